import { createHash } from 'node:crypto';
import { RC } from '../protocol/reason-codes.js';
import { parseSharedFilter } from '../protocol/topic.js';
import { aclAllows, aclAllowsSubscribe } from './acl.js';
import {
  advanceOutbox,
  type BridgeOutbox,
  expireOutbox,
  newOutbox,
  nextExpiry,
  type OutboxImage,
  type OutboxMessage,
  outboxItemSize,
  pushOutbox,
  recordPubrec,
  takeOutboxPid,
} from './bridge-outbox.js';
import { type BridgeRule, bridgeNames, outboundForward } from './bridge-rules.js';
import type { BrokerState } from './broker-state.js';
import type {
  AckItem,
  AckKind,
  BridgeInCommand,
  BridgePubrecCommand,
  Command,
  ConnectCommand,
  ConnId,
  DisconnectCommand,
  Effect,
  Entry,
  Message,
  PublishCommand,
  PubrelCommand,
  QoS,
  Settings,
  ShardInCommand,
  SubscribeCommand,
  UnsubscribeCommand,
  Will,
} from './commands.js';
import { REFUSED_NONE } from './commands.js';
import { type Deadline, DeadlineHeap, SESSION_DEADLINE, WILL_DEADLINE } from './deadlines.js';
import {
  applyAck,
  canTake,
  deliver,
  type Effects,
  event,
  fillInflight,
  inflightLimit,
  openFence,
  resendInflight,
  takeShared,
} from './deliver.js';
import { holdAfterPubrec, isHeld, qos1ReusesHeldId, releaseOnPubrel } from './qos2-receiver.js';
import { RetainedTrie } from './retained-trie.js';
import {
  assignedClientId,
  connPeriod,
  type Delivery,
  EXPIRY_NEVER,
  newSession,
  type PendingWill,
  PID_MAX,
  type RetainedMessage,
  type Session,
  type Subscription,
} from './session.js';
import { completeSettings, DEFAULT_SETTINGS } from './settings.js';
import {
  advanceShardOutbox,
  newShardOutbox,
  pushShardOutbox,
  type ShardOutbox,
  type ShardOutboxItem,
  shardItemSize,
} from './shard-outbox.js';
import { decodeImage, encodeImage, SnapshotError, type StateImage } from './snapshot.js';
import { type CursorCapture, SNAPSHOT_CURSOR_DEFAULTS, SnapshotCursor, type SnapshotCursorOptions } from './snapshot-cursor.js';
import { TopicTrie } from './topic-trie.js';
import { commandProblem } from './validate.js';

// The broker state machine (docs/design.md "The seam"): sessions, subscriptions, retained messages,
// queues, QoS 1/2 flows and wills, changed only by applying committed entries. Pure: time is the
// entry's time, and every decision depends only on the state and the entry, so every replica
// decides the same.

/** Due will and session deadlines that one entry fires at most; the rest fire at the next entries
 * (the serving node proposes a tick at once while some are left). Ending a session costs up to
 * about 30 µs (its subscriptions, its will's fan-out), so an entry stays near 1 ms even when
 * thousands of deadlines fall due together, as after a mass disconnect or a failover. A rule of
 * apply, so every replica splits the work alike (docs/design.md "Deadlines live in the state"). */
export const DEADLINES_PER_ENTRY_MAX = 32;

const GRANTED: readonly number[] = [RC.GRANTED_QOS_0, RC.GRANTED_QOS_1, RC.GRANTED_QOS_2];

/** One session's share of a routed message, merged over its overlapping subscriptions. */
interface Target {
  s: Session;
  qos: QoS;
  rap: boolean;
  subIds: number[] | null;
  /** The shared subscription that chose this session, or null for plain subscriptions. */
  share: string | null;
}

/** Sizes of the replicated state (Broker.totals). */
export interface StateTotals {
  sessions: number;
  /** Sessions held by a connection. */
  online: number;
  subscriptions: number;
  retained: number;
  queuedMessages: number;
  queuedBytes: number;
  /** Outbound QoS 1/2 sent and not yet completed. */
  inflight: number;
}

/** Targets of one message found by a linear scan before route indexes them in a Map. */
const ROUTE_TARGETS_SCANNED = 8;
/** Stands in for the session of an unused scratch target, so the scratch holds no real session. */
const NO_SESSION: Session = newSession('');

const minQos = (a: QoS, b: QoS): QoS => (a < b ? a : b);
const EMPTY_TOUCHED: ReadonlySet<string> = new Set();
const SHARE_PREFIX = '$share/';
const byClientId = (a: { clientId: string }, b: { clientId: string }): number =>
  a.clientId < b.clientId ? -1 : a.clientId > b.clientId ? 1 : 0;
/** Trie key of a subscription: the client id, or for a shared subscription the share id and the
 * client id joined by U+0000, which no MQTT string contains [MQTT-1.5.4-2], so keys never clash. */
const trieKey = (sub: Subscription): string => (sub.share === null ? sub.clientId : `\u0000${sub.share}\u0000${sub.clientId}`);
const expiryDeadline = (msg: Message, now: number): number | null =>
  msg.props?.expiryS === undefined ? null : now + msg.props.expiryS * 1000;

/** The rules a session's own record keeps, whatever the indexes: checked by verify, and on
 * restore, where an image that breaks one is refused. */
/** The codes of a SUBACK or UNSUBACK, one per filter of the packet in order: those the connection
 * decided (`refused`), with apply's `codes` in its REFUSED_NONE slots. */
function withRefused(refused: readonly number[] | undefined, codes: number[]): number[] {
  if (refused === undefined) return codes;
  const all = refused.slice();
  let j = 0;
  for (let i = 0; i < all.length; i++) if (all[i] === REFUSED_NONE) all[i] = codes[j++] ?? RC.UNSPECIFIED_ERROR;
  return all;
}

function sessionProblem(s: Session, settings: Settings): string | null {
  if (s.conn !== null && s.expiresAt !== null) return 'online with an expiry deadline';
  if (s.conn === null && s.will !== null) return 'offline with a connection will';
  const pids = new Set(s.inflight.map((f) => f.pid));
  const inUse = s.pidsInUse ?? new Set<number>();
  if (pids.size !== s.inflight.length || pids.size !== inUse.size || [...pids].some((p) => !inUse.has(p))) {
    return 'inflight pids and pids in use differ';
  }
  if (s.queue.toArray().reduce((n, q) => n + q.size, 0) !== s.queueBytes) return 'queue bytes out of step';
  if (s.conn !== null && s.queue.length > 0 && s.inflight.length < inflightLimit(s, settings)) return 'queued with a free slot';
  if (s.fenceLeft < 0 || s.fenceLeft > PID_MAX || s.fenceOwed?.size === 0) return 'fence out of range';
  return null;
}

export class Broker implements BrokerState {
  // ---- replicated state (all of it is in the snapshot) ----
  private settings: Settings = DEFAULT_SETTINGS;
  /** Log index of the latest serve-start; connections of older periods have ended. */
  private servePeriod = 0;
  /** Highest raft epoch generation a serve-start carried; 0 before any. */
  private generation = 0;
  private index = 0;
  private time = 0;
  private failReason: string | null = null;
  private sessions = new Map<string, Session>();
  /** Wills waiting for their delay, by client id. */
  private wills = new Map<string, PendingWill>();
  private retained = new RetainedTrie<RetainedMessage>();
  /** Shared subscription round robin: share id → the member chosen last. */
  private cursors = new Map<string, string>();
  /** Bridge outboxes by name, one per bridge the rules name (src/broker/bridge-outbox.ts). */
  private outboxes = new Map<string, BridgeOutbox>();
  /** Outboxes of the other shards this shard forwards to, by shard name (src/broker/shard-outbox.ts);
   * one is made by the first message to its shard. */
  private shardOutboxes = new Map<string, ShardOutbox>();
  /** Per (origin shard, log identity), `ORIGIN LOG`: the highest sequence of a forwarded message
   * applied here. One entry per origin log that ever forwarded here. */
  private highWater = new Map<string, number>();

  // ---- derived state, rebuilt on restore ----
  private subsTrie = new TopicTrie<Subscription>();
  private byConn = new Map<ConnId, Session>();
  /** Members per share id. */
  private shareMembers = new Map<string, number>();
  private deadlines = new DeadlineHeap();
  /** The last entry stopped at DEADLINES_PER_ENTRY_MAX with deadlines still due. */
  private deadlinesCapped = false;
  private digestCache: string | null = null;

  // ---- local: the open snapshot cursor, at most one ----
  private cursor: SnapshotCursor | null = null;
  /** Epoch of the newest cursor; sessions it has yet to encode carry it as their mark. */
  private cursorEpoch = 0;
  private readonly releaseCursor = (c: SnapshotCursor): void => {
    if (this.cursor === c) this.cursor = null;
  };

  // ---- local, not replicated: the QoS 0 path runs only on the serving node ----
  private qos0Cursors = new Map<string, string>();

  // ---- scratch of route(): empty between calls, reused so a message allocates no Map ----
  /** Written from index 0 by each match; entries beyond the last count are stale. */
  private readonly routeMatches: Subscription[] = [];
  /** Targets of the message being routed, in first-match order: the first routeTargetCount are
   * live, the rest are kept for reuse. */
  private readonly routeTargets: Target[] = [];
  private routeTargetCount = 0;
  /** More than one filter matched: a client may have several matching subscriptions to merge. */
  private routeMerging = false;
  /** Client id to target, filled only once there are more than ROUTE_TARGETS_SCANNED. */
  private readonly routeTargetIndex = new Map<string, Target>();
  /** Matching members per share id, in first-match order. */
  private readonly routeShares = new Map<string, Subscription[]>();

  get appliedIndex(): number {
    return this.index;
  }

  get appliedTime(): number {
    return this.time;
  }

  get failed(): string | null {
    return this.failReason;
  }

  /** The client id of the session `conn` holds; null if it holds none. */
  clientIdOf(conn: ConnId): string | null {
    return this.byConn.get(conn)?.clientId ?? null;
  }

  /** The bridge topic rules of the settings in force. */
  get bridgeRules(): readonly BridgeRule[] {
    return this.settings.bridgeRules;
  }

  /** The outbox of messages forwarded to shard `dest`; undefined before the first. */
  shardOutbox(dest: string): Readonly<ShardOutbox> | undefined {
    return this.shardOutboxes.get(dest);
  }

  /** The shards with an outbox, in name order. */
  get shardDests(): string[] {
    return [...this.shardOutboxes.keys()].sort();
  }

  /** The outbox of bridge `name`, if the rules name it. The serving node reads it to forward; only
   * apply changes it. */
  bridgeOutbox(name: string): Readonly<BridgeOutbox> | undefined {
    return this.outboxes.get(name);
  }

  /** Applies one committed entry and appends its effects to `out`. With `out` null (a node that
   * does not serve, which would drop them) no effect is built; the state after the entry, and so
   * its digest and snapshot bytes, is the same either way. */
  apply(e: Entry, out: Effects): void {
    try {
      this.digestCache = null;
      if (!Number.isSafeInteger(e.index) || e.index <= this.index) {
        this.breakInvariant(`entry index ${String(e.index)} after ${this.index}`, out);
        return;
      }
      // Time never decreases along the log; a step back is treated as no time passing.
      const now = Number.isSafeInteger(e.time) && e.time > this.time ? e.time : this.time;
      this.index = e.index;
      this.time = now;
      this.runDeadlines(now, out);
      if (this.outboxes.size > 0) this.expireOutboxes(now, out);
      const problem = commandProblem(e.cmd);
      if (problem === null) this.dispatch(e.cmd, e.index, now, out);
      else event(out, 'no-op', { index: e.index, reason: problem });
    } catch (err) {
      this.breakInvariant(`apply threw at ${String(e?.index)}: ${(err as Error)?.message ?? String(err)}`, out);
    }
  }

  /** Routes a QoS 0, non-retained publish to the online sessions it matches, without a log entry
   * (docs/design.md "The seam"): QoS 0 is never queued or put in flight, so replicated state does not
   * change; shared subscriptions use a local cursor. Returns the number of matching sessions. */
  routeQos0(from: ConnId, msg: Message, out: Effect[]): number {
    try {
      if (msg.qos !== 0 || msg.retain) {
        event(out, 'no-op', { reason: 'routeQos0 takes QoS 0 without retain' });
        return 0;
      }
      const s = this.byConn.get(from);
      if (!this.mayPublish(s, msg, out)) return 0;
      return this.route(s?.clientId ?? null, msg, this.time, out, this.qos0Cursors);
    } catch (err) {
      event(out, 'invariant', { reason: `routeQos0 threw: ${(err as Error)?.message ?? String(err)}` });
      return 0;
    }
  }

  /** Whether the session `from` holds may publish `msg` (the ACL), as routeQos0 judges it; no
   * event. For the QoS 0 publishes a bridge forwards without a log entry. */
  publishAllowed(from: ConnId, msg: Message): boolean {
    const acl = this.settings.acl;
    if (acl === null) return true;
    const s = this.byConn.get(from);
    return s !== undefined && aclAllows(acl, s, 'write', msg.topic);
  }

  /** The sizes of the replicated state that cost O(1) (StateTotals without the queues). */
  /** Whether a session of this client id exists (online or not). */
  hasSession(clientId: string): boolean {
    return this.sessions.has(clientId);
  }

  counts(): Pick<StateTotals, 'sessions' | 'online' | 'subscriptions' | 'retained'> {
    return { sessions: this.sessions.size, online: this.byConn.size, subscriptions: this.subsTrie.size, retained: this.retained.size };
  }

  /** Sizes of the replicated state, for metrics. O(sessions) for the queues: read at a scrape,
   * never on the message path. */
  totals(): StateTotals {
    let queuedMessages = 0;
    let queuedBytes = 0;
    let inflight = 0;
    for (const s of this.sessions.values()) {
      queuedMessages += s.queue.length;
      queuedBytes += s.queueBytes;
      inflight += s.inflight.length;
    }
    return {
      sessions: this.sessions.size,
      online: this.byConn.size,
      subscriptions: this.subsTrie.size,
      retained: this.retained.size,
      queuedMessages,
      queuedBytes,
      inflight,
    };
  }

  /** Routes a message the serving node itself publishes (the $SYS topics), QoS 0, to the online
   * sessions it matches, without a log entry: like routeQos0, it changes no replicated state. Read
   * access is judged per subscriber, and no publisher's write access applies. Returns the number
   * of matching sessions. */
  routeLocal(msg: Message, out: Effect[]): number {
    try {
      if (msg.qos !== 0) {
        event(out, 'no-op', { reason: 'routeLocal takes QoS 0' });
        return 0;
      }
      return this.route(null, msg, this.time, out, this.qos0Cursors);
    } catch (err) {
      event(out, 'invariant', { reason: `routeLocal threw: ${(err as Error)?.message ?? String(err)}` });
      return 0;
    }
  }

  /** The messages of a local retained table (the $SYS topics) that a subscription just granted
   * (`cmd`, applied; `codes` its SUBACK codes) should receive, as QoS 0 retained deliveries after
   * its SUBACK: what sendRetained does for the replicated retained messages, by the same Retain
   * Handling rules (`existed`: the filters the session held before this entry), with read access
   * judged per topic. Changes no replicated state. */
  sendLocalRetained(
    cmd: SubscribeCommand,
    codes: readonly number[],
    existed: ReadonlySet<string>,
    match: (filter: string, fn: (topic: string, msg: Message) => void) => void,
    out: Effect[],
  ): void {
    const s = this.byConn.get(cmd.conn);
    if (s === undefined) return;
    const subIds = cmd.subId === undefined ? null : [cmd.subId];
    // The SUBACK has a code per filter of the packet; `subs` are those of its REFUSED_NONE slots.
    const refused = cmd.refused;
    const granted = refused === undefined ? codes : codes.filter((_, i) => refused[i] === REFUSED_NONE);
    for (let i = 0; i < cmd.subs.length; i++) {
      const req = cmd.subs[i] as SubscribeCommand['subs'][number];
      if ((granted[i] ?? RC.UNSPECIFIED_ERROR) >= RC.UNSPECIFIED_ERROR || req.filter.startsWith(SHARE_PREFIX)) continue;
      if (s.protocol === 5 && (req.rh === 2 || (req.rh === 1 && existed.has(req.filter)))) continue;
      match(req.filter, (topic, msg) => {
        if (!aclAllows(this.settings.acl, s, 'read', topic)) return;
        const d = { msg, qos: 0 as QoS, retain: true, subIds, expiresAt: null, share: null };
        deliver(s, d, this.settings, this.time, out);
      });
    }
  }

  /** The filters the session of `conn` holds now (before a subscribe is applied, for Retain
   * Handling 1 of the local retained table). */
  filtersOf(conn: ConnId): ReadonlySet<string> {
    const subs = this.byConn.get(conn)?.subs;
    return subs == null ? new Set() : new Set(subs.keys());
  }

  /** The earliest time at which apply has something to do without a command: a will, a session
   * end, or a message expiring in a bridge outbox. */
  nextDeadline(): number | undefined {
    let next: number | undefined;
    for (;;) {
      const top = this.deadlines.peek();
      if (top === undefined || this.isLive(top)) {
        next = top?.at;
        break;
      }
      this.deadlines.pop();
    }
    for (const o of this.outboxes.values()) {
      const at = nextExpiry(o);
      if (at !== undefined && (next === undefined || at < next)) next = at;
    }
    return next;
  }

  snapshot(): SnapshotCursor {
    return this.snapshotCursor();
  }

  /** Opens a lazy cursor over the state at the last applied index (see snapshot-cursor.ts). At
   * most one is open: opening another cancels this one, whose next pull then throws
   * ERR_SNAPSHOT_CANCELLED; a cursor read to its end or returned closes itself. */
  snapshotCursor(opts: SnapshotCursorOptions = SNAPSHOT_CURSOR_DEFAULTS): SnapshotCursor {
    this.cursor?.cancel();
    const capture: CursorCapture = {
      appliedIndex: this.index,
      appliedTime: this.time,
      servePeriod: this.servePeriod,
      generation: this.generation,
      settings: this.settings,
      failed: this.failReason,
      sessions: this.sessions.values(),
      sessionCount: this.sessions.size,
      wills: [...this.wills.values()],
      retained: [...this.retained.entries()],
      cursors: [...this.cursors.entries()],
      bridges: this.outboxImages(),
      shards: this.shardOutboxImages(),
      highWater: this.highWaterImage(),
    };
    this.cursor = new SnapshotCursor(capture, ++this.cursorEpoch, opts, this.releaseCursor);
    return this.cursor;
  }

  /** A snapshot cursor is open and not yet read to its end or cancelled: opening another would
   * cancel it. */
  get cursorOpen(): boolean {
    return this.cursor !== null;
  }

  /** Copy-on-write: called before apply mutates a session in place. One branch while no
   * snapshot cursor is open. */
  private cow(s: Session): void {
    if (this.cursor !== null) this.cursor.touch(s);
  }

  restore(chunks: Iterable<Uint8Array>): void {
    const parts = [...chunks];
    const bytes = new Uint8Array(parts.reduce((n, c) => n + c.length, 0));
    let off = 0;
    for (const c of parts) {
      bytes.set(c, off);
      off += c.length;
    }
    this.load(decodeImage(bytes, parseSharedFilter));
  }

  /** sha256 of the canonical image, computed in one go: for tests and the simulator. A node hashes
   * a snapshot cursor's chunks a slice per turn instead (src/server/digest-runner.ts); both hash
   * the same bytes. */
  digest(): string {
    this.digestCache ??= createHash('sha256').update(encodeImage(this.image())).digest('hex');
    return this.digestCache;
  }

  /** Checks the invariants that tie the replicated records and the derived indexes together;
   * null when they hold, else the first broken one. O(state): for tests and the simulator. */
  verify(): string | null {
    let subs = 0;
    let online = 0;
    for (const [id, s] of this.sessions) {
      const problem = this.verifySession(id, s);
      if (problem !== null) return `session ${id}: ${problem}`;
      subs += s.subs?.size ?? 0;
      if (s.conn !== null) online++;
    }
    if (this.byConn.size !== online) return `conn index holds ${this.byConn.size}, ${online} sessions online`;
    if (this.subsTrie.size !== subs) return `trie holds ${this.subsTrie.size}, sessions ${subs} subscriptions`;
    for (const [id, w] of this.wills) {
      if (w.clientId !== id) return `pending will under ${id} names ${w.clientId}`;
      if (this.sessions.get(id)?.conn != null) return `pending will of online client ${id}`;
    }
    for (const o of this.outboxes.values()) {
      const items = o.items.toArray();
      const bytes = items.reduce((n, it) => n + outboxItemSize(it), 0);
      if (bytes !== o.bytes) return `outbox ${o.name} counts ${o.bytes} bytes, holds ${bytes}`;
      if (items.some((it) => it.expiresAt !== null && it.expiresAt <= this.time)) return `outbox ${o.name} holds an expired message`;
    }
    return null;
  }

  private verifySession(id: string, s: Session): string | null {
    if (s.clientId !== id) return `stored under another id (${s.clientId})`;
    if (s.conn !== null && this.byConn.get(s.conn) !== s) return 'conn index does not point back';
    const problem = sessionProblem(s, this.settings);
    if (problem !== null) return problem;
    for (const sub of s.subs?.values() ?? [])
      if (this.subsTrie.get(sub.topicFilter, trieKey(sub)) !== sub) return `${sub.filter} not in the trie`;
    return null;
  }

  // ---- dispatch ----

  private dispatch(cmd: Command, index: number, now: number, out: Effects): void {
    switch (cmd.t) {
      case 'serve-start':
        this.serveStart(completeSettings(cmd.settings) as Settings, cmd.generation, index, now, out);
        return;
      case 'settings':
        this.changeSettings(completeSettings(cmd.settings) as Settings, now, out);
        return;
      case 'connect':
        this.connect(cmd, now, out);
        return;
      case 'disconnect':
        this.disconnect(cmd, now, out);
        return;
      case 'subscribe':
        this.subscribe(cmd, now, out);
        return;
      case 'unsubscribe':
        this.unsubscribe(cmd, now, out);
        return;
      case 'publish':
        this.publish(cmd, now, out);
        return;
      case 'publishes':
        for (let i = 0; i < cmd.pubs.length; i++) {
          const p = cmd.pubs[i] as PublishCommand | PubrelCommand;
          if (p.t === 'pubrel') this.pubrel(p.conn, p.pid, out);
          else this.publish(p, now, out);
        }
        return;
      case 'pubrel':
        this.pubrel(cmd.conn, cmd.pid, out);
        return;
      case 'ack':
        this.ack(cmd.conn, cmd.pid, cmd.kind, now, out);
        return;
      case 'acks':
        for (let i = 0; i < cmd.acks.length; i++) {
          const a = cmd.acks[i] as AckItem;
          this.ack(cmd.conn, a.pid, a.kind, now, out);
        }
        return;
      case 'tick':
        return;
      case 'check':
        // Replicas compare digests outside apply (BrokerNode), so that no apply hashes the state.
        return;
      case 'bridge-position':
        this.bridgePosition(cmd.bridge, cmd.below, index, out);
        return;
      case 'bridge-pubrec':
        this.bridgePubrec(cmd, out);
        return;
      case 'bridge-in':
        this.bridgeIn(cmd, now, out);
        return;
      case 'bridge-in-rel':
        this.bridgeInRel(cmd.bridge, cmd.conn, cmd.pid, out);
        return;
      case 'bridge-in-reset': {
        const o = this.outboxes.get(cmd.bridge);
        if (o === undefined) event(out, 'no-op', { command: 'bridge-in-reset', bridge: cmd.bridge, reason: 'no such bridge' });
        else o.inIds.clear();
        return;
      }
      case 'shard-position':
        this.shardPosition(cmd.dest, cmd.below, out);
        return;
      case 'shard-in':
        this.shardIn(cmd, now, out);
        return;
      default: {
        const _: never = cmd;
        event(out, 'no-op', { reason: `unknown command ${String((_ as { t?: unknown }).t)}` });
      }
    }
  }

  private noop(out: Effects, t: string, conn: string, reason: string): void {
    event(out, 'no-op', { command: t, conn, reason });
  }

  private breakInvariant(reason: string, out: Effects): void {
    this.failReason ??= reason;
    event(out, 'invariant', { reason });
  }

  // ---- serving periods and settings ----

  /** A node begins serving: every connection of an older period ended without DISCONNECT at this
   * time (docs/design.md "Failover"). The first serve-start of a higher epoch generation than one seen
   * before is a forced epoch's: clients may hold packet ids of flows its file lacks, so every
   * session's ids are fenced (deliver.ts "Fence"). */
  private serveStart(settings: Settings, generation: number | undefined, index: number, now: number, out: Effects): void {
    this.settings = settings;
    this.syncOutboxes(index, out);
    this.servePeriod = index;
    const fence = generation !== undefined && generation > this.generation && this.generation !== 0;
    if (generation !== undefined && generation > this.generation) this.generation = generation;
    if (fence) event(out, 'packet-id-fence', { generation: this.generation, sessions: this.sessions.size });
    for (const s of this.sortedSessions()) {
      if (fence) {
        this.cow(s);
        openFence(s);
      }
      if (s.conn !== null && (connPeriod(s.conn) ?? 0) < index) this.endByFailover(s, now, out);
    }
  }

  /** Its will waits max(grace, will delay) even where the session ends sooner, and is dropped if
   * the client connects again within it: a documented deviation from the "earlier of" rule, for
   * clients that reconnect to the new leader (docs/design.md "Failover"). */
  private endByFailover(s: Session, now: number, out: Effects): void {
    this.cow(s);
    this.detach(s);
    const will = s.will;
    s.will = null;
    if (will !== null) {
      const delayS = Math.max(this.settings.willGraceS, will.delayS);
      this.setPendingWill({ clientId: s.clientId, msg: will.msg, at: now + delayS * 1000, failover: true });
    }
    event(out, 'failover-ended', { clientId: s.clientId });
    this.startExpiry(s, now, out);
  }

  private changeSettings(settings: Settings, now: number, out: Effects): void {
    this.settings = settings;
    this.syncOutboxes(this.index, out);
    // A larger inflight bound frees slots for queued messages at once.
    for (const s of this.sortedSessions()) {
      if (s.conn === null) continue;
      // fillInflight changes only a session with something queued.
      if (s.queue.length > 0) this.cow(s);
      if (!fillInflight(s, settings, now, out)) this.breakInvariant('no free packet id', out);
    }
  }

  // ---- sessions ----

  private connect(cmd: ConnectCommand, now: number, out: Effects): void {
    const period = connPeriod(cmd.conn) ?? 0;
    if (period < this.servePeriod) {
      this.noop(out, cmd.t, cmd.conn, 'connection of an ended serving period');
      return;
    }
    if (this.byConn.has(cmd.conn)) {
      this.noop(out, cmd.t, cmd.conn, 'connection already holds a session');
      return;
    }
    const clientId = cmd.clientId ?? cmd.assignedId ?? assignedClientId(cmd.conn);
    if (cmd.will !== null && !aclAllows(this.settings.acl, { clientId, username: cmd.username }, 'write', cmd.will.msg.topic)) {
      // A will the client may not publish is refused at CONNECT, before it can take over a session.
      event(out, 'acl-denied', { clientId, access: 'write', topic: cmd.will.msg.topic, will: true });
      out?.push({ t: 'send', conn: cmd.conn, packet: { type: 'connack', sessionPresent: false, code: RC.NOT_AUTHORIZED } });
      return;
    }
    this.runDueDeadlinesOf(clientId, now, out);
    let s = this.sessions.get(clientId);
    if (s !== undefined) this.cow(s);
    // A session whose expiry is 0 (3.1.1 Clean Session 1) lasts as long as its network connection
    // [MQTT-3.1.2-6, MQTT-3.1.2-23]: the takeover closes that connection, so it ends with it, and a
    // new connection gets a new session whatever its own clean flag says.
    const ends = cmd.clean || (s !== undefined && s.conn !== null && s.expiryS === 0);
    if (s !== undefined && s.conn !== null) this.takeover(s, ends, now, out);
    this.settlePendingWill(clientId, cmd.clean, now, out);
    if (s !== undefined && ends) {
      this.discardSession(s, now, out);
      s = undefined;
    }
    const present = s !== undefined;
    if (s === undefined) {
      s = newSession(clientId);
      this.sessions.set(clientId, s);
    }
    this.attach(s, cmd);
    if (out !== null) {
      const connack: Extract<Effect, { t: 'send' }>['packet'] = { type: 'connack', sessionPresent: present, code: RC.SUCCESS };
      if (cmd.clientId === null) connack.assignedClientId = clientId;
      out.push({ t: 'send', conn: cmd.conn, packet: connack });
    }
    if (present) {
      resendInflight(s, this.settings, now, out);
      if (!fillInflight(s, this.settings, now, out)) this.breakInvariant('no free packet id', out);
    }
  }

  private attach(s: Session, cmd: ConnectCommand): void {
    s.conn = cmd.conn;
    s.protocol = cmd.protocol;
    s.username = cmd.username;
    s.expiryS = cmd.expiryS;
    s.will = cmd.will;
    s.receiveMax = cmd.receiveMax;
    s.maxPacketSize = cmd.maxPacketSize;
    s.expiresAt = null;
    this.byConn.set(cmd.conn, s);
  }

  private detach(s: Session): void {
    if (s.conn !== null) this.byConn.delete(s.conn);
    s.conn = null;
  }

  /** A second connection with the same client id closes the first [MQTT-3.1.4-3]. The first ended
   * without DISCONNECT, so its will is processed: published now if its delay is 0 or the session
   * ends (`ends`: the new connection starts clean, or the old session lasted only as long as its
   * connection), else cancelled by the resume [MQTT-3.1.3-9]. */
  private takeover(s: Session, ends: boolean, now: number, out: Effects): void {
    const old = s.conn ?? '';
    out?.push({ t: 'close', conn: old, reason: RC.SESSION_TAKEN_OVER });
    event(out, 'takeover', { clientId: s.clientId, conn: old });
    this.detach(s);
    const will = s.will;
    s.will = null;
    if (will === null) return;
    if (will.delayS === 0 || ends) this.publishWill(s.clientId, will.msg, now, out);
    else event(out, 'will-cancelled', { clientId: s.clientId });
  }

  /** A pending will when its client connects again: a failover will is dropped; otherwise clean
   * ends the old session, which publishes it, and a resume cancels it [MQTT-3.1.3-9]. */
  private settlePendingWill(clientId: string, clean: boolean, now: number, out: Effects): void {
    const w = this.wills.get(clientId);
    if (w === undefined) return;
    this.wills.delete(clientId);
    if (w.failover) event(out, 'will-dropped', { clientId });
    else if (clean) this.publishWill(clientId, w.msg, now, out);
    else event(out, 'will-cancelled', { clientId });
  }

  private disconnect(cmd: DisconnectCommand, now: number, out: Effects): void {
    const s = this.byConn.get(cmd.conn);
    if (s === undefined) {
      this.noop(out, cmd.t, cmd.conn, 'connection holds no session');
      return;
    }
    this.cow(s);
    this.detach(s);
    // v5 DISCONNECT may replace the Session Expiry Interval [MQTT-3.14.2-2].
    if (cmd.expiryS !== undefined) s.expiryS = cmd.expiryS;
    const will = s.will;
    s.will = null;
    if (will !== null && cmd.publishWill) this.startWill(s.clientId, will, now, out);
    this.startExpiry(s, now, out);
  }

  private startWill(clientId: string, will: Will, now: number, out: Effects): void {
    if (will.delayS === 0) this.publishWill(clientId, will.msg, now, out);
    else this.setPendingWill({ clientId, msg: will.msg, at: now + will.delayS * 1000, failover: false });
  }

  /** An offline session ends after its expiry interval; 0 ends it now. */
  private startExpiry(s: Session, now: number, out: Effects): void {
    if (s.expiryS === 0) {
      this.endSession(s, now, out);
      return;
    }
    if (s.expiryS === EXPIRY_NEVER) return;
    s.expiresAt = now + s.expiryS * 1000;
    this.pushDeadline({ at: s.expiresAt, clientId: s.clientId, kind: SESSION_DEADLINE });
  }

  /** The session ends: a pending will goes first, since a will is published at the earlier of its
   * delay and the session's end [MQTT-3.1.3-9]; a failover will keeps its grace. */
  private endSession(s: Session, now: number, out: Effects): void {
    const w = this.wills.get(s.clientId);
    if (w !== undefined && !w.failover) {
      this.wills.delete(s.clientId);
      this.publishWill(s.clientId, w.msg, now, out);
    }
    this.discardSession(s, now, out);
  }

  private discardSession(s: Session, now: number, out: Effects): void {
    for (const filter of [...(s.subs?.keys() ?? [])]) this.removeSub(s, filter);
    this.detach(s);
    s.expiresAt = null;
    this.sessions.delete(s.clientId);
    this.redistribute(takeShared(s, null, true), now, out);
  }

  /** Messages a shared subscription gave to a session that will not acknowledge them go to
   * another member of the same share, by the share's round robin (§4.8.2 SHOULD), in the order the
   * session held them; with no member left they are dropped and counted. The new member gets them
   * at its own granted QoS, with its own Subscription Identifier. */
  private redistribute(items: readonly Delivery[], now: number, out: Effects): void {
    for (const item of items) {
      const share = item.share as string;
      const members = this.shareMembersFor(share, item.msg.topic);
      const t = members.length === 0 ? null : this.pickMember(share, members, this.cursors, item.msg, item.expiresAt, now);
      if (t === null) {
        if (out !== null) event(out, 'shared-dropped', { share, topic: item.msg.topic });
        continue;
      }
      if (out !== null) event(out, 'shared-redelivered', { share, clientId: t.s.clientId });
      this.deliverRouted(t, item.msg, item.expiresAt, now, out);
    }
  }

  /** The members of `share` that may read `topic` (which matches the share's filter). */
  private shareMembersFor(share: string, topic: string): Subscription[] {
    const matches: Subscription[] = [];
    const count = this.subsTrie.matchValues(topic, matches);
    const members: Subscription[] = [];
    for (let i = 0; i < count; i++) {
      const sub = matches[i] as Subscription;
      if (sub.share !== share) continue;
      const member = this.sessions.get(sub.clientId);
      if (member !== undefined && aclAllows(this.settings.acl, member, 'read', topic)) members.push(sub);
    }
    return members;
  }

  private sortedSessions(): Session[] {
    return [...this.sessions.values()].sort(byClientId);
  }

  // ---- deadlines ----

  private setPendingWill(w: PendingWill): void {
    this.wills.set(w.clientId, w);
    this.pushDeadline({ at: w.at, clientId: w.clientId, kind: WILL_DEADLINE });
  }

  private pushDeadline(d: Deadline): void {
    this.deadlines.push(d);
    // Cancelled deadlines stay in the heap until popped; rebuild when they dominate it.
    if (this.deadlines.length > 2 * (this.sessions.size + this.wills.size) + 64) this.rebuildDeadlines();
  }

  private rebuildDeadlines(): void {
    this.deadlines.clear();
    for (const s of this.sessions.values()) {
      if (s.expiresAt !== null) this.deadlines.push({ at: s.expiresAt, clientId: s.clientId, kind: SESSION_DEADLINE });
    }
    for (const w of this.wills.values()) this.deadlines.push({ at: w.at, clientId: w.clientId, kind: WILL_DEADLINE });
  }

  /** A CONNECT is judged as if every deadline <= now had fired: the per-entry cap may have left
   * this client's will or session end for a later entry, and a resume must neither find a session
   * that has expired nor cancel a will that is due [MQTT-3.1.3-9]. Same outcome as the heap order:
   * a due will goes first, and a session end publishes a will that is not yet due. Their heap
   * entries go stale and are skipped when popped. */
  private runDueDeadlinesOf(clientId: string, now: number, out: Effects): void {
    const w = this.wills.get(clientId);
    if (w !== undefined && w.at <= now) {
      this.wills.delete(clientId);
      this.publishWill(clientId, w.msg, now, out);
    }
    const s = this.sessions.get(clientId);
    if (s === undefined || s.conn !== null || s.expiresAt === null || s.expiresAt > now) return;
    event(out, 'session-expired', { clientId });
    this.cow(s);
    this.endSession(s, now, out);
  }

  private isLive(d: Deadline): boolean {
    if (d.kind === WILL_DEADLINE) return this.wills.get(d.clientId)?.at === d.at;
    const s = this.sessions.get(d.clientId);
    return s !== undefined && s.conn === null && s.expiresAt === d.at;
  }

  /** True when the last entry left due deadlines for the next ones (DEADLINES_PER_ENTRY_MAX): the
   * serving node then proposes a tick at once instead of waiting for a later deadline. */
  get deadlinesBacklogged(): boolean {
    return this.deadlinesCapped;
  }

  /** Fires the deadlines <= now in (time, client id, kind) order, at most DEADLINES_PER_ENTRY_MAX
   * of them; the rest fire, in the same order, at the entries that follow. */
  private runDeadlines(now: number, out: Effects): void {
    this.deadlinesCapped = false;
    for (let fired = 0; ; ) {
      const top = this.deadlines.peek();
      if (top === undefined || top.at > now) return;
      if (fired === DEADLINES_PER_ENTRY_MAX) {
        this.deadlinesCapped = true;
        return;
      }
      this.deadlines.pop();
      if (!this.isLive(top)) continue;
      fired++;
      if (top.kind === WILL_DEADLINE) {
        const w = this.wills.get(top.clientId);
        this.wills.delete(top.clientId);
        if (w !== undefined) this.publishWill(w.clientId, w.msg, now, out);
      } else {
        const s = this.sessions.get(top.clientId);
        if (s === undefined) continue;
        event(out, 'session-expired', { clientId: s.clientId });
        this.cow(s);
        this.endSession(s, now, out);
      }
    }
  }

  // ---- subscriptions ----

  private subscribe(cmd: SubscribeCommand, now: number, out: Effects): void {
    const s = this.byConn.get(cmd.conn);
    if (s === undefined) {
      this.noop(out, cmd.t, cmd.conn, 'connection holds no session');
      return;
    }
    this.cow(s);
    const codes: number[] = [];
    const wantRetained: Subscription[] = [];
    for (const req of cmd.subs) {
      const shared = parseSharedFilter(req.filter);
      const sub: Subscription = {
        clientId: s.clientId,
        filter: req.filter,
        topicFilter: shared === null ? req.filter : shared.filter,
        share: shared === null ? null : req.filter,
        qos: minQos(req.qos, this.settings.maxQos),
        nl: req.nl,
        rap: req.rap,
        rh: req.rh,
        subId: cmd.subId ?? null,
      };
      // The same filter again replaces the subscription's options [MQTT-3.8.4-3].
      const isNew = s.subs?.has(req.filter) !== true;
      const refusal = this.subscribeRefusal(s, sub, isNew);
      if (refusal !== null) {
        if (refusal === RC.NOT_AUTHORIZED && out !== null) event(out, 'acl-denied-subscribe', { clientId: s.clientId, filter: req.filter });
        codes.push(refusal);
        continue;
      }
      this.addSub(s, sub, isNew);
      codes.push(GRANTED[sub.qos]);
      // Retain Handling (§3.8.3.1; 3.1.1 always sends); none on a shared subscription (§4.8.2).
      if (sub.share === null && (s.protocol < 5 || req.rh === 0 || (req.rh === 1 && isNew))) wantRetained.push(sub);
    }
    out?.push({ t: 'send', conn: cmd.conn, packet: { type: 'suback', pid: cmd.pid, codes: withRefused(cmd.refused, codes) } });
    for (const sub of wantRetained) this.sendRetained(s, sub, now, out);
  }

  /** NOT_AUTHORIZED when the ACL gives no read access to the whole filter; QUOTA_EXCEEDED for a
   * new subscription beyond Settings.maxSubscriptions. */
  private subscribeRefusal(s: Session, sub: Subscription, isNew: boolean): number | null {
    if (!aclAllowsSubscribe(this.settings.acl, s, sub.topicFilter)) return RC.NOT_AUTHORIZED;
    const max = this.settings.maxSubscriptions;
    if (isNew && max > 0 && (s.subs?.size ?? 0) >= max) return RC.QUOTA_EXCEEDED;
    return null;
  }

  /** Filters (as subscribed) whose subscriptions were added, changed or removed since the last
   * takeTouchedFilters(); null while nobody asks (a sharded node's routes, src/scale/shard-link.ts). */
  private touched: Set<string> | null = null;

  /** Starts noting the filters whose subscriptions change. Node-local, not part of the state. */
  trackFilters(): void {
    this.touched ??= new Set();
  }

  /** The filters noted since the last call (empty when not tracking). */
  takeTouchedFilters(): ReadonlySet<string> {
    const t = this.touched;
    if (t === null || t.size === 0) return EMPTY_TOUCHED;
    this.touched = new Set();
    return t;
  }

  /** The highest QoS granted to the subscriptions to `filter` (as subscribed, `$share/G/` included),
   * or null when there is none; O(subscriptions to that topic filter). */
  subscribedQos(filter: string): QoS | null {
    const topicFilter = parseSharedFilter(filter)?.filter ?? filter;
    let max: QoS | null = null;
    this.subsTrie.forEachAt(topicFilter, (_key, sub) => {
      if (sub.filter === filter && (max === null || sub.qos > max)) max = sub.qos;
    });
    return max;
  }

  /** Every filter (as subscribed) with the highest QoS granted to its subscriptions; O(subscriptions). */
  subscribedFilters(): Map<string, QoS> {
    const out = new Map<string, QoS>();
    for (const s of this.sessions.values()) {
      for (const sub of s.subs?.values() ?? []) {
        const held = out.get(sub.filter);
        if (held === undefined || sub.qos > held) out.set(sub.filter, sub.qos);
      }
    }
    return out;
  }

  private addSub(s: Session, sub: Subscription, isNew: boolean): void {
    this.touched?.add(sub.filter);
    s.subs ??= new Map();
    s.subs.set(sub.filter, sub);
    this.subsTrie.add(sub.topicFilter, trieKey(sub), sub);
    if (isNew && sub.share !== null) this.shareMembers.set(sub.share, (this.shareMembers.get(sub.share) ?? 0) + 1);
  }

  private removeSub(s: Session, filter: string): boolean {
    const subs = s.subs;
    const sub = subs?.get(filter);
    if (subs == null || sub === undefined) return false;
    subs.delete(filter);
    this.touched?.add(filter);
    this.subsTrie.remove(sub.topicFilter, trieKey(sub));
    if (sub.share !== null) {
      const left = (this.shareMembers.get(sub.share) ?? 1) - 1;
      if (left > 0) this.shareMembers.set(sub.share, left);
      else {
        this.shareMembers.delete(sub.share);
        this.cursors.delete(sub.share);
        this.qos0Cursors.delete(sub.share);
      }
    }
    return true;
  }

  /** Retained messages matching a new subscription, with the retain flag set [MQTT-3.3.1-8], at
   * min(message, granted) QoS, through the normal delivery path. Expired ones are deleted here. */
  private sendRetained(s: Session, sub: Subscription, now: number, out: Effects): void {
    const found: [string, RetainedMessage][] = [];
    this.retained.match(sub.topicFilter, (topic, r) => found.push([topic, r]));
    const subIds = sub.subId === null ? null : [sub.subId];
    for (const [topic, r] of found) {
      if (r.expiresAt !== null && now >= r.expiresAt) {
        this.retained.delete(topic);
        continue;
      }
      if (!aclAllows(this.settings.acl, s, 'read', topic)) continue;
      const d = { msg: r.msg, qos: minQos(r.msg.qos, sub.qos), retain: true, subIds, expiresAt: r.expiresAt, share: null };
      if (!deliver(s, d, this.settings, now, out)) this.breakInvariant('no free packet id', out);
    }
  }

  private unsubscribe(cmd: UnsubscribeCommand, now: number, out: Effects): void {
    const s = this.byConn.get(cmd.conn);
    if (s === undefined) {
      this.noop(out, cmd.t, cmd.conn, 'connection holds no session');
      return;
    }
    this.cow(s);
    const codes = cmd.filters.map((f) => (this.removeSub(s, f) ? RC.SUCCESS : RC.NO_SUBSCRIPTION_EXISTED));
    out?.push({ t: 'send', conn: cmd.conn, packet: { type: 'unsuback', pid: cmd.pid, codes: withRefused(cmd.refused, codes) } });
    // Queued messages of a share left go to its other members; those already sent are completed
    // with this session [MQTT-3.10.4-3].
    for (let i = 0; i < codes.length; i++) {
      const f = cmd.filters[i] as string;
      if (codes[i] === RC.SUCCESS && f.startsWith(SHARE_PREFIX)) this.redistribute(takeShared(s, f, false), now, out);
    }
  }

  // ---- publishing ----

  /** A publish is routed even if its connection has gone (docs/design.md "Apply judges each command");
   * acks and the QoS 2 packet id hold need the session the connection holds. */
  private publish(cmd: PublishCommand, now: number, out: Effects): void {
    const s = this.byConn.get(cmd.conn);
    const pid = cmd.pid ?? 0;
    // A held id: routed already, only answered again (qos2-receiver.ts).
    if (cmd.msg.qos === 2 && isHeld(s, pid)) {
      out?.push({ t: 'send', conn: cmd.conn, packet: { type: 'pubrec', pid, code: RC.SUCCESS } });
      return;
    }
    if (cmd.quotaExceeded === true) {
      // Not held, so not received before: refused, and the flow ends with no id held (§4.3.3).
      event(out, 'publish-quota-exceeded', { clientId: s?.clientId ?? '', pid });
      out?.push({ t: 'send', conn: cmd.conn, packet: { type: 'pubrec', pid, code: RC.QUOTA_EXCEEDED } });
      return;
    }
    if (cmd.msg.qos === 1 && qos1ReusesHeldId(s, pid)) {
      event(out, 'packet-id-in-use', { clientId: s?.clientId ?? '', pid });
      out?.push({ t: 'send', conn: cmd.conn, packet: { type: 'puback', pid, code: RC.PACKET_IDENTIFIER_IN_USE } });
      return;
    }
    let code: number = RC.NOT_AUTHORIZED;
    if (this.mayPublish(s, cmd.msg, out)) {
      const full = this.outboxes.size > 0 ? this.fullOutboxFor(cmd.msg) : null;
      if (full !== null) {
        this.refuseForOutbox(cmd, s, full, out);
        return;
      }
      const fullShard = cmd.fwd === undefined ? null : this.fullShardOutboxFor(cmd.fwd, cmd.msg);
      if (fullShard !== null) {
        this.refuseForShardOutbox(cmd, s, fullShard, out);
        return;
      }
      const matched = this.publishMessage(s?.clientId ?? null, cmd.msg, now, out);
      if (cmd.fwd !== undefined) this.toShardOutboxes(cmd.fwd, cmd.msg, now);
      code = matched === 0 && cmd.fwd === undefined ? RC.NO_MATCHING_SUBSCRIBERS : RC.SUCCESS;
    } else if (s !== undefined && s.protocol < 5) {
      // 3.1.1 has no negative PUBACK: acknowledged and dropped, as Mosquitto does.
      code = RC.SUCCESS;
    }
    if (cmd.msg.qos === 1) out?.push({ t: 'send', conn: cmd.conn, packet: { type: 'puback', pid, code } });
    if (cmd.msg.qos === 2) {
      if (s !== undefined && code < RC.UNSPECIFIED_ERROR) {
        this.cow(s);
        holdAfterPubrec(s, pid, code);
      }
      out?.push({ t: 'send', conn: cmd.conn, packet: { type: 'pubrec', pid, code } });
    }
  }

  /** Write access of the publishing session; a publish whose connection no longer holds a session
   * cannot be judged and is not routed while an ACL is configured. */
  private mayPublish(s: Session | undefined, msg: Message, out: Effects): boolean {
    const acl = this.settings.acl;
    if (acl === null) return true;
    if (s !== undefined && aclAllows(acl, s, 'write', msg.topic)) return true;
    event(out, 'acl-denied', { clientId: s?.clientId ?? '', access: 'write', topic: msg.topic });
    return false;
  }

  private publishWill(clientId: string, msg: Message, now: number, out: Effects): void {
    event(out, 'will-published', { clientId, topic: msg.topic });
    this.publishMessage(clientId, msg, now, out);
  }

  /** Stores or deletes the retained message, then routes; returns the number of matching sessions. */
  /** `viaBridge`: the bridge the message came in through, whose own outbox does not take it back
   * (what the remote sent us is not sent to the remote again, as Mosquitto's bridge does). */
  private publishMessage(from: string | null, msg: Message, now: number, out: Effects, viaBridge: string | null = null): number {
    if (msg.retain && this.settings.retainAvailable) {
      // An empty retained payload deletes the topic's retained message [MQTT-3.3.1-6].
      if (msg.payload.length === 0) this.retained.delete(msg.topic);
      else this.retained.set(msg.topic, { msg, expiresAt: expiryDeadline(msg, now) });
    }
    if (this.outboxes.size > 0) this.toOutboxes(msg, now, out, viaBridge);
    return this.route(from, msg, now, out, this.cursors);
  }

  // ---- bridges ----

  /** One outbox per bridge the rules name: a new bridge's starts at this entry (nothing before it
   * is forwarded); the outbox of a bridge the rules no longer name is dropped with its messages. */
  private syncOutboxes(index: number, out: Effects): void {
    const names = bridgeNames(this.settings.bridgeRules);
    for (const name of [...this.outboxes.keys()].sort()) {
      if (names.includes(name)) continue;
      const o = this.outboxes.get(name) as BridgeOutbox;
      event(out, 'bridge-outbox-removed', { bridge: name, dropped: o.items.length });
      this.outboxes.delete(name);
    }
    for (const name of names) if (!this.outboxes.has(name)) this.outboxes.set(name, newOutbox(name, index));
  }

  /** A copy of a committed message in the outbox of each bridge an outbound rule forwards it to;
   * not admitted (and counted) where the outbox is full. */
  private toOutboxes(msg: Message, now: number, out: Effects, viaBridge: string | null): void {
    const rules = this.settings.bridgeRules;
    const expiresAt = expiryDeadline(msg, now);
    for (const o of this.outboxes.values()) {
      if (o.name === viaBridge) continue;
      const f = outboundForward(rules, o.name, msg.topic, msg.qos);
      if (f === null) continue;
      const item: OutboxMessage = { index: this.index, topic: f.topic, qos: f.qos, msg, expiresAt, pid: 0, rec: false };
      if (expiresAt !== null && expiresAt <= now) {
        // A Message Expiry Interval of 0: expired before it could wait.
        event(out, 'bridge-outbox-expired', { bridge: o.name, topic: msg.topic, index: item.index });
        continue;
      }
      const size = outboxItemSize(item);
      if (o.items.length >= this.settings.bridgeOutboxMessages || o.bytes + size > this.settings.bridgeOutboxBytes) {
        // A client's QoS 1/2 publish was refused before (fullOutboxFor): what reaches here is a QoS 0
        // message or a will, dropped from this outbox and counted.
        event(out, 'bridge-outbox-full', { bridge: o.name, topic: msg.topic, queued: o.items.length });
        continue;
      }
      pushOutbox(o, f.qos === 2 ? { ...item, pid: takeOutboxPid(o) } : item);
    }
  }

  /** Drops from every outbox the messages whose expiry has passed at `now`, the entry's time, and
   * counts each (docs/bridges.md "When the remote is down"): never forwarded after it. */
  private expireOutboxes(now: number, out: Effects): void {
    for (const o of this.outboxes.values()) {
      for (const it of expireOutbox(o, now)) event(out, 'bridge-outbox-expired', { bridge: o.name, topic: it.msg.topic, index: it.index });
    }
  }

  /** The first outbox that a QoS 1/2 message would be copied into and that has no room for it. */
  private fullOutboxFor(msg: Message, viaBridge: string | null = null): BridgeOutbox | null {
    if (msg.qos === 0) return null;
    const rules = this.settings.bridgeRules;
    for (const o of this.outboxes.values()) {
      if (o.name === viaBridge) continue;
      const f = outboundForward(rules, o.name, msg.topic, msg.qos);
      if (f === null) continue;
      const size = f.topic.length + msg.payload.length;
      if (o.items.length >= this.settings.bridgeOutboxMessages || o.bytes + size > this.settings.bridgeOutboxBytes) return o;
    }
    return null;
  }

  /** A QoS 1/2 publish a full outbox has no room for is refused entirely, neither routed nor
   * retained, rather than acknowledged and not forwarded (docs/bridges.md "When the remote is
   * down"): MQTT 5 PUBACK/PUBREC 0x97 (no QoS 2 id held); 3.1.1 has no negative PUBACK, so its
   * connection is closed without one, as the publish rate limit does, and the client keeps it. */
  private refuseForOutbox(cmd: PublishCommand, s: Session | undefined, o: BridgeOutbox, out: Effects): void {
    event(out, 'bridge-outbox-refused', { bridge: o.name, clientId: s?.clientId ?? '', topic: cmd.msg.topic });
    if (s === undefined) return;
    const pid = cmd.pid ?? 0;
    if (s.protocol === 5) {
      out?.push({ t: 'send', conn: cmd.conn, packet: { type: cmd.msg.qos === 1 ? 'puback' : 'pubrec', pid, code: RC.QUOTA_EXCEEDED } });
    } else out?.push({ t: 'close', conn: cmd.conn, reason: RC.QUOTA_EXCEEDED });
  }

  // ---- forwarding to other shards ----

  /** The first shard of `dests` whose outbox has no room for `msg`; a new outbox has room for any
   * message that fits the bound at all. */
  private fullShardOutboxFor(dests: readonly string[], msg: Message): string | null {
    const size = shardItemSize(msg);
    for (const d of dests) {
      const o = this.shardOutboxes.get(d);
      const items = o?.items.length ?? 0;
      const bytes = o?.bytes ?? 0;
      if (items >= this.settings.bridgeOutboxMessages || bytes + size > this.settings.bridgeOutboxBytes) return d;
    }
    return null;
  }

  /** A copy of a committed QoS 1 publish, with the next sequence, in the outbox of each shard it is
   * forwarded to (fullShardOutboxFor has checked the room). Not retained there: retained messages
   * across shards are not built. */
  private toShardOutboxes(dests: readonly string[], msg: Message, now: number): void {
    const copy: Message = msg.retain ? { ...msg, retain: false } : msg;
    for (const d of dests) {
      let o = this.shardOutboxes.get(d);
      if (o === undefined) {
        o = newShardOutbox(d, `${now}-${this.index}`);
        this.shardOutboxes.set(d, o);
      }
      pushShardOutbox(o, this.index, copy);
    }
  }

  /** As refuseForOutbox, for a shard's full outbox. */
  private refuseForShardOutbox(cmd: PublishCommand, s: Session | undefined, dest: string, out: Effects): void {
    event(out, 'shard-outbox-refused', { shard: dest, clientId: s?.clientId ?? '', topic: cmd.msg.topic });
    if (s === undefined) return;
    const pid = cmd.pid ?? 0;
    if (s.protocol === 5) out?.push({ t: 'send', conn: cmd.conn, packet: { type: 'puback', pid, code: RC.QUOTA_EXCEEDED } });
    else out?.push({ t: 'close', conn: cmd.conn, reason: RC.QUOTA_EXCEEDED });
  }

  /** JetStream acknowledged every message to `dest` below sequence `below`. Only forward, and never
   * past what was assigned. */
  private shardPosition(dest: string, below: number, out: Effects): void {
    const o = this.shardOutboxes.get(dest);
    if (o === undefined || below <= o.position || below > o.next) {
      event(out, 'no-op', {
        command: 'shard-position',
        shard: dest,
        reason: `position ${below} not after ${o?.position ?? 'none'} or beyond ${o?.next ?? 'none'}`,
      });
      return;
    }
    advanceShardOutbox(o, below);
  }

  /** What the sequence rule makes of `seq` after `highest` (docs/scale-out.md "Receiving"): only
   * the next one is applied; a repeat is dropped; one ahead of a gap waits for the gap to fill.
   * Protected so that a test kit can plant a bug in it and show the tests catch it. */
  protected sequenceVerdict(highest: number, seq: number): 'apply' | 'repeat' | 'gap' {
    if (seq <= highest) return 'repeat';
    return seq === highest + 1 ? 'apply' : 'gap';
  }

  /** A message forwarded by another shard: published like a client's QoS 1 publish, without the
   * publish ACL (the origin judged it) and never forwarded again, when it is the next of its origin
   * log; the PUBACK effect to the receiver says whether JetStream may be acknowledged. */
  private shardIn(cmd: ShardInCommand, now: number, out: Effects): void {
    const key = `${cmd.origin} ${cmd.log}`;
    const highest = this.highWater.get(key) ?? 0;
    const verdict = this.sequenceVerdict(highest, cmd.seq);
    if (verdict === 'repeat') {
      event(out, 'shard-in-repeat', { origin: cmd.origin, log: cmd.log, seq: cmd.seq, highest });
      out?.push({ t: 'send', conn: cmd.conn, packet: { type: 'puback', pid: cmd.handle, code: RC.SUCCESS } });
      return;
    }
    if (verdict === 'gap') {
      event(out, 'shard-in-gap', { origin: cmd.origin, log: cmd.log, seq: cmd.seq, highest });
      out?.push({ t: 'send', conn: cmd.conn, packet: { type: 'puback', pid: cmd.handle, code: RC.UNSPECIFIED_ERROR } });
      return;
    }
    this.highWater.set(key, cmd.seq);
    const matched = this.publishMessage(null, cmd.msg, now, out);
    const code = matched === 0 ? RC.NO_MATCHING_SUBSCRIBERS : RC.SUCCESS;
    out?.push({ t: 'send', conn: cmd.conn, packet: { type: 'puback', pid: cmd.handle, code } });
  }

  /** The highest sequence applied from (origin, log), 0 for none. */
  highestFrom(origin: string, log: string): number {
    return this.highWater.get(`${origin} ${log}`) ?? 0;
  }

  /** A message a bridge received from its remote (docs/bridges.md "Inbound"): published like a
   * client's QoS 1 or retained publish, but without the publish ACL (the bridge's inbound rules are
   * the operator's choice of what comes in, as in Mosquitto) and not copied back into the same
   * bridge's outbox. The PUBACK effect to the bridge's connection is what the bridge acknowledges
   * the remote with: code 0x97 when another bridge's full outbox refuses the message, which the
   * bridge then does not acknowledge, so the remote sends it again. */
  private bridgeIn(cmd: BridgeInCommand, now: number, out: Effects): void {
    const bridge = this.outboxes.get(cmd.bridge);
    if (bridge === undefined) {
      // The rules no longer name the bridge: nothing acknowledged, so the remote keeps it.
      event(out, 'no-op', { command: 'bridge-in', bridge: cmd.bridge, reason: 'no such bridge' });
      return;
    }
    // The remote's QoS 2 flow is answered with PUBREC, its QoS 1 flow with PUBACK.
    const type = cmd.q2 === true ? 'pubrec' : 'puback';
    if (cmd.q2 === true && bridge.inIds.has(cmd.pid as number)) {
      // Sent again under an id held: published when it first came, so only answered.
      out?.push({ t: 'send', conn: cmd.conn, packet: { type, pid: cmd.pid as number, code: RC.SUCCESS } });
      return;
    }
    const full = this.fullOutboxFor(cmd.msg, cmd.bridge);
    if (full !== null) {
      event(out, 'bridge-outbox-refused', { bridge: full.name, from: cmd.bridge, topic: cmd.msg.topic });
      if (cmd.pid !== undefined) out?.push({ t: 'send', conn: cmd.conn, packet: { type, pid: cmd.pid, code: RC.QUOTA_EXCEEDED } });
      return;
    }
    if (cmd.q2 === true) bridge.inIds.add(cmd.pid as number);
    const matched = this.publishMessage(null, cmd.msg, now, out, cmd.bridge);
    const code = matched === 0 ? RC.NO_MATCHING_SUBSCRIBERS : RC.SUCCESS;
    if (cmd.pid !== undefined) out?.push({ t: 'send', conn: cmd.conn, packet: { type, pid: cmd.pid, code } });
  }

  /** The remote's PUBREL: the id is let go, and PUBCOMP answers it (MQTT 5 0x92 for an id not held,
   * as after a remote's session was dropped). */
  private bridgeInRel(name: string, conn: ConnId, pid: number, out: Effects): void {
    const o = this.outboxes.get(name);
    if (o === undefined) {
      event(out, 'no-op', { command: 'bridge-in-rel', bridge: name, reason: 'no such bridge' });
      return;
    }
    const held = o.inIds.delete(pid);
    out?.push({ t: 'send', conn, packet: { type: 'pubcomp', pid, code: held ? RC.SUCCESS : RC.PACKET_IDENTIFIER_NOT_FOUND } });
  }

  /** The remote answered PUBREC: recorded on each item still in the outbox, and PUBREL for every
   * one to the bridge's connection, sent by the serving node only now that the record is committed.
   * An item no longer in the outbox (completed, or expired) gets its PUBREL too: the remote holds
   * it until then, and no later serving node sends it again. */
  private bridgePubrec(cmd: BridgePubrecCommand, out: Effects): void {
    const o = this.outboxes.get(cmd.bridge);
    if (o === undefined) {
      event(out, 'no-op', { command: 'bridge-pubrec', bridge: cmd.bridge, reason: 'no such bridge' });
      return;
    }
    for (const [index, pid] of cmd.recs) {
      recordPubrec(o, index, pid);
      out?.push({ t: 'send', conn: cmd.conn, packet: { type: 'pubrel', pid } });
    }
  }

  /** The remote completed everything of the outbox below `below`. Only forward: a position at or
   * below the recorded one, or beyond this entry, changes nothing. */
  private bridgePosition(bridge: string, below: number, index: number, out: Effects): void {
    const o = this.outboxes.get(bridge);
    if (o === undefined) {
      event(out, 'no-op', { command: 'bridge-position', bridge, reason: 'no such bridge' });
      return;
    }
    if (below <= o.position || below > index) {
      event(out, 'no-op', { command: 'bridge-position', bridge, reason: `position ${below} not after ${o.position} or beyond ${index}` });
      return;
    }
    advanceOutbox(o, below);
  }

  /** Delivers to each matching session once, at the highest granted QoS of its matching
   * subscriptions, with all their Subscription Identifiers [MQTT-3.3.4-2, -3]; and to one member of
   * each matching shared subscription. */
  private route(from: string | null, msg: Message, now: number, out: Effects, cursors: Map<string, string>): number {
    this.resetRouteScratch();
    const matches = this.routeMatches;
    const matchCount = this.subsTrie.matchValues(msg.topic, matches);
    // Keys are unique within one filter, so only matches of several filters can name one client twice.
    this.routeMerging = this.subsTrie.matchedFilters > 1;
    for (let i = 0; i < matchCount; i++) this.routeMatch(matches[i] as Subscription, from, msg);
    const expiresAt = expiryDeadline(msg, now);
    const targets = this.routeTargets;
    const count = this.routeTargetCount;
    for (let i = 0; i < count; i++) this.deliverRouted(targets[i] as Target, msg, expiresAt, now, out);
    const shares = this.routeShares;
    for (const [share, members] of shares) {
      const t = this.pickMember(share, members, cursors, msg, expiresAt, now);
      if (t !== null) this.deliverRouted(t, msg, expiresAt, now, out);
    }
    const matched = count + shares.size;
    this.resetRouteScratch();
    return matched;
  }

  /** Merges one matching subscription into the targets of the message being routed. */
  private routeMatch(sub: Subscription, from: string | null, msg: Message): void {
    if (sub.share !== null) {
      const member = this.sessions.get(sub.clientId);
      if (member === undefined || !aclAllows(this.settings.acl, member, 'read', msg.topic)) return;
      const members = this.routeShares.get(sub.share);
      if (members === undefined) this.routeShares.set(sub.share, [sub]);
      else members.push(sub);
      return;
    }
    // No Local: not to the publisher's own session [MQTT-3.8.3-3].
    if (sub.nl && sub.clientId === from) return;
    const t = this.routeMerging ? this.findTarget(sub.clientId) : undefined;
    if (t === undefined) {
      const s = this.sessions.get(sub.clientId);
      // Read access is judged per message against the subscriber as it is now (docs/design.md "Settings").
      if (s !== undefined && aclAllows(this.settings.acl, s, 'read', msg.topic)) this.addTarget(s, sub);
      return;
    }
    if (sub.qos > t.qos) t.qos = sub.qos;
    t.rap ||= sub.rap;
    if (sub.subId === null) return;
    if (t.subIds === null) t.subIds = [sub.subId];
    else t.subIds.push(sub.subId);
  }

  /** The target of clientId among those of the message being routed: a scan while there are few
   * (the common case allocates no Map entry), the index beyond that. */
  private findTarget(clientId: string): Target | undefined {
    const count = this.routeTargetCount;
    if (count > ROUTE_TARGETS_SCANNED) return this.routeTargetIndex.get(clientId);
    const targets = this.routeTargets;
    for (let i = 0; i < count; i++) {
      const t = targets[i] as Target;
      if (t.s.clientId === clientId) return t;
    }
    return undefined;
  }

  private addTarget(s: Session, sub: Subscription): void {
    const subIds = sub.subId === null ? null : [sub.subId];
    const targets = this.routeTargets;
    const i = this.routeTargetCount++;
    let t = targets[i];
    if (t === undefined) {
      t = { s, qos: sub.qos, rap: sub.rap, subIds, share: null };
      targets.push(t);
    } else {
      t.s = s;
      t.qos = sub.qos;
      t.rap = sub.rap;
      t.subIds = subIds;
    }
    if (!this.routeMerging) return;
    if (i === ROUTE_TARGETS_SCANNED)
      for (let j = 0; j < i; j++) this.routeTargetIndex.set((targets[j] as Target).s.clientId, targets[j] as Target);
    if (i >= ROUTE_TARGETS_SCANNED) this.routeTargetIndex.set(s.clientId, t);
  }

  /** Empties route's scratch, also after a throw mid-route, and lets go of the sessions and
   * subscription ids it pointed at. */
  private resetRouteScratch(): void {
    const targets = this.routeTargets;
    for (let i = 0; i < this.routeTargetCount; i++) {
      const t = targets[i] as Target;
      t.s = NO_SESSION;
      t.subIds = null;
    }
    this.routeTargetCount = 0;
    if (this.routeTargetIndex.size > 0) this.routeTargetIndex.clear();
    if (this.routeShares.size > 0) this.routeShares.clear();
  }

  /** The live copy has its retain flag cleared unless Retain As Published [MQTT-3.3.1-12, -13]. */
  private deliverRouted(t: Target, msg: Message, expiresAt: number | null, now: number, out: Effects): void {
    const d = { msg, qos: minQos(msg.qos, t.qos), retain: t.rap && msg.retain, subIds: t.subIds, expiresAt, share: t.share };
    // deliver() sends QoS 0 without changing the session.
    if (d.qos !== 0) this.cow(t.s);
    if (!deliver(t.s, d, this.settings, now, out)) this.breakInvariant('no free packet id', out);
  }

  /** Round robin over the share's online members in client id order, from the one after the last
   * chosen; an offline member's queue only when no member is online (§4.8.2). A member that cannot
   * take the message (too large for it, queue full) passes it to the next; when none can, the
   * first choice drops it and counts the drop. */
  private pickMember(
    share: string,
    members: Subscription[],
    cursors: Map<string, string>,
    msg: Message,
    expiresAt: number | null,
    now: number,
  ): Target | null {
    members.sort(byClientId);
    const online = members.filter((m) => this.sessions.get(m.clientId)?.conn != null);
    const pool = online.length > 0 ? online : members;
    const last = cursors.get(share);
    const after = last === undefined ? -1 : pool.findIndex((m) => m.clientId > last);
    const start = Math.max(after, 0);
    let first: Target | null = null;
    for (let i = 0; i < pool.length; i++) {
      const sub = pool[(start + i) % pool.length] as Subscription;
      const s = this.sessions.get(sub.clientId);
      if (s === undefined) continue;
      const t: Target = { s, qos: sub.qos, rap: sub.rap, subIds: sub.subId === null ? null : [sub.subId], share };
      first ??= t;
      const d = { msg, qos: minQos(msg.qos, t.qos), retain: false, subIds: t.subIds, expiresAt, share };
      if (canTake(s, d, this.settings, now)) {
        cursors.set(share, sub.clientId);
        return t;
      }
    }
    if (first !== null) cursors.set(share, first.s.clientId);
    return first;
  }

  // ---- QoS 1/2 flows ----

  /** PUBREL from a publisher (qos2-receiver.ts). */
  private pubrel(conn: ConnId, pid: number, out: Effects): void {
    const s = this.byConn.get(conn);
    if (s === undefined) {
      this.noop(out, 'pubrel', conn, 'connection holds no session');
      return;
    }
    this.cow(s);
    const code = releaseOnPubrel(s, pid);
    out?.push({ t: 'send', conn, packet: { type: 'pubcomp', pid, code } });
  }

  private ack(conn: ConnId, pid: number, kind: AckKind, now: number, out: Effects): void {
    const s = this.byConn.get(conn);
    if (s === undefined) {
      this.noop(out, 'ack', conn, 'connection holds no session');
      return;
    }
    this.cow(s);
    if (!applyAck(s, pid, kind, now, out)) {
      if (out !== null) this.noop(out, 'ack', conn, `${kind} for unknown packet id ${pid}`);
      return;
    }
    if (kind !== 'pubrec' && !fillInflight(s, this.settings, now, out)) this.breakInvariant('no free packet id', out);
  }

  // ---- snapshot image ----

  private image(): StateImage {
    const retained: [string, RetainedMessage][] = [...this.retained.entries()];
    retained.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    const cursors: [string, string][] = [...this.cursors.entries()];
    cursors.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    return {
      appliedIndex: this.index,
      appliedTime: this.time,
      servePeriod: this.servePeriod,
      generation: this.generation,
      settings: this.settings,
      failed: this.failReason,
      sessions: this.sortedSessions(),
      wills: [...this.wills.values()].sort(byClientId),
      retained,
      cursors,
      bridges: this.outboxImages(),
      shards: this.shardOutboxImages(),
      highWater: this.highWaterImage(),
    };
  }

  /** [origin, log, highest] sorted by origin, then log. */
  private highWaterImage(): [string, string, number][] {
    return [...this.highWater]
      .map(([k, v]): [string, string, number] => {
        const sp = k.indexOf(' ');
        return [k.slice(0, sp), k.slice(sp + 1), v];
      })
      .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  }

  /** The shard outboxes sorted by shard, each as [dest, log, next, position, items]: copies. */
  private shardOutboxImages(): [string, string, number, number, ShardOutboxItem[]][] {
    return [...this.shardOutboxes.values()]
      .sort((a, b) => (a.dest < b.dest ? -1 : a.dest > b.dest ? 1 : 0))
      .map((o) => [o.dest, o.log, o.next, o.position, o.items.toArray()]);
  }

  /** The outboxes sorted by name, each as [name, position, items, nextPid, inIds]: copies, so apply may go on. */
  private outboxImages(): OutboxImage[] {
    return [...this.outboxes.values()]
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .map((o) => [o.name, o.position, o.items.toArray(), o.nextPid, [...o.inIds].sort((a, b) => a - b)]);
  }

  /** Replaces the whole state with an image and rebuilds the derived indexes. Builds into fresh
   * structures, so a corrupt image leaves the current state untouched. */
  private load(img: StateImage): void {
    const sessions = new Map<string, Session>();
    const byConn = new Map<ConnId, Session>();
    for (const s of img.sessions) {
      if (sessions.has(s.clientId)) throw new SnapshotError(`corrupt snapshot: duplicate session ${s.clientId}`);
      // A session that breaks a rule apply keeps would break the broker at a later entry.
      const problem = sessionProblem(s, img.settings);
      if (problem !== null) throw new SnapshotError(`corrupt snapshot: session ${s.clientId}: ${problem}`);
      sessions.set(s.clientId, s);
      if (s.conn !== null) {
        if (byConn.has(s.conn)) throw new SnapshotError(`corrupt snapshot: conn ${s.conn} holds two sessions`);
        byConn.set(s.conn, s);
      }
    }
    const retained = new RetainedTrie<RetainedMessage>();
    for (const [topic, r] of img.retained) retained.set(topic, r);
    this.settings = img.settings;
    this.servePeriod = img.servePeriod;
    this.generation = img.generation;
    this.index = img.appliedIndex;
    this.time = img.appliedTime;
    this.failReason = img.failed;
    this.sessions = sessions;
    this.byConn = byConn;
    this.wills = new Map(img.wills.map((w) => [w.clientId, w]));
    this.retained = retained;
    this.cursors = new Map(img.cursors);
    this.outboxes = new Map();
    for (const [name, position, items, nextPid, inIds] of img.bridges) {
      const o = newOutbox(name, position, nextPid, inIds);
      for (const it of items) pushOutbox(o, it);
      this.outboxes.set(name, o);
    }
    this.shardOutboxes = new Map();
    for (const [dest, log, next, position, items] of img.shards) {
      const o = newShardOutbox(dest, log);
      o.next = position;
      o.position = position;
      for (const it of items) pushShardOutbox(o, it.index, it.msg);
      o.next = next;
      this.shardOutboxes.set(dest, o);
    }
    this.highWater = new Map(img.highWater.map(([origin, log, seq]) => [`${origin} ${log}`, seq]));
    this.qos0Cursors = new Map();
    this.digestCache = null;
    // An open cursor holds the replaced objects, which nothing mutates any more: it stays
    // consistent at its own index, and copy-on-write has nothing left to guard.
    this.cursor = null;
    this.subsTrie = new TopicTrie();
    this.shareMembers = new Map();
    for (const s of sessions.values()) for (const sub of s.subs?.values() ?? []) this.addSub(s, sub, true);
    this.rebuildDeadlines();
  }
}
