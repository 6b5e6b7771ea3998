import { RaftError } from '../errors.js';
import { assert, assertInteger, unreachable } from './assert.js';
import { ClusterClock } from './cluster-time.js';
import { type Announced, ConfigTracker, nextConfig, progressKey, syncProgress } from './confchange.js';
import { ForceStart, type ForceStartHost, type ForceStartPhase, forceStartProbeE, forceStartTimeoutE } from './force-start.js';
import { MemoryLog } from './log.js';
import type { Configuration, Epoch, Member, Membership } from './membership.js';
import { hasMember, memberOf, noEpoch } from './membership.js';
import type {
  Announce,
  Append,
  AppendResponse,
  Heartbeat,
  LogEntry,
  Message,
  Outgoing,
  PreVoteRequest,
  PreVoteResponse,
  SnapshotResponse,
  VoteRequest,
  VoteResponse,
} from './messages.js';
import { isVoteRequest } from './messages.js';
import type { RandomSource } from './prng.js';
import type { Progress } from './progress.js';
import type { Snapshot } from './snapshot.js';
import { logBytesMaxDefault, logEntriesMaxDefault, rechunk, snapshotChunkBytesMaxDefault } from './snapshot.js';
import { SnapshotTransfer, type SnapshotTransferHost } from './snapshot-transfer.js';
import { validateMessage } from './validate.js';

export type Role = 'follower' | 'pre-candidate' | 'candidate' | 'leader';

/** Rules broken on purpose, only so tests can prove the simulator's checkers catch a broken core.
 * 'grant-every-vote' ignores votedFor (§5.2: one vote per term); 'commit-old-terms' commits any
 * majority-replicated entry by counting, the bug of the paper's Figure 8 (§5.4.2);
 * 'answer-every-vote' drops the vote-ignoring rule, so elections no longer wait out leases;
 * 'swap-member' replaces a forgotten member by its new incarnation in one entry (docs/design.md "Replacing
 * a node that forgot": never swap in one entry); 'install-any-chunk' assembles snapshot chunks in whatever order they come. */
export type UnsafeRule = 'grant-every-vote' | 'commit-old-terms' | 'answer-every-vote' | 'swap-member' | 'install-any-chunk';

/** ρ: monotonic clocks keep the real rate within 0.1 % (docs/design.md "The model"). */
export const clockDriftMax = 0.001;
/** The lease margin, as a fraction of E; also the wall-over-monotonic jump taken as a frozen
 * machine (docs/design.md "Leases and votes"). */
export const leaseMarginFraction = 0.05;
/** A leadership transfer that has not completed within this many E is aborted (thesis §3.10). */
export const transferTimeoutE = 1;

export { caughtUpRoundE, replaceSilentE } from './confchange.js';
export { type ForceStartPhase, forceStartProbeE, forceStartTimeoutE } from './force-start.js';
/** An announcement older than this many E no longer describes its sender. */
export const announceStaleE = 4;
/** Default of `entriesPerAppendMax`: also the bound a wire decoder checks an append's count against. */
export const entriesPerAppendMaxDefault = 64;

/** What survives a restart (as if resumed from a state file); commit and role do not. */
export interface DurableState {
  readonly term: number;
  /** Node id voted for in `term`; 0: none. */
  readonly vote: number;
  /** Incarnation of the member voted for (docs/design.md "Identity": one vote per term per member). */
  readonly voteInc?: string;
  /** The log after the snapshot: entries from snapshot.index + 1 (from 1 without one). */
  readonly entries: readonly LogEntry[];
  /** The configuration before the first of `entries` (a static one, or the snapshot's); null: none. */
  readonly baseConfig?: Configuration | null;
  /** The newest snapshot (§7); null or absent: the log was never compacted. */
  readonly snapshot?: Snapshot | null;
}

export interface HardState {
  readonly term: number;
  readonly vote: number;
  readonly voteInc: string;
}

export interface RaftOptions {
  readonly id: number;
  /** A static first configuration: these node ids are voters, each with incarnation '0', as if
   * bootstrapped out of band (unit tests, scenario scripts). Without it the node starts with no
   * configuration and joins or bootstraps one (docs/design.md "Fresh, amnesiac, bootstrap"). */
  readonly voters?: readonly number[];
  /** Every configured node id (--cluster-peers), this one included. Default: `voters`. */
  readonly nodes?: readonly number[];
  /** This process's incarnation. Default '0' (the static configuration's). */
  readonly incarnation?: string;
  /** Default 'raftmq'. */
  readonly clusterId?: string;
  /** Makes a slab of the log's entry data of at least this many bytes (raft/core/log.ts); entry
   * data handed out are views of it. Default: a Uint8Array (the driver makes Node Buffers, so the
   * views are Buffers too). */
  readonly newSlab?: (bytes: number) => Uint8Array;
  /** The epoch this node resumes; default: none (or generation 1, id 'static', with `voters`). */
  readonly epoch?: Epoch;
  /** Default 'member' with `voters` or `restore`, else 'fresh'. */
  readonly membership?: Membership;
  /** E, in ms. Election timeouts are drawn from [E, 2E). */
  readonly electionTimeoutMs: number;
  /** Default E/5. */
  readonly heartbeatIntervalMs?: number;
  /** Unacknowledged appends per follower in replicate state. Default 8. */
  readonly inflightAppendsMax?: number;
  /** A commit index that moved goes to each follower with its next append; a follower that gets
   * none this many ms later is sent an empty one carrying it. 0 (default): every follower is sent
   * an append the moment the commit index moves, as in etcd. Followers only apply the commit
   * index; it decides nothing, so a later notice costs apply lag, never safety. */
  readonly commitNoticeDelayMs?: number;
  /** Entries per append message. Default 64. */
  readonly entriesPerAppendMax?: number;
  /** Uncommitted entries a leader accepts before propose() refuses. Default 10,000. */
  readonly uncommittedEntriesMax?: number;
  /** Data bytes per append message (at least one entry is sent, whatever its size). Default 1 MiB. */
  readonly appendBytesMax?: number;
  /** snapshotWanted() turns true once more applied entries than this are held. Default 10,000. */
  readonly logEntriesMax?: number;
  /** ... or once the applied entries held carry more data bytes than this. Default 64 MiB. */
  readonly logBytesMax?: number;
  /** Bytes per InstallSnapshot chunk; the application's chunks are cut to it. Default 256 KiB. */
  readonly snapshotChunkBytesMax?: number;
  /** Unanswered InstallSnapshot chunks per follower. Default 4. */
  readonly snapshotChunksInflightMax?: number;
  /** Ongaro's thesis §9.6. Default true. */
  readonly preVote?: boolean;
  /** A leader steps down when it has not heard from a majority within E. Default true. */
  readonly checkQuorum?: boolean;
  readonly random: RandomSource;
  /** Monotonic ms at construction. */
  readonly now: number;
  readonly restore?: DurableState;
  /** Monotonic ms before which every vote and pre-vote request is ignored. The third case
   * of the vote-ignoring rule (docs/design.md "Leases and votes"): the part-3 driver sets it to now + 2E when it resumes a state file
   * (the node cannot know when it last heard from a leader); the simulator does on each restart. */
  readonly ignoreVotesUntil?: number;
  /** A wall clock farther than this from the median is excluded from cluster time. Default 1000. */
  readonly maxClockOffsetMs?: number;
  /** docs/design.md "Force-start": with `restore` (the node's whole file, treated as committed) and
   * `epoch` (the file's), make the next epoch with this member as its only voter. Needs an
   * incarnation other than the file's. */
  readonly forceStart?: boolean;
  /** A forced epoch must serve within this many ms, or the node gives up; so must one resumed
   * from a state file while this node was its only voter. Default forceStartTimeoutE·E. */
  readonly forceStartTimeoutMs?: number;
  /** The forced epoch's generation is above this as well as above the file's: the membership
   * record may show that this node took part in a newer epoch than its file's, and the new epoch
   * must be newer than that one too, so its members switch. Default 0. */
  readonly forceStartAbove?: number;
  readonly unsafe?: UnsafeRule;
  /** False (default): the log, term and vote are durable the moment the core writes them, as with
   * in-memory storage, and nothing waits. True: they are durable only once the storage says so
   * through persisted() and persistedHardState() (docs/raft.md "Persistence"): the leader counts
   * itself toward a commit only up to its persisted index, a candidate counts its own vote only
   * once it is durable, and an append ack, a vote grant and a snapshot ack leave only once what
   * they answer for is durable. */
  readonly awaitStorage?: boolean;
}

export interface SoftState {
  readonly role: Role;
  readonly term: number;
  /** 0: unknown. */
  readonly leader: number;
  readonly commit: number;
}

/** Everything the driver must act on since the last takeReady(); raft/core/ready-handler.ts acts
 * on it, in its order, for the driver and the simulator alike. */
export interface Ready {
  readonly messages: Message[];
  /** A snapshot the application must restore before applying `committed`, which continue from
   * snapshot.index + 1: one installed from the leader (§7), or the restored one after a restart. */
  readonly snapshot: Snapshot | null;
  /** Entries written to this node's log, after any truncation in `truncatedFrom`. */
  readonly appended: LogEntry[];
  /** Lowest index deleted from the log by a conflicting append (§5.3), or null. */
  readonly truncatedFrom: number | null;
  /** Newly committed entries in log order, each handed out once per process lifetime. */
  readonly committed: LogEntry[];
  /** Set when role, term, leader or commit changed. */
  readonly softState: SoftState | null;
  /** Set when term or vote changed. */
  readonly hardState: HardState | null;
}

export type ProposeResult =
  | { readonly ok: true; readonly firstIndex: number; readonly lastIndex: number }
  | { readonly ok: false; readonly error: RaftError; readonly leader: number };

/** A leadership transfer in progress (thesis §3.10). */
interface Transfer {
  readonly to: number;
  /** Leader monotonic ms at which it is aborted. */
  readonly deadline: number;
  /** TimeoutNow went out; the lease is given up for the rest of the term. */
  timeoutNowSent: boolean;
}

/** A message that waits until what it answers for is durable (awaitStorage). */
interface HeldMessage {
  readonly m: Message;
  /** The log must be durable through this index (0: nothing of the log). */
  readonly index: number;
  /** A vote grant: the vote for m.to (this member) must be durable in m.term. */
  readonly vote: boolean;
}

interface RoleHandler {
  readonly role: Role;
  step(m: Message): void;
  tick(): void;
}

/** A Raft node as a pure, synchronous step machine (etcd-io/raft style): tick(), step() and
 * propose() change state and queue output, which the driver fetches with takeReady(). */
export class RaftCore {
  readonly id: number;
  readonly incarnation: string;
  readonly clusterId: string;
  /** Configured node ids, this one included. */
  private readonly nodes: readonly number[];
  /** Digest of `nodes` sent in announcements: bootstrap needs all three equal. */
  private readonly peersDigest: string;
  private readonly membership: Membership;
  private epochNow: Epoch;
  /** The configurations the log holds and the newest one's quorum (docs/design.md "Configuration"). */
  private readonly conf: ConfigTracker;
  /** Monotonic ms this process started; bootstrap counts only announcements from E after it. */
  private readonly startedAt: number;
  private readonly announced = new Map<number, Announced>();
  private announceDue = 0;
  private readonly electionTimeoutMs: number;
  private readonly heartbeatIntervalMs: number;
  private readonly inflightAppendsMax: number;
  private readonly commitNoticeDelayMs: number;
  /** Monotonic ms at which followers not yet told the commit index get an empty append; 0: none due. */
  private commitNoticeDue = 0;
  private readonly entriesPerAppendMax: number;
  private readonly uncommittedEntriesMax: number;
  private readonly appendBytesMax: number;
  private readonly logEntriesMax: number;
  private readonly logBytesMax: number;
  private readonly snapshotChunkBytesMax: number;
  private readonly snapshotChunksInflightMax: number;
  private readonly preVote: boolean;
  private readonly checkQuorum: boolean;
  private readonly random: RandomSource;
  private readonly unsafe: UnsafeRule | null;
  /** E·(1−2ρ) − margin (docs/design.md "Leases and votes"). */
  private readonly leaseDurationMs: number;
  private readonly leaseMarginMs: number;
  private readonly ignoreVotesUntil: number;

  private term = 0;
  /** Candidate voted for in `term`; 0: none. */
  private vote = 0;
  private voteInc = '';
  private leader = 0;
  private readonly log: MemoryLog;
  /** Last index handed out in Ready.committed (or covered by Ready.snapshot). */
  private applied = 0;
  /** Data bytes of the applied entries the log still holds: what compaction would free. */
  private appliedBytes = 0;
  /** The newest snapshot, taken here or installed from the leader (§7); null: never compacted. */
  private snapshot: Snapshot | null = null;
  /** Snapshots sent to followers and received from the leader, chunk by chunk. */
  private readonly snapshots: SnapshotTransfer;
  /** A snapshot for the application to restore, not yet handed out. */
  private readySnapshot: Snapshot | null = null;
  /** Monotonic and wall ms of the latest tick. */
  private now: number;
  private wall = 0;

  private handler: RoleHandler;
  private electionDeadline = 0;
  /** Monotonic ms of the latest append or heartbeat from the current leader. */
  private leaderHeardAt = Number.NEGATIVE_INFINITY;
  /** Votes (or pre-votes) received in the current campaign: voter -> granted. */
  private readonly votes = new Map<number, boolean>();
  /** Per replicated member, keyed `node.inc`: voters of the configuration and learners. */
  private readonly progress = new Map<string, Progress>();
  /** maybeCommit's match indexes, reused. */
  private readonly matchScratch: number[] = [];
  private heartbeatDue = 0;
  private leaderSince = 0;
  /** Monotonic ms at which the lease ends; 0: none. Only a leader holds one. */
  private leaseEnd = 0;
  /** Rounds sent at or before this monotonic ms never renew the lease (term start, a frozen machine). */
  private leaseFloor = 0;
  /** Set when TimeoutNow went out: no lease again in this term. */
  private leaseForfeited = false;
  private transfer: Transfer | null = null;
  /** wall − monotonic at the latest tick; a jump of more than the margin is a frozen machine. */
  private wallAhead: number | null = null;
  private readonly clock: ClusterClock;
  /** Force-start progress (force-start.ts); its phase is null: this process did not force-start. */
  private readonly forceStart: ForceStart;
  /** A newer epoch that serves with two node ids: this member of an older epoch must switch. */
  private switchTo: Epoch | null = null;
  /** This core bootstrapped its epoch (made generation 1 for a fresh cluster). */
  private bootstrappedHere = false;

  private messages: Message[] = [];
  private appended: LogEntry[] = [];
  private truncatedFrom: number | null = null;
  private reportedSoft: SoftState | null = null;
  private reportedHard: HardState | null = null;
  /** awaitStorage: writes are durable only once the storage acknowledges them. */
  private readonly awaitStorage: boolean;
  /** awaitStorage: the log is durable through this index (its entry matched the storage's term). */
  private persistedIndex = 0;
  /** awaitStorage: the newest term and vote the storage made durable. */
  private persistedHard: HardState = { term: 0, vote: 0, voteInc: '' };
  /** awaitStorage: answers waiting for the storage, in the order they were made. */
  private held: HeldMessage[] = [];

  constructor(opts: RaftOptions) {
    checkOptions(opts);
    this.id = opts.id;
    this.incarnation = opts.incarnation ?? '0';
    this.clusterId = opts.clusterId ?? 'raftmq';
    this.nodes = [...(opts.nodes ?? opts.voters ?? [])].sort((a, b) => a - b);
    this.peersDigest = this.nodes.join(',');
    const statics = opts.voters?.map((node) => ({ node, inc: '0' })) ?? null;
    const restoredSnapshot = opts.restore?.snapshot ?? null;
    this.membership = opts.membership ?? (statics !== null || opts.restore !== undefined ? 'member' : 'fresh');
    this.epochNow = opts.epoch ?? (statics !== null ? { generation: 1, id: 'static' } : noEpoch);
    this.startedAt = opts.now;
    this.electionTimeoutMs = opts.electionTimeoutMs;
    this.heartbeatIntervalMs = opts.heartbeatIntervalMs ?? Math.max(1, Math.floor(opts.electionTimeoutMs / 5));
    this.inflightAppendsMax = opts.inflightAppendsMax ?? 8;
    this.commitNoticeDelayMs = opts.commitNoticeDelayMs ?? 0;
    this.entriesPerAppendMax = opts.entriesPerAppendMax ?? entriesPerAppendMaxDefault;
    this.uncommittedEntriesMax = opts.uncommittedEntriesMax ?? 10_000;
    this.appendBytesMax = opts.appendBytesMax ?? 1024 * 1024;
    this.logEntriesMax = opts.logEntriesMax ?? logEntriesMaxDefault;
    this.logBytesMax = opts.logBytesMax ?? logBytesMaxDefault;
    this.snapshotChunkBytesMax = opts.snapshotChunkBytesMax ?? snapshotChunkBytesMaxDefault;
    this.snapshotChunksInflightMax = opts.snapshotChunksInflightMax ?? 4;
    this.preVote = opts.preVote ?? true;
    this.checkQuorum = opts.checkQuorum ?? true;
    this.random = opts.random;
    this.unsafe = opts.unsafe ?? null;
    const e = opts.electionTimeoutMs;
    this.leaseMarginMs = leaseMarginFraction * e;
    this.leaseDurationMs = e * (1 - 2 * clockDriftMax) - this.leaseMarginMs;
    this.ignoreVotesUntil = opts.ignoreVotesUntil ?? Number.NEGATIVE_INFINITY;
    this.clock = new ClusterClock({ electionTimeoutMs: e, maxClockOffsetMs: opts.maxClockOffsetMs ?? 1000 });
    this.now = opts.now;
    this.log = new MemoryLog(opts.restore?.entries, restoredSnapshot, opts.newSlab);
    this.snapshots = new SnapshotTransfer(this.snapshotTransferHost(), this.snapshotChunksInflightMax, this.unsafe === 'install-any-chunk');
    // A restarted node restores the application from its snapshot first, then re-applies the rest.
    this.snapshot = restoredSnapshot;
    this.readySnapshot = restoredSnapshot;
    this.applied = this.log.snapshotIndex;
    this.term = opts.restore?.term ?? 0;
    this.vote = opts.restore?.vote ?? 0;
    this.voteInc = opts.restore?.voteInc ?? (this.vote === 0 ? '' : '0');
    this.awaitStorage = opts.awaitStorage === true;
    // What a node restarts from is what its storage kept.
    this.persistedIndex = this.log.lastIndex();
    this.persistedHard = { term: this.term, vote: this.vote, voteInc: this.voteInc };
    assert(this.log.lastTerm() <= this.term, 'restored log has entries above the restored term');
    this.conf = new ConfigTracker(this.id, this.incarnation, opts.restore?.baseConfig ?? restoredSnapshot?.config ?? statics, this.log);
    this.handler = this.followerHandler();
    this.refreshConfig();
    this.becomeFollower(this.term, 0);
    this.reportedHard = this.hardState();
    const forceTimeoutMs = opts.forceStartTimeoutMs ?? forceStartTimeoutE * this.electionTimeoutMs;
    this.forceStart = new ForceStart(this.forceStartHost(), forceTimeoutMs, opts.forceStartAbove ?? 0);
    if (opts.forceStart === true) this.forceStart.probe(opts.now, forceStartProbeE * this.electionTimeoutMs);
    else if (opts.restore !== undefined && this.nodes.length > 1 && this.conf.config.length === 1 && this.conf.isVoter) {
      this.forceStart.resumeWaiting(opts.now);
    }
  }

  // ---- inputs ----

  tick(monotonic: number, wall: number): void {
    assert(monotonic >= this.now, `monotonic clock went back from ${this.now} to ${monotonic}`);
    this.now = monotonic;
    this.wall = wall;
    this.detectFreeze(wall - monotonic);
    if (this.forceStart.phase !== null && this.forceStart.tick()) return;
    this.handler.tick();
  }

  /** docs/design.md "Leases and votes": a machine frozen with its monotonic clock (a suspended VM) sees
   * its wall clock step ahead on resume. The lease ends, and rounds sent before now never renew
   * it, since their answers may be older than they look. */
  private detectFreeze(wallAhead: number): void {
    const before = this.wallAhead;
    this.wallAhead = wallAhead;
    if (before === null || wallAhead - before <= this.leaseMarginMs) return;
    this.leaseEnd = 0;
    this.leaseFloor = this.now;
  }

  /** Feeds one message from a peer. A malformed or misaddressed message returns its error and
   * changes nothing. */
  step(m: Message): RaftError | null {
    const ctx = {
      self: this.id,
      nodes: this.nodes,
      entriesPerAppendMax: this.entriesPerAppendMax,
      snapshotChunkBytesMax: this.snapshotChunkBytesMax,
    };
    const error = validateMessage(m, ctx);
    if (error !== null) return error;
    if (m.type === 'announce' && this.otherEpochAnnounce(m)) return null;
    if (this.forceStart.takes(m)) {
      this.forceStart.hear(m);
      return null;
    }
    const foreign = this.refuseForIdentity(m);
    if (foreign !== null) return foreign;
    if (m.type === 'announce') {
      this.handleAnnounce(m);
      this.checkInvariants();
      return null;
    }
    this.joinEpoch(m);
    this.forgetStaleAnnounce(m);
    const refused = this.refuseForState(m);
    if (refused !== null) return refused;
    if (!this.stepTerm(m)) return null;
    if (isVoteRequest(m)) this.handleVoteRequest(m);
    else this.handler.step(m);
    this.checkInvariants();
    return null;
  }

  /** docs/design.md "Identity": a message from another cluster or epoch, or meant for another
   * incarnation of this node id, changes nothing. A node without an epoch (fresh or amnesiac)
   * takes any epoch of its cluster. */
  private refuseForIdentity(m: Message): RaftError | null {
    if (m.cluster !== this.clusterId) return new RaftError('RAFT_FOREIGN_MESSAGE', `cluster ${JSON.stringify(m.cluster)}`);
    if (m.toInc !== '' && m.toInc !== this.incarnation) {
      return new RaftError('RAFT_OTHER_MEMBER', `${m.type} from ${m.from} for incarnation ${m.toInc} of node ${this.id}`);
    }
    const mine = this.epochNow;
    if (mine.generation === 0 || (m.epoch === mine.generation && m.epochId === mine.id)) return null;
    if (m.type === 'announce' && m.epoch === 0) return null;
    return new RaftError('RAFT_FOREIGN_MESSAGE', `${m.type} from ${m.from} of epoch ${m.epoch}/${m.epochId}`);
  }

  /** One process per node id runs at a time (docs/design.md "Links": port and PID lock), so a raft
   * message from one incarnation shows that an announcement heard earlier from another is stale.
   * Kept, it would make a leader that missed the newer member's announcements take that member
   * for replaced and remove it. */
  private forgetStaleAnnounce(m: Message): void {
    const a = this.announced.get(m.from);
    if (a !== undefined && a.inc !== m.fromInc) this.announced.delete(m.from);
  }

  /** A node without an epoch joins the epoch of the first raft message it takes. */
  private joinEpoch(m: Message): void {
    if (this.epochNow.generation !== 0 || m.epoch === 0) return;
    this.epochNow = { generation: m.epoch, id: m.epochId };
  }

  /** Checks of a valid message against this node's state: what the peer claims must be possible. */
  private refuseForState(m: Message): RaftError | null {
    if (m.term !== this.term) return null;
    // Only a leader counts acks, and one never loses its own entries in its term. A node that lost
    // power may come back in the term it led with a shorter log (its unsynced tail is gone); acks
    // for that tail still in flight mean nothing to it, and a node that does not lead ignores acks.
    const leads = this.handler.role === 'leader';
    if (leads && m.type === 'append-response' && m.index > this.log.lastIndex() && m.success) {
      return new RaftError('RAFT_BAD_MESSAGE', `ack of index ${m.index} beyond last ${this.log.lastIndex()}`);
    }
    if (leads && m.type === 'snapshot-response' && m.match > this.log.lastIndex()) {
      return new RaftError('RAFT_BAD_MESSAGE', `snapshot ack of index ${m.match} beyond last ${this.log.lastIndex()}`);
    }
    const echoes =
      m.type === 'append-response' || m.type === 'heartbeat-response' || m.type === 'vote-response' || m.type === 'snapshot-response';
    if (echoes && m.sentAt > this.now) {
      return new RaftError('RAFT_BAD_MESSAGE', `${m.type} echoes send time ${m.sentAt}, after now ${this.now}`);
    }
    const first = m.type === 'append' ? m.entries[0] : undefined;
    if (m.type === 'append' && first !== undefined && this.log.matches(m.prevIndex, m.prevTerm)) {
      const before = this.log.timeAt(m.prevIndex);
      if (first.time < before) return new RaftError('RAFT_BAD_MESSAGE', `entry ${first.index} time ${first.time} below ${before}`);
    }
    return null;
  }

  /** Appends one entry per item and sends them as one round of appends (docs/design.md "Batch":
   * the proposals of one turn travel together). */
  propose(data: readonly Uint8Array[]): ProposeResult {
    if (this.handler.role !== 'leader') {
      return { ok: false, error: new RaftError('RAFT_NOT_LEADER', `node ${this.id} is ${this.handler.role}`), leader: this.leader };
    }
    if (this.forceStart.phase === 'waiting') {
      return { ok: false, error: new RaftError('RAFT_NOT_SERVING', `epoch ${this.epochNow.generation} has one voter`), leader: this.id };
    }
    if (this.transfer !== null) {
      return { ok: false, error: new RaftError('RAFT_TRANSFERRING', `to node ${this.transfer.to}`), leader: this.id };
    }
    const uncommitted = this.log.lastIndex() - this.log.commit;
    if (uncommitted + data.length > this.uncommittedEntriesMax) {
      const detail = `${uncommitted} uncommitted + ${data.length} > ${this.uncommittedEntriesMax}`;
      return { ok: false, error: new RaftError('RAFT_PROPOSALS_FULL', detail), leader: this.id };
    }
    const firstIndex = this.log.lastIndex() + 1;
    const time = this.stampTime();
    this.appendOwn(data.map((d, k) => ({ index: firstIndex + k, term: this.term, time, data: d })));
    this.broadcastAppend();
    this.maybeCommit();
    return { ok: true, firstIndex, lastIndex: this.log.lastIndex() };
  }

  /** Starts an election now, as an election timeout would (with pre-vote when enabled). */
  campaign(): void {
    // docs/design.md "Configuration": a learner never campaigns.
    if (this.handler.role === 'leader' || !this.conf.isVoter) return;
    if (this.preVote) this.becomePreCandidate();
    else this.becomeCandidate(false);
  }

  /** Hands leadership to `to` (thesis §3.10): proposals stop, `to` is brought up to date, then the
   * lease is given up and TimeoutNow sent. Aborted after transferTimeoutE·E. */
  transferLeadership(to: number): RaftError | null {
    if (this.handler.role !== 'leader') return new RaftError('RAFT_NOT_LEADER', `node ${this.id} is ${this.handler.role}`);
    const pr = to === this.id ? undefined : this.voterProgress(to);
    if (pr === undefined) return new RaftError('RAFT_BAD_TRANSFER', `node ${to} is not another voter`);
    if (this.transfer !== null) return new RaftError('RAFT_BAD_TRANSFER', `already transferring to ${this.transfer.to}`);
    this.transfer = { to, deadline: this.now + transferTimeoutE * this.electionTimeoutMs, timeoutNowSent: false };
    if (pr.match === this.log.lastIndex()) this.sendTimeoutNow();
    else this.sendAppend(pr, true);
    return null;
  }

  // ---- leases (docs/design.md "Leases and votes") ----

  /** True while this node leads and holds a lease at monotonic ms `monotonic`. */
  hasLease(monotonic: number): boolean {
    return this.handler.role === 'leader' && monotonic < this.leaseEnd && this.forceStart.phase !== 'waiting';
  }

  /** Monotonic ms at which the lease ends; 0 if there is none. */
  leaseUntil(): number {
    return this.handler.role === 'leader' && this.forceStart.phase !== 'waiting' ? this.leaseEnd : 0;
  }

  /** Cluster ms (whole) at monotonic `monotonic`: on the leader, its steered clock (never below the log's
   * last time); elsewhere, the time of the last entry in the log. */
  clusterTime(monotonic: number): number {
    if (this.handler.role !== 'leader') return this.log.lastTime();
    return Math.max(this.log.lastTime(), Math.floor(this.clock.read(monotonic)));
  }

  /** True on a leader whose cluster time follows two agreeing clocks; false before its one jump
   * forward (no target yet this term) and on every other role. Serving waits for it, so the jump
   * happens before a serving period starts and apply never sees time leap mid-period. */
  clusterTimeReady(): boolean {
    return this.handler.role === 'leader' && this.clock.followsClocks;
  }

  /** Voters whose wall clock the leader excluded at its latest estimate (empty unless leading). */
  excludedClocks(): number[] {
    return this.handler.role === 'leader' ? this.clock.excludedClocks() : [];
  }

  /** Leader only: each voter clock's distance from the median (ms; ClusterClock.offsets). */
  clockOffsets(): Map<number, number> {
    return this.handler.role === 'leader' ? this.clock.offsets(this.now) : new Map();
  }

  // ---- storage acknowledgements (docs/raft.md "Persistence") ----

  /** The storage made the log durable through `index`, whose entry has `term` (the snapshot's
   * index and term when that is the last thing written). A report that no longer matches the log
   * (it was truncated or replaced since) changes nothing. Without awaitStorage, a no-op. */
  persisted(index: number, term: number): void {
    if (!this.awaitStorage || index <= this.persistedIndex || index > this.log.lastIndex()) return;
    if (this.log.termAt(index) !== term) return;
    this.persistedIndex = index;
    this.afterPersist();
  }

  /** The storage made this term and vote durable. Without awaitStorage, a no-op. */
  persistedHardState(h: HardState): void {
    if (!this.awaitStorage || h.term < this.persistedHard.term || h.term > this.term) return;
    this.persistedHard = { term: h.term, vote: h.vote, voteInc: h.voteInc };
    // §5.2: a candidate counts its own vote only once a restart cannot forget it.
    if (this.handler.role === 'candidate' && !this.votes.has(this.id) && this.ownVoteDurable()) {
      this.votes.set(this.id, true);
      this.tallyVotes();
    }
    this.afterPersist();
  }

  /** Highest index this node counts itself for toward a commit. */
  get durableIndex(): number {
    return this.awaitStorage ? Math.min(this.persistedIndex, this.log.lastIndex()) : this.log.lastIndex();
  }

  /** Answers held for the storage (awaitStorage), not yet sent. */
  get heldMessages(): number {
    return this.held.length;
  }

  private ownVoteDurable(): boolean {
    const h = this.persistedHard;
    return !this.awaitStorage || (h.term === this.term && h.vote === this.id && h.voteInc === this.incarnation);
  }

  private afterPersist(): void {
    this.releaseHeld();
    if (this.handler.role === 'leader' && this.maybeCommit()) this.commitMoved();
    this.checkInvariants();
  }

  /** Sends each held answer whose subject is now durable; drops those of an earlier term, which
   * answer for a log or a vote this node may no longer hold. */
  private releaseHeld(): void {
    if (this.held.length === 0) return;
    const keep: HeldMessage[] = [];
    for (const x of this.held) {
      if (x.m.term !== this.term) continue;
      if (this.durableFor(x)) this.messages.push(x.m);
      else keep.push(x);
    }
    this.held = keep;
  }

  /** The term (and for a grant, the vote) and the log through x.index are durable. */
  private durableFor(x: HeldMessage): boolean {
    const h = this.persistedHard;
    const hardOk = h.term === x.m.term && (!x.vote || (h.vote === x.m.to && h.voteInc === x.m.toInc));
    return hardOk && this.persistedIndex >= x.index;
  }

  /** What a message answers for that must be durable before it leaves: the acknowledged log for
   * an append or snapshot ack, the vote for a grant; null: nothing, it leaves at once. */
  private holdFor(m: Message): HeldMessage | null {
    if (m.type === 'append-response' && m.success) return { m, index: m.index, vote: false };
    if (m.type === 'snapshot-response' && m.match > 0) return { m, index: m.match, vote: false };
    if (m.type === 'vote-response' && m.granted) return { m, index: 0, vote: true };
    return null;
  }

  // ---- output ----

  hasReady(): boolean {
    return (
      this.messages.length > 0 ||
      this.readySnapshot !== null ||
      this.appended.length > 0 ||
      this.applied < this.log.commit ||
      this.truncatedFrom !== null ||
      this.softChanged() ||
      this.hardChanged()
    );
  }

  takeReady(): Ready {
    const soft = this.softChanged() ? this.softState() : null;
    const hard = this.hardChanged() ? this.hardState() : null;
    const committed = this.applied < this.log.commit ? this.log.slice(this.applied + 1, this.log.commit + 1) : [];
    for (const e of committed) this.appliedBytes += e.data?.length ?? 0;
    const ready: Ready = {
      messages: this.messages,
      snapshot: this.readySnapshot,
      appended: this.appended,
      truncatedFrom: this.truncatedFrom,
      committed,
      softState: soft,
      hardState: hard,
    };
    this.messages = [];
    this.readySnapshot = null;
    this.appended = [];
    this.truncatedFrom = null;
    this.applied = this.log.commit;
    if (soft !== null) this.reportedSoft = soft;
    if (hard !== null) this.reportedHard = hard;
    return ready;
  }

  // ---- reading state (tests, simulator, driver) ----

  hardState(): HardState {
    return { term: this.term, vote: this.vote, voteInc: this.voteInc };
  }

  /** This process's member. */
  get member(): Member {
    return { node: this.id, inc: this.incarnation };
  }

  get epoch(): Epoch {
    return this.epochNow;
  }

  /** The newest configuration in the log (empty: none yet). */
  get configuration(): Configuration {
    return this.conf.config;
  }

  get voter(): boolean {
    return this.conf.isVoter;
  }

  get membershipAtStart(): Membership {
    return this.membership;
  }

  /** Null unless this process force-started. */
  get forceStartPhase(): ForceStartPhase | null {
    return this.forceStart.phase;
  }

  /** Why the force-start failed (refused by a peer, or timed out); null otherwise. */
  forceStartFailure(): string | null {
    return this.forceStart.failure;
  }

  /** A newer epoch serves with two node ids and this node is a member of an older one: the driver
   * must replace this core by an amnesiac one of that epoch (docs/design.md "Force-start": a live
   * member of the old epoch switches only then). */
  epochToJoin(): Epoch | null {
    return this.switchTo;
  }

  /** True once this core made its epoch by bootstrap: the cluster is new, and the driver makes its
   * identity (docs/design.md "Identity"). */
  get bootstrapped(): boolean {
    return this.bootstrappedHere;
  }

  /** Leader only: every configured node id is a voter with its current incarnation, and each
   * holds the whole log (docs/operations.md "Health": `redundant`). */
  isRedundant(): boolean {
    if (this.handler.role !== 'leader' || this.conf.config.length !== this.nodes.length) return false;
    if (this.log.termAt(this.log.commit) !== this.term || this.conf.pending(this.log.commit)) return false;
    for (const m of this.conf.config) {
      if (m.node === this.id) continue;
      const pr = this.progress.get(progressKey(m.node, m.inc));
      if (pr === undefined || pr.match < this.log.commit) return false;
      const heard = this.announced.get(m.node);
      if (heard !== undefined && heard.inc !== m.inc && heard.at > pr.lastHeardAt) return false;
    }
    return true;
  }

  /** docs/design.md "Beyond the model": no configuration this node knows can elect a leader again,
   * because too many of its members forgot (their node ids answer as other incarnations), or all
   * three nodes are amnesiac, or a peer that knows more said so. */
  needsForceStart(): boolean {
    if (this.now - this.leaderHeardAt < this.electionTimeoutMs || this.handler.role === 'leader') return false;
    if (this.conf.isVoter) return this.liveVoters() < this.conf.quorum;
    const fresh = (a: Announced | undefined) => a !== undefined && a.membership === 'fresh';
    let nonVoters = 1;
    let allFresh = this.membership === 'fresh';
    for (const n of this.nodes) {
      if (n === this.id) continue;
      const a = this.recentAnnounce(n);
      if (a?.stuck === true) return true;
      if (a !== undefined && !a.voter) nonVoters++;
      allFresh &&= fresh(a);
    }
    return nonVoters === this.nodes.length && !allFresh;
  }

  /** Voters of the configuration that may still vote: this node, and each member whose node id has
   * not come back as another incarnation. */
  private liveVoters(): number {
    let live = 0;
    for (const m of this.conf.config) {
      const a = this.announced.get(m.node);
      if (m.node === this.id || a === undefined || a.inc === m.inc) live++;
    }
    return live;
  }

  private recentAnnounce(node: number): Announced | undefined {
    const a = this.announced.get(node);
    return a !== undefined && this.now - a.at < announceStaleE * this.electionTimeoutMs ? a : undefined;
  }

  softState(): SoftState {
    return { role: this.handler.role, term: this.term, leader: this.leader, commit: this.log.commit };
  }

  durableState(): DurableState {
    // Entries the newest snapshot covers are not durable state: a restart begins at the snapshot.
    const after = this.snapshotIndex;
    const held = after > this.log.snapshotIndex;
    const log = held ? this.log.slice(after + 1, this.log.lastIndex() + 1) : this.log.all();
    const baseConfig = held ? this.conf.at(after, this.log) : this.conf.base;
    return { term: this.term, vote: this.vote, voteInc: this.voteInc, entries: log, baseConfig, snapshot: this.snapshot };
  }

  get role(): Role {
    return this.handler.role;
  }

  get currentTerm(): number {
    return this.term;
  }

  get lastIndex(): number {
    return this.log.lastIndex();
  }

  get commitIndex(): number {
    return this.log.commit;
  }

  get lastWall(): number {
    return this.wall;
  }

  /** The entries held, from firstIndex. */
  entries(): readonly LogEntry[] {
    return this.log.all();
  }

  /** Index of the first entry held (1 if the log was never compacted). */
  get firstIndex(): number {
    return this.log.snapshotIndex + 1;
  }

  /** Term of the entry at `index`, or at the index the log was compacted to; undefined elsewhere. */
  termAt(index: number): number | undefined {
    return this.log.termAt(index);
  }

  timeAt(index: number): number {
    return this.log.timeAt(index);
  }

  /** The newest snapshot (§7), null if the log was never compacted. */
  get latestSnapshot(): Snapshot | null {
    return this.snapshot;
  }

  /** Last index handed to the application (in Ready.committed or Ready.snapshot). */
  get appliedIndex(): number {
    return this.applied;
  }

  /** Data bytes of the entries held. */
  get logBytes(): number {
    return this.log.bytes;
  }

  /** The leader's progress for `peer`: its voter member, else a learner of that node id. */
  progressOf(peer: number): Progress | undefined {
    let learner: Progress | undefined;
    for (const pr of this.progress.values()) {
      if (pr.node !== peer) continue;
      if (pr.voter) return pr;
      learner = pr;
    }
    return learner;
  }

  private voterProgress(node: number): Progress | undefined {
    const m = memberOf(this.conf.config, node);
    return m === undefined ? undefined : this.progress.get(progressKey(m.node, m.inc));
  }

  // ---- terms (§5.1) and votes (§5.2, §5.4.1, thesis §9.6) ----

  /** Applies the term rules common to every role; false: drop the message. */
  private stepTerm(m: Message): boolean {
    if (isVoteRequest(m) && this.ignoresVoteRequest(m)) return false;
    if (m.term > this.term) {
      const keepsTerm = m.type === 'pre-vote-request' || (m.type === 'pre-vote-response' && m.granted);
      const fromLeader = m.type === 'append' || m.type === 'heartbeat' || m.type === 'snapshot';
      if (!keepsTerm) this.becomeFollower(m.term, fromLeader ? m.from : 0);
      return true;
    }
    if (m.term < this.term) {
      this.answerStale(m);
      return false;
    }
    return true;
  }

  /** The vote-ignoring rule of docs/design.md "Leases and votes": within E of hearing from a leader,
   * while leading with a lease, and before `ignoreVotesUntil` (2E after resuming a state file). A
   * node that answered a leader's round thus votes for nobody until that leader's lease, measured
   * from the round's send time and shorter by the drift bound and a margin, is over: elections wait
   * out leases. Only the target of a transfer overrides it; its old leader gave up the lease. */
  private ignoresVoteRequest(m: PreVoteRequest | VoteRequest): boolean {
    if (m.type === 'vote-request' && m.transfer) return false;
    if (this.unsafe === 'answer-every-vote') return false;
    if (this.now < this.ignoreVotesUntil) return true;
    if (this.handler.role === 'leader') return this.hasLease(this.now);
    return this.now - this.leaderHeardAt < this.electionTimeoutMs;
  }

  /** A lower-term pre-vote gets a refusal carrying our term, so a pre-candidate catches up. A
   * lower-term append or heartbeat gets a response with our term, so a stale leader steps down:
   * without it a node whose term rose while cut off (a restart mid-campaign) would ignore the
   * leader forever and never be able to win against it either (pre-vote and check-quorum). */
  private answerStale(m: Message): void {
    if (m.type === 'pre-vote-request') {
      this.send({ type: 'pre-vote-response', from: this.id, to: m.from, term: this.term, granted: false }, m.fromInc);
    } else if (m.type === 'append' || m.type === 'heartbeat' || m.type === 'snapshot') {
      const stale: Outgoing = {
        type: 'append-response',
        from: this.id,
        to: m.from,
        term: this.term,
        success: false,
        index: 0,
        hint: 0,
        sentAt: 0,
      };
      this.send(stale, m.fromInc);
    }
  }

  private handleVoteRequest(m: PreVoteRequest | VoteRequest): void {
    const pre = m.type === 'pre-vote-request';
    // One vote per term per member (§5.2, docs/design.md "Identity"); a learner answers as itself.
    const votedFor = this.vote === m.from && this.voteInc === m.fromInc;
    const canVote = this.unsafe === 'grant-every-vote' || votedFor || (this.vote === 0 && this.leader === 0) || (pre && m.term > this.term);
    const granted = canVote && this.log.isUpToDate(m.lastIndex, m.lastTerm);
    const term = granted ? m.term : this.term;
    if (pre) {
      this.send({ type: 'pre-vote-response', from: this.id, to: m.from, term, granted }, m.fromInc);
      return;
    }
    if (granted) {
      assert(m.term === this.term, 'vote granted in a term other than ours');
      // The 'grant-every-vote' mutation keeps its first vote, so only the checker can see the harm.
      if (this.vote === 0 || this.unsafe !== 'grant-every-vote') {
        this.vote = m.from;
        this.voteInc = m.fromInc;
      }
      this.resetElectionTimer();
    }
    this.send({ type: 'vote-response', from: this.id, to: m.from, term, granted, sentAt: m.sentAt, wall: this.wall }, m.fromInc);
  }

  // ---- roles: one becomeX per role swaps the handler ----

  private becomeFollower(term: number, leader: number): void {
    assert(term >= this.term, `term would go back from ${this.term} to ${term}`);
    if (term > this.term) {
      this.term = term;
      this.vote = 0;
      this.voteInc = '';
    }
    this.leader = leader;
    if (leader !== 0) this.leaderHeardAt = this.now;
    this.progress.clear();
    this.votes.clear();
    this.leaseEnd = 0;
    this.transfer = null;
    this.handler = this.followerHandler();
    this.resetElectionTimer();
  }

  private becomePreCandidate(): void {
    this.leader = 0;
    this.handler = this.preCandidateHandler();
    this.resetElectionTimer();
    this.startPoll('pre-vote-request', this.term + 1, false);
  }

  /** `transfer`: campaigning on TimeoutNow, so the vote requests override the vote-ignoring rule. */
  private becomeCandidate(transfer: boolean): void {
    this.term += 1;
    this.vote = this.id;
    this.voteInc = this.incarnation;
    this.leader = 0;
    this.handler = this.candidateHandler();
    this.resetElectionTimer();
    this.clock.reset();
    this.startPoll('vote-request', this.term, transfer);
  }

  private becomeLeader(): void {
    assert(this.vote === this.id && this.voteInc === this.incarnation, 'leader without its own vote');
    this.leader = this.id;
    this.handler = this.leaderHandler();
    this.leaderSince = this.now;
    this.heartbeatDue = this.now + this.heartbeatIntervalMs;
    this.commitNoticeDue = 0;
    this.progress.clear();
    this.syncProgress();
    this.leaseEnd = 0;
    this.leaseFloor = this.now;
    this.leaseForfeited = false;
    this.transfer = null;
    // docs/design.md "Cluster time": the one jump forward is at the start of a term, to the target the
    // vote answers' clocks give.
    this.clock.sampleSelf(this.id, this.wall, this.now);
    this.clock.start(this.now, this.log.lastTime());
    // §5.4.2 and §8: an entry of the new term lets earlier entries commit, and tells the leader
    // its commit index.
    this.appendOwn([{ index: this.log.lastIndex() + 1, term: this.term, time: this.stampTime(), data: null }]);
    this.broadcastAppend();
    this.maybeCommit();
  }

  private startPoll(type: 'pre-vote-request' | 'vote-request', term: number, transfer: boolean): void {
    this.votes.clear();
    // A vote of this term counts for itself once durable (at once without awaitStorage).
    if (type === 'pre-vote-request' || this.ownVoteDurable()) this.votes.set(this.id, true);
    const lastIndex = this.log.lastIndex();
    const lastTerm = this.log.lastTerm();
    for (const m of this.conf.config) {
      const to = m.node;
      if (to === this.id) continue;
      if (type === 'pre-vote-request') this.send({ type, from: this.id, to, term, lastIndex, lastTerm }, m.inc);
      else this.send({ type, from: this.id, to, term, lastIndex, lastTerm, transfer, sentAt: this.now }, m.inc);
    }
    this.tallyVotes();
  }

  /** Counts the poll; wins or gives up once the outcome is certain. */
  private tallyVotes(): void {
    let granted = 0;
    let rejected = 0;
    for (const g of this.votes.values()) g ? granted++ : rejected++;
    if (granted >= this.conf.quorum) {
      if (this.handler.role === 'pre-candidate') this.becomeCandidate(false);
      else this.becomeLeader();
    } else if (rejected >= this.conf.quorum) {
      this.becomeFollower(this.term, 0);
    }
  }

  private followerHandler(): RoleHandler {
    return {
      role: 'follower',
      tick: () => this.tickElection(),
      step: (m) => this.stepFollower(m),
    };
  }

  private preCandidateHandler(): RoleHandler {
    return {
      role: 'pre-candidate',
      tick: () => this.tickElection(),
      step: (m) => this.stepCampaigner(m),
    };
  }

  private candidateHandler(): RoleHandler {
    return {
      role: 'candidate',
      tick: () => this.tickElection(),
      step: (m) => this.stepCampaigner(m),
    };
  }

  private leaderHandler(): RoleHandler {
    return {
      role: 'leader',
      tick: () => this.tickLeader(),
      step: (m) => this.stepLeader(m),
    };
  }

  // ---- follower and candidates ----

  private tickElection(): void {
    this.maybeAnnounce();
    if (this.now < this.electionDeadline) return;
    if (this.conf.isVoter) this.campaign();
    else this.resetElectionTimer();
  }

  /** §5.2: a random timeout in [E, 2E) makes split votes rare. */
  private resetElectionTimer(): void {
    this.electionDeadline = this.now + this.electionTimeoutMs + this.random.int(this.electionTimeoutMs);
  }

  private stepFollower(m: Message): void {
    switch (m.type) {
      case 'append':
        this.handleAppend(m);
        return;
      case 'heartbeat':
        this.handleHeartbeat(m);
        return;
      case 'snapshot':
        this.snapshots.receive(m);
        return;
      case 'timeout-now':
        // Thesis §3.10: campaign at once, without pre-vote, which the others would ignore.
        if (m.from === this.leader) this.becomeCandidate(true);
        return;
      case 'pre-vote-request':
      case 'vote-request':
      case 'pre-vote-response':
      case 'vote-response':
      case 'append-response':
      case 'heartbeat-response':
      case 'snapshot-response':
      case 'announce':
        return; // stale answers to an earlier role of ours
      default:
        unreachable(m, 'follower message');
    }
  }

  /** Pre-candidate and candidate: count answers; an append or heartbeat of our term means another
   * node won it (§5.2), so follow it. */
  private stepCampaigner(m: Message): void {
    switch (m.type) {
      case 'append':
      case 'heartbeat':
      case 'snapshot':
        this.becomeFollower(this.term, m.from);
        this.stepFollower(m);
        return;
      case 'pre-vote-response':
        if (this.handler.role === 'pre-candidate') this.countVote(m, this.term + 1);
        return;
      case 'vote-response':
        if (this.handler.role !== 'candidate') return;
        if (m.term === this.term && hasMember(this.conf.config, m.from, m.fromInc)) this.clock.sample(m.from, m.wall, m.sentAt, this.now);
        this.countVote(m, this.term);
        return;
      case 'pre-vote-request':
      case 'vote-request':
      case 'append-response':
      case 'heartbeat-response':
      case 'snapshot-response':
      case 'timeout-now':
      case 'announce':
        return;
      default:
        unreachable(m, 'candidate message');
    }
  }

  /** A grant counts only for the poll's own term; a refusal carries the responder's term, which
   * stepTerm has already shown is not above ours. */
  private countVote(m: PreVoteResponse | VoteResponse, pollTerm: number): void {
    if (m.granted ? m.term !== pollTerm : m.term !== this.term) return;
    // docs/design.md "Identity": a vote counts only for a member the configuration lists as a voter.
    if (!hasMember(this.conf.config, m.from, m.fromInc)) return;
    this.votes.set(m.from, m.granted);
    this.tallyVotes();
  }

  private handleAppend(m: Append): void {
    this.heardFromLeader(m.from);
    if (m.prevIndex < this.log.commit) {
      // Everything up to our commit index is in the leader's log (§5.4 Leader Completeness).
      this.replyAppend(m, true, this.log.commit, 0);
      return;
    }
    const outcome = this.log.tryAppend(m.prevIndex, m.prevTerm, m.entries);
    if (!outcome.ok) {
      this.replyAppend(m, false, m.prevIndex, outcome.hint);
      return;
    }
    if (outcome.truncatedFrom !== null) this.noteTruncation(outcome.truncatedFrom);
    this.appended.push(...outcome.written);
    this.noteConfigEntries(outcome.written, outcome.truncatedFrom);
    this.log.commitTo(Math.min(m.commit, outcome.lastNew));
    this.replyAppend(m, true, outcome.lastNew, 0);
  }

  private handleHeartbeat(m: Heartbeat): void {
    this.heardFromLeader(m.from);
    this.log.commitTo(Math.min(m.commit, this.log.lastIndex()));
    this.send({ type: 'heartbeat-response', from: this.id, to: m.from, term: this.term, sentAt: m.sentAt, wall: this.wall }, m.fromInc);
  }

  private heardFromLeader(from: number): void {
    assert(this.leader === 0 || this.leader === from, `two leaders in term ${this.term}: ${this.leader} and ${from}`);
    this.leader = from;
    this.leaderHeardAt = this.now;
    this.resetElectionTimer();
  }

  private replyAppend(m: Append, success: boolean, index: number, hint: number): void {
    this.send({ type: 'append-response', from: this.id, to: m.from, term: this.term, success, index, hint, sentAt: m.sentAt }, m.fromInc);
  }

  private noteTruncation(from: number): void {
    if (this.persistedIndex >= from) this.persistedIndex = from - 1;
    this.truncatedFrom = this.truncatedFrom === null ? from : Math.min(this.truncatedFrom, from);
    this.appended = this.appended.filter((e) => e.index < from);
  }

  // ---- leader ----

  private tickLeader(): void {
    if (this.checkQuorum && this.now - this.leaderSince >= this.electionTimeoutMs && !this.quorumActive()) {
      this.becomeFollower(this.term, 0);
      return;
    }
    if (this.transfer !== null && this.now >= this.transfer.deadline) {
      this.abortTransfer();
      if (this.handler.role !== 'leader') return;
    }
    this.clock.sampleSelf(this.id, this.wall, this.now);
    this.clock.steer(this.now);
    if (this.now >= this.heartbeatDue) {
      this.heartbeatDue = this.now + this.heartbeatIntervalMs;
      for (const pr of this.progress.values()) this.sendHeartbeat(pr);
      this.announceAsLeader();
    }
    if (this.commitNoticeDue !== 0 && this.now >= this.commitNoticeDue) this.sendCommitNotices();
    this.maybeChangeConfig();
  }

  /** An empty append to each follower that holds entries the commit index passed and has not been
   * told it (a paused one learns it from its next append or heartbeat). */
  private sendCommitNotices(): void {
    this.commitNoticeDue = 0;
    for (const pr of this.progress.values()) {
      if (pr.state === 'replicate' && pr.commitSent < Math.min(pr.match, this.log.commit)) this.sendAppend(pr, true);
    }
  }

  /** Check-quorum: a majority (this node included) was heard from within the last E. */
  private quorumActive(): boolean {
    let active = this.conf.isVoter ? 1 : 0;
    for (const pr of this.progress.values()) {
      if (pr.voter && this.now - pr.lastHeardAt < this.electionTimeoutMs) active++;
    }
    return active >= this.conf.quorum;
  }

  private stepLeader(m: Message): void {
    // An answer from a member we do not replicate to (a replaced incarnation) counts for nothing.
    const pr = this.progress.get(progressKey(m.from, m.fromInc));
    switch (m.type) {
      case 'append-response':
        if (pr === undefined) return;
        pr.lastHeardAt = this.now;
        this.roundAnswered(pr, m.sentAt);
        this.handleAppendResponse(m, pr);
        this.maybeSendTimeoutNow(m.from, pr);
        return;
      case 'heartbeat-response':
        if (pr === undefined) return;
        pr.lastHeardAt = this.now;
        this.roundAnswered(pr, m.sentAt);
        if (pr.voter) this.clock.sample(m.from, m.wall, m.sentAt, this.now);
        this.heartbeatAnswered(pr);
        return;
      case 'snapshot-response':
        if (pr === undefined) return;
        pr.lastHeardAt = this.now;
        this.roundAnswered(pr, m.sentAt);
        this.handleSnapshotResponse(m, pr);
        this.maybeSendTimeoutNow(m.from, pr);
        return;
      case 'append':
      case 'heartbeat':
      case 'snapshot':
        // Same term, another leader: impossible with one vote per node per term (§5.2).
        assert(false, `leader ${this.id} got ${m.type} from ${m.from} in its own term ${this.term}`);
        return;
      case 'pre-vote-request':
      case 'vote-request':
      case 'pre-vote-response':
      case 'vote-response':
      case 'timeout-now':
      case 'announce':
        return;
      default:
        unreachable(m, 'leader message');
    }
  }

  private heartbeatAnswered(pr: Progress): void {
    pr.heartbeatAnswered(this.inflightAppendsMax);
    if (pr.match < this.log.lastIndex()) this.sendAppend(pr, true);
    this.maybeSendTimeoutNow(pr.node, pr);
  }

  /** A follower answered the round sent at `sentAt` in this term, so it ignores votes for E from
   * when it got it. The lease runs from the newest round a majority (this node included, at once)
   * answered, for E·(1−2ρ) − margin: even with both clocks off by ρ, it ends before any of that
   * majority will vote again (docs/design.md "Leases and votes"). */
  private roundAnswered(pr: Progress, sentAt: number): void {
    if (sentAt <= pr.ackedSentAt) return;
    pr.ackedSentAt = sentAt;
    if (this.leaseForfeited || !pr.voter) return;
    const sent = this.conf.isVoter ? [this.now] : [];
    for (const p of this.progress.values()) if (p.voter) sent.push(p.ackedSentAt);
    sent.sort((a, b) => b - a);
    const round = sent[this.conf.quorum - 1] ?? Number.NEGATIVE_INFINITY;
    // Strictly after: a round sent just before a freeze carries the same monotonic time as the
    // moment it was detected, since the monotonic clock stood still in between.
    if (round <= this.leaseFloor) return;
    this.leaseEnd = Math.max(this.leaseEnd, round + this.leaseDurationMs);
  }

  // ---- configuration (docs/design.md "Configuration", docs/design.md "Replacing a node that forgot") ----

  /** A node uses the newest configuration in its log, committed or not (confchange.ts): note
   * configuration entries just written, after any truncation that removed some. */
  private noteConfigEntries(written: readonly LogEntry[], truncatedFrom: number | null): void {
    if (this.conf.noteEntries(written, truncatedFrom)) this.refreshConfig();
  }

  private refreshConfig(): void {
    this.conf.refresh(this.log);
    if (this.handler.role === 'leader') {
      if (!this.conf.isVoter) this.becomeFollower(this.term, 0);
      else this.syncProgress();
    } else if (!this.conf.isVoter && this.handler.role !== 'follower') {
      this.becomeFollower(this.term, 0);
    }
  }

  private syncProgress(): void {
    syncProgress(this.progress, this.id, this.conf.config, this.announced, this.epochNow, this.log.lastIndex() + 1, this.now);
  }

  /** Only after an entry of this term committed, with no other change pending and no transfer. */
  private maybeChangeConfig(): void {
    if (this.transfer !== null || this.log.termAt(this.log.commit) !== this.term) return;
    if (this.conf.pending(this.log.commit)) return;
    const config = nextConfig({
      self: this.id,
      config: this.conf.config,
      nodes: this.nodes.length,
      announced: this.announced,
      progress: this.progress,
      lastIndex: this.log.lastIndex(),
      now: this.now,
      electionTimeoutMs: this.electionTimeoutMs,
      swapMember: this.unsafe === 'swap-member',
    });
    if (config !== null) this.proposeConfig(config);
  }

  private proposeConfig(config: Configuration): void {
    const index = this.log.lastIndex() + 1;
    this.appendOwn([{ index, term: this.term, time: this.stampTime(), data: null, config }]);
    this.broadcastAppend();
    this.maybeCommit();
  }

  // ---- announcements and bootstrap (docs/design.md "Fresh, amnesiac, bootstrap") ----

  /** A node that is not a voter tells every peer who it is; so does a voter that judged that its
   * configuration can no longer elect anyone, so the learners learn it too. */
  private maybeAnnounce(): void {
    if (this.now < this.announceDue) return;
    const stuck = this.needsForceStart();
    if (this.conf.isVoter && !stuck) return;
    this.announceDue = this.now + this.heartbeatIntervalMs;
    for (const to of this.nodes) if (to !== this.id) this.announceTo(to, stuck);
  }

  /** A leader tells every node id it does not replicate to who it leads and how many node ids
   * vote in its committed configuration, so a node of an older epoch learns of a newer one
   * (docs/design.md "Force-start"). */
  private announceAsLeader(): void {
    for (const to of this.nodes) {
      if (to === this.id || this.progressOf(to) !== undefined) continue;
      this.announceTo(to, false);
    }
  }

  /** The leader this node heard from within E, itself if it leads; 0: none. */
  private recentLeader(): number {
    if (this.handler.role === 'leader') return this.id;
    return this.now - this.leaderHeardAt < this.electionTimeoutMs ? this.leader : 0;
  }

  private announceTo(to: number, stuck: boolean): void {
    const m: Outgoing = {
      type: 'announce',
      from: this.id,
      to,
      term: this.term,
      membership: this.membership,
      peers: this.peersDigest,
      lastIndex: this.log.lastIndex(),
      lastTerm: this.log.lastTerm(),
      voter: this.conf.isVoter,
      stuck,
      leader: this.recentLeader(),
      committedVoters: this.handler.role === 'leader' ? this.committedVoterIds() : 0,
    };
    this.send(m, '');
  }

  private handleAnnounce(m: Announce): void {
    const a: Announced = {
      inc: m.fromInc,
      membership: m.membership,
      peers: m.peers,
      term: m.term,
      epoch: m.epoch,
      epochId: m.epochId,
      lastIndex: m.lastIndex,
      voter: m.voter,
      stuck: m.stuck,
      at: this.now,
    };
    const before = this.announced.get(m.from);
    this.announced.set(m.from, a);
    if (this.handler.role === 'leader') {
      if (before?.inc !== a.inc) this.syncProgress();
      const pr = this.progress.get(progressKey(m.from, m.fromInc));
      if (pr !== undefined && !pr.voter && pr.match < this.log.lastIndex()) this.sendAppend(pr, true);
      return;
    }
    this.maybeBootstrap();
  }

  /** The lowest node id proposes the first configuration, only when all configured nodes announced
   * no record, the same cluster id (the envelope) and the same peer list, and hold nothing.
   * Announcements count only from E after this process started, so none from before a crash of
   * this node id (a network delays a message less than E) can vouch for a peer. */
  private maybeBootstrap(): void {
    if (this.membership !== 'fresh' || this.id !== this.nodes[0] || this.term !== 0 || this.log.lastIndex() !== 0) return;
    if (this.conf.base !== null || this.epochNow.generation !== 0) return;
    const since = Math.max(this.startedAt + this.electionTimeoutMs, this.now - 2 * this.electionTimeoutMs);
    const config: Member[] = [{ node: this.id, inc: this.incarnation }];
    for (const n of this.nodes) {
      if (n === this.id) continue;
      const a = this.announced.get(n);
      if (a === undefined || a.at < since || a.membership !== 'fresh' || a.peers !== this.peersDigest) return;
      if (a.term !== 0 || a.lastIndex !== 0 || a.epoch !== 0) return;
      config.push({ node: n, inc: a.inc });
    }
    this.epochNow = { generation: 1, id: this.random.int(2 ** 31).toString(36) };
    this.bootstrappedHere = true;
    this.term = 1;
    this.vote = this.id;
    this.voteInc = this.incarnation;
    // No clock samples yet: cluster time starts at 0 and jumps forward once two clocks agree
    // (docs/design.md "Cluster time"), never trusting this node's wall clock alone.
    this.appendOwn([{ index: 1, term: 1, time: 0, data: null, config }]);
    this.becomeLeader();
  }

  // ---- force-start (docs/design.md "Force-start") ----

  /** What force-start.ts reads and does of this core. */
  private forceStartHost(): ForceStartHost {
    const core = this;
    return {
      clusterId: this.clusterId,
      get now() {
        return core.now;
      },
      get role() {
        return core.handler.role;
      },
      get epoch() {
        return core.epochNow;
      },
      get lastIndex() {
        return core.log.lastIndex();
      },
      get lastTerm() {
        return core.log.lastTerm();
      },
      committedVoterIds: () => this.committedVoterIds(),
      announce: () => this.maybeAnnounce(),
      stepDown: () => {
        if (this.handler.role !== 'follower') this.becomeFollower(this.term, 0);
      },
      makeEpoch: (generation) => this.makeEpoch(generation),
    };
  }

  /** docs/design.md "Force-start": the next epoch, from the whole log treated as committed, with
   * this member its only voter, in a term above any in the file. */
  private makeEpoch(generation: number): void {
    this.epochNow = { generation, id: this.random.int(2 ** 31).toString(36) };
    this.log.commitTo(this.log.lastIndex());
    this.term += 1;
    this.vote = this.id;
    this.voteInc = this.incarnation;
    this.appendOwn([{ index: this.log.lastIndex() + 1, term: this.term, time: this.log.lastTime(), data: null, config: [this.member] }]);
    this.becomeLeader();
  }

  /** Node ids that are voters in the newest committed configuration. */
  private committedVoterIds(): number {
    return this.conf.committedVoterIds(this.log);
  }

  /** Announcements of another epoch (not "none") change nothing here but two things: a member of
   * an older epoch switches when the sender leads a newer epoch that two node ids serve, and a
   * probing force-start learns of a newer epoch. True when the announcement was of another epoch. */
  private otherEpochAnnounce(m: Announce): boolean {
    const mine = this.epochNow;
    if (m.epoch === 0 || mine.generation === 0 || (m.epoch === mine.generation && m.epochId === mine.id)) return false;
    if (m.cluster !== this.clusterId) return false; // refused as foreign by refuseForIdentity
    if (this.forceStart.phase === 'probing' && m.epoch > mine.generation)
      this.forceStart.fail(`node ${m.from} is of newer epoch ${m.epoch}`);
    // A learner holds no vote of its epoch, so it may leave for any newer one, as a fresh or
    // amnesiac node joins one; a voter only once the newer epoch serves with two node ids, when its
    // own can no longer gather a majority.
    const leads = m.leader === m.from && (!this.conf.isVoter || m.committedVoters >= 2);
    if (m.epoch > mine.generation && leads && this.forceStart.phase === null) this.switchTo = { generation: m.epoch, id: m.epochId };
    return true;
  }

  // ---- leadership transfer (thesis §3.10) ----

  /** Once the target holds the whole log, give up the lease, then send TimeoutNow. */
  private maybeSendTimeoutNow(from: number, pr: Progress): void {
    const t = this.transfer;
    if (t === null || t.timeoutNowSent || t.to !== from || !pr.voter || pr.match !== this.log.lastIndex()) return;
    this.sendTimeoutNow();
  }

  private sendTimeoutNow(): void {
    const t = this.transfer;
    assert(t !== null, 'TimeoutNow without a transfer');
    // The target's vote requests override the vote-ignoring rule, so this lease must end first,
    // and no round of this term may renew it: a follower that answers one may still vote for the
    // target afterwards.
    this.leaseEnd = 0;
    this.leaseForfeited = true;
    t.timeoutNowSent = true;
    const pr = this.voterProgress(t.to);
    assert(pr !== undefined, `transfer target ${t.to} is not a voter`);
    this.send({ type: 'timeout-now', from: this.id, to: t.to, term: this.term }, pr.inc);
  }

  /** Before TimeoutNow, the leader just resumes. After it, it cannot hold a lease again in this
   * term, so it steps down and lets an election (perhaps the target's) choose the next leader. */
  private abortTransfer(): void {
    const sent = this.transfer?.timeoutNowSent === true;
    this.transfer = null;
    if (sent) this.becomeFollower(this.term, 0);
  }

  private handleAppendResponse(m: AppendResponse, pr: Progress): void {
    if (m.success) {
      if (!pr.acked(m.index)) return;
      if (!this.maybeCommit()) this.sendAppends(pr);
      else this.commitMoved();
      return;
    }
    if (pr.rejected(m.index, m.hint)) this.sendAppend(pr, true);
  }

  /** The commit index moved on the leader: followers learn it. */
  private commitMoved(): void {
    if (this.commitNoticeDelayMs === 0) this.broadcastAppend();
    else {
      // The new commit index rides on the appends that go anyway; the rest wait for the notice.
      for (const p of this.progress.values()) this.sendAppends(p);
      if (this.commitNoticeDue === 0) this.commitNoticeDue = this.now + this.commitNoticeDelayMs;
    }
  }

  /** §5.3, §5.4.2: the highest index on a majority commits, but only if it is of the leader's own
   * term; earlier entries then commit with it (Log Matching). The leader counts itself up to its
   * durable index. True if the commit index moved. */
  private maybeCommit(): boolean {
    // One array for every call, sorted in place, descending (a handful of voters): a leader asks
    // at every append answer, and a new array with Array.prototype.sort each time was about a
    // tenth of a leader's allocation at a moderate publish rate.
    const matches = this.matchScratch;
    matches.length = 0;
    if (this.conf.isVoter) matches.push(this.durableIndex);
    for (const pr of this.progress.values()) if (pr.voter) matches.push(pr.match);
    for (let i = 1; i < matches.length; i++) {
      const v = matches[i] as number;
      let j = i - 1;
      while (j >= 0 && (matches[j] as number) < v) {
        matches[j + 1] = matches[j] as number;
        j--;
      }
      matches[j + 1] = v;
    }
    const n = matches[this.conf.quorum - 1] ?? 0;
    if (n <= this.log.commit) return false;
    if (this.log.termAt(n) !== this.term && this.unsafe !== 'commit-old-terms') return false;
    return this.log.commitTo(n);
  }

  private appendOwn(entries: LogEntry[]): void {
    this.log.appendOwn(entries);
    this.appended.push(...entries);
    this.noteConfigEntries(entries, null);
  }

  private broadcastAppend(): void {
    for (const pr of this.progress.values()) {
      this.sendAppend(pr, true);
      this.sendAppends(pr);
    }
  }

  /** Streams appends to a follower until it is caught up or its window is full. */
  private sendAppends(pr: Progress): void {
    while (pr.next <= this.log.lastIndex() && this.sendAppend(pr, false)) {
      // each round sends one bounded append
    }
  }

  /** Sends one append of at most entriesPerAppendMax entries from pr.next; `evenIfEmpty` sends a
   * probe or commit update with no entries. False when paused or there was nothing to send. */
  private sendAppend(pr: Progress, evenIfEmpty: boolean): boolean {
    if (pr.state !== 'snapshot' && pr.next <= this.log.snapshotIndex) {
      assert(this.snapshot !== null, `log compacted to ${this.log.snapshotIndex} without a snapshot`);
      pr.becomeSnapshot(this.snapshot);
    }
    if (pr.state === 'snapshot') {
      this.snapshots.sendChunks(pr);
      return false;
    }
    if (pr.isPaused(this.inflightAppendsMax)) return false;
    const to = pr.node;
    const last = this.log.lastIndex();
    assert(
      pr.next > this.log.snapshotIndex && pr.next <= last + 1,
      `next ${pr.next} for ${to} outside (${this.log.snapshotIndex}, ${last + 1}]`,
    );
    const hi = this.appendEnd(pr.next, Math.min(last + 1, pr.next + this.entriesPerAppendMax));
    if (hi === pr.next && !evenIfEmpty) return false;
    const prevIndex = pr.next - 1;
    const prevTerm = this.log.termAt(prevIndex) ?? 0;
    const entries = hi > pr.next ? this.log.slice(pr.next, hi) : [];
    const commit = this.log.commit;
    this.send({ type: 'append', from: this.id, to, term: this.term, prevIndex, prevTerm, entries, commit, sentAt: this.now }, pr.inc);
    pr.sent(hi - 1);
    if (commit > pr.commitSent) pr.commitSent = commit;
    return true;
  }

  /** The end (exclusive) of an append from `lo`: at most `hi`, and no more data bytes than
   * appendBytesMax, except that one entry always goes, whatever its size. */
  private appendEnd(lo: number, hi: number): number {
    let bytes = 0;
    for (let i = lo; i < hi; i++) {
      bytes += this.log.dataLength(i);
      if (bytes > this.appendBytesMax && i > lo) return i;
    }
    return hi;
  }

  // ---- snapshots and compaction (§7) ----

  /** The application holds a snapshot of its state after applying `index`, as `chunks`: the log
   * drops every entry up to it, and the snapshot replaces them for followers that need them. */
  compact(index: number, chunks: Iterable<Uint8Array>): RaftError | null {
    const before = this.snapshotIndex;
    if (index <= before || index > this.applied) {
      return new RaftError('RAFT_SNAPSHOT_STALE', `snapshot at ${index}, the newest is at ${before}, applied ${this.applied}`);
    }
    const { chunks: parts, bytes } = rechunk(chunks, this.snapshotChunkBytesMax);
    for (let i = before + 1; i <= index; i++) this.appliedBytes -= this.log.dataLength(i);
    const term = this.log.termAt(index) ?? 0;
    this.snapshot = { index, term, time: this.log.timeAt(index), config: this.conf.at(index, this.log), chunks: parts, bytes };
    const floor = this.compactionFloor(index);
    if (floor > this.log.snapshotIndex) {
      const config = this.conf.at(floor, this.log);
      this.log.compact(floor);
      this.conf.dropUpTo(floor, config);
    }
    this.checkInvariants();
    return null;
  }

  /** The last index of the newest snapshot (0: none). The log may still hold entries up to it. */
  get snapshotIndex(): number {
    return this.snapshot?.index ?? 0;
  }

  /** The entries applied since the newest snapshot pass logEntriesMax or logBytesMax: the
   * application should hand over a snapshot of its state (compact()). */
  snapshotWanted(): boolean {
    const since = this.applied - this.snapshotIndex;
    return since > 0 && (since > this.logEntriesMax || this.appliedBytes > this.logBytesMax);
  }

  /** How far a compaction to `index` drops the log. A leader keeps the entries a follower that is
   * behind still needs (its match index, or the index of the snapshot it is being sent, so that
   * once installed it goes on by appends instead of needing the next snapshot), but never more than
   * logEntriesMax entries or logBytesMax bytes before `index`: a follower further behind, or gone,
   * gets the snapshot. The log thus holds at most twice the bounds plus the uncommitted tail. */
  private compactionFloor(index: number): number {
    let needed = index;
    if (this.handler.role === 'leader') {
      for (const pr of this.progress.values()) {
        needed = Math.min(needed, pr.state === 'snapshot' ? (pr.snapshot?.index ?? pr.match) : pr.match);
      }
    }
    let floor = index;
    let bytes = 0;
    while (floor > needed && floor > this.log.snapshotIndex && index - floor < this.logEntriesMax) {
      bytes += this.log.dataLength(floor);
      if (bytes > this.logBytesMax) break;
      floor--;
    }
    return floor;
  }

  private handleSnapshotResponse(m: SnapshotResponse, pr: Progress): void {
    if (!pr.snapshotAnswered(m.index, m.received, m.match)) return;
    if (pr.state === 'snapshot') this.snapshots.sendChunks(pr);
    else if (this.maybeCommit()) this.broadcastAppend();
    else this.sendAppend(pr, true);
  }

  /** What snapshot-transfer.ts reads and does of this core. */
  private snapshotTransferHost(): SnapshotTransferHost {
    const core = this;
    return {
      id: this.id,
      get term() {
        return core.term;
      },
      get now() {
        return core.now;
      },
      get commit() {
        return core.log.commit;
      },
      send: (m, toInc) => this.send(m, toInc),
      heardFromLeader: (from) => this.heardFromLeader(from),
      install: (s) => this.installSnapshot(s),
    };
  }

  /** The snapshot replaces the log (keeping any entries after it that match, §7) and becomes the
   * application's state: Ready.snapshot carries it, and applying continues after it. */
  private installSnapshot(s: Snapshot): void {
    // Entries kept after the snapshot stay durable; a replaced log is durable only up to the old
    // commit index (the snapshot's prefix) until the storage holds the snapshot.
    if (!this.log.matches(s.index, s.term)) this.persistedIndex = Math.min(this.persistedIndex, this.log.commit);
    const truncatedFrom = this.log.install(s);
    if (truncatedFrom !== null) {
      this.noteTruncation(truncatedFrom);
      this.conf.truncate(truncatedFrom);
    }
    this.appended = this.appended.filter((e) => e.index > s.index);
    this.snapshot = s;
    this.readySnapshot = s;
    this.applied = s.index;
    this.appliedBytes = 0;
    this.conf.dropUpTo(s.index, s.config ?? this.conf.base);
    this.refreshConfig();
  }

  private sendHeartbeat(pr: Progress): void {
    const commit = Math.min(pr.match, this.log.commit);
    this.send({ type: 'heartbeat', from: this.id, to: pr.node, term: this.term, commit, sentAt: this.now }, pr.inc);
    if (commit > pr.commitSent) pr.commitSent = commit;
  }

  /** docs/design.md "Cluster time": one time per append, never below the log's last. */
  private stampTime(): number {
    return Math.max(this.log.lastTime(), Math.floor(this.clock.read(this.now)));
  }

  // ---- plumbing ----

  /** Adds the identity of docs/design.md "Identity" to a message built by a handler, in place. */
  private send(m: Outgoing, toInc: string): void {
    const full = m as Outgoing & { -readonly [K in keyof Message]?: unknown };
    full.cluster = this.clusterId;
    full.epoch = this.epochNow.generation;
    full.epochId = this.epochNow.id;
    full.fromInc = this.incarnation;
    full.toInc = toInc;
    if (this.awaitStorage) {
      const hold = this.holdFor(full as Message);
      if (hold !== null && !this.durableFor(hold)) {
        this.held.push(hold);
        return;
      }
    }
    this.messages.push(full as Message);
  }

  private softChanged(): boolean {
    const r = this.reportedSoft;
    return r === null || r.role !== this.handler.role || r.term !== this.term || r.leader !== this.leader || r.commit !== this.log.commit;
  }

  private hardChanged(): boolean {
    const r = this.reportedHard;
    return r === null || r.term !== this.term || r.vote !== this.vote || r.voteInc !== this.voteInc;
  }

  private checkInvariants(): void {
    assert(this.log.commit <= this.log.lastIndex(), 'commit past the end of the log');
    assert(this.log.lastTerm() <= this.term, 'log holds an entry above the current term');
    assert(this.handler.role !== 'leader' || this.leader === this.id, 'leader does not know it leads');
    assert(this.applied <= this.log.commit, 'applied past commit');
  }
}

function checkOptions(opts: RaftOptions): void {
  const bad = (what: string): never => {
    throw new RaftError('RAFT_BAD_OPTIONS', what);
  };
  const nodes = opts.nodes ?? opts.voters ?? [];
  if (!nodes.includes(opts.id)) bad(`node ${opts.id} is not among nodes ${nodes.join(',')}`);
  if (new Set(nodes).size !== nodes.length) bad('duplicate node id');
  for (const v of nodes) if (!Number.isSafeInteger(v) || v <= 0) bad(`node id ${v}`);
  for (const v of opts.voters ?? []) if (!nodes.includes(v)) bad(`voter ${v} is not a configured node`);
  if (!(opts.electionTimeoutMs >= 2)) bad(`electionTimeoutMs ${opts.electionTimeoutMs}`);
  if (opts.maxClockOffsetMs !== undefined && !(opts.maxClockOffsetMs > 0)) bad(`maxClockOffsetMs ${opts.maxClockOffsetMs}`);
  const counts = ['appendBytesMax', 'logEntriesMax', 'logBytesMax', 'snapshotChunkBytesMax', 'snapshotChunksInflightMax'] as const;
  for (const k of counts) {
    const v = opts[k];
    if (v !== undefined && (!Number.isSafeInteger(v) || v < 1)) bad(`${k} ${v} (a positive integer)`);
  }
  const restored = opts.restore?.snapshot;
  if (restored != null && restored.index !== (opts.restore?.entries[0]?.index ?? restored.index + 1) - 1) {
    bad(`restored log starts at ${opts.restore?.entries[0]?.index}, not after the snapshot at ${restored.index}`);
  }
  assertInteger(opts.now, 'now');
  const restore = opts.restore;
  if (restore !== undefined && restore.vote !== 0 && !nodes.includes(restore.vote)) bad(`restored vote ${restore.vote}`);
}
