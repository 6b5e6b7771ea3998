// RaftLog: the broker's log over raft/ (docs/design.md "The seam", docs/design.md "Raft", docs/design.md "One server at a time").
// Commands are encoded once, all proposals of one event-loop turn go to raft as one append,
// and committed entries are decoded and handed to the broker in log order on every node. Only a
// node that leads, has applied an entry of its own term, has committed its serve-start and holds a
// lease serves; the rule is judged again at each accept and each write (`checkServing()`) and
// every poll interval, and the moment it fails the node stops serving.
import { performance } from 'node:perf_hooks';
import type { Epoch, Membership } from '../../raft/core/membership.js';
import type { LogEntry, Message } from '../../raft/core/messages.js';
import type { ForceStartPhase, Role, SoftState } from '../../raft/core/raft.js';
import type { Snapshot } from '../../raft/core/snapshot.js';
import { type DriverLogger, type DriverStorage, type OutOfMembership, type ProposeTicket, RaftDriver } from '../../raft/driver/driver.js';
import type { DriverError } from '../../raft/driver/errors.js';
import { raftWireCodec } from '../../raft/driver/wire-codec.js';
import { type PeerAddress, Transport } from '../../raft/transport/transport.js';
import type { Command, Entry, Settings } from '../broker/commands.js';
import type { BrokerLog, LogListener } from '../log/broker-log.js';
import { decodeCommand, encodeCommand } from '../log/command-codec.js';
import { LatencyBuckets } from '../server/latency-buckets.js';
import type { PublishTracer } from '../server/publish-trace.js';
import { HealthAlerts } from './alerts.js';
import type { AuditLog, LeaseView } from './audit-log.js';
import { type CheckPolicy, CheckScheduler, defaultCheckPolicy } from './check-scheduler.js';
import { type ServingFacts, servingBegins, servingEnd, servingHolds } from './serving-rule.js';

/** What RaftLog needs of a RaftDriver; tests give a fake to drive the serving rule by hand. */
export interface ClusterDriver {
  start(): Promise<void>;
  stop(): Promise<void>;
  /** stop() without waiting: stopped at once, so writeStateFile() may follow in the same turn. */
  halt(): void;
  propose(data: Uint8Array): ProposeTicket | Error;
  readonly accepting: boolean;
  readonly currentRole: Role;
  readonly currentTerm: number;
  readonly leader: number;
  readonly commitIndex: number;
  readonly lastIndex: number;
  readonly appliedIndex: number;
  hasLease(): boolean;
  /** Monotonic ms (performance.now()) at which the lease ends; 0 without one. */
  leaseUntil(): number;
  leaseRemainingMs(): number;
  /** Cluster ms (docs/design.md "Cluster time"); null without a cluster-time implementation. */
  clusterTime(): number | null;
  /** This leader's cluster time follows the voters' clocks (it has made its one jump forward). */
  clusterTimeReady(): boolean;
  matchIndex(peer: number): number | undefined;
  lastContact(peer: number): number | undefined;
  /** Ms since the last valid message from `peer`; null: never heard. */
  lastContactAgoMs(peer: number): number | null;
  /** Leader only: each voter wall clock's distance from the voters' median (ms). */
  clockOffsets(): Map<number, number>;
  /** Thesis §3.10: hand leadership to `to`; an Error when it cannot start. */
  transferLeadership(to: number): Error | null;
  /** Leader only: voters whose wall clock its cluster time leaves out (docs/design.md "Cluster time"). */
  excludedClocks(): number[];
  /** Membership and epoch for /health (docs/operations.md "Health"). */
  status(): MembershipStatus;
  /** After stop(): writes the state file (docs/design.md "State file"); the path, or null when there is
   * nothing a later start could resume. Throws if the write fails. */
  writeStateFile(): string | null;
  on(event: 'drain', fn: () => void): unknown;
}

/** What /health reports of raft membership (raft/driver's DriverStatus has these fields). */
export interface MembershipStatus {
  membership: Membership;
  epoch: Epoch;
  voter: boolean;
  redundant: boolean;
  needsForceStart: boolean;
  forceStart: ForceStartPhase | null;
  excludedClocks: number[];
  clusterUid: string;
  outOfMembership: OutOfMembership | null;
}

/** The driver's callbacks, which RaftLog owns. */
export interface DriverHooks {
  onCommitted(entries: readonly LogEntry[]): void;
  /** The log passed its bounds: the application's state at the last delivered entry, as chunks;
   * null: not now (its one snapshot cursor is in use), ask again later. */
  snapshotSource(): Iterable<Uint8Array> | null;
  /** A snapshot from the leader replaces the application's state (§7). */
  onSnapshot(s: Snapshot): void;
  onStateChange(s: SoftState): void;
  onFatal(err: Error): void;
  onLeaseRenewed(leaseEnd: number, term: number): void;
  /** docs/design.md "Force-start": the node joined a newer epoch that serves elsewhere; the broker's
   * state of the old epoch is dropped and the new epoch's log follows from its start. */
  onReset(): void;
}

/** What RaftLog asks of the broker node above it, for checks and for a failed state machine. */
export interface ReplicaSource {
  /** Index and digest of the newest check entry whose state digest this replica has finished
   * computing (a few turns after applying it); null before the first. */
  lastCheck(): { index: number; digest: string } | null;
  /** Why the state machine stopped (a digest mismatch, a broken invariant); null while sound. */
  failure(): string | null;
  /** The state machine's snapshot, consistent at the last entry it applied; null while its one
   * cursor is in use for a digest (a bounded number of turns). */
  snapshot(): Iterable<Uint8Array> | null;
  /** Replaces the state machine's state with a snapshot's chunks; throws on a corrupt one. */
  restore(chunks: Iterable<Uint8Array>): void;
  /** Drops the state machine's state: the empty state a fresh node starts from. */
  reset(): void;
}

export interface RaftLogOptions {
  node: number;
  /** Every configured node id (--cluster-peers), this one included. */
  nodes: readonly number[];
  settings: Settings;
  logger: DriverLogger;
  driver: (hooks: DriverHooks) => ClusterDriver;
  /** Interval (ms) at which the serving rule is judged even when nothing happens: E/10. */
  pollIntervalMs: number;
  /** Raft's election timeout E, the unit of the alert lines' grace periods; default 10 polls. */
  electionTimeoutMs?: number;
  check?: CheckPolicy;
  /** Connected state of each peer link, for /health; absent: assume connected. */
  peerConnected?: (peer: number) => boolean;
  /** This node's configuration hash for given settings (config-hash.ts), carried by its
   * serve-start and settings commands; recomputed on updateSettings(). */
  configHashOf?: (settings: Settings) => string;
  /** How long stop() waits for a leadership handover before it stops raft anyway (ms). Default
   * 2E: the core aborts a transfer after E. */
  handoverTimeoutMs?: number;
}

/** What /metrics reads of raft beyond ClusterStatus; counters of this process. */
export interface RaftMetrics {
  lastIndex: number;
  /** Every other configured node: the leader's view of its log (null elsewhere) and its link. */
  peers: { id: number; matchLag: number | null; lastContactAgoMs: number | null; connected: boolean }[];
  /** Terms this node stood as a candidate in. */
  elections: number;
  /** Times this node learned of a leader other than the one it knew (the first one included). */
  leaderChanges: number;
  /** Leader only: voter clock offsets from the median (ms), by node. */
  clockOffsetsMs: Map<number, number>;
  /** Proposal to commit, sampled: one proposal timed at a time. */
  commitLatency: LatencyBuckets;
}

/** How often stop() looks whether the handover finished (ms). */
const HANDOVER_POLL_MS = 5;

/** The fields of /health that the log knows (docs/operations.md "Health"). */
export interface ClusterStatus {
  node: number;
  serving: boolean;
  role: Role;
  term: number;
  leader: number;
  servePeriod: number;
  leaseRemainingMs: number;
  commitIndex: number;
  appliedIndex: number;
  redundant: boolean;
  /** No configuration this node knows can elect a leader again: an operator must force-start. */
  needsForceStart: boolean;
  /** 'member' while this node is a voter of its epoch (resumed from its state file, or added
   * since); otherwise how the process started: fresh (no record) or amnesiac (a record, no file). */
  membership: Membership;
  /** Listed as a voter in the newest configuration this node holds. */
  voter: boolean;
  /** The epoch this node is in (generation and id); null before it joined one. */
  epoch: Epoch | null;
  /** The force-start phase of this process; null unless started with --cluster-force-start. */
  forceStart: ForceStartPhase | null;
  /** Leader only: voters whose wall clock is farther than --cluster-max-clock-offset-ms from the
   * median of the voters' clocks, left out of cluster time (docs/design.md "Cluster time"). */
  excludedClocks: number[];
  /** The cluster identity made when the cluster was bootstrapped; null while this node knows none
   * (fresh, or of a cluster formed before identities existed). */
  clusterUid: string | null;
  /** Set once this node has stayed out of its cluster's membership for 10 election timeouts while
   * its peers refused it or addressed another member (a state file of another cluster): for how
   * long, and what each peer did. Null otherwise. */
  outOfMembership: OutOfMembership | null;
  failure: string | null;
  /** This node's configuration hash equals the one the serving leader's serve-start carried (true
   * before any serve-start with a hash was applied: nothing to differ from). */
  configMatchesServing: boolean;
}

export interface TcpClusterOptions {
  node: number;
  peers: ReadonlyMap<number, PeerAddress>;
  listen: PeerAddress;
  clusterId: string;
  secret: string | undefined;
  electionTimeoutMs: number;
  settings: Settings;
  logger: DriverLogger;
  check?: CheckPolicy;
  configHashOf?: (settings: Settings) => string;
  /** docs/design.md "State file"; without it the three nodes are a static configuration (tests). */
  stateFile?: string;
  forceStart?: boolean;
  forceStartTimeoutMs?: number;
  maxClockOffsetMs?: number;
  /** Default 2E. */
  handoverTimeoutMs?: number;
  /** The force-start was refused or timed out; raft has stopped and the process must exit. */
  onForceStartFailed?: (err: DriverError) => void;
  /** --data-dir: raft's log, term, vote and snapshot on disk (docs/raft.md "Persistence"); needs
   * stateFile. */
  storage?: DriverStorage;
  /** A write or fsync of `storage` failed; raft has stopped and the process must exit. */
  onStorageFailed?: (err: Error) => void;
}

/** At most one line per kind of dropped proposal per window (ms). */
const DROP_LOG_WINDOW_MS = 10_000;

export class RaftLog implements BrokerLog, LeaseView {
  readonly node: number;
  /** The leader commits as it reads its followers' answers (BrokerLog). */
  readonly commitsMidTurn = true;
  private readonly opts: RaftLogOptions;
  private readonly driver: ClusterDriver;
  private readonly peers: readonly number[];
  private readonly checks: CheckScheduler;
  private listener: LogListener | null = null;
  private source: ReplicaSource | null = null;
  /** Entries committed before start(listener), delivered on start. */
  private early: Entry[] = [];
  /** start() was called and the early entries have not been delivered yet. */
  private earlyPending = false;
  private evaluateImmediate: NodeJS.Immediate | undefined;
  private poll: NodeJS.Timeout | undefined;
  private opened = false;
  private stopped = false;
  /** A leader's stop waits for its handover; stopNow() ends the wait. */
  private handingOver = false;
  private handoverSkipped = false;
  private stateFileDone = false;
  /** Time of the last applied entry, and the highest time now() returned: neither goes back. */
  private lastAppliedTime = 0;
  private lastNow = 0;
  private lastAppliedTerm = 0;
  /** This leader's serve-start, proposed and not yet committed. */
  private startTicket: ProposeTicket | null = null;
  /** Index and term of this leader's committed serve-start, not yet serving (waiting for a lease). */
  private readyPeriod = 0;
  private readyTerm = 0;
  /** The serving period (index of its serve-start) and the term it belongs to; 0 when not serving. */
  private period = 0;
  private servingTerm = 0;
  private readonly dropLoggedAt = new Map<string, number>();
  /** The excluded clocks last logged, joined; '' when none. */
  private clocksLogged = '';
  private readonly alerts: HealthAlerts;
  private readonly electionTimeoutMs: number;
  private audit: AuditLog | null = null;
  private tracer: PublishTracer | null = null;
  /** The configuration hash of the latest applied serve-start that carried one. */
  private servingConfigHash: string | null = null;
  /** Scratch for servingFacts(). */
  private readonly facts: { -readonly [K in keyof ServingFacts]: ServingFacts[K] } = {
    stopped: false,
    role: 'follower',
    term: 0,
    servingTerm: 0,
    lastAppliedTerm: 0,
    hasLease: false,
    failed: false,
  };
  /** What this node's next serve-start carries: the settings of the latest reload, and their hash. */
  private settings: Settings;
  private configHash: string | undefined;
  // ---- metrics: plain counters, read at scrape time ----
  private elections = 0;
  private leaderChanges = 0;
  private knownLeader = 0;
  private knownRole: Role = 'follower';
  private knownTerm = 0;
  private readonly commitLatency = new LatencyBuckets();
  /** The one proposal whose commit is being timed, and when it was proposed (ms); null: none. The
   * ticket itself is kept, since the driver may move its index before the batch is appended. One
   * at a time keeps the cost to a clock read per commit round, not per command. */
  private probe: ProposeTicket | null = null;
  private probeAt = 0;

  constructor(opts: RaftLogOptions) {
    this.opts = opts;
    this.node = opts.node;
    this.peers = opts.nodes.filter((v) => v !== opts.node);
    this.checks = new CheckScheduler(opts.check ?? defaultCheckPolicy);
    this.electionTimeoutMs = opts.electionTimeoutMs ?? 10 * opts.pollIntervalMs;
    this.alerts = new HealthAlerts(opts.node, this.electionTimeoutMs);
    this.settings = opts.settings;
    this.configHash = opts.configHashOf?.(opts.settings);
    this.driver = opts.driver({
      onCommitted: (entries) => this.onCommitted(entries),
      onStateChange: (s) => {
        this.noteSoftState(s);
        this.evaluate();
      },
      onFatal: (err) => this.onFatal(err),
      onLeaseRenewed: (leaseEnd, term) => this.audit?.leaseRenewed(leaseEnd, term),
      snapshotSource: () => this.snapshotSource(),
      onSnapshot: (s) => this.installSnapshot(s),
      onReset: () => this.reset(),
    });
    this.driver.on('drain', () => this.onDrain());
  }

  /** A RaftLog over a RaftDriver and the TCP transport. Call open() before start(). */
  static overTcp(o: TcpClusterOptions): { log: RaftLog; transport: () => Transport<Message> | undefined } {
    let transport: Transport<Message> | undefined;
    const nodes = [...o.peers.keys()];
    const identity =
      o.stateFile === undefined
        ? { voters: nodes }
        : {
            nodes,
            stateFile: o.stateFile,
            forceStart: o.forceStart === true,
            ...(o.forceStartTimeoutMs === undefined ? {} : { forceStartTimeoutMs: o.forceStartTimeoutMs }),
            ...(o.onForceStartFailed === undefined ? {} : { onForceStartFailed: o.onForceStartFailed }),
            ...(o.storage === undefined ? {} : { storage: o.storage }),
          };
    const log = new RaftLog({
      node: o.node,
      nodes,
      settings: o.settings,
      logger: o.logger,
      check: o.check,
      ...(o.configHashOf === undefined ? {} : { configHashOf: o.configHashOf }),
      pollIntervalMs: Math.max(1, Math.floor(o.electionTimeoutMs / 10)),
      electionTimeoutMs: o.electionTimeoutMs,
      handoverTimeoutMs: o.handoverTimeoutMs ?? 2 * o.electionTimeoutMs,
      peerConnected: (peer) => transport?.stats().peers.find((p) => p.nodeId === peer)?.connected ?? false,
      driver: (hooks) =>
        new RaftDriver({
          id: o.node,
          ...identity,
          clusterId: o.clusterId,
          electionTimeoutMs: o.electionTimeoutMs,
          logger: o.logger,
          ...(o.maxClockOffsetMs === undefined ? {} : { core: { maxClockOffsetMs: o.maxClockOffsetMs } }),
          transport: (validate, id) => {
            transport = new Transport<Message>({
              nodeId: o.node,
              incarnation: id.incarnation,
              clusterId: o.clusterId,
              epoch: id.epoch,
              clusterUid: id.clusterUid,
              listen: o.listen,
              peers: new Map(o.peers),
              secret: o.secret,
              logger: o.logger,
              validate,
              callerFlushes: true,
              codec: raftWireCodec(),
            });
            return transport;
          },
          onCommitted: hooks.onCommitted,
          onStateChange: hooks.onStateChange,
          onFatal: hooks.onFatal,
          // The node stops serving, then the process exits.
          onStorageFailed: (err) => {
            hooks.onFatal(err);
            o.onStorageFailed?.(err);
          },
          onLeaseRenewed: hooks.onLeaseRenewed,
          snapshotSource: hooks.snapshotSource,
          onSnapshot: hooks.onSnapshot,
          onReset: hooks.onReset,
        }),
    });
    return { log, transport: () => transport };
  }

  /** Binds the peer port and starts raft (docs/design.md "Links": the bind comes before anything else,
   * so a second process with this node id fails here). Rejects with the transport's error. */
  async open(): Promise<void> {
    if (this.opened) return;
    this.opened = true;
    await this.driver.start();
    if (this.stopped) return;
    this.poll = setInterval(() => {
      this.evaluate();
      this.noteClocks();
      this.noteHealth();
    }, this.opts.pollIntervalMs);
  }

  /** The broker node above this log, consulted for checks, state-machine failure and snapshots. */
  attach(source: ReplicaSource): void {
    this.source = source;
  }

  /** Raft compacts its log at the last entry it delivered; the broker's state must be at that entry
   * too. Entries still queued for the broker (before start(), or behind the early ones) would make
   * the snapshot older than the index raft records, so the driver is told to try again later. The
   * broker's cursor is lazy: the driver pulls its chunks a slice per turn and logs the bytes, the
   * time and the longest slice. */
  private snapshotSource(): Iterable<Uint8Array> | null {
    const source = this.source;
    if (source === null || this.listener === null || this.earlyPending || this.early.length > 0) {
      throw new Error('the broker has not applied every delivered entry yet');
    }
    return source.snapshot();
  }

  /** A snapshot installed from the leader: the broker's state is replaced, and entries after it
   * continue from its index. Queued early entries are older than the snapshot and are dropped. */
  private installSnapshot(s: Snapshot): void {
    const source = this.source;
    if (source === null) throw new Error('a snapshot arrived before the broker attached');
    const started = performance.now();
    source.restore(s.chunks);
    this.early = [];
    this.probe = null;
    this.lastAppliedTime = Math.max(this.lastAppliedTime, s.time);
    this.lastAppliedTerm = s.term;
    this.opts.logger.info(
      { index: s.index, bytes: s.bytes, ms: Math.round(performance.now() - started) },
      'broker restored from a raft snapshot',
    );
  }

  /** docs/design.md "Force-start": this node switched to a newer epoch made elsewhere. What it applied
   * of the old epoch is gone; the new epoch's log (or its snapshot) follows from the start, so time,
   * term and the serving configuration start over with it. */
  private reset(): void {
    const source = this.source;
    if (source === null) throw new Error('an epoch switch arrived before the broker attached');
    source.reset();
    this.early = [];
    this.probe = null;
    this.lastAppliedTime = 0;
    this.lastAppliedTerm = 0;
    this.servingConfigHash = null;
    this.startTicket = null;
    this.readyPeriod = 0;
    this.opts.logger.info(
      { node: this.node, epoch: this.driver.status().epoch },
      'joined a newer epoch; broker state of the old epoch dropped',
    );
  }

  /** The audit stream (--audit-log): lease renewals and serving periods go to it. */
  attachAudit(audit: AuditLog): void {
    this.audit = audit;
  }

  /** The status page's live trace: appends and commits of traced publishes are noted while it is on. */
  attachTracer(tracer: PublishTracer): void {
    this.tracer = tracer;
  }

  /** This node and the peers whose match index has reached `index` (meaningful on the leader). */
  private readonly holdersOf = (index: number): number[] => {
    const out = [this.node];
    for (const p of this.peers) if ((this.driver.matchIndex(p) ?? 0) >= index) out.push(p);
    return out.sort((a, b) => a - b);
  };

  get currentTerm(): number {
    return this.driver.currentTerm;
  }

  leaseUntil(): number {
    return this.driver.leaseUntil();
  }

  // ---- BrokerLog ----

  get accepting(): boolean {
    return this.driver.accepting;
  }

  /** Live: the serving rule judged on every read, so each accept and each write sees a lapsed
   * lease at once. No side effect: checkServing() is where a lapse found ends the period. */
  get serving(): boolean {
    return this.period !== 0 && this.servingHolds();
  }

  /** The serving rule judged at a moment that acts on it (accept, write, proposal, apply's
   * effects, status). A period whose rule failed since the last event ends in a turn of its own
   * (endServingSoon), without waiting for the poll. */
  checkServing(): boolean {
    if (this.period === 0) return false;
    if (this.servingHolds()) return true;
    this.endServingSoon();
    return false;
  }

  get servePeriod(): number {
    return this.checkServing() ? this.period : 0;
  }

  /** The leader's cluster time; elsewhere the time of the last applied entry. */
  now(): number {
    const t = Math.max(this.driver.clusterTime() ?? 0, this.lastAppliedTime, this.lastNow);
    this.lastNow = t;
    return t;
  }

  start(listener: LogListener): void {
    if (this.listener !== null) throw new Error('RaftLog already started');
    this.listener = listener;
    if (!this.opened) {
      this.open().catch((err: unknown) => this.onFatal(err instanceof Error ? err : new Error(String(err))));
    }
    // Entries committed before start() are delivered in a later turn (never inside start); until
    // then newer entries queue behind them, so the listener sees the log in order and serving
    // never begins before the listener has applied this leader's serve-start.
    this.earlyPending = true;
    setImmediate(() => {
      this.earlyPending = false;
      const early = this.early;
      this.early = [];
      if (early.length > 0 && !this.stopped) listener.committed(early);
      this.evaluate();
    });
  }

  /** Encoded once; the driver sends every proposal of this turn as one append, and raft/core
   * stamps that append with one cluster time (docs/design.md "Batch", docs/design.md "Cluster time"). */
  propose(cmd: Command): void {
    if (this.stopped || !this.checkServing()) return;
    // A reload's settings carry this node's hash, so every replica can compare its own with it.
    if (cmd.t === 'settings' && this.configHash !== undefined) cmd = { ...cmd, configHash: this.configHash };
    const r = this.driver.propose(encodeCommand(cmd));
    if (this.tracer?.on && !(r instanceof Error)) this.tracer.appended(cmd, r);
    if (r instanceof Error) this.noteDropped(r);
    else if (this.probe === null) {
      this.probe = r;
      this.probeAt = performance.now();
    }
  }

  updateSettings(settings: Settings): void {
    this.settings = settings;
    this.configHash = this.opts.configHashOf?.(settings);
  }

  /** docs/design.md "State file": serving has already stopped (the broker closed its connections);
   * a leader hands leadership to its most caught-up connected peer, so another node serves after
   * about one round trip instead of an election timeout; then all raft traffic stops. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.beginStop();
    await this.handOver();
    await this.driver.stop();
    this.writeStateFile();
  }

  /** The stop's deadline has come (--shutdown-timeout-ms): a handover still under way is given
   * up, raft traffic stops at once and the state file is written now, in this turn, so the process
   * may exit right after. Before, during or after stop(); the file is written once. */
  stopNow(): void {
    if (!this.stopped) this.beginStop();
    if (this.handingOver)
      this.opts.logger.warn({ node: this.node, term: this.driver.currentTerm, reason: 'stop timed out' }, 'leadership handover skipped');
    this.handoverSkipped = true;
    this.driver.halt();
    this.writeStateFile();
  }

  private beginStop(): void {
    this.stopped = true;
    if (this.period !== 0) {
      this.opts.logger.info({ node: this.node, period: this.period, term: this.driver.currentTerm, reason: 'stopping' }, 'serving ended');
      this.period = 0;
      this.audit?.serving(0);
    }
    this.early = [];
    clearInterval(this.poll);
    if (this.evaluateImmediate !== undefined) clearImmediate(this.evaluateImmediate);
  }

  /** Last in the stop order: raft traffic has stopped, so the file holds everything this node
   * acknowledged. A failed write is logged with the file's path: the next start is amnesiac. */
  private writeStateFile(): void {
    if (this.stateFileDone) return;
    this.stateFileDone = true;
    const started = performance.now();
    try {
      const file = this.driver.writeStateFile();
      const ms = Math.round(performance.now() - started);
      if (file === null) this.opts.logger.info({ node: this.node }, 'no state file written: nothing to resume');
      else
        this.opts.logger.info(
          { node: this.node, file, ms, index: this.driver.lastIndex, term: this.driver.currentTerm },
          'state file written',
        );
    } catch (err) {
      this.opts.logger.error(
        { node: this.node, err: (err as Error).message },
        'state file not written; the next start of this node is amnesiac',
      );
    }
  }

  private async handOver(): Promise<void> {
    const d = this.driver;
    if (d.currentRole !== 'leader') return;
    const to = this.handoverTarget();
    if (to === null) {
      this.opts.logger.info({ node: this.node }, 'no peer to hand leadership to');
      return;
    }
    const err = d.transferLeadership(to);
    if (err !== null) {
      this.opts.logger.warn({ node: this.node, to, err: err.message }, 'leadership handover not started');
      return;
    }
    this.audit?.leaseReleased();
    const limit = this.opts.handoverTimeoutMs ?? 0;
    const started = performance.now();
    this.handingOver = true;
    while (d.currentRole === 'leader' && !this.handoverSkipped && performance.now() - started < limit) {
      await new Promise((r) => setTimeout(r, HANDOVER_POLL_MS));
    }
    this.handingOver = false;
    if (this.handoverSkipped) return;
    const handed = d.currentRole !== 'leader';
    const ms = Math.round(performance.now() - started);
    this.opts.logger.info(
      { node: this.node, to, ms, term: d.currentTerm },
      handed ? 'leadership handed over' : 'leadership handover timed out',
    );
  }

  /** The connected peer holding the most of the log; null if none is connected. */
  private handoverTarget(): number | null {
    let best: number | null = null;
    let bestMatch = -1;
    for (const p of this.peers) {
      if (this.opts.peerConnected !== undefined && !this.opts.peerConnected(p)) continue;
      const match = this.driver.matchIndex(p) ?? -1;
      if (match > bestMatch) {
        best = p;
        bestMatch = match;
      }
    }
    return best;
  }

  // ---- status ----

  raftMetrics(): RaftMetrics {
    const d = this.driver;
    const last = d.lastIndex;
    return {
      lastIndex: last,
      peers: this.peers.map((id) => {
        const match = d.matchIndex(id);
        return {
          id,
          matchLag: match === undefined ? null : Math.max(0, last - match),
          lastContactAgoMs: d.lastContactAgoMs(id),
          connected: this.opts.peerConnected?.(id) ?? true,
        };
      }),
      elections: this.elections,
      leaderChanges: this.leaderChanges,
      clockOffsetsMs: d.currentRole === 'leader' ? d.clockOffsets() : new Map(),
      commitLatency: this.commitLatency,
    };
  }

  /** The timed proposal's index was committed: with its term, it was this proposal. */
  private endProbe(term: number): void {
    if (term === this.probe?.term) this.commitLatency.observe((performance.now() - this.probeAt) / 1000);
    this.probe = null;
  }

  private noteSoftState(s: SoftState): void {
    if (s.role === 'candidate' && (this.knownRole !== 'candidate' || s.term !== this.knownTerm)) this.elections++;
    if (s.leader !== 0 && s.leader !== this.knownLeader) {
      this.leaderChanges++;
      this.knownLeader = s.leader;
    }
    this.knownRole = s.role;
    this.knownTerm = s.term;
  }

  status(): ClusterStatus {
    const serving = this.checkServing() && this.source?.failure() == null;
    const m = this.driver.status();
    return {
      node: this.node,
      serving,
      role: this.driver.currentRole,
      term: this.driver.currentTerm,
      leader: this.driver.leader,
      servePeriod: serving ? this.period : 0,
      leaseRemainingMs: this.driver.leaseRemainingMs(),
      commitIndex: this.driver.commitIndex,
      appliedIndex: this.driver.appliedIndex,
      redundant: this.driver.currentRole === 'leader' && this.redundancyGap(m.redundant) === null,
      needsForceStart: m.needsForceStart,
      // A node that started fresh or amnesiac is a member once it votes in its epoch.
      membership: m.voter && m.epoch.generation !== 0 ? 'member' : m.membership,
      voter: m.voter,
      epoch: m.epoch.generation === 0 ? null : m.epoch,
      forceStart: m.forceStart,
      excludedClocks: m.excludedClocks,
      clusterUid: m.clusterUid === '' ? null : m.clusterUid,
      outOfMembership: m.outOfMembership,
      failure: this.source?.failure() ?? null,
      configMatchesServing: this.servingConfigHash === null || this.servingConfigHash === this.configHash,
    };
  }

  /** The leader this node knows, if it is another node heard from within `ms`; else 0 (none, this
   * node itself, or a leader gone quiet: one killed is still named until the next election). */
  liveLeader(ms: number): number {
    const leader = this.driver.leader;
    if (leader === 0 || leader === this.node) return 0;
    const heard = this.driver.lastContact(leader);
    return heard !== undefined && performance.now() - heard <= ms ? leader : 0;
  }

  /** Null when every configured node is a caught-up voter with its current incarnation (raft's
   * judgement), its link is up and it was heard from within E (a frozen process keeps its link),
   * else what is missing. Judged by the leader, which alone tracks what each follower holds; on a
   * follower the answer means nothing. */
  private redundancyGap(raftSays: boolean): string | null {
    const commit = this.driver.commitIndex;
    const now = performance.now();
    for (const p of this.peers) {
      if (this.opts.peerConnected !== undefined && !this.opts.peerConnected(p)) return `node ${p}: link down`;
      const heard = this.driver.lastContact(p);
      if (heard === undefined || now - heard > this.electionTimeoutMs) return `node ${p}: not heard from within E`;
      const match = this.driver.matchIndex(p);
      if (match === undefined) return `node ${p}: not a voter`;
      if (match < commit) return `node ${p}: behind the commit index`;
    }
    return raftSays ? null : 'a node is not a caught-up voter of its current incarnation';
  }

  /** The alert lines (alerts.ts), judged at each poll; each is logged once per change. */
  private noteHealth(): void {
    const d = this.driver;
    const leading = d.currentRole === 'leader';
    const m = d.status();
    const lines = this.alerts.observe({
      now: performance.now(),
      role: d.currentRole,
      term: d.currentTerm,
      leader: d.leader,
      lease: leading && d.hasLease(),
      ...(leading ? { redundancyGap: this.redundancyGap(m.redundant) } : {}),
      needsForceStart: m.needsForceStart,
    });
    for (const l of lines) this.opts.logger[l.level](l.fields, l.msg);
  }

  // ---- proposals ----

  /** A proposal the driver refused (not leader any more, too many uncommitted): the connection's
   * client gets no answer and retries after reconnecting; logged once per code per window. */
  private noteDropped(err: Error): void {
    this.logDropped(err);
    this.evaluate();
  }

  private logDropped(err: Error): void {
    const code = (err as { code?: string }).code ?? 'unknown';
    const now = Math.floor(performance.now());
    const at = this.dropLoggedAt.get(code);
    if (at === undefined || now - at >= DROP_LOG_WINDOW_MS) {
      this.dropLoggedAt.set(code, now);
      this.opts.logger.warn({ code, err: err.message }, 'proposal dropped');
    }
  }

  /** serve-start and check bypass the serving gate: a leader proposes serve-start before it
   * serves, and needs its ticket to know its period. A refusal is only logged: evaluate() calls
   * this, and a leader that may not propose yet (a force-started one before its epoch has a second
   * voter) is asked again at the next poll. */
  private proposeInternal(cmd: Command): ProposeTicket | null {
    if (this.stopped || this.driver.currentRole !== 'leader') return null;
    const r = this.driver.propose(encodeCommand(cmd));
    if (r instanceof Error) {
      this.logDropped(r);
      return null;
    }
    return r;
  }

  private onDrain(): void {
    if (!this.stopped) this.listener?.drain();
  }

  // ---- committed entries ----

  private onCommitted(raw: readonly LogEntry[]): void {
    if (this.stopped) return;
    const out: Entry[] = [];
    let checks = 0;
    for (let i = 0; i < raw.length; i++) {
      const e = raw[i] as LogEntry;
      this.lastAppliedTerm = e.term;
      if (e.index === this.probe?.index) this.endProbe(e.term);
      const entry = this.toEntry(e);
      const ticket = this.startTicket;
      if (ticket !== null && e.index === ticket.index) {
        this.startTicket = null;
        // Another term's entry at the ticket's index: the proposal was lost with leadership.
        if (e.term === ticket.term) this.startCommitted(e, entry);
      }
      if (entry === null) continue;
      if (entry.cmd.t === 'check') checks++;
      out.push(entry);
    }
    if (this.tracer?.on && raw.length > 0)
      this.tracer.committed((raw[0] as LogEntry).index, (raw[raw.length - 1] as LogEntry).index, this.holdersOf);
    // Passed without its index (a snapshot, a truncation): not timed.
    if (this.probe !== null && raw.length > 0 && (raw[raw.length - 1] as LogEntry).index > this.probe.index) this.probe = null;

    this.checks.noteApplied(out.length, checks);
    if (this.listener === null || this.earlyPending) {
      for (const e of out) this.early.push(e);
      return;
    }
    if (out.length > 0) this.listener.committed(out);
    this.evaluate();
    this.maybeCheck();
  }

  /** This leader's serve-start ticket came up in its own term: the period is the entry's index. The
   * connections of the period carry it in their ids and apply compares them with the serve-start it
   * applied, so an index that holds another entry would leave every CONNECT of the period unanswered;
   * that is logged and a new serve-start is proposed instead. */
  private startCommitted(e: LogEntry, entry: Entry | null): void {
    const cmd = entry?.cmd;
    if (cmd?.t !== 'serve-start' || cmd.node !== this.node) {
      this.opts.logger.error({ node: this.node, index: e.index, found: cmd?.t ?? null }, 'serve-start ticket holds another entry');
      return;
    }
    this.readyPeriod = e.index;
    this.readyTerm = e.term;
  }

  /** Null for a new leader's empty entry (§8), which carries no command, and for an entry that
   * cannot be decoded (a bug: only leaders of this cluster propose); every replica reads the same
   * bytes and skips alike, and apply accepts gaps in the index. The time is the one raft/core
   * stamped on the append. */
  private toEntry(e: LogEntry): Entry | null {
    if (e.data === null) return null;
    let cmd: Command;
    try {
      cmd = decodeCommand(e.data);
    } catch (err) {
      this.opts.logger.error({ index: e.index, err: (err as Error).message }, 'committed entry cannot be decoded; skipped');
      return null;
    }
    // The core never lets time go back along the log; apply gets the same guarantee regardless.
    if ((cmd.t === 'serve-start' || cmd.t === 'settings') && cmd.configHash !== undefined) this.servingConfigHash = cmd.configHash;
    const time = Math.max(e.time, this.lastAppliedTime);
    this.lastAppliedTime = time;
    return { index: e.index, time, cmd };
  }

  /** A wall clock left out of cluster time is reported once when it leaves and once when it is
   * back (the set is judged by the leader only). */
  private noteClocks(): void {
    const excluded = this.driver.currentRole === 'leader' ? this.driver.excludedClocks().join(',') : '';
    if (excluded === this.clocksLogged) return;
    if (excluded === '') this.opts.logger.info({ node: this.node }, 'every voter clock within --cluster-max-clock-offset-ms again');
    else
      this.opts.logger.warn(
        { node: this.node, excluded: excluded.split(',').map(Number) },
        'voter wall clock too far from the median; left out of cluster time',
      );
    this.clocksLogged = excluded;
  }

  // ---- the serving rule ----

  /** docs/design.md "One server at a time": leader, an entry of its own term applied, its serve-start
   * committed, a lease; and a sound state machine. */
  private servingHolds(): boolean {
    return servingHolds(this.servingFacts(this.servingTerm));
  }

  /** The facts the rule (serving-rule.ts) is judged on, for a period of `servingTerm`. One object,
   * refilled: the rule is judged at every accept and every write. */
  private servingFacts(servingTerm: number): ServingFacts {
    const d = this.driver;
    const f = this.facts;
    f.stopped = this.stopped;
    f.role = d.currentRole;
    f.term = d.currentTerm;
    f.servingTerm = servingTerm;
    f.lastAppliedTerm = this.lastAppliedTerm;
    f.hasLease = d.hasLease();
    f.failed = this.source?.failure() != null;
    return f;
  }

  /** The serving rule failed inside a period: evaluate() ends it in the next turn, once however
   * many reads found the failure this turn (never inside the caller's own accept or write). */
  private endServingSoon(): void {
    this.evaluateImmediate ??= setImmediate(this.evaluateSoon);
  }

  private readonly evaluateSoon = (): void => {
    this.evaluateImmediate = undefined;
    this.evaluate();
  };

  private evaluate(): void {
    if (this.stopped) return;
    if (this.period !== 0 && !this.servingHolds()) this.endServing();
    if (this.driver.currentRole !== 'leader' || this.source?.failure() != null) {
      this.startTicket = null;
      this.readyPeriod = 0;
      return;
    }
    if (this.period !== 0) return;
    const term = this.driver.currentTerm;
    if (this.readyPeriod !== 0 && this.readyTerm !== term) this.readyPeriod = 0;
    if (this.startTicket !== null && this.startTicket.term !== term) this.startTicket = null;
    if (this.readyPeriod === 0 && this.startTicket === null) {
      // docs/design.md "Cluster time": time jumps forward only at the start of a serving period, and
      // apply must never expire anything early. A leader without two agreeing clocks stamps the
      // log's last time and jumps later; serve-start waits for that jump, so the whole period runs
      // on time that follows the voters' clocks. The poll re-judges this every E/10.
      if (!this.driver.clusterTimeReady()) return;
      const hash = this.configHash;
      // The generation lets apply see a forced epoch's first serve-start (docs/design.md "Force-start").
      const generation = this.driver.status().epoch.generation;
      const cmd: Command = { t: 'serve-start', node: this.node, settings: this.settings, generation };
      if (hash !== undefined) cmd.configHash = hash;
      this.startTicket = this.proposeInternal(cmd);
      return;
    }
    if (this.readyPeriod !== 0 && servingBegins(this.servingFacts(term), this.listener !== null && !this.earlyPending)) {
      this.beginServing(this.readyPeriod, term);
    }
  }

  private beginServing(period: number, term: number): void {
    this.period = period;
    this.servingTerm = term;
    this.readyPeriod = 0;
    this.checks.reset(this.now());
    this.opts.logger.info({ node: this.node, term, period, leaseRemainingMs: this.driver.leaseRemainingMs() }, 'serving');
    this.audit?.serving(period);
    this.listener?.serving(true, period);
  }

  /** The period is over for good: a later one needs a serve-start of its own, so ConnIds of this
   * period are never reused (docs/design.md "The seam"). */
  private endServing(): void {
    const d = this.driver;
    const reason = servingEnd(this.servingFacts(this.servingTerm)) ?? 'lease lapsed';
    this.opts.logger.info({ node: this.node, period: this.period, term: d.currentTerm, reason }, 'serving ended');
    if (reason !== 'state machine failed') {
      const l = this.alerts.leaseLost(d.currentTerm, this.period, reason);
      this.opts.logger[l.level](l.fields, l.msg);
    }
    this.period = 0;
    this.servingTerm = 0;
    this.audit?.serving(0);
    this.listener?.serving(false, 0);
  }

  // ---- checks ----

  private maybeCheck(): void {
    if (this.period === 0 || !this.checkServing()) return;
    const now = this.now();
    if (!this.checks.due(now)) return;
    const last = this.source?.lastCheck() ?? null;
    const cmd: Command = last === null ? { t: 'check', atIndex: 0, digest: '' } : { t: 'check', atIndex: last.index, digest: last.digest };
    if (this.proposeInternal(cmd) !== null) this.checks.proposed(now);
  }

  private onFatal(err: Error): void {
    this.opts.logger.error({ node: this.node, err: err.message }, 'raft stopped; this node no longer takes part');
    if (this.period !== 0) {
      this.period = 0;
      this.listener?.serving(false, 0);
    }
    this.stopped = true;
    clearInterval(this.poll);
  }
}
