import type { Epoch, Membership } from '../core/membership.js';
import type { LogEntry, Message } from '../core/messages.js';
import { Prng } from '../core/prng.js';
import type { Ready, Role, UnsafeRule } from '../core/raft.js';
import { clockDriftMax, forceStartProbeE, RaftCore } from '../core/raft.js';
import { drainReady, type ReadySink } from '../core/ready-handler.js';
import type { SnapshotMeta } from '../core/snapshot.js';
import { formatEntry, formatMessage } from '../core/test-cluster.js';
import { decodeStateFile, encodeStateFile, stateOfCore } from '../driver/state-format.js';
import { RaftError } from '../errors.js';
import { SafetyChecker, Violation } from './checker.js';
import { SimClock, wallEpochMs } from './clocks.js';
import { EventQueue } from './event-queue.js';
import { LeaseChecker } from './lease-checker.js';
import { PowerCutStorage } from './power-cut.js';

export const faultNames = [
  'drop',
  'dup',
  'reorder',
  'partition',
  'crash',
  'pause',
  'clock',
  'transfer',
  'amnesia',
  'restart',
  'snapshot',
  'force-start',
  'figure8',
  'deaf-follower',
  'leader-pause',
] as const;
export type Fault = (typeof faultNames)[number];

/** Faults of the in-memory mode only: they lose or replace a node's memory through state files
 * and new members, which the durable mode replaces by power cuts. */
export const memoryOnlyFaults: ReadonlySet<Fault> = new Set<Fault>(['amnesia', 'restart', 'force-start']);
/** The faults the durable mode runs with (`all` there). */
export const durableFaultNames: readonly Fault[] = faultNames.filter((f) => !memoryOnlyFaults.has(f));

/** Bugs planted in the durable mode's storage handling, never in the core (docs/raft.md
 * "Persistence"): 'skip-fsync' reports writes persisted without syncing them; 'ack-before-fsync'
 * reports a follower's entries persisted as soon as they are written, so its append
 * acknowledgement leaves before they are durable. */
export type StorageBug = 'skip-fsync' | 'ack-before-fsync';
export const storageBugs: readonly StorageBug[] = ['skip-fsync', 'ack-before-fsync'];
/** A planted bug: a broken core rule, or (durable mode) broken storage handling. */
export type SimRule = UnsafeRule | StorageBug;
const isStorageBug = (r: SimRule | undefined): r is StorageBug => r === 'skip-fsync' || r === 'ack-before-fsync';

/** Named scenarios: node 1 campaigns at E/2, clocks drift, and one thing happens (see docs/raft.md). */
export const scenarioNames = [
  'skewed-follower',
  'skewed-leader',
  'leader-step',
  'frozen-leader',
  'transfer',
  'remove-then-add',
  'crash-looping-replacement',
  'leader-dies-during-replacement',
  'quick-restart',
  'crash-after-resume',
  'bootstrap-all-fresh',
  'bootstrap-all-amnesiac',
  'force-start-alive',
  'force-start-partitioned',
  'force-start-concurrent',
  'force-start-after-two-losses',
  'learner-must-vote',
  'single-server-bug',
  'stopped-for-hours',
  'restored-state-file',
  'bootstrap-two-fresh-one-member',
] as const;
/** Scenarios that start three fresh nodes, which bootstrap (docs/design.md "Fresh, amnesiac, bootstrap"). */
const membershipScenarios: ReadonlySet<string> = new Set(scenarioNames.slice(5));
export type Scenario = (typeof scenarioNames)[number];

/** A correct wall clock is within this of true time (NTP); only one clock may be wrong. */
export const correctWallErrorMs = 10;

export interface SimOptions {
  readonly seed: number;
  readonly faults: ReadonlySet<Fault>;
  /** E in simulated ms. */
  readonly electionTimeoutMs?: number;
  /** Length of the phase with faults, in simulated ms. Default 200E. */
  readonly faultPhaseMs?: number;
  readonly unsafe?: SimRule;
  /** Every node keeps its log, term, vote and snapshot in a power-cut storage double and its core
   * waits for it (awaitStorage); nodes lose power, one or all at once, and restart from what their
   * storage kept (docs/raft.md "Persistence"). A crash is a power cut of one node. */
  readonly durable?: boolean;
  readonly scenario?: Scenario;
  /** Record the event list (off for speed; a failing seed is re-run with it on). */
  readonly trace?: boolean;
  /** An application over the cluster, made afresh for each run (a replay too). */
  readonly app?: () => SimApp;
}

/** What an application sees of one node when it is called. */
export interface SimNodeView {
  readonly role: Role;
  readonly term: number;
  readonly hasLease: boolean;
  readonly clusterTimeReady: boolean;
  /** The node's epoch as `generation.id`: a force-start makes a new epoch whose log is the forced
   * file's, which need not match what the old epoch committed at the same index. */
  readonly epoch: string;
  /** True time, simulated ms (for the application's reports; nodes never read it). */
  readonly now: number;
}

/** A state machine and workload over the simulated cluster (the broker's, in src/cluster/sim/). It
 * may throw a Violation, which fails the seed like any raft property. */
export interface SimApp {
  /** What to propose at `leader` instead of the simulator's own payloads; [] proposes nothing. */
  proposals(leader: number, view: SimNodeView): Uint8Array[];
  /** `node` applied `entries`, in order (its core's Ready). */
  applied(node: number, entries: readonly LogEntry[], view: SimNodeView): void;
  /** A process for `node` started; its core re-delivers committed entries from index 1, or from
   * after the snapshot it restores. `view.epoch` is the epoch it starts in: a resume's, the one a
   * switch joins (its state of the old epoch is dropped, as the driver's onReset() says), the
   * forced file's for a force-start (which moves to the next epoch once it forces), or generation 0
   * for a fresh or amnesiac node. */
  started(node: number, view: SimNodeView): void;
  /** The run is over (after the quiet period). */
  end(): void;
  /** `node` ticked (its timers fired), running: what its clients do without a log entry happens
   * here. On a resume this comes before the messages that waited are handled, as a driver's timers
   * and a client's queued packet may be read before a peer's. */
  tick?(node: number, view: SimNodeView): void;
  /** The node's current serving period has answered a client (fault leader-pause resumes the old
   * leader soon after). Without it the simulator takes a rival's commit in its term for that. */
  serves?(node: number): boolean;
  /** With these, fault `snapshot` compacts the log with the application's own snapshots (its state
   * at the last index `applied` handed it) and hands an installed one to `restore`; without them
   * the nodes never compact. */
  snapshot?(node: number): Iterable<Uint8Array>;
  restore?(node: number, chunks: readonly Uint8Array[]): void;
}

export interface SimStats {
  readonly events: number;
  readonly messages: number;
  readonly elections: number;
  readonly committed: number;
  /** Lease intervals begun (in true time, across all nodes). */
  readonly leases: number;
  /** Leadership transfers that reached TimeoutNow. */
  readonly transfers: number;
  /** Every voter a leader ever reported as an excluded clock. */
  readonly excludedClocks: readonly number[];
  /** Most that an entry's cluster time was ahead of true time when stamped, ms (negative: behind). */
  readonly maxAheadMs: number;
  /** Memory losses injected (amnesia). */
  readonly amnesias: number;
  /** Committed configurations of the newest epoch, in order, as `1.a1,2.b1,3.c1`. */
  readonly configs: readonly string[];
  /** Snapshots taken (compactions) and restored (installs from a leader and restarts). */
  readonly compactions: number;
  readonly restores: number;
  /** Crashes injected while a node was receiving a snapshot. */
  readonly installCrashes: number;
  /** Most entries any node held at once. */
  readonly maxHeldEntries: number;
  /** Force-starts begun, refused or timed out (failed), and that made an epoch serve. */
  readonly forceStarts: number;
  /** Vote grants sent by a node that did not list itself as a voter. */
  readonly learnerVotes: number;
  /** Durable mode: nodes that lost power, cuts of all three at once, cuts where a torn prefix of an
   * unsynced write reached the disk, and restarts that cut a torn tail off. */
  readonly powerCuts: number;
  readonly allPowerCuts: number;
  readonly tornWrites: number;
  readonly tornTailsCut: number;
  /** Restarts whose state file was refused as consumed (a restored copy). */
  readonly refusedFiles: number;
  readonly forceFailures: number;
  readonly forceServed: number;
  /** Members of an older epoch that switched to a newer one. */
  readonly switches: number;
  /** Epochs in which something committed, and the newest generation any node ended in. */
  readonly epochs: number;
  readonly finalGeneration: number;
  /** Fault figure8: episodes that got as far as the rival's return; fault deaf-follower: links cut. */
  readonly figure8Episodes: number;
  readonly deafEpisodes: number;
  /** Fault leader-pause: episodes in which another node served before the paused leader resumed
   * (by the application's word, or without one by a commit in its term). */
  readonly leaderPauseEpisodes: number;
}

export type SimResult =
  | {
      readonly ok: true;
      readonly seed: number;
      readonly stats: SimStats;
      /** The event list when run with `trace` (empty otherwise). */
      readonly trace: readonly string[];
    }
  | {
      readonly ok: false;
      readonly seed: number;
      /** The property broken, e.g. 'election safety'; 'core assertion' for a RAFT_INVARIANT. */
      readonly property: string;
      readonly violation: string;
      readonly trace: readonly string[];
    };

/** Fault `figure8` (Raft §5.4.2, Figure 8, on three nodes): the leader is cut off right after a
 * burst of proposals, so entries of its term exist only on it; a rival wins the next term and is
 * cut off as it wins, before its own entries leave; the old leader, with the longer log, wins again
 * with the third node's vote and starts repairing that node's log with its old-term entries; the
 * link to the third node fails during the repair, the old leader is cut off, and the rival comes
 * back. A core that commits an old-term entry by counting replicas has then called an entry
 * committed that the rival, whose last term is higher, overwrites. */
type Figure8 =
  | { readonly phase: 'idle'; readonly token: number }
  | { readonly phase: 'old-isolated'; readonly token: number; readonly old: number }
  | { readonly phase: 'rival-cut'; readonly token: number; readonly old: number; readonly rival: number; readonly third: number }
  | {
      readonly phase: 'old-repairs';
      readonly token: number;
      readonly old: number;
      readonly rival: number;
      readonly third: number;
      repairs: number;
      readonly cutAfter: number;
    }
  | { readonly phase: 'rival-returns'; readonly token: number; readonly old: number; readonly rival: number; readonly third: number };

type SimEvent =
  | { readonly kind: 'tick'; readonly node: number }
  | { readonly kind: 'deliver'; readonly msg: Message }
  | { readonly kind: 'propose' }
  | { readonly kind: 'crash'; readonly node: number }
  | { readonly kind: 'restart'; readonly node: number }
  | { readonly kind: 'amnesia'; readonly node: number; readonly again?: boolean; readonly fresh?: boolean }
  | { readonly kind: 'expect-stuck' }
  | { readonly kind: 'stop'; readonly node: number; readonly downMs?: number; readonly restoreOldest?: boolean }
  | { readonly kind: 'force-start'; readonly node: number; readonly downMs?: number }
  | { readonly kind: 'partition' }
  | { readonly kind: 'heal' }
  | { readonly kind: 'isolate'; readonly node: number }
  | { readonly kind: 'pause'; readonly node: number; readonly forMs?: number }
  | { readonly kind: 'resume'; readonly node: number }
  | { readonly kind: 'clock-fault' }
  | { readonly kind: 'transfer' }
  | { readonly kind: 'lag'; readonly node: number }
  | { readonly kind: 'lag-end'; readonly node: number }
  | { readonly kind: 'campaign'; readonly node: number }
  | { readonly kind: 'figure8' }
  | { readonly kind: 'figure8-step'; readonly token: number }
  | { readonly kind: 'deaf-follower' }
  | { readonly kind: 'deaf-cut'; readonly leader: number; readonly follower: number }
  | { readonly kind: 'deaf-end' }
  | { readonly kind: 'sync'; readonly node: number; readonly process: number }
  | { readonly kind: 'power-cut'; readonly node: number; readonly all: boolean }
  | { readonly kind: 'leader-pause' }
  | { readonly kind: 'leader-resume'; readonly node: number; readonly since: number; readonly rival?: string }
  | { readonly kind: 'quiet' }
  | { readonly kind: 'liveness-probe' }
  | { readonly kind: 'end' };

const ids = [1, 2, 3] as const;
/** Events a scenario or an episode scheduled for itself, as opposed to a random fault's. */
const scripted = (ev: SimEvent): boolean =>
  (ev.kind === 'amnesia' && ev.again === true) || ((ev.kind === 'force-start' || ev.kind === 'stop') && ev.downMs !== undefined);
const waitsForFigure8: ReadonlySet<SimEvent['kind']> = new Set<SimEvent['kind']>([
  'crash',
  'power-cut',
  'amnesia',
  'stop',
  'force-start',
  'partition',
  'pause',
  'clock-fault',
  'transfer',
  'lag',
  'leader-pause',
]);
/** Quiet period after the faults: a majority connected for 10E (the brief's liveness window). */
const quietPeriodsE = 10;
/** With amnesia, every node must be a caught-up voter again within this many E of quiet (issue 7:
 * 30E plus the transfer). */
const redundantWithinE = 32;
/** The liveness marker is proposed from this many E into the quiet period, retried every E/2. */
const probeStartE = 5;
/** How long stopped-for-hours keeps node 3 down. */
const hoursStoppedMs = 2 * 3600 * 1000;
/** A force-started epoch that has no second voter within this many E gives up (the node exits). */
const forceTimeoutE = 10;
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const markerBytes = 6;
/** The simulated state machine's snapshot: index and hash (u32 each), filler length, filler. */
const snapshotHeadBytes = 12;

/** The simulated application: a running FNV-1a hash of the data of every entry applied, in order.
 * Its snapshot carries the hash, so a node that installs one must reach the same state as one that
 * applied every entry (applied-state equality after install). */
interface SimState {
  index: number;
  hash: number;
}

function hashEntry(hash: number, data: Uint8Array): number {
  let h = hash;
  for (const b of data) h = Math.imul(h ^ b, 16777619) >>> 0;
  return h;
}

/** Filler bytes derived from the hash, so a chunk lost, repeated or reordered in a transfer shows. */
const fillerByte = (hash: number, k: number): number => ((hash >>> ((k % 4) * 8)) ^ k) & 0xff;

function encodeSimState(st: SimState, fillerBytes: number): Uint8Array[] {
  const head = new Uint8Array(snapshotHeadBytes);
  const view = new DataView(head.buffer);
  view.setUint32(0, st.index);
  view.setUint32(4, st.hash);
  view.setUint32(8, fillerBytes);
  const filler = new Uint8Array(fillerBytes);
  for (let k = 0; k < fillerBytes; k++) filler[k] = fillerByte(st.hash, k);
  return [head, filler];
}

/** The simulator's state and, after it, the application's snapshot bytes (SimApp.snapshot). */
function decodeSimState(chunks: readonly Uint8Array[]): { st: SimState; rest: Uint8Array } | string {
  const all = Buffer.concat(chunks.map((c) => Buffer.from(c.buffer, c.byteOffset, c.byteLength)));
  if (all.length < snapshotHeadBytes) return `snapshot of ${all.length} bytes`;
  const index = all.readUInt32BE(0);
  const hash = all.readUInt32BE(4);
  const fillerBytes = all.readUInt32BE(8);
  if (all.length < snapshotHeadBytes + fillerBytes) return `snapshot of ${all.length} bytes, filler ${fillerBytes}`;
  for (let k = 0; k < fillerBytes; k++) if (all[snapshotHeadBytes + k] !== fillerByte(hash, k)) return `filler byte ${k} differs`;
  return { st: { index, hash }, rest: all.subarray(snapshotHeadBytes + fillerBytes) };
}

/** Runs one seed; on a violation, runs it again with the trace on so the result carries it. */
export function runSeed(opts: SimOptions): SimResult {
  const result = new Simulation(opts).run();
  if (result.ok || opts.trace === true) return result;
  const traced = new Simulation({ ...opts, trace: true }).run();
  if (traced.ok || traced.violation !== result.violation) {
    throw new RaftError('RAFT_INVARIANT', `seed ${opts.seed} did not replay: ${result.violation}`);
  }
  return traced;
}

/** Three cores, a simulated clock in ms and a network that drops, delays, duplicates, reorders and
 * partitions messages; nodes crash and restart with term, vote and log intact. Everything random
 * comes from one seed. */
class Simulation {
  private readonly e: number;
  private readonly prng: Prng;
  private readonly netRandom: Prng;
  private readonly faults: ReadonlySet<Fault>;
  private readonly queue = new EventQueue<SimEvent>();
  private readonly checker = new SafetyChecker();
  private readonly leases = new LeaseChecker();
  private readonly clocks = new Map<number, SimClock>();
  /** Messages that reached a paused node, delivered in order when it resumes. */
  private readonly backlog = new Map<number, Message[]>();
  /** The one node whose wall clock may be wrong, once chosen. */
  private wrongClock = 0;
  /** Which clock fault this seed injects (with `clock`): skew, jumps, leader step, drift only. */
  private readonly clockVariant: number;
  /** An entry's time may be ahead of true time by at most this: a correct clock's error plus half
   * the longest round trip a sample may have (E) plus a little for drift and steering. */
  private readonly aheadMaxMs: number;
  private transfers = 0;
  private maxAheadMs = Number.NEGATIVE_INFINITY;
  private readonly excluded = new Set<number>();
  private readonly nodes = new Map<number, RaftCore>();
  private readonly down = new Set<number>();
  /** Directed links that lose everything: `${from}>${to}`. */
  private readonly blocked = new Set<string>();
  /** Per directed link, the latest scheduled delivery; without reorder a link is FIFO. */
  private readonly linkClock = new Map<string, number>();
  private readonly trace: string[] | null;
  private readonly faultEnd: number;
  private now = 0;
  private quiet = false;
  private dropRate: number;
  private proposals = 0;
  private markerCommitted = false;
  private markerProposed = false;
  private stats = { events: 0, messages: 0 };
  /** Nodes start fresh and bootstrap; members carry incarnations (amnesia, membership scenarios). */
  private readonly dynamic: boolean;
  private readonly starts = new Map<number, number>();
  /** Crashed nodes that come back without their memory. */
  private readonly forgetful = new Set<number>();
  /** State files written by a clean stop, read back on restart (the real codec). */
  private readonly stateFiles = new Map<number, Uint8Array>();
  private readonly endAt: number;
  /** bootstrap-all-amnesiac: nobody may serve, and everyone must say so. */
  private readonly expectStuck: boolean;
  private amnesias = 0;
  private readonly app: SimApp | null;
  /** Fault `snapshot`: nodes compact once they hold more applied entries than this (0: never). */
  private readonly compactEntries: number;
  private readonly snapshotChunkBytes: number;
  private readonly snapshotFillerBytes: number;
  private readonly states = new Map<number, SimState>();
  /** The state machine's hash after applying each index, as first reached by any node. */
  private readonly hashAt = new Map<string, number[]>();
  /** Nodes cut off by the `snapshot` fault's lag, so the others compact past them. */
  private readonly lagging = new Set<number>();
  private compactions = 0;
  private restores = 0;
  private installCrashes = 0;
  private maxHeldEntries = 0;
  /** Nodes whose next start is a force-start from their state file. */
  private readonly forcing = new Set<number>();
  /** State-file logs of force-starts not yet forced, by node: the checker seeds the new epoch. */
  private readonly forcedFiles = new Map<RaftCore, { from: Epoch; snapshot: SnapshotMeta | null; log: readonly LogEntry[] }>();
  /** Each core's ReadySink, made once. */
  private readonly sinks = new WeakMap<RaftCore, ReadySink>();
  private force = { starts: 0, failures: 0, served: 0, switches: 0 };
  private readonly served = new Set<RaftCore>();
  private learnerVotes = 0;
  private refusedFiles = 0;
  /** Per node, the ids of state files it consumed (its membership record), and every file it wrote. */
  private readonly consumedFiles = new Map<number, Set<string>>();
  private readonly oldFiles = new Map<number, Uint8Array[]>();
  /** Crashed nodes that come back with no membership record either (a wiped disk). */
  private readonly wiped = new Set<number>();
  /** learner-must-vote and single-server-bug: the configuration change that triggers them happened. */
  private triggered = false;
  /** Per epoch, the true time until which a node of it holds a lease (at most one epoch serves). */
  private readonly servingUntil = new Map<string, number>();
  /** Highest epoch generation that has served. */
  private servedGeneration = 0;
  /** Fault `figure8`: the episode under way, its own cuts (kept apart from the partition fault's,
   * which heal on their own schedule) and its own random source (drawn only with the fault, so
   * other fault sets replay as before). */
  private figure8: Figure8 = { phase: 'idle', token: 0 };
  private readonly figure8Cut = new Set<string>();
  /** Fault `deaf-follower` under way: clients are idle, and one follower stops hearing the leader. */
  private deaf = false;
  private readonly episodes = { figure8: 0, deaf: 0, leaderPause: 0 };
  private readonly figure8Random: Prng;
  /** Durable mode: each node's storage, kept across its processes. */
  private readonly durable: boolean;
  private readonly storages = new Map<number, PowerCutStorage>();
  /** Durable mode: simulated ms an fsync takes (per seed). */
  private readonly fsyncMs: number;
  /** Durable mode: the process whose sync is due, by node (one sync in flight per node). */
  private readonly syncDue = new Map<number, number>();
  /** Processes started per node: a sync scheduled by an earlier one is void. */
  private readonly processes = new Map<number, number>();
  private readonly storageBug: StorageBug | null;
  private readonly power = { cuts: 0, allCuts: 0, tornWrites: 0, tornCut: 0 };
  /** Fault `leader-pause`: the node its episode paused (0: none under way), and its own random
   * source, so other fault sets replay as before. */
  private leaderPaused = 0;
  /** The leader and term seen at the episode's previous look: it pauses a leader of at least E. */
  private leaderPauseSeen = '';
  private readonly leaderPauseRandom: Prng;

  constructor(private readonly opts: SimOptions) {
    this.durable = opts.durable === true;
    this.storageBug = isStorageBug(opts.unsafe) ? opts.unsafe : null;
    if (this.storageBug !== null && !this.durable) throw new RaftError('RAFT_BAD_OPTIONS', `${this.storageBug} needs the durable mode`);
    for (const f of opts.faults) {
      if (this.durable && memoryOnlyFaults.has(f)) throw new RaftError('RAFT_BAD_OPTIONS', `fault ${f} is not run in the durable mode`);
    }
    if (this.durable && opts.scenario !== undefined) throw new RaftError('RAFT_BAD_OPTIONS', 'scenarios run in the in-memory mode');
    this.app = opts.app?.() ?? null;
    // A node stopped for hours: E of 1 s keeps the two hours to 7,200E of simulated events.
    this.e = opts.electionTimeoutMs ?? (opts.scenario === 'stopped-for-hours' ? 1000 : 100);
    this.prng = new Prng(opts.seed);
    this.netRandom = this.prng.fork();
    this.figure8Random = new Prng((opts.seed ^ 0x5f3759df) >>> 0);
    this.leaderPauseRandom = new Prng((opts.seed ^ 0x2545f491) >>> 0);
    this.faults = opts.faults;
    this.trace = opts.trace === true ? [] : null;
    this.faultEnd = opts.faultPhaseMs ?? (opts.scenario === 'stopped-for-hours' ? 40 * this.e + hoursStoppedMs : 200 * this.e);
    this.dropRate = this.faults.has('drop') ? 0.02 + this.prng.float() * 0.2 : 0;
    // Small bounds make log repair split old-term entries from new ones (Figure 8's precondition);
    // the smallest still let a lagging node catch up within the quiet period.
    this.entriesPerAppendMax = [4, 16, 64][this.prng.int(3)] ?? 64;
    this.inflightAppendsMax = [2, 8][this.prng.int(2)] ?? 8;
    // Odd seeds run the driver's delayed commit notices, even seeds the immediate broadcast; the
    // choice draws nothing from the PRNG, so even seeds replay as before.
    this.commitNoticeDelayMs = opts.seed % 2 === 0 ? 0 : Math.max(1, Math.floor(this.e / 20));
    const snapshots = this.faults.has('snapshot');
    const compactEntries = snapshots ? this.prng.range(8, 40) : 0;
    // An application that cannot restore a snapshot never sees one: its nodes do not compact.
    this.compactEntries = this.app === null || this.app.snapshot !== undefined ? compactEntries : 0;
    // Chunks of 4-24 bytes cut the simulated state (tens of bytes) into several; an application's
    // state (the broker's: a kilobyte or more) in chunks 16 times larger, so its transfer is a few
    // to a few dozen chunks, as a real one is, and fits the liveness window after a late lag. The
    // draw is the same either way, so the raft-only seeds replay as before.
    const chunkDraw = snapshots ? this.prng.range(4, 24) : 1024;
    this.snapshotChunkBytes = snapshots && this.app !== null ? chunkDraw * 16 : chunkDraw;
    this.snapshotFillerBytes = snapshots ? this.prng.range(0, 80) : 0;
    const variant = this.prng.int(4);
    this.clockVariant = opts.scenario === 'leader-step' ? 2 : variant;
    this.aheadMaxMs = correctWallErrorMs + this.e / 2 + 5;
    this.dynamic =
      this.faults.has('amnesia') ||
      this.faults.has('restart') ||
      this.faults.has('force-start') ||
      membershipScenarios.has(opts.scenario ?? '');
    this.expectStuck = opts.scenario === 'bootstrap-all-amnesiac';
    this.endAt = this.faultEnd + (this.dynamic ? redundantWithinE : quietPeriodsE) * this.e;
    const drifts = this.faults.has('clock') || opts.scenario !== undefined;
    for (const id of ids) {
      const rate = drifts ? 1 + (this.prng.float() * 2 - 1) * clockDriftMax : 1;
      const offset = drifts ? (this.prng.float() * 2 - 1) * correctWallErrorMs : 0;
      this.clocks.set(id, new SimClock(0, rate, offset));
    }
    // Drawn only in the durable mode, so the in-memory mode replays as before.
    this.fsyncMs = this.durable ? this.prng.range(1, 9) : 0;
    if (this.durable) for (const id of ids) this.storages.set(id, new PowerCutStorage());
    // A vote that never became durable was never sent either: with power cuts, votes are counted
    // from the grants that left.
    if (this.durable) this.checker.countVotesFromGrants();
  }

  private readonly entriesPerAppendMax: number;
  private readonly inflightAppendsMax: number;
  private readonly commitNoticeDelayMs: number;

  run(): SimResult {
    try {
      this.schedule();
      for (let ev = this.queue.pop(); ev !== undefined; ev = this.queue.pop()) {
        this.now = ev.at;
        this.stats.events++;
        if (this.handle(ev.item)) break;
      }
      this.app?.end();
      this.checkLiveness();
    } catch (err) {
      const violation = err instanceof Error ? err.message : String(err);
      const property = err instanceof Violation ? err.property : err instanceof RaftError ? 'core assertion' : 'crash';
      this.record(`VIOLATION ${violation}`);
      return { ok: false, seed: this.opts.seed, property, violation, trace: this.trace ?? [] };
    }
    const stats = {
      ...this.stats,
      elections: this.checker.elections,
      committed: this.checker.committed.length,
      leases: this.leases.intervals,
      transfers: this.transfers,
      excludedClocks: [...this.excluded].sort((a, b) => a - b),
      maxAheadMs: this.maxAheadMs,
      amnesias: this.amnesias,
      compactions: this.compactions,
      restores: this.restores,
      installCrashes: this.installCrashes,
      maxHeldEntries: this.maxHeldEntries,
      configs: this.checker
        .committedIn(this.finalEpoch())
        .filter((c) => c.data.startsWith('config('))
        .map((c) => c.data.slice(7, -1)),
      forceStarts: this.force.starts,
      learnerVotes: this.learnerVotes,
      refusedFiles: this.refusedFiles,
      forceFailures: this.force.failures,
      forceServed: this.force.served,
      switches: this.force.switches,
      epochs: this.checker.epochCount,
      finalGeneration: Math.max(...ids.map((id) => this.node(id).epoch.generation)),
      figure8Episodes: this.episodes.figure8,
      deafEpisodes: this.episodes.deaf,
      powerCuts: this.power.cuts,
      allPowerCuts: this.power.allCuts,
      tornWrites: this.power.tornWrites,
      tornTailsCut: this.power.tornCut,
      leaderPauseEpisodes: this.episodes.leaderPause,
    };
    return { ok: true, seed: this.opts.seed, stats, trace: this.trace ?? [] };
  }

  /** The epoch most nodes ended in (the newest on a tie). */
  private finalEpoch(): Epoch {
    const epochs = ids.map((id) => this.node(id).epoch);
    const count = (e: Epoch): number => epochs.filter((x) => x.generation === e.generation && x.id === e.id).length;
    return epochs.reduce((a, b) => (count(b) > count(a) || (count(b) === count(a) && b.generation > a.generation) ? b : a));
  }

  /** Quiet: a marker commits; with amnesia every node is a caught-up voter again; three amnesiac
   * nodes never serve and all say they need a force-start. */
  private checkLiveness(): void {
    if (this.expectStuck) {
      const leader = ids.find((id) => this.node(id).role === 'leader');
      if (leader !== undefined) throw new Violation('bootstrap', `node ${leader} leads a cluster of three amnesiac nodes`);
      const unaware = ids.find((id) => !this.node(id).needsForceStart());
      if (unaware !== undefined) throw new Violation('liveness', `node ${unaware} does not report needsForceStart`);
      return;
    }
    if (!this.markerCommitted) throw new Violation('liveness', `no proposal committed within ${quietPeriodsE}E of quiet`);
    if (!this.dynamic) return;
    const leader = ids.find((id) => this.runs(id) && this.node(id).role === 'leader');
    if (leader === undefined || !this.node(leader).isRedundant()) {
      const config =
        leader === undefined
          ? 'no leader'
          : this.node(leader)
              .configuration.map((m) => `${m.node}.${m.inc}`)
              .join(',');
      throw new Violation('liveness', `not every node is a caught-up voter ${redundantWithinE}E after quiet (${config})`);
    }
  }

  private schedule(): void {
    for (const id of ids) {
      this.startNode(id, undefined, this.expectStuck ? 'amnesiac' : 'fresh');
      this.queue.push(this.prng.int(this.tickMs()), { kind: 'tick', node: id });
    }
    this.queue.push(this.prng.int(this.e), { kind: 'propose' });
    if (this.faults.has('partition')) this.queue.push(this.prng.range(this.e, 5 * this.e), { kind: 'partition' });
    if (this.faults.has('crash')) this.queue.push(this.prng.range(this.e, 5 * this.e), { kind: 'crash', node: this.pickNode() });
    if (this.faults.has('pause')) this.queue.push(this.prng.range(this.e, 5 * this.e), { kind: 'pause', node: this.pickNode() });
    if (this.faults.has('clock')) this.queue.push(this.prng.range(this.e, 20 * this.e), { kind: 'clock-fault' });
    if (this.faults.has('transfer')) this.queue.push(this.prng.range(5 * this.e, 15 * this.e), { kind: 'transfer' });
    if (this.faults.has('amnesia')) this.queue.push(this.prng.range(10 * this.e, 30 * this.e), { kind: 'amnesia', node: this.pickNode() });
    if (this.faults.has('restart')) this.queue.push(this.prng.range(5 * this.e, 20 * this.e), { kind: 'stop', node: this.pickNode() });
    if (this.faults.has('snapshot')) this.queue.push(this.prng.range(2 * this.e, 10 * this.e), { kind: 'lag', node: this.pickNode() });
    if (this.faults.has('force-start'))
      this.queue.push(this.prng.range(20 * this.e, 60 * this.e), { kind: 'force-start', node: this.pickNode() });
    if (this.faults.has('figure8')) this.queue.push(this.figure8Random.range(3 * this.e, 15 * this.e), { kind: 'figure8' });
    if (this.faults.has('deaf-follower')) this.queue.push(this.figure8Random.range(3 * this.e, 15 * this.e), { kind: 'deaf-follower' });
    if (this.durable)
      this.queue.push(this.prng.range(this.e, 5 * this.e), { kind: 'power-cut', node: this.pickNode(), all: this.prng.chance(0.5) });
    if (this.faults.has('leader-pause')) this.queue.push(this.leaderPauseRandom.range(3 * this.e, 15 * this.e), { kind: 'leader-pause' });
    if (this.opts.scenario !== undefined) this.scheduleScenario(this.opts.scenario);
    this.queue.push(this.faultEnd, { kind: 'quiet' });
    this.queue.push(this.faultEnd + probeStartE * this.e, { kind: 'liveness-probe' });
    this.queue.push(this.endAt, { kind: 'end' });
  }

  /** Returns true at the end of the run. */
  private handle(ev: SimEvent): boolean {
    // A figure8 episode is the one fault of its moment: faults that start meanwhile wait until it
    // is over (those that end a fault, restart, resume, heal and lag-end, go on), since in the mix
    // they would break the episode up before it builds its situation.
    const episode = this.figure8.phase !== 'idle' || this.deaf || this.leaderPaused !== 0;
    if (episode && waitsForFigure8.has(ev.kind) && !scripted(ev)) {
      this.queue.push(this.now + this.e, ev);
      return false;
    }
    switch (ev.kind) {
      case 'tick':
        return this.onTick(ev.node);
      case 'deliver':
        return this.onDeliver(ev.msg);
      case 'propose':
        return this.onPropose();
      case 'crash':
        return this.onCrash(ev.node);
      case 'restart':
        return this.onRestart(ev.node);
      case 'amnesia':
        if (ev.fresh === true) this.wiped.add(ev.node);
        return this.onAmnesia(ev.node, ev.again === true);
      case 'expect-stuck':
        this.checkStuck();
        return false;
      case 'stop':
        this.onStop(ev.node, ev.downMs);
        if (ev.restoreOldest === true) this.restoreOldest(ev.node);
        return false;
      case 'force-start':
        return this.onForceStart(ev.node, ev.downMs);
      case 'partition':
        return this.onPartition();
      case 'heal':
        return this.onHeal();
      case 'isolate':
        this.isolate(ev.node);
        this.record(`isolate ${ev.node}`);
        return false;
      case 'pause':
        return this.onPause(ev.node, ev.forMs);
      case 'resume':
        return this.onResume(ev.node);
      case 'clock-fault':
        return this.onClockFault();
      case 'transfer':
        return this.onTransfer();
      case 'lag':
        return this.onLag(ev.node);
      case 'lag-end':
        this.lagging.delete(ev.node);
        this.record(`lag of ${ev.node} ends`);
        return false;
      case 'figure8':
        this.onFigure8();
        return false;
      case 'figure8-step':
        if (ev.token === this.figure8.token) this.figure8Step();
        return false;
      case 'deaf-follower':
        this.onDeafFollower();
        return false;
      case 'deaf-cut':
        if (!this.deaf) return false;
        this.episodes.deaf++;
        this.figure8Cut.add(`${ev.leader}>${ev.follower}`);
        this.figure8Cut.add(`${ev.follower}>${ev.leader}`);
        this.record(`deaf-follower: the link between ${ev.leader} and ${ev.follower} fails`);
        return false;
      case 'deaf-end':
        this.endDeafFollower();
        return false;
      case 'leader-pause':
        this.onLeaderPause();
        return false;
      case 'leader-resume':
        return this.onLeaderResume(ev.node, ev.since, ev.rival ?? '');
      case 'campaign':
        this.node(ev.node).campaign();
        this.flush(this.node(ev.node));
        return false;
      case 'sync':
        this.onSync(ev.node, ev.process);
        return false;
      case 'power-cut':
        this.onPowerCut(ev.node, ev.all);
        return false;
      case 'quiet':
        return this.onQuiet();
      case 'liveness-probe':
        return this.onLivenessProbe();
      case 'end':
        return true;
      default: {
        const _: never = ev;
        throw new RaftError('RAFT_INVARIANT', `unknown event ${String(_)}`);
      }
    }
  }

  private tickMs(): number {
    return Math.max(1, Math.floor(this.e / 20));
  }

  private onTick(id: number): boolean {
    if (this.runs(id)) this.tickNode(id);
    this.queue.push(this.now + this.tickMs(), { kind: 'tick', node: id });
    return false;
  }

  private tickNode(id: number): void {
    const node = this.node(id);
    const clock = this.clock(id);
    node.tick(clock.mono(this.now), clock.wall(this.now));
    this.flush(node);
    this.app?.tick?.(id, this.view(node));
  }

  /** Up and not paused. */
  private runs(id: number): boolean {
    return !this.down.has(id) && !this.clock(id).isPaused;
  }

  private onDeliver(m: Message): boolean {
    if (this.down.has(m.to)) return false;
    if (this.clock(m.to).isPaused) {
      const held = this.backlog.get(m.to);
      if (held === undefined) this.backlog.set(m.to, [m]);
      else held.push(m);
      return false;
    }
    if (this.crashesDuringInstall(m)) return false;
    const node = this.node(m.to);
    if (this.trace !== null) this.record(`deliver ${formatMessage(m)}`);
    this.checkOldEpochAck(m, node);
    const error = node.step(m);
    // A message for a replaced incarnation, or from an epoch this node does not hold, is normal
    // after a restart; any other refusal is a core sending something malformed.
    if (error !== null && error.code !== 'RAFT_OTHER_MEMBER' && error.code !== 'RAFT_FOREIGN_MESSAGE') throw error;
    this.flush(node);
    return false;
  }

  /** Fault `snapshot`: one node is cut off for 3E-12E while the others commit and compact past it,
   * so it must catch up by InstallSnapshot. */
  private onLag(id: number): boolean {
    if (this.quiet) return false;
    this.lagging.add(id);
    this.record(`lag ${id}`);
    this.queue.push(this.now + this.prng.range(3 * this.e, 12 * this.e), { kind: 'lag-end', node: id });
    this.queue.push(this.now + this.prng.range(10 * this.e, 30 * this.e), { kind: 'lag', node: this.pickNode() });
    return false;
  }

  /** Fault `snapshot`: a node receiving a snapshot crashes between two chunks, one time in ten. */
  private crashesDuringInstall(m: Message): boolean {
    if (!this.faults.has('snapshot') || this.quiet || m.type !== 'snapshot' || m.seq === 0 || !this.runs(m.to)) return false;
    // A leader-pause episode needs the other two to make a quorum: this crash waits like the others.
    if (this.leaderPaused !== 0) return false;
    if (!this.prng.chance(0.1)) return false;
    this.installCrashes++;
    if (this.durable) this.cutPower([m.to]);
    this.down.add(m.to);
    this.leases.update(m.to, this.now, this.now);
    this.record(`crash ${m.to} during install of chunk ${m.seq + 1}/${m.chunks}`);
    this.queue.push(this.now + this.prng.range(this.e / 2, 2 * this.e), { kind: 'restart', node: m.to });
    return true;
  }

  private onPropose(): boolean {
    // Two hours of proposals at the usual rate would make a log of a quarter of a million entries.
    const sparse = this.opts.scenario === 'stopped-for-hours' && this.down.size > 0;
    const leaders = ids.filter((id) => this.runs(id) && this.node(id).role === 'leader');
    const id = leaders[this.prng.int(leaders.length)];
    if (id !== undefined && !this.deaf) {
      const count = 1 + this.prng.int(3);
      const node = this.node(id);
      const data: Uint8Array[] = this.app?.proposals(id, this.view(node)) ?? [];
      if (this.app === null) for (let k = 0; k < count; k++) data.push(encoder.encode(`p${++this.proposals}`));
      if (data.length > 0) {
        const r = node.propose(data);
        this.record(`propose to ${id}: ${r.ok ? `${r.firstIndex}..${r.lastIndex}` : r.error.code}`);
      }
      this.flush(node);
    }
    // The quiet period proposes only the liveness marker, so a backlog cannot hide it.
    if (!this.quiet) this.queue.push(this.now + 1 + this.prng.int(this.e / 2) + (sparse ? 20 * this.e : 0), { kind: 'propose' });
    return false;
  }

  private onCrash(id: number): boolean {
    if (!this.quiet && this.runs(id) && this.durable) {
      this.cutPower([id]);
      this.queue.push(this.now + this.prng.range(this.e / 2, 4 * this.e), { kind: 'restart', node: id });
    } else if (!this.quiet && this.runs(id)) {
      this.down.add(id);
      this.leases.update(id, this.now, this.now);
      this.record(`crash ${id}`);
      this.queue.push(this.now + this.prng.range(this.e / 2, 4 * this.e), { kind: 'restart', node: id });
    }
    if (!this.quiet) this.queue.push(this.now + this.prng.range(this.e, 6 * this.e), { kind: 'crash', node: this.pickNode() });
    return false;
  }

  private onRestart(id: number): boolean {
    if (!this.down.has(id)) return false;
    this.down.delete(id);
    if (this.durable) {
      this.startNode(id, this.node(id), 'member');
      const r = this.storage(id).lastRecovery;
      this.record(`restart ${id} from its storage${r.cutBytes > 0 ? ` (cut a torn tail of ${r.cutBytes} bytes: ${r.reason})` : ''}`);
      return false;
    }
    if (this.forgetful.delete(id)) {
      this.startNode(id, undefined, this.wiped.delete(id) ? 'fresh' : 'amnesiac');
      this.record(`restart ${id} amnesiac as ${this.node(id).incarnation}`);
      return false;
    }
    const file = this.stateFiles.get(id);
    this.stateFiles.delete(id);
    if (this.forcing.delete(id) && file !== undefined) {
      this.startForced(id, file);
      return false;
    }
    if (file !== undefined && !this.consume(id, file)) {
      // docs/design.md "State file": a consumed file put back is refused; the operator starts the node
      // without it, so it comes back amnesiac.
      this.refusedFiles++;
      this.startNode(id, undefined, 'amnesiac');
      this.record(`restart ${id}: state file refused as consumed; amnesiac as ${this.node(id).incarnation}`);
      return false;
    }
    this.startNode(id, this.node(id), 'member', file);
    this.record(`restart ${id}${file === undefined ? '' : ' from its state file'}`);
    return false;
  }

  /** kill -9: the process and its memory are gone; the node id comes back as a new member. One
   * memory loss at a time (docs/design.md "The model"): only once every node is a caught-up voter. */
  private onAmnesia(id: number, again: boolean): boolean {
    if (this.quiet) return false;
    const leader = ids.find((x) => this.runs(x) && this.node(x).role === 'leader');
    const calm = this.down.size === 0 && ids.every((x) => this.runs(x)) && this.allVoters(leader);
    if (!calm && !again) {
      this.queue.push(this.now + this.e, { kind: 'amnesia', node: id });
      return false;
    }
    if (this.runs(id) || (again && !this.down.has(id))) this.forget(id);
    if (this.faults.has('amnesia'))
      this.queue.push(this.now + this.prng.range(20 * this.e, 60 * this.e), { kind: 'amnesia', node: this.pickNode() });
    return false;
  }

  /** The process dies with its memory; it comes back amnesiac after E/2–4E. */
  private forget(id: number): void {
    this.down.add(id);
    this.forgetful.add(id);
    this.leases.update(id, this.now, this.now);
    this.amnesias++;
    this.record(`amnesia ${id}`);
    this.queue.push(this.now + this.prng.range(this.e / 2, 4 * this.e), { kind: 'restart', node: id });
  }

  /** A clean stop (SIGTERM): traffic stops, the state goes through the real state-file codec, and
   * the node resumes from it as the same member, ignoring votes for 2E. */
  /** Every node is a caught-up voter, as the leader reports it, and as it is: the leader may not
   * have heard yet that a node id came back as another member (a force-start's probe). */
  private allVoters(leader: number | undefined): boolean {
    if (leader === undefined || !this.node(leader).isRedundant()) return false;
    const config = this.node(leader).configuration;
    return ids.every((x) => config.some((m) => m.node === x && m.inc === this.node(x).incarnation));
  }

  private onStop(id: number, downMs: number | undefined): boolean {
    const phase = this.node(id).forceStartPhase;
    if (!this.quiet && this.runs(id) && (phase === 'probing' || phase === 'failed')) {
      // The driver writes no file for a force-start that made no epoch (its own was consumed):
      // the node comes back amnesiac.
      this.forget(id);
      return false;
    }
    if (!this.quiet && this.runs(id)) {
      const bytes = this.stateFileOf(this.node(id));
      this.stateFiles.set(id, bytes);
      this.down.add(id);
      this.leases.update(id, this.now, this.now);
      this.record(`stop ${id} (state file of ${bytes.length} bytes)`);
      this.queue.push(this.now + (downMs ?? this.prng.range(this.e / 2, 4 * this.e)), { kind: 'restart', node: id });
    }
    if (!this.quiet && this.faults.has('restart'))
      this.queue.push(this.now + this.prng.range(5 * this.e, 20 * this.e), { kind: 'stop', node: this.pickNode() });
    return false;
  }

  /** An operator puts back the node's oldest state file (a backup), over the one it just wrote. */
  private restoreOldest(id: number): void {
    const oldest = this.oldFiles.get(id)?.[0];
    if (oldest === undefined || !this.stateFiles.has(id)) return;
    this.stateFiles.set(id, oldest);
    this.record(`restore node ${id}'s oldest state file`);
  }

  /** bootstrap-two-fresh-one-member, force-start-after-two-losses: nobody leads, and every node
   * says it needs a force-start. */
  private checkStuck(): void {
    const leader = ids.find((id) => this.runs(id) && this.node(id).role === 'leader');
    if (leader !== undefined) throw new Violation('bootstrap', `node ${leader} leads where no configuration can elect`);
    const unaware = ids.find((id) => this.runs(id) && !this.node(id).needsForceStart());
    if (unaware !== undefined) throw new Violation('liveness', `node ${unaware} does not report needsForceStart`);
    this.record('every node needs a force-start');
  }

  /** The operator's procedure (docs/design.md "Force-start"): SIGTERM (the state file is written even
   * when the node does not serve), then a start with --cluster-force-start from that file. At a
   * random time it is mostly refused, since the others are alive and led; cut off by a partition,
   * it makes an epoch that nobody joins, and gives up. */
  private onForceStart(id: number, downMs: number | undefined): boolean {
    // As with amnesia, one lost member at a time: a force-start takes the node's member out of
    // its epoch whatever the outcome, so a random one waits until every node is a caught-up voter
    // (scenarios force-start regardless).
    const leader = ids.find((x) => this.runs(x) && this.node(x).role === 'leader');
    const calm = downMs !== undefined || (this.down.size === 0 && this.allVoters(leader));
    if (!this.quiet && this.runs(id) && calm) {
      this.onStop(id, downMs ?? this.prng.range(this.e / 2, 2 * this.e));
      this.forcing.add(id);
      this.record(`force-start ${id} next`);
    }
    if (!this.quiet && this.faults.has('force-start')) {
      this.queue.push(this.now + this.prng.range(30 * this.e, 80 * this.e), { kind: 'force-start', node: this.pickNode() });
    }
    return false;
  }

  /** The membership record's side of consuming a file (raft/driver/state-file.ts): its id must not
   * be one consumed before. */
  private consume(id: number, bytes: Uint8Array): boolean {
    const f = decodeStateFile(bytes, `sim node ${id}`, { clusterId: this.node(id).clusterId, nodeId: id });
    const consumed = this.consumedFiles.get(id) ?? new Set<string>();
    this.consumedFiles.set(id, consumed);
    if (consumed.has(f.fileId)) return false;
    consumed.add(f.fileId);
    return true;
  }

  private stateFileOf(n: RaftCore): Uint8Array {
    const bytes = this.encodeState(n);
    const old = this.oldFiles.get(n.id) ?? [];
    old.push(bytes);
    this.oldFiles.set(n.id, old);
    return bytes;
  }

  private encodeState(n: RaftCore): Uint8Array {
    const clusterTime = Math.floor(n.clusterTime(this.clock(n.id).mono(this.now)));
    return encodeStateFile(stateOfCore(n, clusterTime, `f${this.prng.int(2 ** 31)}`, ''));
  }

  /** `--cluster-force-start` from the state file the node just wrote: a new member that probes,
   * then forces the next epoch (or is refused and exits). */
  private startForced(id: number, file: Uint8Array): void {
    const before = this.node(id);
    const f = decodeStateFile(file, `sim node ${id}`, { clusterId: before.clusterId, nodeId: id });
    const mono = Math.floor(this.clock(id).mono(this.now));
    const node = new RaftCore({
      id,
      nodes: ids,
      incarnation: this.nextIncarnation(id),
      membership: 'amnesiac',
      epoch: f.epoch,
      restore: { term: f.term, vote: f.vote, voteInc: f.voteInc, entries: f.log, baseConfig: f.configuration, snapshot: f.snapshot },
      forceStart: true,
      forceStartTimeoutMs: forceTimeoutE * this.e,
      electionTimeoutMs: this.e,
      entriesPerAppendMax: this.entriesPerAppendMax,
      inflightAppendsMax: this.inflightAppendsMax,
      commitNoticeDelayMs: this.commitNoticeDelayMs,
      random: this.prng.fork(),
      now: mono,
      ...this.coreRule(),
    });
    this.nodes.set(id, node);
    this.app?.started(id, this.view(node));
    this.states.set(id, { index: 0, hash: 0 });
    this.checker.restarted(id);
    this.forcedFiles.set(node, { from: f.epoch, snapshot: f.snapshot, log: f.log });
    this.force.starts++;
    this.record(`restart ${id} force-starting as ${node.incarnation} from a file of ${f.log.length} entries`);
    this.flush(node);
  }

  private nextIncarnation(id: number): string {
    const n = (this.starts.get(id) ?? 0) + 1;
    this.starts.set(id, n);
    return `${String.fromCharCode(96 + id)}${n}`;
  }

  /** After every input: a failed force-start exits (the node comes back amnesiac), and a member
   * of an older epoch that learned of a newer one switches to it as a new amnesiac member. */
  private afterInput(node: RaftCore): void {
    const id = node.id;
    if (this.nodes.get(id) !== node || this.down.has(id)) return;
    if (node.forceStartPhase === 'failed') {
      this.force.failures++;
      this.down.add(id);
      this.forgetful.add(id);
      this.leases.update(id, this.now, this.now);
      this.record(`force-start of ${id} failed: ${node.forceStartFailure()}`);
      this.queue.push(this.now + this.prng.range(this.e / 2, 2 * this.e), { kind: 'restart', node: id });
      return;
    }
    if (node.forceStartPhase === 'serving' && !this.served.has(node)) {
      this.served.add(node);
      this.force.served++;
    }
    const epoch = node.epochToJoin();
    if (epoch === null) return;
    this.force.switches++;
    this.leases.update(id, this.now, this.now);
    this.startNode(id, undefined, 'amnesiac', undefined, epoch);
    this.record(`${id} switches to epoch ${epoch.generation}.${epoch.id} as ${this.node(id).incarnation}`);
  }

  /** docs/design.md "Force-start": once a newer epoch has served, no node of an older one counts an
   * acknowledgement from a member of its own epoch. */
  private checkOldEpochAck(m: Message, to: RaftCore): void {
    const ack =
      (m.type === 'append-response' && m.success) ||
      m.type === 'heartbeat-response' ||
      ((m.type === 'vote-response' || m.type === 'pre-vote-response') && m.granted);
    if (!ack || m.epoch >= this.servedGeneration || to.epoch.generation !== m.epoch || to.epoch.id !== m.epochId) return;
    throw new Violation(
      'old epoch acknowledges',
      `${m.type} from ${m.from} in epoch ${m.epoch} after epoch ${this.servedGeneration} served`,
    );
  }

  /** At most one epoch serves at a time: a lease in one epoch never overlaps one in another. */
  private noteServing(node: RaftCore, trueEnd: number): void {
    const key = `${node.epoch.generation}.${node.epoch.id}`;
    for (const [other, until] of this.servingUntil) {
      if (other !== key && until > this.now)
        throw new Violation('epoch overlap', `epoch ${key} serves while epoch ${other} serves until ${until}`);
    }
    this.servingUntil.set(key, Math.max(trueEnd, this.servingUntil.get(key) ?? 0));
    this.servedGeneration = Math.max(this.servedGeneration, node.epoch.generation);
  }

  private onPartition(): boolean {
    if (this.quiet) return false;
    this.blocked.clear();
    const a = this.pickNode();
    const b = ids.filter((x) => x !== a)[this.prng.int(2)] ?? a;
    const shape = this.prng.int(3);
    if (shape === 0)
      this.isolate(a); // symmetric: {a} | the other two
    else if (shape === 1)
      this.blocked.add(`${a}>${b}`); // one-way
    else {
      this.blocked.add(`${a}>${b}`); // one node cannot reach either peer, but hears them
      for (const c of ids) if (c !== a && c !== b) this.blocked.add(`${a}>${c}`);
    }
    this.record(`partition ${[...this.blocked].join(' ')}`);
    this.queue.push(this.now + this.prng.range(this.e, 4 * this.e), { kind: 'heal' });
    return false;
  }

  private onHeal(): boolean {
    if (this.blocked.size > 0) this.record('heal');
    this.blocked.clear();
    if (!this.quiet && this.faults.has('partition')) this.queue.push(this.now + this.prng.range(this.e, 4 * this.e), { kind: 'partition' });
    return false;
  }

  /** Faults stop. Every crashed node restarts, except that in half the seeds one node stays cut
   * off, so the quiet period proves progress with a bare majority. */
  private onQuiet(): boolean {
    this.quiet = true;
    this.dropRate = 0;
    this.blocked.clear();
    this.endFigure8('quiet');
    this.endDeafFollower();
    this.figure8Cut.clear();
    this.lagging.clear();
    // Quiet restarts resume their files: a force-start now would leave too little of the quiet
    // period to prove liveness.
    this.forcing.clear();
    for (const id of [...this.down]) this.onRestart(id);
    for (const id of ids) if (this.clock(id).isPaused) this.onResume(id);
    // With amnesia every node must come back as a voter, so none stays cut off.
    if (this.faults.size > 0 && !this.dynamic && this.prng.chance(0.5)) this.isolate(this.pickNode());
    this.record(`quiet ${[...this.blocked].join(' ')}`);
    return false;
  }

  private onLivenessProbe(): boolean {
    if (this.markerProposed) return false;
    const leader = ids.find((id) => this.runs(id) && this.node(id).role === 'leader');
    if (leader !== undefined) {
      const node = this.node(leader);
      const r = node.propose([encoder.encode('marker')]);
      this.markerProposed = r.ok;
      this.record(`propose marker to ${leader}: ${r.ok ? r.firstIndex : r.error.code}`);
      this.flush(node);
    }
    if (!this.markerProposed) this.queue.push(this.now + this.e / 2, { kind: 'liveness-probe' });
    return false;
  }

  /** The machine stops, clocks included, for 1 ms to 3E; see SimClock. */
  private onPause(id: number, forMs: number | undefined): boolean {
    if (!this.quiet && this.runs(id)) {
      this.clock(id).pause(this.now);
      this.record(`pause ${id}`);
      this.queue.push(this.now + (forMs ?? this.prng.range(1, 3 * this.e)), { kind: 'resume', node: id });
    }
    if (!this.quiet && this.faults.has('pause')) {
      this.queue.push(this.now + this.prng.range(this.e, 6 * this.e), { kind: 'pause', node: this.pickNode() });
    }
    return false;
  }

  /** On resume the node ticks first (a driver's timers fire before queued socket reads are
   * handled), then gets what arrived meanwhile. */
  private onResume(id: number): boolean {
    const clock = this.clock(id);
    if (!clock.isPaused) return false;
    clock.resume(this.now);
    this.record(`resume ${id}`);
    if (this.down.has(id)) return false;
    this.tickNode(id);
    const held = this.backlog.get(id) ?? [];
    this.backlog.delete(id);
    for (const m of held) this.onDeliver(m);
    return false;
  }

  /** One wall clock goes wrong (docs/design.md "The model" allows one): a skew, repeated jumps, or a step
   * of the leader's clock; or none, leaving drift only. */
  private onClockFault(): boolean {
    if (this.quiet) return false;
    const big = (): number => (this.prng.chance(0.5) ? 1 : -1) * this.prng.range(50, 5000);
    const leader = ids.find((id) => this.runs(id) && this.node(id).role === 'leader');
    const id = this.clockVariant === 2 ? leader : this.wrongClock || this.pickNode();
    if (this.clockVariant > 2) return false;
    // A stopped machine's clocks stop too: its wall clock cannot step while it is paused.
    if (id === undefined || this.clock(id).isPaused) {
      this.queue.push(this.now + this.e, { kind: 'clock-fault' });
      return false;
    }
    this.setWrongClock(id, (this.clockVariant === 2 ? this.clock(id).wallOffset : 0) + big());
    if (this.clockVariant === 1) this.queue.push(this.now + this.prng.range(this.e, 10 * this.e), { kind: 'clock-fault' });
    return false;
  }

  private setWrongClock(id: number, offset: number): void {
    this.wrongClock = id;
    this.clock(id).wallOffset = offset;
    this.record(`wall clock of ${id} off by ${offset} ms`);
  }

  private onTransfer(): boolean {
    if (this.quiet) return false;
    const leader = ids.find((id) => this.runs(id) && this.node(id).role === 'leader');
    if (leader !== undefined) {
      const to = ids.filter((x) => x !== leader)[this.prng.int(2)] ?? leader;
      const node = this.node(leader);
      const error = node.transferLeadership(to);
      this.record(`transfer ${leader} -> ${to}: ${error === null ? 'started' : error.code}`);
      this.flush(node);
    }
    this.queue.push(this.now + this.prng.range(5 * this.e, 15 * this.e), { kind: 'transfer' });
    return false;
  }

  private scheduleScenario(scenario: Scenario): void {
    if (!membershipScenarios.has(scenario)) this.queue.push(this.e / 2, { kind: 'campaign', node: 1 });
    const at = 20 * this.e;
    switch (scenario) {
      case 'remove-then-add':
        this.queue.push(at, { kind: 'amnesia', node: 3 });
        return;
      case 'crash-looping-replacement':
        // Node 3 forgets, then forgets again four times before it can be caught up and added.
        this.queue.push(at, { kind: 'amnesia', node: 3 });
        for (let k = 1; k <= 4; k++) this.queue.push(at + 5 * this.e + k * 4 * this.e, { kind: 'amnesia', node: 3, again: true });
        return;
      case 'leader-dies-during-replacement':
        // Node 3 forgets; at a random step of its replacement the leader stops and resumes.
        this.queue.push(at, { kind: 'amnesia', node: 3 });
        this.queue.push(at + this.prng.range(this.e, 8 * this.e), { kind: 'stop', node: 1, downMs: 2 * this.e });
        this.queue.push(at + this.prng.range(this.e, 8 * this.e), { kind: 'stop', node: 2, downMs: 2 * this.e });
        return;
      case 'quick-restart':
        // The leader stops cleanly and is back within E/2, while its lease may still run.
        for (const id of ids) this.queue.push(at + id * 10 * this.e, { kind: 'stop', node: id, downMs: this.e / 4 });
        return;
      case 'crash-after-resume':
        this.queue.push(at, { kind: 'stop', node: 1, downMs: this.e });
        this.queue.push(at + 1.5 * this.e, { kind: 'amnesia', node: 1, again: true });
        return;
      case 'bootstrap-all-fresh':
      case 'bootstrap-all-amnesiac':
        return;
      case 'force-start-alive':
        // Node 3 force-starts while the other two are alive and led: refused.
        this.queue.push(at, { kind: 'force-start', node: 3, downMs: this.e });
        return;
      case 'force-start-partitioned':
        // Node 3 force-starts cut off, so it makes the next epoch; the cut heals while it waits,
        // but the other two are voters of a led epoch and never switch; it gives up.
        this.queue.push(at - 1, { kind: 'isolate', node: 3 });
        this.queue.push(at, { kind: 'force-start', node: 3, downMs: this.e });
        this.queue.push(at + (1 + forceStartProbeE + 2) * this.e, { kind: 'heal' });
        return;
      case 'force-start-concurrent':
        // Node 3 forgets; nodes 1 and 2 both force-start at once: at most one epoch serves.
        this.queue.push(at, { kind: 'amnesia', node: 3, again: true });
        this.queue.push(at, { kind: 'force-start', node: 1, downMs: this.e });
        this.queue.push(at, { kind: 'force-start', node: 2, downMs: this.e });
        return;
      case 'force-start-after-two-losses':
        // Nodes 2 and 3 forget: nobody can serve. The survivor is stopped and force-started.
        this.queue.push(at, { kind: 'amnesia', node: 2, again: true });
        this.queue.push(at, { kind: 'amnesia', node: 3, again: true });
        this.queue.push(at + 5.5 * this.e, { kind: 'expect-stuck' });
        this.queue.push(at + 6 * this.e, { kind: 'force-start', node: 1, downMs: this.e });
        return;
      case 'learner-must-vote':
      case 'single-server-bug':
        // Node 3 forgets; its replacement's add (or removal) entry triggers the rest.
        this.queue.push(at, { kind: 'amnesia', node: 3 });
        return;
      case 'stopped-for-hours':
        this.queue.push(at, { kind: 'stop', node: 3, downMs: hoursStoppedMs });
        return;
      case 'restored-state-file':
        // Node 3 stops and resumes (its first file is consumed), stops again, and an operator puts
        // the first file back: resuming it would roll its term, vote and log back.
        this.queue.push(at, { kind: 'stop', node: 3, downMs: this.e });
        this.queue.push(at + 10 * this.e, { kind: 'stop', node: 3, downMs: this.e, restoreOldest: true });
        return;
      case 'bootstrap-two-fresh-one-member':
        // Nodes 1 and 2 lose their disks (no membership record: fresh again) while node 3 stops
        // cleanly and resumes: two fresh nodes and one member never bootstrap a second cluster;
        // nobody serves until node 3 is force-started.
        this.queue.push(at, { kind: 'stop', node: 3, downMs: 2 * this.e });
        this.queue.push(at, { kind: 'amnesia', node: 1, again: true, fresh: true });
        this.queue.push(at, { kind: 'amnesia', node: 2, again: true, fresh: true });
        this.queue.push(at + 10 * this.e, { kind: 'expect-stuck' });
        this.queue.push(at + 11 * this.e, { kind: 'force-start', node: 3, downMs: this.e });
        return;
      case 'skewed-follower':
        this.setWrongClock(3, 5000);
        return;
      case 'skewed-leader':
        this.setWrongClock(1, 5000);
        return;
      case 'leader-step':
        this.queue.push(at, { kind: 'clock-fault' });
        return;
      case 'frozen-leader':
        this.queue.push(at, { kind: 'pause', node: 1, forMs: 3 * this.e });
        return;
      case 'transfer':
        this.queue.push(at, { kind: 'transfer' });
        return;
      default: {
        const _: never = scenario;
        throw new RaftError('RAFT_BAD_OPTIONS', `unknown scenario ${String(_)}`);
      }
    }
  }

  private clock(id: number): SimClock {
    const c = this.clocks.get(id);
    if (c === undefined) throw new RaftError('RAFT_INVARIANT', `no clock ${id}`);
    return c;
  }

  // ---- fault figure8 (see the Figure8 type) ----

  /** An episode begins once a leader runs with both peers up; one episode at a time. */
  private onFigure8(): void {
    if (this.quiet || this.figure8.phase !== 'idle') return;
    if (this.deaf) {
      this.queue.push(this.now + this.e, { kind: 'figure8' });
      return;
    }
    const old = ids.find((id) => this.runs(id) && this.node(id).role === 'leader');
    const calm = ids.every((id) => this.runs(id)) && this.blocked.size === 0 && this.lagging.size === 0;
    if (old === undefined || !calm) {
      this.queue.push(this.now + this.e, { kind: 'figure8' });
      return;
    }
    this.figure8Cut.clear();
    this.cutOff(old);
    this.setFigure8({ phase: 'old-isolated', token: this.figure8.token + 1, old }, 6 * this.e);
    // More entries than one append carries, so repairing a log with them takes several appends.
    const burst = this.entriesPerAppendMax + 1 + this.figure8Random.int(8);
    const node = this.node(old);
    const data: Uint8Array[] = [];
    for (let k = 0; k < burst; k++) {
      const more = this.app?.proposals(old, this.view(node));
      if (more === undefined) data.push(encoder.encode(`p${++this.proposals}`));
      else data.push(...more);
    }
    const r = data.length > 0 ? node.propose(data) : null;
    this.record(
      `figure8: leader ${old} cut off after a burst ${r === null ? 'of none' : r.ok ? `${r.firstIndex}..${r.lastIndex}` : r.error.code}`,
    );
    this.flush(node);
  }

  /** A node became leader (seen before its Ready's messages leave). */
  private onFigure8Leader(node: RaftCore): void {
    const f = this.figure8;
    const id = node.id;
    if (f.phase === 'old-isolated' && id !== f.old) {
      const third = ids.find((x) => x !== f.old && x !== id) ?? id;
      this.figure8Cut.clear();
      this.cutOff(id);
      this.setFigure8({ phase: 'rival-cut', token: f.token + 1, old: f.old, rival: id, third }, 8 * this.e);
      this.record(`figure8: rival ${id} leads term ${node.currentTerm} and is cut off; ${f.old} and ${third} reconnect`);
    } else if (f.phase === 'rival-cut' && id === f.old) {
      const cutAfter = 1 + this.figure8Random.int(2);
      this.setFigure8({ ...f, phase: 'old-repairs', token: f.token + 1, repairs: 0, cutAfter }, 4 * this.e);
      this.record(`figure8: ${id} leads again at term ${node.currentTerm}; link ${id}>${f.third} fails after ${cutAfter} repair append(s)`);
    } else if (f.phase === 'rival-cut' && id === f.third) {
      this.endFigure8(`${id} won instead`);
    } else if (f.phase === 'rival-returns' && id !== f.old) {
      this.endFigure8(`${id} leads term ${node.currentTerm}`);
    }
  }

  /** An append of old-term entries from the old leader to the third node went out. */
  private onFigure8Repair(m: Message, link: string): void {
    const f = this.figure8;
    if (f.phase !== 'old-repairs' || m.type !== 'append' || m.from !== f.old || m.to !== f.third) return;
    const first = m.entries[0];
    if (first === undefined || first.term >= m.term || f.repairs >= f.cutAfter) return;
    f.repairs++;
    if (f.repairs < f.cutAfter) return;
    this.figure8Cut.add(link);
    this.record(`figure8: link ${link} fails`);
    this.setFigure8({ ...f, token: f.token + 1 }, this.figure8Random.range(this.e / 10, this.e / 2));
  }

  /** A phase's deadline, or the planned step after the repair link failed. */
  private figure8Step(): void {
    const f = this.figure8;
    if (f.phase === 'old-repairs' && f.repairs >= f.cutAfter) {
      this.figure8Cut.clear();
      this.cutOff(f.old);
      this.episodes.figure8++;
      this.setFigure8({ phase: 'rival-returns', token: f.token + 1, old: f.old, rival: f.rival, third: f.third }, 8 * this.e);
      this.record(`figure8: ${f.old} cut off; ${f.rival} and ${f.third} reconnect`);
      return;
    }
    this.endFigure8(`phase ${f.phase} timed out`);
  }

  private setFigure8(next: Figure8, stepInMs: number): void {
    this.figure8 = next;
    this.queue.push(this.now + Math.max(1, Math.floor(stepInMs)), { kind: 'figure8-step', token: next.token });
  }

  private endFigure8(reason: string): void {
    if (this.figure8.phase === 'idle') return;
    this.figure8Cut.clear();
    this.figure8 = { phase: 'idle', token: this.figure8.token + 1 };
    this.record(`figure8: episode over (${reason})`);
    if (!this.quiet) this.queue.push(this.now + this.figure8Random.range(10 * this.e, 30 * this.e), { kind: 'figure8' });
  }

  // ---- fault deaf-follower ----

  /** Clients go idle; once what was proposed has reached every node, the leader's link to one
   * follower fails one way for 2E-4E: that follower stops hearing the leader and campaigns with a
   * log as long as the other follower's, which still hears the leader and must ignore it while the
   * leader's lease may run (the vote-ignoring rule). */
  private onDeafFollower(): void {
    if (this.quiet || this.deaf || this.figure8.phase !== 'idle') return;
    const leader = ids.find((id) => this.runs(id) && this.node(id).role === 'leader');
    const calm = ids.every((id) => this.runs(id)) && this.blocked.size === 0 && this.lagging.size === 0;
    if (leader === undefined || !calm) {
      this.queue.push(this.now + this.e, { kind: 'deaf-follower' });
      return;
    }
    const followers = ids.filter((id) => id !== leader);
    const follower = followers[this.figure8Random.int(followers.length)] ?? leader;
    this.deaf = true;
    this.record(`deaf-follower: clients idle; ${follower} stops hearing ${leader} soon`);
    this.queue.push(this.now + this.figure8Random.range(this.e / 4, this.e / 2), { kind: 'deaf-cut', leader, follower });
    this.queue.push(this.now + this.figure8Random.range(2 * this.e, 4 * this.e), { kind: 'deaf-end' });
  }

  private endDeafFollower(): void {
    if (!this.deaf) return;
    this.deaf = false;
    this.figure8Cut.clear();
    this.record('deaf-follower: over');
    if (!this.quiet) this.queue.push(this.now + this.figure8Random.range(10 * this.e, 30 * this.e), { kind: 'deaf-follower' });
  }

  /** Fault `leader-pause`: once every 10E-30E, when every node runs and no link is cut, the leader
   * (of E at least) stops, its monotonic clock too, while other faults wait: a SIGSTOP while the
   * clients connected to it stay connected (a longer keep-alive). It resumes once another node
   * serves (see onLeaderResume; after 12E in any case). On resume it ticks first and its clients may
   * act before it hears of the new term: only the lease tells it not to serve. */
  private onLeaderPause(): void {
    if (this.quiet) return;
    const leader = ids.find((id) => this.runs(id) && this.node(id).role === 'leader');
    const calm = ids.every((id) => this.runs(id)) && this.blocked.size === 0 && this.lagging.size === 0;
    const seen = leader === undefined ? '' : `${leader}.${this.node(leader).currentTerm}`;
    if (leader === undefined || !calm || seen !== this.leaderPauseSeen) {
      this.leaderPauseSeen = seen;
      this.queue.push(this.now + this.e, { kind: 'leader-pause' });
      return;
    }
    this.leaderPaused = leader;
    this.clock(leader).pause(this.now);
    this.record(`leader-pause: ${leader} stops`);
    this.queue.push(this.now + 3 * this.e, { kind: 'leader-resume', node: leader, since: this.now });
    this.queue.push(this.now + this.leaderPauseRandom.range(10 * this.e, 30 * this.e), { kind: 'leader-pause' });
  }

  /** The paused leader resumes once another node leading with a lease serves: E/10-E after the
   * application says it answered a client or, without that word, 2E-4E after it committed an entry
   * of its own term; after 12E in any case. Until then it is looked at every E/2. `rival` is
   * `id.term.index`: the rival seen leading, and its last index then, at or past its term's first
   * entry. */
  private onLeaderResume(id: number, since: number, rival: string): boolean {
    if (this.leaderPaused === id && this.now - since < 12 * this.e) {
      const leader = ids.find((o) => o !== id && this.runs(o) && this.node(o).hasLease(this.clock(o).mono(this.now)));
      const r = leader === undefined ? null : this.node(leader);
      const [rid, rterm, rindex] = rival.split('.').map(Number);
      const same = r !== null && r.id === rid && r.currentTerm === rterm;
      const app = this.app;
      const serves = r !== null && (app?.serves === undefined ? same && r.commitIndex >= (rindex ?? 0) : app.serves(r.id));
      if (r !== null && serves) {
        this.episodes.leaderPause++;
        this.record(`leader-pause: ${r.id} serves in term ${r.currentTerm}; ${id} resumes soon`);
        this.leaderPaused = -id;
        const [lo, hi] = app?.serves === undefined ? [2 * this.e, 4 * this.e] : [this.e / 10, this.e];
        this.queue.push(this.now + this.leaderPauseRandom.range(lo, hi), { kind: 'leader-resume', node: id, since });
        return false;
      }
      const next = r === null ? '' : same ? rival : `${r.id}.${r.currentTerm}.${r.lastIndex}`;
      this.queue.push(this.now + this.e / 2, { kind: 'leader-resume', node: id, since, rival: next });
      return false;
    }
    this.leaderPaused = 0;
    return this.onResume(id);
  }

  private cutOff(id: number): void {
    for (const other of ids) {
      if (other === id) continue;
      this.figure8Cut.add(`${id}>${other}`);
      this.figure8Cut.add(`${other}>${id}`);
    }
  }

  private isolate(id: number): void {
    for (const other of ids) {
      if (other === id) continue;
      this.blocked.add(`${id}>${other}`);
      this.blocked.add(`${other}>${id}`);
    }
  }

  private pickNode(): number {
    return ids[this.prng.int(ids.length)] ?? 1;
  }

  private node(id: number): RaftCore {
    const n = this.nodes.get(id);
    if (n === undefined) throw new RaftError('RAFT_INVARIANT', `no node ${id}`);
    return n;
  }

  /** Starts a process for `id`: fresh or amnesiac (a new member), or resuming the durable state of
   * the one that stopped, from its state file when it wrote one. */
  private startNode(id: number, crashed: RaftCore | undefined, membership: Membership, file?: Uint8Array, join?: Epoch): void {
    const mono = Math.floor(this.clock(id).mono(this.now));
    this.processes.set(id, (this.processes.get(id) ?? 0) + 1);
    let restore = this.durable ? (this.storage(id).load() ?? undefined) : crashed?.durableState();
    if (file !== undefined && crashed !== undefined) {
      const f = decodeStateFile(file, `sim node ${id}`, { clusterId: crashed.clusterId, nodeId: id });
      restore = { term: f.term, vote: f.vote, voteInc: f.voteInc, entries: f.log, baseConfig: f.configuration, snapshot: f.snapshot };
    }
    const identity = this.dynamic
      ? {
          nodes: ids,
          incarnation: crashed?.incarnation ?? this.nextIncarnation(id),
          // No membership record exists before a node joins an epoch: such a resume is as fresh
          // (or amnesiac) as the process that stopped.
          membership: crashed !== undefined && crashed.epoch.generation === 0 ? crashed.membershipAtStart : membership,
          ...(crashed === undefined ? (join === undefined ? {} : { epoch: join }) : { epoch: crashed.epoch }),
        }
      : { voters: ids };
    const node = new RaftCore({
      id,
      ...identity,
      electionTimeoutMs: this.e,
      entriesPerAppendMax: this.entriesPerAppendMax,
      inflightAppendsMax: this.inflightAppendsMax,
      commitNoticeDelayMs: this.commitNoticeDelayMs,
      snapshotChunkBytesMax: this.snapshotChunkBytes,
      ...(this.compactEntries > 0 ? { logEntriesMax: this.compactEntries } : {}),
      random: this.prng.fork(),
      now: mono,
      forceStartTimeoutMs: forceTimeoutE * this.e,
      // docs/design.md "Leases and votes": a node that resumed a state file ignores votes for 2E.
      ignoreVotesUntil: crashed === undefined ? mono : mono + 2 * this.e,
      ...(restore === undefined ? {} : { restore }),
      ...this.coreRule(),
      ...(this.durable ? { awaitStorage: true } : {}),
    });
    if (crashed !== undefined && !this.durable) this.checker.resumed(crashed, node);
    if (this.durable) this.checker.restoredFromStorage(node);
    this.nodes.set(id, node);
    this.app?.started(id, this.view(node));
    this.states.set(id, { index: 0, hash: 0 });
    this.checker.restarted(id);
    this.flush(node);
  }

  /** Hands the node's Readies to the handler the driver runs (raft/core/ready-handler.ts), then
   * compacts as the driver's snapshot source would. */
  private flush(node: RaftCore): void {
    const file = this.forcedFiles.get(node);
    if (file !== undefined && node.forceStartPhase !== 'probing') {
      this.forcedFiles.delete(node);
      if (node.forceStartPhase !== 'failed') this.checker.forced(node, file.from, file);
    }
    if (drainReady(node, this.readySink(node)) > 0) this.maybeCompact(node);
    this.afterInput(node);
  }

  /** The simulator's part of each step: the network and the state machine; the trace, the checks
   * and the scenarios' triggers see the whole Ready first. */
  private readySink(node: RaftCore): ReadySink {
    let sink = this.sinks.get(node);
    if (sink !== undefined) return sink;
    sink = {
      live: () => this.nodes.get(node.id) === node && !this.down.has(node.id),
      begin: (ready) => this.checkReady(node, ready),
      send: (m) => {
        if (m.type === 'vote-response' && m.granted && !node.voter) this.learnerVotes++;
        if (this.durable && m.type === 'vote-response' && m.granted) this.checker.granted(node, m);
        this.send(m);
      },
      ...(this.durable
        ? {
            hardState: (h) => {
              this.storage(node.id).setHardState(h);
              this.scheduleSync(node.id);
            },
          }
        : {}),
      appended: (entries, truncatedFrom) => {
        if (!this.durable) return;
        const storage = this.storage(node.id);
        storage.append(entries, truncatedFrom);
        this.scheduleSync(node.id);
        if (this.storageBug === 'ack-before-fsync' && node.role !== 'leader') {
          const w = storage.writtenState();
          node.persisted(w.index, w.term);
        }
      },
      restore: (s) => {
        const storage = this.storages.get(node.id);
        if (storage !== undefined && s.index > storage.snapshotIndex) {
          storage.saveSnapshot(s);
          this.scheduleSync(node.id);
        }
        this.restoreState(node.id, s.index, s.chunks);
      },
      committed: (entries) => this.applyCommitted(node, entries),
      softState: () => {},
    };
    this.sinks.set(node, sink);
    return sink;
  }

  /** Before anything of the Ready is acted on: the trace of a role change (ahead of the violation it
   * may cause), the safety checks, leases, and the scenarios that cut links on what a leader
   * appended, before the messages carrying it go out. */
  private checkReady(node: RaftCore, ready: Ready): void {
    const s = ready.softState;
    if (s !== null && this.trace !== null) this.record(`${node.id} ${s.role} term=${s.term} leader=${s.leader} commit=${s.commit}`);
    this.checker.check(node, ready);
    this.checkTime(node, ready.appended);
    const clock = this.clock(node.id);
    const mono = clock.mono(this.now);
    this.leases.update(node.id, this.now, node.hasLease(mono) ? clock.trueAt(node.leaseUntil()) : this.now);
    if (node.hasLease(mono)) this.noteServing(node, clock.trueAt(node.leaseUntil()));
    for (const c of node.excludedClocks()) this.excluded.add(c);
    if (node.role === 'leader') this.onLeaderAppended(node, ready.appended);
    if (s !== null && s.role === 'leader' && this.figure8.phase !== 'idle') this.onFigure8Leader(node);
  }

  private applyCommitted(node: RaftCore, entries: readonly LogEntry[]): void {
    for (const e of entries) {
      if (e.data !== null && e.data.length === markerBytes && decoder.decode(e.data) === 'marker') this.markerCommitted = true;
      if (this.trace !== null) this.record(`${node.id} applied ${formatEntry(e)}`);
      this.applyState(node.id, e);
    }
    this.app?.applied(node.id, entries, this.view(node));
  }

  /** learner-must-vote: the leader appends the entry that adds node 3's new member; node 3 must not
   * get it, and the leader stops, so the next leader needs the vote of a node that does not list
   * itself. single-server-bug (Ongaro, raft-dev 2015): the leader appends a removal and stops before
   * anyone has it; the next leader must commit an entry of its own term before it changes the
   * configuration again. */
  private onLeaderAppended(node: RaftCore, appended: readonly LogEntry[]): void {
    const scenario = this.opts.scenario;
    if (this.triggered || (scenario !== 'learner-must-vote' && scenario !== 'single-server-bug')) return;
    const change = appended.find((e) => e.config !== undefined && e.index > 1);
    if (change === undefined) return;
    const adds = (change.config?.length ?? 0) === 3;
    if (adds !== (scenario === 'learner-must-vote')) return;
    this.triggered = true;
    const id = node.id;
    for (const other of ids) if (other !== id && (scenario === 'single-server-bug' || other === 3)) this.blocked.add(`${id}>${other}`);
    this.record(`leader ${id} appended ${formatEntry(change)}; links ${[...this.blocked].join(' ')} cut`);
    this.queue.push(this.now + (scenario === 'learner-must-vote' ? this.e / 4 : 1), { kind: 'stop', node: id, downMs: 4 * this.e });
    this.queue.push(this.now + 2 * this.e, { kind: 'heal' });
  }

  private view(node: RaftCore): SimNodeView {
    const mono = this.clock(node.id).mono(this.now);
    return {
      role: node.role,
      term: node.currentTerm,
      hasLease: node.hasLease(mono),
      clusterTimeReady: node.clusterTimeReady(),
      epoch: `${node.epoch.generation}.${node.epoch.id}`,
      now: this.now,
    };
  }

  private state(id: number): SimState {
    const st = this.states.get(id);
    if (st === undefined) throw new RaftError('RAFT_INVARIANT', `no state machine ${id}`);
    return st;
  }

  /** Per epoch: a forced epoch's log need not match the old one's at an index (docs/design.md
   * "Force-start"). */
  private hashesOf(id: number): number[] {
    const epoch = this.node(id).epoch;
    const key = `${epoch.generation}.${epoch.id}`;
    let hashes = this.hashAt.get(key);
    if (hashes === undefined) {
      hashes = [];
      this.hashAt.set(key, hashes);
    }
    return hashes;
  }

  private applyState(id: number, e: LogEntry): void {
    const st = this.state(id);
    st.index = e.index;
    if (e.data !== null) st.hash = hashEntry(st.hash, e.data);
    const hashes = this.hashesOf(id);
    const known = hashes[e.index];
    if (known === undefined) hashes[e.index] = st.hash;
    else if (known !== st.hash) throw new Violation('applied state', `node ${id} reached state ${st.hash} at ${e.index}, another ${known}`);
  }

  /** Applied-state equality after install: the restored state is the one every node reached at
   * that index by applying the entries. */
  private restoreState(id: number, index: number, chunks: readonly Uint8Array[]): void {
    const decoded = decodeSimState(chunks);
    if (typeof decoded === 'string') throw new Violation('applied state', `node ${id} restored a corrupt snapshot at ${index}: ${decoded}`);
    const { st, rest } = decoded;
    if (this.app === null && rest.length > 0)
      throw new Violation('applied state', `node ${id} restored ${rest.length} bytes too many at ${index}`);
    const hashes = this.hashesOf(id);
    // A forced epoch starts from its file's snapshot, which no node of it applied entry by entry.
    if (hashes[index] === undefined && this.node(id).forceStartPhase !== null) hashes[index] = st.hash;
    if (st.index !== index || hashes[index] !== st.hash) {
      throw new Violation(
        'applied state',
        `node ${id} restored state ${st.hash} of ${st.index} as the snapshot at ${index}, whose state is ${hashes[index]}`,
      );
    }
    this.states.set(id, st);
    this.app?.restore?.(id, [rest]);
    this.restores++;
    this.record(`${id} restored snapshot at ${index}`);
  }

  /** Fault `snapshot`: the node's application hands a snapshot over whenever the core wants one;
   * the log then holds at most 2 x compactEntries committed entries (bounded log length). */
  private maybeCompact(node: RaftCore): void {
    if (this.compactEntries > 0 && node.snapshotWanted()) {
      const st = this.state(node.id);
      const own = encodeSimState(st, this.snapshotFillerBytes);
      const app = this.app?.snapshot?.(node.id) ?? [];
      const error = node.compact(st.index, [...own, ...app]);
      if (error !== null) throw error;
      const storage = this.storages.get(node.id);
      if (storage !== undefined && node.latestSnapshot !== null) {
        storage.saveSnapshot(node.latestSnapshot);
        this.scheduleSync(node.id);
      }
      this.compactions++;
      this.record(`${node.id} compacted to ${st.index}`);
    }
    const held = node.entries().length;
    this.maxHeldEntries = Math.max(this.maxHeldEntries, held);
    if (held !== node.lastIndex - node.firstIndex + 1)
      throw new Violation('bounded log', `node ${node.id} holds ${held} entries from ${node.firstIndex} to ${node.lastIndex}`);
    // Up to compactEntries applied since the newest snapshot, and as many before it for followers.
    if (this.compactEntries > 0 && node.commitIndex - node.firstIndex + 1 > 2 * this.compactEntries) {
      throw new Violation(
        'bounded log',
        `node ${node.id} holds ${node.commitIndex - node.firstIndex + 1} committed entries, bound 2 x ${this.compactEntries}`,
      );
    }
  }

  /** No deadline passes early while at most one clock is wrong: an entry the leader stamps is not
   * ahead of true time by more than aheadMaxMs. */
  private checkTime(node: RaftCore, appended: readonly LogEntry[]): void {
    if (node.role !== 'leader') return;
    const trueWall = wallEpochMs + this.now;
    for (const e of appended) {
      if (e.term !== node.currentTerm) continue;
      const ahead = e.time - trueWall;
      this.maxAheadMs = Math.max(this.maxAheadMs, ahead);
      if (ahead > this.aheadMaxMs) {
        throw new Violation('cluster time ahead', `leader ${node.id} stamped ${e.index} ${ahead.toFixed(1)} ms ahead of true time`);
      }
    }
  }

  private coreRule(): { unsafe?: UnsafeRule } {
    const r = this.opts.unsafe;
    return r === undefined || isStorageBug(r) ? {} : { unsafe: r };
  }

  private storage(id: number): PowerCutStorage {
    const s = this.storages.get(id);
    if (s === undefined) throw new RaftError('RAFT_INVARIANT', `no storage for node ${id}`);
    return s;
  }

  /** Durable mode: an fsync starts unless one is under way; when it ends, everything written
   * before it is durable, and the core hears so. */
  private scheduleSync(id: number): void {
    if (this.syncDue.has(id)) return;
    const process = this.processes.get(id) ?? 0;
    this.syncDue.set(id, process);
    this.queue.push(this.now + this.fsyncMs, { kind: 'sync', node: id, process });
  }

  private onSync(id: number, process: number): void {
    if (this.syncDue.get(id) !== process || this.processes.get(id) !== process || this.down.has(id)) return;
    if (this.clock(id).isPaused) {
      // A stopped machine learns of the finished write when it runs again.
      this.queue.push(this.now + this.tickMs(), { kind: 'sync', node: id, process });
      return;
    }
    this.syncDue.delete(id);
    const storage = this.storage(id);
    const d = this.storageBug === 'skip-fsync' ? storage.writtenState() : storage.sync();
    const node = this.node(id);
    node.persistedHardState(d.hard);
    node.persisted(d.index, d.term);
    this.flush(node);
  }

  /** Durable mode: one node, or all three, lose power (restarted after E/2-4E each). */
  private onPowerCut(id: number, all: boolean): void {
    if (this.quiet) return;
    const hit = (all ? [...ids] : [id]).filter((x) => !this.down.has(x));
    if (hit.length > 0) {
      this.cutPower(hit);
      for (const x of hit) this.queue.push(this.now + this.prng.range(this.e / 2, 4 * this.e), { kind: 'restart', node: x });
      if (hit.length === ids.length) this.power.allCuts++;
    }
    this.queue.push(this.now + this.prng.range(3 * this.e, 15 * this.e), {
      kind: 'power-cut',
      node: this.pickNode(),
      all: this.prng.chance(0.5),
    });
  }

  /** The nodes go down with their unsynced writes (a torn prefix of one may reach the disk); then
   * no committed entry may be missing from a majority of what is left, memory of the nodes that
   * run and storage of those that are down. */
  private cutPower(hit: readonly number[]): void {
    for (const id of hit) {
      const torn = this.storage(id).powerCut(this.prng);
      this.down.add(id);
      this.syncDue.delete(id);
      this.leases.update(id, this.now, this.now);
      this.power.cuts++;
      if (torn > 0) this.power.tornWrites++;
      if (this.storage(id).lastRecovery.cutBytes > 0) this.power.tornCut++;
      this.record(`power cut ${id}${torn > 0 ? ` (${torn} bytes of an unsynced write reached the disk)` : ''}`);
    }
    this.checkRetained();
  }

  /** No committed entry lost: each is held by a majority, in the memory of a running node or in the
   * storage of one that is down (a snapshot holds every entry up to its index). */
  private checkRetained(): void {
    const committed = this.checker.committedIn(this.node(1).epoch);
    const holders = ids.map((id): ((index: number) => number | null) => {
      if (!this.down.has(id)) {
        const n = this.node(id);
        return (index) => (index <= n.snapshotIndex ? -1 : (n.termAt(index) ?? null));
      }
      const st = this.storage(id).load();
      const base = st?.snapshot?.index ?? 0;
      return (index) => (index <= base ? -1 : (st?.entries[index - base - 1]?.term ?? null));
    });
    for (let k = 0; k < committed.length; k++) {
      const term = committed[k]?.term;
      let held = 0;
      for (const termAt of holders) {
        const t = termAt(k + 1);
        if (t === -1 || t === term) held++;
      }
      if (held * 2 <= ids.length) {
        const down = ids.filter((id) => this.down.has(id)).join(',');
        throw new Violation('committed entry lost', `entry ${k + 1}/${term} is held by ${held} of ${ids.length} nodes (down: ${down})`);
      }
    }
  }

  private send(m: Message): void {
    this.stats.messages++;
    if (m.type === 'timeout-now') this.transfers++;
    const link = `${m.from}>${m.to}`;
    const lags = this.lagging.has(m.from) || this.lagging.has(m.to);
    if (this.blocked.has(link) || this.figure8Cut.has(link) || lags || this.netRandom.chance(this.dropRate)) {
      if (this.trace !== null) this.record(`drop ${formatMessage(m)}`);
      return;
    }
    this.enqueue(m, link);
    if (this.figure8.phase === 'old-repairs') this.onFigure8Repair(m, link);
    if (!this.quiet && this.faults.has('dup') && this.netRandom.chance(0.05)) this.enqueue(m, link);
  }

  /** Latency 1-5 ms; with reorder, one message in ten waits up to E/2 more and may overtake or be
   * overtaken; without it each link stays FIFO. */
  private enqueue(m: Message, link: string): void {
    let at = this.now + 1 + this.netRandom.int(5);
    if (!this.quiet && this.faults.has('reorder') && this.netRandom.chance(0.1)) {
      at += this.netRandom.int(this.e / 2);
    } else {
      at = Math.max(at, this.linkClock.get(link) ?? 0);
      this.linkClock.set(link, at);
    }
    this.queue.push(at, { kind: 'deliver', msg: m });
  }

  private record(line: string): void {
    this.trace?.push(`t=${this.now} ${line}`);
  }
}
