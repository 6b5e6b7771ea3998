// Runs a RaftCore on real time and a real transport (docs/design.md "Timing", docs/design.md "Links"). The core is a
// pure step machine; this is the loop around it: clocks in, messages in and out, Ready batches
// drained in order after every input, and the application's proposals batched per event-loop turn.

import { Buffer } from 'node:buffer';
import { randomBytes, randomInt } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { renameSync } from 'node:fs';
import { dirname } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Epoch, Membership } from '../core/membership.js';
import { noEpoch, sameEpoch } from '../core/membership.js';
import type { LogEntry, Message } from '../core/messages.js';
import { Prng } from '../core/prng.js';
import {
  type DurableState,
  type ForceStartPhase,
  type HardState,
  RaftCore,
  type RaftOptions,
  type Role,
  type SoftState,
} from '../core/raft.js';
import { drainReady, type ReadySink } from '../core/ready-handler.js';
import type { Snapshot } from '../core/snapshot.js';
import type { Durable } from '../core/storage.js';
import { RaftError } from '../errors.js';
import { DriverError } from './errors.js';
import { LogLimiter } from './log-limiter.js';
import { type DriverLogger, MessageGate } from './message-gate.js';
import { SnapshotTaker } from './snapshot-taker.js';
import {
  acquirePidLock,
  consumeStateFile,
  type Expected,
  type MembershipRecord,
  newClusterUid,
  newFileId,
  peekStateFile,
  prevPathOf,
  readForceStartFile,
  readRecord,
  resumedUid,
  type StateFile,
  stateOfCore,
  syncDir,
  writeRecord,
  writeStateFile,
} from './state-file.js';

export type { DriverLogger } from './message-gate.js';

/** What the driver needs of a transport; raft/transport's Transport<Message> provides it. */
export interface DriverTransport {
  start(): Promise<void>;
  stop(): Promise<void>;
  send(to: number, msg: Message): void;
  onMessage(fn: (from: number, msg: Message) => void): void;
  /** Hellos of links made from now on carry this epoch (raft/transport's Transport has it). */
  setEpoch?(epoch: unknown): void;
  /** Writes what send() queued now rather than at the transport's own end-of-turn flush; the
   * driver calls it once a turn, after proposing the turn's batch. */
  flush?(): void;
  /** Hellos carry this cluster identity from now on (raft/transport's Transport makes its links
   * again, so that peers learn it). */
  setClusterUid?(uid: string): void;
  /** Makes every link again, with hellos of the epoch and identity as they are now. */
  remakeLinks?(): void;
  /** Links that came up (with the peer's hello) and hellos refused for another identity. */
  onLink?(fn: (event: DriverLinkEvent) => void): void;
}

/** The link events the driver reads (raft/transport's LinkEvent has these and more). */
export type DriverLinkEvent =
  | { t: 'up'; nodeId: number; epoch: unknown; clusterUid: string }
  | { t: 'down'; nodeId: number }
  | { t: 'identity-refused'; nodeId: number; clusterUid: string; detail: string };

/** Who this process is, for the transport's hello (docs/design.md "Identity"). */
export interface DriverIdentity {
  /** The member's incarnation: the state file's when it resumes one, else random. */
  readonly incarnation: string;
  /** The epoch it resumes; generation 0 (none) for a fresh or amnesiac start. */
  readonly epoch: Epoch;
  /** The cluster identity (docs/design.md "Identity"); '' while not known. */
  readonly clusterUid: string;
}

export interface DriverClock {
  /** Monotonic ms. */
  monotonic(): number;
  /** Wall-clock ms since the Unix epoch. */
  wall(): number;
}

/** Core options the driver passes through unchanged. */
export type CoreTuning = Pick<
  RaftOptions,
  | 'heartbeatIntervalMs'
  | 'inflightAppendsMax'
  | 'commitNoticeDelayMs'
  | 'entriesPerAppendMax'
  | 'uncommittedEntriesMax'
  | 'preVote'
  | 'checkQuorum'
  | 'appendBytesMax'
  | 'logEntriesMax'
  | 'logBytesMax'
  | 'snapshotChunkBytesMax'
  | 'maxClockOffsetMs'
>;

/** A cluster node's raft state on disk (--data-dir; src/cluster/raft-storage.ts): writes are
 * buffered and made durable in group commits, each reported through listen(). */
export interface DriverStorage {
  /** The directory, for messages. */
  readonly dir: string;
  /** What it held at start; null: nothing. */
  readonly loaded: DurableState | null;
  /** The member whose state it holds (the incarnation its writes were made under). */
  readonly incarnation: string;
  readonly snapshotIndex: number;
  append(entries: readonly LogEntry[], truncatedFrom: number | null): void;
  setHardState(h: HardState): void;
  saveSnapshot(s: Snapshot): void;
  /** Drops everything held: from now on it holds the state of the member `incarnation`. */
  reset(incarnation: string): void;
  /** Resolves once every write so far is durable; rejects once the storage failed. */
  flush(): Promise<Durable>;
  /** What each group commit made durable, and the one error that stopped the storage. */
  listen(onDurable: (d: Durable) => void, onFailure: (err: Error) => void): void;
  close(): Promise<void>;
}

export interface RaftDriverOptions {
  readonly id: number;
  /** A static configuration: these node ids are voters with incarnation '0', as if bootstrapped
   * out of band; no state file. Give this or `stateFile`. */
  readonly voters?: readonly number[];
  /** Every configured node id (--cluster-peers), this one included; required with `stateFile`. */
  readonly nodes?: readonly number[];
  /** Default 'raftmq'. */
  readonly clusterId?: string;
  /** docs/design.md "State file": identity and membership come from this file and the record beside
   * it. A valid file is resumed (consumed at start()); without one the start is fresh (no record)
   * or amnesiac. */
  readonly stateFile?: string;
  /** docs/design.md "Force-start": make the next epoch from the state file (FILE, else FILE.prev). */
  readonly forceStart?: boolean;
  /** docs/raft.md "Persistence": the log, term, vote and snapshot on disk, with a core that waits
   * for them (awaitStorage). A storage that holds a state is resumed as the same member (its
   * epoch and cluster identity from the record beside `stateFile`, which it needs); one that holds
   * none is reset for the member this start makes. A force-start forces from what it holds. */
  readonly storage?: DriverStorage;
  /** A write or fsync of `storage` failed: the driver has stopped (the process should exit; the
   * write is never retried). Default: onFatal. */
  readonly onStorageFailed?: (err: Error) => void;
  /** A forced epoch that has no second voter within this gives up. Default 60E. */
  readonly forceStartTimeoutMs?: number;
  /** The force-start was refused or timed out: the process must exit (the driver has stopped). */
  readonly onForceStartFailed?: (err: DriverError) => void;
  /** E in ms (docs/design.md "Timing"). */
  readonly electionTimeoutMs: number;
  /** Builds the transport around the driver's message check, which it must use as `validate`,
   * and with this process's identity in its hello. */
  readonly transport: (validate: (m: unknown) => m is Message, identity: DriverIdentity) => DriverTransport;
  readonly logger: DriverLogger;
  /** Committed entries, in log order, each once; entries with data null are a new leader's empty
   * entry (§8) and carry no command. Never called from inside propose(). */
  readonly onCommitted: (entries: readonly LogEntry[]) => void;
  /** Role, term or leader changed. */
  readonly onStateChange?: (state: SoftState) => void;
  /** Entries written to this node's log, after deleting from `truncatedFrom` (§5.3) if not null. */
  readonly onAppended?: (entries: readonly LogEntry[], truncatedFrom: number | null) => void;
  /** The core broke an invariant: a bug. The driver has stopped itself when this is called. */
  readonly onFatal?: (err: Error) => void;
  /** The lease was extended to `leaseEnd` (monotonic ms of the driver's clock) in `term`. Called
   * after the input that renewed it, for audit streams. */
  readonly onLeaseRenewed?: (leaseEnd: number, term: number) => void;
  /** The application's state as chunks, consistent at the last index handed to onCommitted (the
   * broker's snapshot() cursor). The driver calls it when the log passes its bounds (CoreTuning
   * logEntriesMax, logBytesMax), reads the chunks a few ms per event-loop turn, and then compacts
   * the log up to that index. Without it the log is never compacted. It returns null when the
   * application cannot take a snapshot now (its one cursor is busy): the driver asks again at its
   * next event. */
  readonly snapshotSource?: () => Iterable<Uint8Array> | null;
  /** Replace the application's state with a snapshot's (from the leader, §7); the committed
   * entries that follow continue from snapshot.index + 1. Required if any peer compacts. */
  readonly onSnapshot?: (snapshot: Snapshot) => void;
  /** docs/design.md "Force-start": the driver replaced its core by a new member of a newer epoch, which
   * serves elsewhere; the application drops its state, and committed entries (or a snapshot) of
   * that epoch follow from the start. Without it the driver stops there (onFatal): an application
   * that kept its state would apply the new epoch's log on top of the old one's. */
  readonly onReset?: () => void;
  /** `accepting` turns false while proposed-but-uncommitted bytes exceed this. Default 64 MiB. */
  readonly uncommittedBytesMax?: number;
  /** Default E/10. */
  readonly tickIntervalMs?: number;
  /** How long a small batch may wait for the entries in flight to commit (HOLD_ENTRIES_MAX);
   * default 1 ms, 0: never. */
  readonly holdMs?: number;
  readonly core?: CoreTuning;
  /** Seeds the election-timeout randomness; default from the OS. */
  readonly seed?: number;
  readonly clock?: DriverClock;
}

export interface ProposeTicket {
  /** The entry commits at `index` with `term`, or not at all: an entry of another term committed at
   * `index` means this proposal was lost (leadership changed first). The index is the driver's
   * expectation until the turn's batch reaches the core: the core may append an entry of its own
   * first (a configuration change, at a tick or an answer), and the driver then moves `index` on
   * this same object. Read it when entries commit; a copy taken at propose time may be stale. */
  readonly index: number;
  readonly term: number;
}

/** The driver's side of a ticket: it corrects the index when its batch reaches the core. */
interface PendingTicket {
  index: number;
  readonly term: number;
}

export interface DriverStatus {
  id: number;
  role: Role;
  term: number;
  leader: number;
  lastIndex: number;
  commitIndex: number;
  appliedIndex: number;
  hasLease: boolean;
  clusterTime: number;
  accepting: boolean;
  uncommittedBytes: number;
  refusedMessages: number;
  /** Ms since the last valid message from each peer; null: never heard. */
  lastContactAgoMs: Record<string, number | null>;
  /** The log: last index a snapshot covers (0: never compacted), entries and data bytes held. */
  snapshotIndex: number;
  logEntries: number;
  logBytes: number;
  /** How this process started (docs/design.md "Fresh, amnesiac, bootstrap"). */
  membership: Membership;
  epoch: Epoch;
  incarnation: string;
  /** Listed in the newest configuration this node holds. */
  voter: boolean;
  /** That configuration's voters, as `node.incarnation`. */
  voters: string[];
  /** Leader only: every configured node id is a caught-up voter. */
  redundant: boolean;
  /** No configuration this node knows can elect a leader again: an operator must force-start. */
  needsForceStart: boolean;
  /** Null unless this process force-started. */
  forceStart: ForceStartPhase | null;
  /** Leader only: voters whose wall clock its latest estimate left out of cluster time (farther than
   * maxClockOffsetMs from the median). */
  excludedClocks: number[];
  /** The cluster identity made at bootstrap; '' while this node knows none. */
  clusterUid: string;
  /** Set while this node has stayed out of its cluster's membership for OUT_OF_MEMBERSHIP_E
   * election timeouts although peers answer: why, per peer. Null otherwise. */
  outOfMembership: OutOfMembership | null;
}

export interface OutOfMembership {
  /** Ms this has lasted. */
  forMs: number;
  /** What each peer that leaves this node out did: refused its cluster identity, or sent
   * messages for another member of this node id or of another epoch. */
  peers: Record<string, string>;
}

export const UNCOMMITTED_BYTES_MAX_DEFAULT = 64 * 1024 * 1024;
/** One line per kind of refusal per window. */
const REFUSAL_LOG_WINDOW_MS = 10_000;
/** Proposed and not yet committed entries. Reads pause at half of it (`accepting`), so a burst
 * already decoded when they pause still fits and no proposal is refused for want of room. */
const UNCOMMITTED_ENTRIES_MAX_DEFAULT = 100_000;
/** The log is compacted past this many applied entries (or raft/core's byte bound). Each
 * compaction snapshots the whole broker state: at 10,000 entries a fleet of 10,000 sessions
 * publishing was snapshotted several times a second. */
const LOG_ENTRIES_MAX_DEFAULT = 100_000;
/** Each node compacts at its own count (node id × this more), so the three do not snapshot the
 * same index at the same moment: the leader commits through whichever follower is not busy. */
const LOG_ENTRIES_STAGGER = 10_000;
/** Appends in flight to one follower (8 in the core). When a broker's QoS 1 message cost two
 * entries (before its publishes of one read shared one), and with a commit update taking a slot of
 * its own, 8 appends of at most 64 entries filled thousands of times a second under fan-in load and
 * entries waited for a response to go out. */
const INFLIGHT_APPENDS_MAX_DEFAULT = 32;
/** A moved commit index rides on the next append; followers that get none within this are sent
 * an empty one. Immediate notices (the core's default) sent every follower an extra append per
 * commit: under load about a tenth of all appends, at a fixed 5,000 msg/s about half. */
const COMMIT_NOTICE_DELAY_MS_DEFAULT = 5;
/** A turn's batch of fewer entries than this, and of fewer bytes than HOLD_BYTES_MAX, waits while
 * the leader has entries in flight (not yet committed), until they commit or HOLD_MS passes, and
 * then goes with whatever came meanwhile: at a moderate rate each publish would otherwise cost a
 * round of its own (two appends written, two answers read). A batch this large goes at once: under
 * load every turn's does. Bytes count too, since an application may put many small messages in one
 * entry: 16 entries of a 100-byte message are about 2 KiB. */
const HOLD_ENTRIES_MAX = 16;
const HOLD_BYTES_MAX = 2048;
const HOLD_MS_DEFAULT = 1;
/** A node that is not a voter hearing a leader, while peers refuse it or address another member,
 * for this many election timeouts says so at error level: a node rejoining after losing its memory
 * is taken in within a few, a node of another cluster never is. */
const OUT_OF_MEMBERSHIP_E = 10;
/** Core refusals that mean a peer does not count this member in: messages for another incarnation
 * of this node id, or of another epoch. */
const LEFT_OUT_CODES: ReadonlySet<string> = new Set(['RAFT_OTHER_MEMBER', 'RAFT_FOREIGN_MESSAGE']);

type State = 'new' | 'started' | 'stopping' | 'stopped';

/** What a start resumes or forces, decided in the constructor by reading (never writing) the state
 * file and record; start() then takes the lock and consumes the file. */
interface StartPlan {
  readonly membership: Membership;
  readonly incarnation: string;
  readonly epoch: Epoch | undefined;
  readonly restore: DurableState | undefined;
  /** The file to consume at start(): the resumed one, or FILE when forcing from it. */
  readonly consume: StateFile | null;
  readonly record: MembershipRecord | null;
  /** The cluster identity to start with: the resumed file's or the record's; a force-start that
   * knows none makes one. '' when not known. */
  readonly clusterUid: string;
}

const systemClock: DriverClock = { monotonic: () => performance.now(), wall: () => Date.now() };

/** The log's slabs as Node Buffers (uninitialized: only written bytes are ever handed out), so the
 * entry data the log hands out are Buffers and the commands decode without another view. */
const newSlab = (bytes: number): Uint8Array => Buffer.allocUnsafeSlow(bytes);

export class RaftDriver extends EventEmitter<{ drain: [] }> {
  readonly id: number;
  private readonly opts: RaftDriverOptions;
  private core: RaftCore;
  private readonly nodes: readonly number[];
  private readonly plan: StartPlan;
  private readonly expected: Expected;
  /** The epoch the membership record holds (docs/design.md "Fresh, amnesiac, bootstrap":
   * written before anything of an epoch is applied); null without a state file. */
  private recordEpoch: Epoch | null;
  /** The cluster identity the membership record holds. */
  private recordUid: string;
  /** docs/design.md "Identity": made at bootstrap, learned from peers of the same epoch, kept in the
   * record and state file; '' while not known. */
  private clusterUid: string;
  /** Each peer's latest hello (of a link that came up): its epoch and cluster identity. */
  private readonly hellos = new Map<number, { epoch: unknown; clusterUid: string }>();
  /** Peers that leave this node out, with what each did last. */
  private readonly leftOutBy = new Map<number, string>();
  private outSince = -1;
  private outReported = false;
  private recordConsumed: readonly string[];
  private releaseLock: (() => void) | null = null;
  private forceFailureReported = false;
  private failed = false;
  /** Set once start() has consumed the state file: nothing reaches the core before (docs/design.md
   * "State file": consumed before the first raft message), though the port is bound already. */
  private live = false;
  private readonly transport: DriverTransport;
  private readonly gate: MessageGate;
  private readonly limiter = new LogLimiter(REFUSAL_LOG_WINDOW_MS);
  private readonly clock: DriverClock;
  private readonly peers: readonly number[];
  private readonly tickIntervalMs: number;
  private readonly holdMs: number;
  private readonly uncommittedBytesMax: number;
  private readonly uncommittedEntriesMax: number;
  private state: State = 'new';
  private ticker: NodeJS.Timeout | undefined;
  private flushImmediate: NodeJS.Immediate | undefined;
  /** Integer monotonic ms last given to the core. */
  private lastTick: number;
  private applied = 0;
  private role: Role = 'follower';
  private term = 0;
  private leaderId = 0;
  /** Proposals of this turn, flushed as one core.propose() (docs/design.md "Batch"). */
  private pending: Uint8Array[] = [];
  /** The tickets of `pending`, in order. */
  private pendingTickets: PendingTicket[] = [];
  private pendingBytes = 0;
  private holdTimer: NodeJS.Timeout | undefined;
  private holdDue = false;
  /** Flushed batches not yet committed, oldest first: last index and bytes of each. */
  private readonly batchLast: number[] = [];
  private readonly batchBytes: number[] = [];
  private batchHead = 0;
  private flushedBytes = 0;
  private wasAccepting = true;
  private readonly contact = new Map<number, number>();
  /** The lease end last reported through onLeaseRenewed; 0: no lease. */
  private leaseReported = 0;
  private readonly snapshots: SnapshotTaker;

  constructor(opts: RaftDriverOptions) {
    super();
    checkOptions(opts);
    this.opts = opts;
    this.id = opts.id;
    this.clock = opts.clock ?? systemClock;
    this.nodes = opts.nodes ?? opts.voters ?? [];
    this.peers = this.nodes.filter((v) => v !== opts.id);
    this.expected = { clusterId: opts.clusterId ?? 'raftmq', nodeId: opts.id };
    this.tickIntervalMs = opts.tickIntervalMs ?? Math.max(1, Math.floor(opts.electionTimeoutMs / 10));
    this.holdMs = opts.holdMs ?? HOLD_MS_DEFAULT;
    this.uncommittedBytesMax = opts.uncommittedBytesMax ?? UNCOMMITTED_BYTES_MAX_DEFAULT;
    this.uncommittedEntriesMax = opts.core?.uncommittedEntriesMax ?? UNCOMMITTED_ENTRIES_MAX_DEFAULT;
    this.lastTick = Math.floor(this.clock.monotonic());
    this.random = new Prng(opts.seed ?? randomInt(2 ** 32));
    this.storage = opts.storage ?? null;
    this.plan =
      opts.stateFile === undefined
        ? staticPlan()
        : this.storage?.loaded != null
          ? planFromStorage(opts.stateFile, this.expected, this.storage, opts.forceStart === true)
          : planStart(opts.stateFile, this.expected, opts.forceStart === true);
    this.recordEpoch = opts.stateFile === undefined ? null : (this.plan.record?.epoch ?? noEpoch);
    this.recordUid = this.plan.record?.clusterUid ?? '';
    this.clusterUid = this.plan.clusterUid;
    this.recordConsumed = this.plan.record?.consumed ?? [];
    this.core = this.makeCore();
    const entriesPerAppendMax = opts.core?.entriesPerAppendMax ?? 64;
    const chunkBytes = opts.core?.snapshotChunkBytesMax;
    const ctx = {
      self: opts.id,
      nodes: this.nodes,
      entriesPerAppendMax,
      ...(chunkBytes === undefined ? {} : { snapshotChunkBytesMax: chunkBytes }),
    };
    this.snapshots = new SnapshotTaker({
      sliceMs: Math.max(1, Math.floor(opts.electionTimeoutMs / 20)),
      clock: () => this.clock.monotonic(),
      compact: (index, chunks) => this.compactTo(index, chunks),
      logger: opts.logger,
    });
    this.gate = new MessageGate(ctx, opts.logger, this.limiter, () => this.clock.monotonic());
    this.transport = opts.transport(this.gate.validate, {
      incarnation: this.plan.incarnation,
      epoch: this.plan.epoch ?? noEpoch,
      clusterUid: this.clusterUid,
    });
    this.transport.onMessage(this.onMessage);
    this.transport.onLink?.(this.onLink);
  }

  private readonly random: Prng;
  /** --data-dir: the raft state on disk; null: in memory, written to the state file at a clean stop. */
  private readonly storage: DriverStorage | null;
  /** The storage made every write durable at the stop: a state file written now is no newer. */
  private storageSettled = false;

  private makeCore(): RaftCore {
    const opts = this.opts;
    const plan = this.plan;
    const base = {
      logEntriesMax: LOG_ENTRIES_MAX_DEFAULT + (this.id % 8) * LOG_ENTRIES_STAGGER,
      inflightAppendsMax: INFLIGHT_APPENDS_MAX_DEFAULT,
      commitNoticeDelayMs: COMMIT_NOTICE_DELAY_MS_DEFAULT,
      ...opts.core,
      uncommittedEntriesMax: this.uncommittedEntriesMax,
      newSlab,
      id: opts.id,
      electionTimeoutMs: opts.electionTimeoutMs,
      random: this.random,
      now: this.lastTick,
      clusterId: this.expected.clusterId,
      ...(this.storage === null ? {} : { awaitStorage: true }),
    };
    if (opts.stateFile === undefined) return new RaftCore({ ...base, voters: this.nodes });
    const resumed = plan.membership === 'member' && opts.forceStart !== true;
    return new RaftCore({
      ...base,
      nodes: this.nodes,
      incarnation: plan.incarnation,
      membership: plan.membership,
      ...(plan.epoch === undefined ? {} : { epoch: plan.epoch }),
      ...(plan.restore === undefined ? {} : { restore: plan.restore }),
      // docs/design.md "Leases and votes": a resumed member cannot know when it last heard from a
      // leader, so it ignores vote requests for 2E.
      ...(resumed ? { ignoreVotesUntil: this.lastTick + 2 * opts.electionTimeoutMs } : {}),
      ...(opts.forceStart === true ? { forceStart: true, forceStartAbove: plan.record?.epoch.generation ?? 0 } : {}),
      ...(opts.forceStartTimeoutMs === undefined ? {} : { forceStartTimeoutMs: opts.forceStartTimeoutMs }),
    });
  }

  /** Binds the peer port (docs/design.md "Links": before anything else, so a second process of this
   * node id on this host fails here), takes the PID lock beside the state file, consumes the file
   * it resumes (before any raft message is sent), then starts the timers. Rejects, with nothing
   * left running, on a bind failure or a refused state file or lock. */
  async start(): Promise<void> {
    if (this.state !== 'new') throw new DriverError('RAFT_DRIVER_STATE', `start() when ${this.state}`);
    this.state = 'started';
    await this.transport.start();
    if (this.state !== 'started') return; // stop() while the transport was binding
    try {
      this.takeStateFile();
      await this.prepareStorage();
      if (this.state !== 'started') return;
      this.live = true;
    } catch (err) {
      await this.stop();
      this.releaseLock?.();
      this.releaseLock = null;
      throw err;
    }
    this.ticker = setInterval(this.onTick, this.tickIntervalMs);
    this.onTick();
  }

  /** docs/raft.md "Persistence": before the first raft message, a storage that is not resumed holds
   * what this start begins from (nothing, or the state file it resumes) and is durable. */
  private async prepareStorage(): Promise<void> {
    const st = this.storage;
    if (st === null) return;
    // A force-start makes a new member from the state it starts from, so that is written again.
    if (st.loaded === null || this.plan.restore !== st.loaded || this.opts.forceStart === true) {
      st.reset(this.plan.incarnation);
      const r = this.plan.restore;
      if (r !== undefined) {
        // A state file resumed into an empty data directory: the directory takes it over.
        if (r.snapshot) st.saveSnapshot(r.snapshot);
        st.setHardState({ term: r.term, vote: r.vote, voteInc: r.voteInc ?? '' });
        st.append(r.entries, null);
      }
    }
    await st.flush();
    st.listen(this.onDurable, this.onStorageFailed);
  }

  /** A group commit is durable: the core may now count and answer for it. */
  private readonly onDurable = (d: Durable): void => {
    if (this.state !== 'started' || !this.live) return;
    try {
      this.core.persistedHardState(d.hard);
      this.core.persisted(d.index, d.term);
    } catch (err) {
      this.fail(err);
      return;
    }
    this.drainReady();
  };

  /** docs/raft.md "Persistence": a failed write or fsync is never retried (an fsync retried after
   * EIO can report success for pages the kernel dropped); the node stops. */
  private readonly onStorageFailed = (err: Error): void => {
    if (this.failed) return;
    this.failed = true;
    this.opts.logger.error(
      { err: err.message, code: (err as { code?: unknown }).code, dir: this.storage?.dir },
      'raft data directory write failed; stopping (the write is never retried)',
    );
    void this.stop();
    (this.opts.onStorageFailed ?? this.opts.onFatal)?.(err);
  };

  /** docs/design.md "State file": the record notes the file id, the file becomes FILE.prev, the
   * directory is synced, all before the first raft message. */
  private takeStateFile(): void {
    const path = this.opts.stateFile;
    if (path === undefined) return;
    this.releaseLock = acquirePidLock(path);
    const planned = this.plan.consume;
    if (planned === null) return;
    if (this.opts.forceStart === true) {
      // Forcing from FILE uses it up too: it must never be resumed into the old epoch afterwards.
      const consumed = [...this.recordConsumed, planned.fileId];
      writeRecord(path, { ...this.expected, clusterUid: this.clusterUid, epoch: this.recordEpoch ?? noEpoch, consumed });
      this.recordConsumed = consumed;
      this.recordUid = this.clusterUid;
      renameSync(path, prevPathOf(path));
      syncDir(dirname(path));
      return;
    }
    const file = consumeStateFile(path, this.expected);
    if (file?.fileId !== planned.fileId) {
      throw new DriverError('RAFT_STATE_FILE_CONSUMED', `${path} changed between reading and consuming it`);
    }
    this.recordEpoch = file.epoch;
    this.recordUid = this.clusterUid;
    this.recordConsumed = [...this.recordConsumed, file.fileId];
  }

  /** No timer fires and no message is sent or stepped after this begins; resolves once the
   * transport has closed its links and listener. */
  async stop(): Promise<void> {
    if (this.state === 'stopping' || this.state === 'stopped') return;
    this.deliverLate();
    this.state = 'stopping';
    clearInterval(this.ticker);
    this.ticker = undefined;
    if (this.flushImmediate !== undefined) clearImmediate(this.flushImmediate);
    this.flushImmediate = undefined;
    if (this.holdTimer !== undefined) clearTimeout(this.holdTimer);
    this.holdTimer = undefined;
    this.snapshots.cancel();
    this.pending = [];
    this.pendingTickets = [];
    this.pendingBytes = 0;
    const st = this.storage;
    await Promise.all([
      this.transport.stop(),
      // What was written is made durable before the state file may be written after it.
      st === null
        ? undefined
        : st.flush().then(
            () => {
              this.storageSettled = true;
              return st.close();
            },
            () => st.close(),
          ),
    ]);
    this.state = 'stopped';
  }

  /** stop() at a deadline: the same steps, but the driver counts as stopped at once (the
   * transport's listener closes in the background), so writeStateFile() may follow in this turn.
   * Nothing is stepped once stop() began, so the file holds what it would after a full stop. */
  halt(): void {
    if (this.state !== 'started' && this.state !== 'stopping') return;
    void this.stop();
    this.state = 'stopped';
  }

  /** docs/design.md "State file", the clean stop: only after stop() (no raft traffic any more), writes
   * the whole state (write-temp, fsync, rename, fsync of the directory) and releases the PID lock.
   * Returns the path, or null when there is nothing a later start could resume: no state file
   * configured, a node that never joined an epoch, a force-start that did not make its epoch, or
   * a core that failed. */
  writeStateFile(): string | null {
    if (this.state !== 'stopped') throw new DriverError('RAFT_DRIVER_STATE', `writeStateFile() when ${this.state}; stop() first`);
    const path = this.opts.stateFile;
    const core = this.core;
    const phase = core.forceStartPhase;
    let written: string | null = null;
    // With a storage the file is a copy for force-start and the tools, written only when it holds
    // nothing the storage lacks (a stop cut short by its deadline writes none; the storage has it all).
    const copyOk = this.storage === null || this.storageSettled;
    if (path !== undefined && copyOk && !this.failed && core.epoch.generation !== 0 && phase !== 'probing' && phase !== 'failed') {
      this.writeRecordFor(core.epoch);
      writeStateFile(path, stateOfCore(core, core.clusterTime(Math.floor(this.clock.monotonic())), newFileId(), this.clusterUid));
      written = path;
    }
    this.releaseLock?.();
    this.releaseLock = null;
    return written;
  }

  /** docs/design.md "State file": a leader hands over before it stops. Transfers to the voter with the
   * highest match index and waits until this node no longer leads, at most `timeoutMs` (default
   * 2E). True if leadership moved; false if there was none to hand over or it did not move. */
  async handOver(timeoutMs = 2 * this.opts.electionTimeoutMs): Promise<boolean> {
    if (this.state !== 'started' || this.core.role !== 'leader') return false;
    let to = 0;
    let best = -1;
    for (const m of this.core.configuration) {
      const match = m.node === this.id ? undefined : this.core.progressOf(m.node)?.match;
      if (match !== undefined && match > best) {
        best = match;
        to = m.node;
      }
    }
    if (to === 0 || this.transferLeadership(to) !== null) return false;
    const deadline = this.clock.monotonic() + timeoutMs;
    while (this.state === 'started' && this.core.role === 'leader' && this.clock.monotonic() < deadline) {
      await new Promise((r) => setTimeout(r, this.tickIntervalMs));
    }
    return this.core.role !== 'leader';
  }

  /** The whole clean stop, in the order of docs/design.md "State file": hand over if leading, stop all raft traffic,
   * then write the state file. The application stops serving before calling it. */
  async shutdown(): Promise<string | null> {
    await this.handOver();
    await this.stop();
    return this.writeStateFile();
  }

  // ---- proposals and back-pressure ----

  /** Queues one entry; all entries queued in one event-loop turn go to the core as one append. */
  propose(data: Uint8Array): ProposeTicket | RaftError | DriverError {
    if (this.state !== 'started') return new DriverError('RAFT_DRIVER_STATE', `propose() when ${this.state}`);
    if (this.core.role !== 'leader') {
      return new RaftError('RAFT_NOT_LEADER', `node ${this.id} is ${this.core.role}; leader ${this.core.softState().leader}`);
    }
    const uncommitted = this.core.lastIndex - this.core.commitIndex + this.pending.length;
    if (uncommitted >= this.uncommittedEntriesMax) {
      return new RaftError('RAFT_PROPOSALS_FULL', `${uncommitted} uncommitted entries`);
    }
    const ticket: PendingTicket = { index: this.core.lastIndex + 1 + this.pending.length, term: this.core.currentTerm };
    this.pending.push(data);
    this.pendingTickets.push(ticket);
    this.pendingBytes += data.length;
    this.flushImmediate ??= setImmediate(this.endTurn);
    this.wasAccepting = this.wasAccepting && this.accepting;
    return ticket;
  }

  /** False while proposed-but-uncommitted bytes exceed their bound, or entries half of theirs: stop
   * reading input until 'drain'. */
  get accepting(): boolean {
    if (this.pendingBytes + this.flushedBytes > this.uncommittedBytesMax) return false;
    return this.core.lastIndex - this.core.commitIndex + this.pending.length <= this.uncommittedEntriesMax / 2;
  }

  get uncommittedBytes(): number {
    return this.pendingBytes + this.flushedBytes;
  }

  /** Once a turn, after every input of the poll phase: the turn's proposals go to the core as one
   * batch, then every message of the turn leaves, one write per link (with a transport of
   * callerFlushes; any other transport has flushed its own by then or does so at its turn end). */
  private readonly endTurn = (): void => {
    this.flushImmediate = undefined;
    if (this.holds()) this.holdTimer ??= setTimeout(this.holdExpired, this.holdMs);
    else this.proposeBatch();
    this.transport.flush?.();
    // What the batch sent has just been written; a turn end it scheduled would find nothing.
    if (this.flushImmediate !== undefined && this.pending.length === 0) {
      clearImmediate(this.flushImmediate);
      this.flushImmediate = undefined;
    }
  };

  /** A small batch while entries are in flight waits for their commit (see HOLD_ENTRIES_MAX). */
  private holds(): boolean {
    const n = this.pending.length;
    return (
      n > 0 &&
      n < HOLD_ENTRIES_MAX &&
      this.pendingBytes < HOLD_BYTES_MAX &&
      this.holdMs > 0 &&
      !this.holdDue &&
      this.core.lastIndex > this.core.commitIndex
    );
  }

  private readonly holdExpired = (): void => {
    this.holdTimer = undefined;
    this.holdDue = true;
    this.endTurn();
  };

  private proposeBatch(): void {
    if (this.holdTimer !== undefined) clearTimeout(this.holdTimer);
    this.holdTimer = undefined;
    this.holdDue = false;
    if (this.state !== 'started' || this.pending.length === 0) return;
    const batch = this.pending;
    const tickets = this.pendingTickets;
    const bytes = this.pendingBytes;
    this.pending = [];
    this.pendingTickets = [];
    this.pendingBytes = 0;
    this.advanceClock();
    let r: ReturnType<RaftCore['propose']>;
    try {
      r = this.core.propose(batch);
    } catch (err) {
      this.fail(err);
      return;
    }
    if (r.ok) {
      // The core appended entries of its own since these were proposed (a configuration change
      // while the batch was held): the batch starts later than its tickets said.
      if (tickets[0]!.index !== r.firstIndex) for (let i = 0; i < tickets.length; i++) tickets[i]!.index = r.firstIndex + i;
      this.batchLast.push(r.lastIndex);
      this.batchBytes.push(bytes);
      this.flushedBytes += bytes;
    } else {
      // Leadership changed within this turn; the tickets' indexes will hold other entries.
      this.opts.logger.info({ entries: batch.length, code: r.error.code, leader: r.leader }, 'raft proposals dropped');
    }
    this.drainReady();
    this.noteAccepting();
  }

  private releaseCommitted(commit: number): void {
    while (this.batchHead < this.batchLast.length && this.batchLast[this.batchHead]! <= commit) {
      this.flushedBytes -= this.batchBytes[this.batchHead]!;
      this.batchHead++;
    }
    if (this.batchHead === this.batchLast.length) {
      this.batchLast.length = 0;
      this.batchBytes.length = 0;
      this.batchHead = 0;
    }
  }

  /** A node that stops leading no longer owns its uncommitted tail: the next leader decides it. */
  private forgetBatches(): void {
    this.batchLast.length = 0;
    this.batchBytes.length = 0;
    this.batchHead = 0;
    this.flushedBytes = 0;
  }

  private noteAccepting(): void {
    const now = this.accepting;
    if (now && !this.wasAccepting) {
      this.wasAccepting = true;
      this.emit('drain');
    }
    this.wasAccepting = now;
  }

  // ---- snapshots and compaction (§7) ----

  /** Takes a snapshot of the application at the last index handed to onCommitted: `chunks` (the
   * broker's snapshot() cursor, consistent at that index) are read a few ms per event-loop turn,
   * then the log is compacted up to that index. Resolves with the index, or null if the log had
   * moved past it meanwhile (a snapshot installed from the leader) or the driver stopped. */
  compact(chunks: Iterable<Uint8Array>): Promise<number | null> {
    if (this.state !== 'started') return Promise.resolve(null);
    return this.snapshots.take(this.applied, chunks);
  }

  private compactTo(index: number, chunks: readonly Uint8Array[]): number | null {
    if (this.state !== 'started') return null;
    let error: RaftError | null = null;
    try {
      error = this.core.compact(index, chunks);
    } catch (err) {
      this.fail(err);
      return null;
    }
    if (error !== null) {
      this.opts.logger.info({ index, code: error.code }, 'raft snapshot not used');
      return null;
    }
    const s = this.core.latestSnapshot;
    if (this.storage !== null && s !== null) this.storage.saveSnapshot(s);
    this.drainReady();
    return index;
  }

  /** The log passed its bounds: ask the application for a snapshot, one at a time. */
  private maybeSnapshot(): void {
    const source = this.opts.snapshotSource;
    if (source === undefined || this.snapshots.busy || this.state !== 'started' || !this.core.snapshotWanted()) return;
    let chunks: Iterable<Uint8Array> | null;
    try {
      chunks = source();
    } catch (err) {
      this.opts.logger.error({ err: (err as Error).message }, 'application snapshot failed');
      return;
    }
    if (chunks === null) return;
    void this.snapshots.take(this.applied, chunks);
  }

  // ---- inputs ----

  private readonly onTick = (): void => {
    if (this.state !== 'started' || !this.live) return;
    this.lastTick = Math.max(this.lastTick, Math.floor(this.clock.monotonic()));
    this.tickCore();
    this.drainReady();
    this.judgeMembership();
  };

  /** docs/design.md "Identity": a link refused for another cluster identity, or messages for another
   * member, tell this node that a peer leaves it out; an accepted message or a link of the same
   * identity takes that back. */
  private readonly onLink = (e: DriverLinkEvent): void => {
    if (this.state !== 'started') return;
    switch (e.t) {
      case 'up':
        this.hellos.set(e.nodeId, { epoch: e.epoch, clusterUid: e.clusterUid });
        this.leftOutBy.delete(e.nodeId);
        if (this.live) this.learnClusterUid();
        return;
      case 'down':
        return;
      case 'identity-refused':
        if (this.peers.includes(e.nodeId)) this.leftOutBy.set(e.nodeId, e.detail);
        return;
      default: {
        const _: never = e;
        void _;
      }
    }
  };

  /** Error level once when this node has stayed out of its cluster's membership for
   * OUT_OF_MEMBERSHIP_E election timeouts while peers are there to say so; info when it is back. */
  private judgeMembership(): void {
    const core = this.core;
    const inside = core.voter && (core.role === 'leader' || core.softState().leader !== 0);
    if (inside || this.leftOutBy.size === 0) {
      if (this.outReported)
        this.opts.logger.info({ epoch: core.epoch.generation, voter: core.voter }, 'raft node back in its cluster membership');
      this.outSince = -1;
      this.outReported = false;
      return;
    }
    if (this.outSince < 0) this.outSince = this.lastTick;
    if (this.outReported || this.lastTick - this.outSince < OUT_OF_MEMBERSHIP_E * this.opts.electionTimeoutMs) return;
    this.outReported = true;
    this.opts.logger.error(
      {
        code: 'RAFT_OUT_OF_MEMBERSHIP',
        node: this.id,
        epoch: `${core.epoch.generation}/${core.epoch.id}`,
        clusterUid: this.clusterUid,
        incarnation: core.incarnation,
        peers: Object.fromEntries(this.leftOutBy),
        stateFile: this.opts.stateFile,
      },
      'raft node stays out of its cluster membership: its peers do not count it in (a state file of another cluster?)',
    );
  }

  private outOfMembership(): OutOfMembership | null {
    if (!this.outReported) return null;
    return { forMs: this.lastTick - this.outSince, peers: Object.fromEntries(this.leftOutBy) };
  }

  /** A node that knows no cluster identity takes the one a peer of its own epoch sent in its hello
   * (the link is authenticated where a secret is set); the epoch id is random, so a peer of the
   * same epoch is of the same cluster. */
  private learnClusterUid(): void {
    const epoch = this.core.epoch;
    if (this.clusterUid !== '' || epoch.generation === 0) return;
    for (const [peer, hello] of this.hellos) {
      if (hello.clusterUid === '' || !isSameEpoch(hello.epoch, epoch)) continue;
      this.adoptClusterUid(hello.clusterUid, `learned from node ${peer}`);
      return;
    }
  }

  private adoptClusterUid(uid: string, how: string): void {
    this.clusterUid = uid;
    this.writeRecordFor(this.core.epoch);
    this.transport.setClusterUid?.(uid);
    this.opts.logger.info({ clusterUid: uid, epoch: this.core.epoch.generation }, `raft cluster identity ${how}`);
  }

  private readonly onMessage = (from: number, m: Message): void => {
    if (this.state !== 'started' || !this.live) return;
    if (m.from !== from) {
      // The link's handshake named the sender; a message claiming another sender is not its own.
      this.refuse('sender-mismatch', { link: from, claimed: m.from });
      return;
    }
    this.advanceClock();
    this.contact.set(from, this.lastTick);
    let error: RaftError | null = null;
    try {
      error = this.core.step(m);
    } catch (err) {
      this.fail(err);
      return;
    }
    if (error !== null) {
      this.refuse(error.code, { peer: from, detail: error.message });
      if (LEFT_OUT_CODES.has(error.code)) this.leftOutBy.set(from, `${error.code}: ${error.message}`);
    } else {
      this.leftOutBy.delete(from);
    }
    this.drainReady();
  };

  /** Gives the core the current time before an input, so what it stamps (heard-from times, send
   * times of rounds) is precise to the millisecond, not to the tick interval. */
  private advanceClock(): void {
    const now = Math.floor(this.clock.monotonic());
    if (now <= this.lastTick) return;
    this.lastTick = now;
    this.tickCore();
  }

  private tickCore(): void {
    try {
      this.core.tick(this.lastTick, this.clock.wall());
    } catch (err) {
      this.fail(err);
    }
  }

  private refuse(kind: string, fields: Record<string, unknown>): void {
    const suppressed = this.limiter.admit(kind, this.lastTick);
    if (suppressed !== null) this.opts.logger.warn({ kind, suppressed, ...fields }, 'raft message dropped');
  }

  /** A throw from the core is a broken invariant (a bug, never bad input: the gate ran first). This
   * node stops taking part rather than go on with a state it cannot trust. */
  private fail(err: unknown): void {
    const e = err instanceof Error ? err : new Error(String(err));
    this.failed = true;
    this.opts.logger.error({ err: e.message, code: (e as { code?: unknown }).code }, 'raft core failed; stopping');
    void this.stop();
    this.opts.onFatal?.(e);
  }

  // ---- output: Ready, in order ----

  private drainReady(): void {
    drainReady(this.core, this.readySink);
    if (this.opts.onLeaseRenewed !== undefined) this.noteLease(this.opts.onLeaseRenewed);
    this.maybeSnapshot();
    if (this.state !== 'started') return;
    if (this.core.forceStartPhase === 'failed') this.forceStartFailed();
    else if (this.core.epochToJoin() !== null) this.switchEpoch();
  }

  /** docs/design.md "Fresh, amnesiac, bootstrap": before a node first applies (or acknowledges)
   * anything of an epoch, it durably writes the membership record; the transport's hellos carry
   * the epoch from then on. */
  private noteEpoch(): void {
    const epoch = this.core.epoch;
    if (this.recordEpoch === null || epoch.generation === 0 || sameEpoch(epoch, this.recordEpoch)) return;
    // docs/design.md "Identity": the node that bootstraps a cluster makes its identity, before its
    // first entry reaches a peer; the others learn it from the hellos of peers of this epoch.
    const made = this.clusterUid === '' && this.core.bootstrapped;
    if (made) this.clusterUid = newClusterUid();
    this.writeRecordFor(epoch);
    this.transport.setEpoch?.(epoch);
    this.opts.logger.info({ epoch: epoch.generation, epochId: epoch.id, incarnation: this.core.incarnation }, 'raft epoch joined');
    if (this.clusterUid === '') {
      this.learnClusterUid();
      return;
    }
    // setClusterUid makes the links again when the identity is new to the transport. A forced
    // epoch keeps the identity the transport had, so its links are made again here: either way
    // the peers that will join this epoch get hellos of it, with the identity, to learn from.
    this.transport.setClusterUid?.(this.clusterUid);
    const phase = this.core.forceStartPhase;
    if (!made && (phase === 'waiting' || phase === 'serving')) this.transport.remakeLinks?.();
  }

  private writeRecordFor(epoch: Epoch): void {
    const path = this.opts.stateFile;
    if (path === undefined) return;
    if (this.recordEpoch !== null && sameEpoch(epoch, this.recordEpoch) && this.recordUid === this.clusterUid) return;
    writeRecord(path, { ...this.expected, clusterUid: this.clusterUid, epoch, consumed: this.recordConsumed });
    this.recordEpoch = epoch;
    this.recordUid = this.clusterUid;
  }

  /** docs/design.md "Force-start": a member of an older epoch whose node ids went over to a newer one
   * that serves becomes a new amnesiac member of that epoch (a new incarnation: its term, vote
   * and log of the old epoch mean nothing there). The transport keeps its hello incarnation. */
  private switchEpoch(): void {
    const to = this.core.epochToJoin();
    if (to === null) return;
    const onReset = this.opts.onReset;
    if (onReset === undefined) {
      this.fail(new DriverError('RAFT_DRIVER_STATE', `epoch ${to.generation} serves elsewhere and no onReset was given`));
      return;
    }
    const inc = randomBytes(8).toString('hex');
    this.opts.logger.warn({ from: this.core.epoch.generation, to: to.generation, incarnation: inc }, 'raft switches to a newer epoch');
    this.core = new RaftCore({
      logEntriesMax: LOG_ENTRIES_MAX_DEFAULT + (this.id % 8) * LOG_ENTRIES_STAGGER,
      inflightAppendsMax: INFLIGHT_APPENDS_MAX_DEFAULT,
      commitNoticeDelayMs: COMMIT_NOTICE_DELAY_MS_DEFAULT,
      ...this.opts.core,
      uncommittedEntriesMax: this.uncommittedEntriesMax,
      newSlab,
      id: this.id,
      electionTimeoutMs: this.opts.electionTimeoutMs,
      random: this.random,
      now: this.lastTick,
      clusterId: this.expected.clusterId,
      nodes: this.nodes,
      incarnation: inc,
      membership: 'amnesiac',
      epoch: to,
      ...(this.storage === null ? {} : { awaitStorage: true }),
    });
    // The new member starts with nothing: so does its storage, before anything of it is written.
    this.storage?.reset(inc);
    this.applied = 0;
    this.snapshots.cancel();
    this.forgetBatches();
    this.noteAccepting();
    onReset();
  }

  private forceStartFailed(): void {
    if (this.forceFailureReported) return;
    this.forceFailureReported = true;
    const err = new DriverError('RAFT_FORCE_START_FAILED', this.core.forceStartFailure() ?? 'unknown');
    this.opts.logger.error({ code: err.code, detail: err.message }, 'raft force-start failed; stopping');
    void this.stop();
    this.opts.onForceStartFailed?.(err);
  }

  /** Renewals happen inside core.step (a majority acknowledged a newer round); the core's lease
   * end only grows within a term, and drops to 0 when the lease ends early. */
  private noteLease(report: (leaseEnd: number, term: number) => void): void {
    const end = this.core.leaseUntil();
    if (end > this.leaseReported) report(end, this.core.currentTerm);
    this.leaseReported = end;
  }

  /** The driver's part of raft/core/ready-handler.ts, which owns the order. */
  private readonly readySink: ReadySink = {
    live: () => this.state === 'started',
    begin: () => this.noteEpoch(),
    send: (m) => {
      this.transport.send(m.to, m);
      this.flushImmediate ??= setImmediate(this.endTurn);
    },
    hardState: (h) => this.storage?.setHardState(h),
    appended: (entries, truncatedFrom) => {
      this.storage?.append(entries, truncatedFrom);
      this.opts.onAppended?.(entries, truncatedFrom);
    },
    restore: (s) => {
      this.deliverLate();
      // The restored snapshot of a resumed storage is the one it holds already.
      if (this.storage !== null && s.index > this.storage.snapshotIndex) this.storage.saveSnapshot(s);
      this.restore(s);
    },
    committed: (entries) => {
      if (this.core.role === 'leader') {
        this.deliverLate();
        this.deliver(entries);
        return;
      }
      this.late.push(entries);
      if (!this.lateScheduled) {
        this.lateScheduled = true;
        process.nextTick(this.applyLate);
      }
    },
    softState: (s) => this.noteSoftState(s),
  };

  /** A node that does not lead applies what committed only after the answers of the same read have
   * been written: the leader's commit waits for those answers, never for this node's apply. The
   * appends of one read (one leader turn's writev) are all answered first, in one write; then their
   * committed entries are applied, in log order, before anything else of the event loop runs. */
  private late: (readonly LogEntry[])[] = [];
  private lateScheduled = false;

  private readonly applyLate = (): void => {
    this.lateScheduled = false;
    if (this.late.length === 0 || this.state !== 'started') return;
    this.transport.flush?.();
    this.deliverLate();
  };

  /** Applies the entries held back by committed(), before anything that must follow them. */
  private deliverLate(): void {
    while (this.late.length > 0) {
      const batch = this.late;
      this.late = [];
      for (const entries of batch) this.deliver(entries);
    }
  }

  /** A snapshot from the leader, or this node's own after a restart, replaces the application's
   * state. Without onSnapshot the application cannot follow the log any further: stop. */
  private restore(s: Snapshot): void {
    const onSnapshot = this.opts.onSnapshot;
    if (onSnapshot === undefined) {
      this.fail(new DriverError('RAFT_DRIVER_STATE', `a snapshot at ${s.index} arrived and no onSnapshot was given`));
      return;
    }
    const started = this.clock.monotonic();
    try {
      onSnapshot(s);
    } catch (err) {
      this.fail(err);
      return;
    }
    this.snapshots.cancel();
    this.applied = s.index;
    this.opts.logger.info(
      { index: s.index, term: s.term, bytes: s.bytes, chunks: s.chunks.length, ms: Math.round(this.clock.monotonic() - started) },
      'raft snapshot restored',
    );
  }

  private deliver(entries: readonly LogEntry[]): void {
    const last = entries[entries.length - 1]!;
    try {
      this.opts.onCommitted(entries);
    } catch (err) {
      // docs/design.md "Apply judges each command": apply never throws; a throw is the application's bug, reported, not raft's.
      this.opts.logger.error({ err: (err as Error).message, from: entries[0]!.index, to: last.index }, 'committed-entry callback threw');
    }
    this.applied = last.index;
    this.releaseCommitted(last.index);
    this.noteAccepting();
    // A held batch goes once what was in flight committed.
    if (this.holdTimer !== undefined) this.flushImmediate ??= setImmediate(this.endTurn);
  }

  private noteSoftState(s: SoftState): void {
    if (s.role === this.role && s.term === this.term && s.leader === this.leaderId) return;
    const wasLeader = this.role === 'leader';
    this.role = s.role;
    this.term = s.term;
    this.leaderId = s.leader;
    if (wasLeader && s.role !== 'leader') {
      this.forgetBatches();
      this.noteAccepting();
    }
    this.opts.logger.info({ role: s.role, term: s.term, leader: s.leader }, 'raft state');
    this.opts.onStateChange?.(s);
  }

  // ---- serving-relevant state ----

  get currentRole(): Role {
    return this.core.role;
  }

  get currentTerm(): number {
    return this.core.currentTerm;
  }

  /** 0: unknown. */
  get leader(): number {
    return this.core.softState().leader;
  }

  get commitIndex(): number {
    return this.core.commitIndex;
  }

  get lastIndex(): number {
    return this.core.lastIndex;
  }

  /** The last index handed to onCommitted. */
  get appliedIndex(): number {
    return this.applied;
  }

  /** Whether this node holds a leader lease now (docs/design.md "Leases and votes"). */
  hasLease(): boolean {
    return this.core.hasLease(Math.floor(this.clock.monotonic()));
  }

  /** Cluster ms (docs/design.md "Cluster time"). */
  clusterTime(): number {
    return this.core.clusterTime(Math.floor(this.clock.monotonic()));
  }

  /** This leader's cluster time follows the voters' clocks (RaftCore.clusterTimeReady). */
  clusterTimeReady(): boolean {
    return this.core.clusterTimeReady();
  }

  /** Monotonic ms (of the driver's clock) at which this leader's lease ends; 0 without one. */
  leaseUntil(): number {
    return this.core.leaseUntil();
  }

  /** Ms left of this node's lease; 0 without one. */
  leaseRemainingMs(): number {
    if (!this.hasLease()) return 0;
    return Math.max(0, Math.floor(this.core.leaseUntil() - this.clock.monotonic()));
  }

  /** Highest index known replicated on `peer` (§5.3 matchIndex), as the leader sees it; undefined
   * on a non-leader, which does not track followers. */
  matchIndex(peer: number): number | undefined {
    if (this.core.role !== 'leader') return undefined;
    return this.core.progressOf(peer)?.match;
  }

  transferLeadership(to: number): RaftError | DriverError | null {
    if (this.state !== 'started') return new DriverError('RAFT_DRIVER_STATE', `transferLeadership() when ${this.state}`);
    let error: RaftError | DriverError | null = null;
    try {
      error = this.core.transferLeadership(to);
    } catch (err) {
      this.fail(err);
      return new DriverError('RAFT_DRIVER_STATE', 'the core failed during the transfer');
    }
    this.drainReady();
    return error;
  }

  /** Monotonic ms of the last valid message from `peer`; undefined: never heard. */
  lastContact(peer: number): number | undefined {
    return this.contact.get(peer);
  }

  /** Leader only: voters whose wall clock the latest cluster-time estimate left out. */
  excludedClocks(): number[] {
    return this.core.excludedClocks();
  }

  /** Leader only: each voter wall clock's distance from the median of the voters' clocks (ms). */
  clockOffsets(): Map<number, number> {
    return this.core.clockOffsets();
  }

  /** Ms since the last valid message from `peer`; null: never heard. */
  lastContactAgoMs(peer: number): number | null {
    const at = this.contact.get(peer);
    return at === undefined ? null : Math.floor(this.clock.monotonic()) - at;
  }

  status(): DriverStatus {
    const now = Math.floor(this.clock.monotonic());
    const lastContactAgoMs: Record<string, number | null> = {};
    for (const p of this.peers) {
      const at = this.contact.get(p);
      lastContactAgoMs[p] = at === undefined ? null : now - at;
    }
    return {
      id: this.id,
      role: this.core.role,
      term: this.core.currentTerm,
      leader: this.leader,
      lastIndex: this.core.lastIndex,
      commitIndex: this.core.commitIndex,
      appliedIndex: this.applied,
      hasLease: this.core.hasLease(now),
      clusterTime: this.core.clusterTime(now),
      accepting: this.accepting,
      uncommittedBytes: this.uncommittedBytes,
      refusedMessages: this.gate.refused,
      lastContactAgoMs,
      snapshotIndex: this.core.firstIndex - 1,
      logEntries: this.core.lastIndex - this.core.firstIndex + 1,
      logBytes: this.core.logBytes,
      membership: this.core.membershipAtStart,
      epoch: this.core.epoch,
      incarnation: this.core.incarnation,
      voter: this.core.voter,
      voters: this.core.configuration.map((m) => `${m.node}.${m.inc}`),
      redundant: this.core.isRedundant(),
      needsForceStart: this.core.needsForceStart(),
      forceStart: this.core.forceStartPhase,
      excludedClocks: this.core.excludedClocks(),
      clusterUid: this.clusterUid,
      outOfMembership: this.outOfMembership(),
    };
  }
}

/** `hello` (an untrusted value from a peer's hello) names `epoch`. */
function isSameEpoch(hello: unknown, epoch: Epoch): boolean {
  if (typeof hello !== 'object' || hello === null) return false;
  const h = hello as Partial<Epoch>;
  return h.generation === epoch.generation && h.id === epoch.id;
}

function staticPlan(): StartPlan {
  return { membership: 'member', incarnation: '0', epoch: undefined, restore: undefined, consume: null, record: null, clusterUid: '' };
}

const restoreOf = (f: StateFile): DurableState => ({
  term: f.term,
  vote: f.vote,
  voteInc: f.voteInc,
  entries: f.log,
  baseConfig: f.configuration,
  snapshot: f.snapshot,
});

/** docs/design.md "Fresh, amnesiac, bootstrap" and docs/design.md "State file", read-only: a valid unconsumed file is
 * resumed as the same member; without one the start is amnesiac if a record exists, else fresh,
 * with a new incarnation; a force-start takes FILE or FILE.prev with a new incarnation. */
function planStart(path: string, expected: Expected, force: boolean): StartPlan {
  const record = readRecord(path, expected);
  const incarnation = randomBytes(8).toString('hex');
  if (force) {
    const { file, path: from } = readForceStartFile(path, expected);
    return {
      membership: 'amnesiac',
      incarnation,
      epoch: file.epoch,
      restore: restoreOf(file),
      consume: from === path ? file : null,
      record,
      // A forced epoch stays of its cluster; one formed before identities existed gets one now.
      clusterUid: resumedUid(file, record) || newClusterUid(),
    };
  }
  const file = peekStateFile(path, expected);
  if (file === null) {
    const membership = record === null ? 'fresh' : 'amnesiac';
    return { membership, incarnation, epoch: undefined, restore: undefined, consume: null, record, clusterUid: record?.clusterUid ?? '' };
  }
  const clusterUid = resumedUid(file, record);
  return {
    membership: 'member',
    incarnation: file.member.inc,
    epoch: file.epoch,
    restore: restoreOf(file),
    consume: file,
    record,
    clusterUid,
  };
}

/** docs/raft.md "Persistence": a storage that holds a state resumes the member it holds, in the
 * epoch of the record beside the state file (written before anything of an epoch is stored). A
 * state file there is consumed unused, unless it is newer than the storage (written by a start
 * without the storage): resuming the storage would then roll the member back, so it is refused.
 * A force-start forces from the storage's state (never from FILE.prev, which is older), as a new
 * member. */
function planFromStorage(path: string, expected: Expected, st: DriverStorage, force: boolean): StartPlan {
  const loaded = st.loaded as DurableState;
  const record = readRecord(path, expected);
  if (record === null || record.epoch.generation === 0) return planStart(path, expected, force);
  const file = peekStateFile(path, expected);
  if (file !== null) {
    const lastOf = (d: DurableState): number => d.entries.at(-1)?.index ?? d.snapshot?.index ?? 0;
    const fileLast = file.log.at(-1)?.index ?? file.snapshot?.index ?? 0;
    if (file.member.inc !== st.incarnation || file.term > loaded.term || fileLast > lastOf(loaded)) {
      throw new DriverError(
        'RAFT_STATE_FILE_NEWER',
        `${path} (member ${file.member.inc}, term ${file.term}, last index ${fileLast}) is newer than --data-dir ${st.dir} (member ${st.incarnation}, term ${loaded.term}, last index ${lastOf(loaded)}): it was written by a start without the data directory; move one of them away`,
      );
    }
  }
  if (force) {
    return {
      membership: 'amnesiac',
      incarnation: randomBytes(8).toString('hex'),
      epoch: record.epoch,
      restore: loaded,
      consume: file,
      record,
      clusterUid: record.clusterUid || newClusterUid(),
    };
  }
  return {
    membership: 'member',
    incarnation: st.incarnation,
    epoch: record.epoch,
    restore: loaded,
    consume: file,
    record,
    clusterUid: record.clusterUid,
  };
}

function checkOptions(opts: RaftDriverOptions): void {
  const bad = (what: string): never => {
    throw new DriverError('RAFT_DRIVER_BAD_OPTIONS', what);
  };
  if (opts.storage !== undefined && opts.stateFile === undefined) bad('storage needs stateFile (its membership record)');
  if ((opts.voters === undefined) === (opts.stateFile === undefined)) bad('give exactly one of voters (static) and stateFile');
  if (opts.stateFile !== undefined && opts.nodes === undefined) bad('nodes is required with stateFile');
  if (opts.forceStart === true && opts.stateFile === undefined) bad('forceStart needs stateFile');
  if (!Number.isSafeInteger(opts.electionTimeoutMs) || opts.electionTimeoutMs < 10)
    bad(`electionTimeoutMs ${opts.electionTimeoutMs} (at least 10)`);
  const tick = opts.tickIntervalMs;
  if (tick !== undefined && (!Number.isSafeInteger(tick) || tick < 1 || tick > opts.electionTimeoutMs)) bad(`tickIntervalMs ${tick}`);
  const bytes = opts.uncommittedBytesMax;
  if (bytes !== undefined && (!Number.isSafeInteger(bytes) || bytes < 1)) bad(`uncommittedBytesMax ${bytes}`);
}
