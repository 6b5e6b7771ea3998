// A broker node: the log, the state machine applied in log order, and the MQTT listener that is
// open only while the log says this node serves (DESIGN.md "The seam").
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { Broker } from '../broker/broker.js';
import type { AclRule, Command, ConnId, Effect, Entry, Message, OutPacket, ProtocolLevel, Settings } from '../broker/commands.js';
import { Fifo } from '../broker/fifo.js';
import type { SnapshotCursor } from '../broker/snapshot-cursor.js';
import type { AuditSink } from '../cluster/audit-log.js';
import type { BrokerLog, LogListener } from '../log/broker-log.js';
import { LocalLog } from '../log/local-log.js';
import { encode } from '../protocol/encoder.js';
import { RC } from '../protocol/reason-codes.js';
import { type Authenticator, allowAll } from './authenticator.js';
import { Connection, type ConnectionHost, type ConnectionLimits } from './connection.js';
import { DIGEST_CURSOR, DIGEST_SLICE_MS, DigestRunner, type RunStats, type Verdict } from './digest-runner.js';
import { type EnhancedAuthMethod, methodTable } from './enhanced-auth.js';
import { ConnectRateLimiter, DEFAULT_NODE_LIMITS, type NodeLimits, WRITE_BUFFER_BYTES_DEFAULT } from './limits.js';
import { type ListenerSpec, listenerUrl } from './listeners/listen-url.js';
import { Listener, type ListenerHost } from './listeners/listener.js';
import type { TlsMaterial } from './listeners/tls-material.js';
import { type ConnackLimits, toWire } from './outbound.js';
import { RateLimitedLog } from './rate-limited-log.js';
import type { ByteStream, Transport } from './transport.js';

export interface NodeOptions {
  /** The one mqtt:// listener used when `listeners` is absent or empty. */
  host: string;
  port: number;
  /** Every listener of the node (--listen); all serve the same broker. */
  listeners?: ListenerSpec[];
  /** Certificates for mqtts:// and wss:// listeners (required when there is one). */
  tls?: TlsMaterial | null;
  maxPacketSize: number;
  maxQueuedMessages: number;
  maxQueuedBytes: number;
  /** Output bytes waiting per connection (--max-write-buffer-bytes); absent: 1 MiB. */
  maxWriteBufferBytes?: number;
  maxInflight: number;
  receiveMaximum: number;
  maxKeepalive: number;
  topicAliasMaximum: number;
  maxQos: 0 | 1 | 2;
  retainAvailable: boolean;
  willGraceS: number;
  logger: Logger;
  /** Checks each CONNECT; accepts everyone when absent. */
  authenticator?: Authenticator;
  /** MQTT 5 enhanced-authentication methods offered (e.g. ScramSha256 over a credential store). A
   * CONNECT naming one of them is authenticated by it instead of `authenticator`; any other
   * Authentication Method is refused with 0x8C. */
  enhancedAuth?: readonly EnhancedAuthMethod[];
  /** Subscriptions per session (Settings.maxSubscriptions); 0 or absent: no bound. */
  maxSubscriptions?: number;
  /** The ACL table (src/broker/acl.ts); null or absent: everything allowed. */
  acl?: AclRule[] | null;
  /** Local limits; absent fields take DEFAULT_NODE_LIMITS. */
  nodeLimits?: Partial<NodeLimits>;
  /** Log a 'stats' line at this interval; 0 or absent: off. */
  statsIntervalMs?: number;
  /** Further gauges for the stats line (e.g. the authenticator's bounded tables). */
  gauges?: () => Record<string, number>;
  /** The audit stream (--audit-log): every ack and delivery this node executes. */
  audit?: AuditSink | null;
}

/** At most one log line per key per window (protocol errors, apply events). */
const LOG_WINDOW_MS = 10_000;
/** stop(): peers that do not close within this time after DISCONNECT 0x8B are destroyed. */
const STOP_GRACE_MS = 1_000;
/** setTimeout's largest delay. */
const TIMER_MAX_MS = 0x7fffffff;
/** Back-off when the state reports a deadline it should already have processed. */
const STALE_DEADLINE_RETRY_MS = 1_000;
/** Sockets ended after their peer's FIN in one event-loop turn. Ending and closing one costs
 * about 30–40 µs (Node's stream teardown, the close() system call, the disconnect proposal and
 * its apply), so 64 keep a turn near 2 ms however many clients leave at once (DESIGN.md
 * "Performance principles": no turn beyond E/10). Measured with bench/disconnect-storm.ts, 10,000
 * clients: event-loop delay max 20–65 ms at 64 per turn, 43–175 ms at 256, 120–490 ms with every
 * socket closed in the poll phase that read its FIN. */
export const PEER_ENDS_PER_TURN_MAX = 64;
/** Connections whose output is written (one socket write each) in one event-loop turn, and the
 * bytes after which a turn stops early; the rest are written in the next turns, in the order they
 * became dirty. A write costs about 10–20 µs in the kernel, so 256 keep the flush of a turn near
 * 4 ms when thousands of clients reconnect at once and each gets its CONNACK and queued messages
 * (DESIGN.md "Performance principles": no turn beyond E/10). The byte bound is high (copying
 * 4 MiB into socket buffers is about a millisecond) so that a turn writing many messages to a few
 * subscribers is not split. */
export const FLUSHES_PER_TURN_MAX = 256;
export const FLUSH_BYTES_PER_TURN_MAX = 4 * 1024 * 1024;

/** The Settings that apply() consults, from the node's options. */
export function settingsFrom(o: NodeOptions): Settings {
  return {
    maxQueuedMessages: o.maxQueuedMessages,
    maxQueuedBytes: o.maxQueuedBytes,
    maxInflight: o.maxInflight,
    maxQos: o.maxQos,
    retainAvailable: o.retainAvailable,
    maxPacketSize: o.maxPacketSize,
    willGraceS: o.willGraceS,
    maxSubscriptions: o.maxSubscriptions ?? 0,
    acl: o.acl ?? null,
  };
}

interface SharedPublish {
  msg: Message;
  retain: boolean;
  buf: Buffer;
}

/** Broken invariants are errors; refused or dropped work is a warning; the rest is routine. */
function eventLevel(kind: string): 'debug' | 'info' | 'warn' | 'error' {
  switch (kind) {
    case 'invariant':
    case 'digest-mismatch':
      return 'error';
    case 'check-unknown':
    case 'check-match':
    case 'digest-run':
    case 'snapshot-deferred':
    case 'flush-continued':
      return 'debug';
    case 'no-op':
    case 'queue-full':
    case 'shared-dropped':
    case 'too-large':
    case 'will-dropped':
    case 'qos0-dropped-slow-consumer':
    case 'reads-paused-slow-consumer':
    case 'stale-deadline':
    case 'reads-paused':
    case 'acl-denied':
    case 'auth-failed':
    case 'auth-throttled':
    case 'auth-anonymous-refused':
    case 'limit-max-connections':
    case 'limit-pending-connections':
    case 'limit-connect-rate':
    case 'limit-publish-rate':
    case 'limit-topic':
      return 'warn';
    default:
      return 'info';
  }
}

/** The connection a command came from, if any: its proposer counts it as pending until applied. */
function connOf(cmd: Command): ConnId | undefined {
  switch (cmd.t) {
    case 'connect':
    case 'disconnect':
    case 'subscribe':
    case 'unsubscribe':
    case 'publish':
    case 'pubrel':
    case 'ack':
    case 'acks':
      return cmd.conn;
    case 'serve-start':
    case 'settings':
    case 'tick':
    case 'check':
      return undefined;
    default: {
      const _: never = cmd;
      void _;
    }
  }
}

export class BrokerNode implements LogListener, ConnectionHost, ListenerHost {
  readonly limits: ConnectionLimits;
  readonly authenticator: Authenticator;
  readonly enhancedAuth: ReadonlyMap<string, EnhancedAuthMethod>;
  /** Event counts (apply events, protocol errors, drops), for metrics. */
  readonly counters = new Map<string, number>();
  /** PUBLISH packets received from clients (every QoS) and written to clients, for metrics. */
  messagesIn = 0;
  messagesOut = 0;
  private readonly opts: NodeOptions;
  private readonly log: BrokerLog;
  private readonly broker = new Broker();
  private readonly logger: Logger;
  private readonly limited: RateLimitedLog;
  /** Open connections of the current serving period only. */
  private readonly conns = new Map<ConnId, Connection>();
  private period = 0;
  private seq = 0;
  private readonly specs: ListenerSpec[];
  private listeners: Listener[] | null = null;
  /** Bumped whenever listening should stop, so a listen that completes late closes itself. */
  private listenGen = 0;
  /** Bound port per spec; a later serving period listens on the same ports (port 0 stays the
   * first pick). */
  private readonly boundPorts: number[];
  /** Connections with output not yet written, in the order they got it; FLUSHES_PER_TURN_MAX
   * written per turn. A connection appears once until written (its own dirty flag). */
  private readonly dirty = new Fifo<Connection>();
  /** Connections whose peer sent FIN, ended PEER_ENDS_PER_TURN_MAX per turn in arrival order. */
  private readonly peerEnds = new Fifo<Connection>();
  private peerEndsScheduled = false;
  private readonly peerEndsBound = (): void => this.endPeers();
  private flushScheduled = false;
  private readonly flushBound = (): void => this.flushAll();
  /** The last QoS 0 PUBLISH encoded per protocol level, shared by the rest of its fan-out; cleared
   * at every flush so it holds no message beyond the turn. */
  private readonly sharedPublish: (SharedPublish | null)[] = [null, null, null, null, null, null];
  private readonly applyOut: Effect[] = [];
  private readonly routeOut: Effect[] = [];
  private tickTimer: NodeJS.Timeout | null = null;
  private tickDeadline: number | undefined;
  private readonly tickBound = (): void => this.onTick();
  private paused = false;
  /** Sockets accepted by a listener and still in their PROXY header, TLS handshake or WebSocket
   * upgrade: they count toward max-pending-connections from accept. */
  private handshaking = 0;
  /** Connections of this period admitted past CONNECT (max-connections counts these). */
  private readonly admitted = new Set<ConnId>();
  private readonly connectRate: ConnectRateLimiter;
  private settings: Settings;
  private statsTimer: NodeJS.Timeout | null = null;
  private halted = false;
  private stopped = false;
  private firstListen: { resolve: () => void; reject: (e: Error) => void } | null = null;
  /** The state digests at `check` entries, hashed a slice per turn after the entry is applied. */
  private readonly digests: DigestRunner;
  /** A digest mismatch found here; local, since the other replicas found none. */
  private digestFailure: string | null = null;

  constructor(opts: NodeOptions, log?: BrokerLog) {
    this.opts = opts;
    this.logger = opts.logger;
    this.limited = new RateLimitedLog(opts.logger, LOG_WINDOW_MS, () => performance.now());
    this.settings = settingsFrom(opts);
    this.log = log ?? new LocalLog({ node: 1, settings: this.settings });
    this.digests = new DigestRunner({
      sliceMs: DIGEST_SLICE_MS,
      clock: () => performance.now(),
      onRun: (stats) => this.digestRun(stats),
      onVerdict: (atIndex, verdict, expected, mine) => this.checkVerdict(atIndex, verdict, expected, mine),
    });
    this.authenticator = opts.authenticator ?? allowAll;
    this.specs = opts.listeners?.length ? opts.listeners : [{ kind: 'mqtt', host: opts.host, port: opts.port, path: '', proxy: null }];
    this.boundPorts = this.specs.map(() => 0);
    this.enhancedAuth = methodTable(opts.enhancedAuth);
    const nl: NodeLimits = { ...DEFAULT_NODE_LIMITS, ...opts.nodeLimits };
    this.connectRate = new ConnectRateLimiter(nl.connectRatePerAddress);
    this.limits = {
      ...nl,
      maxPacketSize: opts.maxPacketSize,
      maxKeepalive: opts.maxKeepalive,
      receiveMaximum: opts.receiveMaximum,
      topicAliasMaximum: opts.topicAliasMaximum,
      maxQos: opts.maxQos,
      retainAvailable: opts.retainAvailable,
      maxWriteBufferBytes: opts.maxWriteBufferBytes ?? WRITE_BUFFER_BYTES_DEFAULT,
    };
  }

  /** The bound port of the first listener (the real one when options asked for port 0); 0 before
   * the first listen. */
  get port(): number {
    return this.boundPorts[0] ?? 0;
  }

  /** Bound ports in the order of the listener specs. */
  get ports(): readonly number[] {
    return this.boundPorts;
  }

  /** Re-reads the TLS files (SIGHUP); new handshakes use them, open connections stay. */
  reloadTls(): void {
    const tls = this.opts.tls;
    if (tls == null) return;
    try {
      const r = tls.reload();
      if (r === 'changed') this.logger.info({ cert: tls.settings.cert }, 'tls certificates reloaded');
    } catch (err) {
      this.event('tls-reload-failed');
      this.logger.error({ err: (err as Error).message }, 'tls reload failed; the previous certificates stay in use');
    }
  }

  get readsPaused(): boolean {
    return this.paused;
  }

  /** Open MQTT connections of the current serving period. */
  get connectionCount(): number {
    return this.conns.size;
  }

  /** Why this node stopped serving (a broken invariant in apply, a digest mismatch); null while
   * sound. */
  get failure(): string | null {
    return this.broker.failed ?? this.digestFailure;
  }

  /** Index and digest of the newest `check` whose digest run finished here; the leader's next
   * check carries it. */
  get lastCheck(): { index: number; digest: string } | null {
    return this.digests.latest();
  }

  /** The index of the open digest run, or null. */
  get digestRunning(): number | null {
    return this.digests.running;
  }

  /** The replicated state, consistent at the last applied entry (for raft log compaction); null
   * while a digest run holds the one snapshot cursor: the driver asks again in a later turn, and a
   * run lasts a bounded number of turns, so compaction waits but never starves. */
  snapshot(): SnapshotCursor | null {
    if (this.digests.running !== null) {
      this.event('snapshot-deferred', { digestRun: this.digests.running });
      return null;
    }
    return this.broker.snapshot();
  }

  /** Time of the last entry applied. */
  get appliedTime(): number {
    return this.broker.appliedTime;
  }

  /** Replaces the replicated state with a snapshot's (installed from the raft leader on a node that
   * does not serve); the deadline timer follows the new state. */
  restore(chunks: Iterable<Uint8Array>): void {
    // An open digest run goes on reading the replaced state, consistent at its own index.
    this.broker.restore(chunks);
    this.armTick();
  }

  /** Drops the replicated state (raft joined a newer epoch made by a force-start elsewhere: its log
   * follows from the start). This node does not serve while that happens. */
  reset(): void {
    this.digests.reset();
    this.broker.restore(new Broker().snapshot());
    this.armTick();
  }

  /** Starts the log; resolves once this node first serves and listens (a cluster follower's
   * start() resolves only when it becomes the serving leader). */
  start(): Promise<void> {
    const first = new Promise<void>((resolve, reject) => {
      this.firstListen = { resolve, reject };
    });
    this.opts.tls?.watch(() => this.reloadTls());
    this.log.start(this);
    const every = this.opts.statsIntervalMs ?? 0;
    if (every > 0) {
      this.statsTimer = setInterval(() => this.logger.info(this.stats(), 'stats'), every);
      this.statsTimer.unref();
    }
    return first;
  }

  /** Stops accepting, closes every connection (v5: DISCONNECT 0x8B), stops the log. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.clearTick();
    this.digests.cancel();
    this.opts.tls?.close();
    if (this.statsTimer !== null) clearInterval(this.statsTimer);
    const closing = this.stopServing(RC.SERVER_SHUTTING_DOWN, !this.log.serving);
    this.firstListen?.resolve();
    this.firstListen = null;
    // Nothing is written once stopServing returns, so the log (a cluster leader's handover) need
    // not wait for clients to close their sockets.
    await Promise.all([closing, this.log.stop()]);
  }

  // ---- LogListener ----

  committed(entries: readonly Entry[]): void {
    for (let i = 0; i < entries.length; i++) this.applyEntry(entries[i] as Entry);
    this.flushTurn(FLUSHES_PER_TURN_MAX, FLUSH_BYTES_PER_TURN_MAX);
    if (this.broker.failed !== null && !this.halted) this.halt(this.broker.failed);
    this.armTick();
  }

  serving(on: boolean, servePeriod: number): void {
    if (this.stopped) return;
    if (!on) {
      this.logger.info({ period: this.period }, 'serve-end');
      // The lease lapsed or a higher term appeared: another node may serve soon.
      void this.stopServing(RC.SERVER_SHUTTING_DOWN, true);
      return;
    }
    if (this.halted) return;
    if (servePeriod !== this.period) this.closeAll(undefined, true);
    this.period = servePeriod;
    this.seq = 0;
    this.logger.info({ period: servePeriod }, 'serve-start');
    this.startListening();
    this.armTick();
  }

  drain(): void {
    if (!this.paused) return;
    this.paused = false;
    for (const c of this.conns.values()) c.setReadsPaused(false);
  }

  // ---- applying ----

  private applyEntry(e: Entry): void {
    // Effects only while serving, only for this period's open connections (the map holds no
    // others). A node that does not serve applies the same entry to the same state but builds no
    // effects, which it would drop. Serving begins only between batches (after committed()), so
    // a node that does not serve before apply does not serve after it; one that does is asked
    // again after apply, since its lease may have lapsed meanwhile (a long pause in apply).
    const out = this.log.serving ? this.applyOut : null;
    if (out !== null) out.length = 0;
    this.broker.apply(e, out);
    if (e.cmd.t === 'check') this.checkApplied(e.index, e.cmd.atIndex, e.cmd.digest);
    if (out !== null && this.log.serving) this.execute(out);
    const id = connOf(e.cmd);
    const conn = id === undefined ? undefined : this.conns.get(id);
    if (conn === undefined) return;
    try {
      conn.applied();
    } catch (err) {
      conn.internalError(err);
    }
  }

  private execute(out: readonly Effect[]): void {
    for (let i = 0; i < out.length; i++) {
      const e = out[i] as Effect;
      if (e.t === 'event') {
        this.event(e.kind, e.detail);
        continue;
      }
      const conn = this.conns.get(e.conn);
      if (conn === undefined) continue;
      try {
        this.executeFor(conn, e);
      } catch (err) {
        // An effect that cannot be encoded is a bug; it costs this connection, not the process
        // (a throw here would stop the log's delivery on every later batch too).
        conn.internalError(err);
      }
    }
  }

  private executeFor(conn: Connection, e: Exclude<Effect, { t: 'event' }>): void {
    switch (e.t) {
      case 'send':
        if (e.packet.type === 'publish') this.messagesOut++;
        conn.deliver(e.packet);
        if (this.opts.audit != null) this.opts.audit.packet(e.packet, this.broker.clientIdOf(e.conn));
        return;
      case 'close':
        conn.closeByBroker(e.reason);
        return;
      default: {
        const _: never = e;
        void _;
      }
    }
  }

  /** A `check` entry at `index` was applied: compare the digest it carries, then hash the state at
   * `index` over the next turns, before any later entry is applied. One snapshot cursor at a time:
   * while a digest run or a compaction snapshot is open this check's run is skipped (the other
   * cursor is never cancelled, so compaction never starves). */
  private checkApplied(index: number, atIndex: number, digest: string): void {
    // atIndex 0: the leader had no completed digest yet, so there is nothing to compare.
    if (atIndex !== 0) this.digests.expect(atIndex, digest);
    const busy = this.digests.running !== null ? 'digest' : this.broker.cursorOpen ? 'snapshot' : null;
    if (busy !== null) {
      this.event('digest-skipped', { index, busy });
      return;
    }
    this.digests.open(index, this.broker.snapshotCursor(DIGEST_CURSOR));
  }

  private digestRun(stats: RunStats): void {
    this.event('digest-run', { ...stats, ms: Math.round(stats.ms), longestSliceMs: Math.round(stats.longestSliceMs) });
  }

  private checkVerdict(atIndex: number, verdict: Verdict, expected: string, mine: string | null): void {
    switch (verdict) {
      case 'match':
        this.event('check-match', { atIndex });
        return;
      case 'unknown':
        this.event('check-unknown', { atIndex });
        return;
      case 'mismatch':
        this.event('digest-mismatch', { atIndex, expected, mine });
        if (this.digestFailure !== null || this.stopped) return;
        this.digestFailure = `digest mismatch at ${atIndex}`;
        if (!this.halted) this.halt(this.digestFailure);
        return;
      default: {
        const _: never = verdict;
        void _;
      }
    }
  }

  /** A broken invariant in apply: this node stops serving and says why (DESIGN.md "The seam"). */
  private halt(reason: string): void {
    this.halted = true;
    this.logger.error({ reason }, 'state machine failed; this node stops serving');
    void this.stopServing(undefined, true);
  }

  /** Counters and gauges of the bounded tables, for the stats line and tests. */
  stats(): Record<string, unknown> {
    return {
      connections: this.conns.size,
      connected: this.admitted.size,
      pending: this.pendingCount(),
      handshaking: this.handshaking,
      connectRateTable: this.connectRate.table.size,
      connectRateTableMax: this.connectRate.table.max,
      ...this.opts.gauges?.(),
      counters: Object.fromEntries(this.counters),
    };
  }

  /** A configuration reload (SIGHUP): the new ACL table is proposed as a `settings` command, so
   * every replica switches at the same log position. */
  reloadAcl(acl: AclRule[] | null): void {
    this.settings = { ...this.settings, acl };
    this.settingsReloaded();
  }

  /** The files behind the settings were re-read (SIGHUP): a later serve-start of this node carries
   * the new settings, and while serving they are proposed now, with this node's configuration hash
   * (which covers the password file too, so a reload of that file alone is proposed as well). */
  settingsReloaded(): void {
    this.log.updateSettings(this.settings);
    if (this.log.serving && !this.stopped) this.log.propose({ t: 'settings', settings: this.settings });
  }

  // ---- ConnectionHost ----

  /** The refusal of a CONNECT by a node limit, or null when admitted (and then counted until the
   * socket closes): the per-address connect rate first, then max-connections. */
  admitConnect(address: string, conn: Connection): number | null {
    if (!this.connectRate.admit(address, performance.now())) {
      this.event('limit-connect-rate', { address });
      return RC.CONNECTION_RATE_EXCEEDED;
    }
    const max = this.limits.maxConnections;
    if (max > 0 && this.admitted.size >= max) {
      this.event('limit-max-connections', { connected: this.admitted.size });
      return RC.QUOTA_EXCEEDED;
    }
    this.admitted.add(conn.id);
    return null;
  }

  propose(cmd: Command): void {
    if (cmd.t === 'publish') this.messagesIn++;
    this.log.propose(cmd);
    if (!this.paused && !this.log.accepting) {
      this.paused = true;
      this.event('reads-paused');
      for (const c of this.conns.values()) c.setReadsPaused(true);
    }
  }

  routeQos0(from: ConnId, msg: Message): void {
    if (!this.log.serving) return;
    this.messagesIn++;
    const out = this.routeOut;
    out.length = 0;
    this.broker.routeQos0(from, msg, out);
    this.execute(out);
  }

  markDirty(c: Connection): void {
    this.dirty.push(c);
    this.scheduleFlush();
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(this.flushBound);
  }

  peerEnded(c: Connection): void {
    this.peerEnds.push(c);
    this.schedulePeerEnds();
  }

  private schedulePeerEnds(): void {
    if (this.peerEndsScheduled) return;
    this.peerEndsScheduled = true;
    setImmediate(this.peerEndsBound);
  }

  private endPeers(): void {
    this.peerEndsScheduled = false;
    for (let n = 0; n < PEER_ENDS_PER_TURN_MAX; n++) {
      const c = this.peerEnds.shift();
      if (c === undefined) return;
      try {
        c.endAfterPeer();
      } catch (err) {
        c.internalError(err);
      }
    }
    if (this.peerEnds.length > 0) this.schedulePeerEnds();
  }

  closed(c: Connection): void {
    if (this.conns.get(c.id) === c) {
      this.conns.delete(c.id);
      this.admitted.delete(c.id);
    }
  }

  event(kind: string, fields?: Record<string, unknown>): void {
    this.counters.set(kind, (this.counters.get(kind) ?? 0) + 1);
    this.limited.log(eventLevel(kind), `event:${kind}`, fields ?? {}, kind);
  }

  protocolError(key: string, fields: Record<string, unknown>, message: string): void {
    this.counters.set(`protocol-error:${key}`, (this.counters.get(`protocol-error:${key}`) ?? 0) + 1);
    this.limited.warn(`protocol:${key}`, fields, message);
  }

  // ---- output ----

  /** A QoS 0 delivery without per-subscription fields is the same bytes for every subscriber of
   * one level (DESIGN.md "Performance principles": encode a PUBLISH once per fan-out). QoS 1/2
   * deliveries differ in packet id and are encoded each. */
  encodePublish(p: Extract<OutPacket, { type: 'publish' }>, level: ProtocolLevel, limits: ConnackLimits): Buffer {
    if (p.qos !== 0 || p.dup || p.subIds !== undefined || p.expiryS !== undefined) {
      return encode(toWire(p, level, limits), level);
    }
    const slot = this.sharedPublish[level];
    if (slot != null && slot.msg === p.msg && slot.retain === p.retain) return slot.buf;
    const buf = encode(toWire(p, level, limits), level);
    this.sharedPublish[level] = { msg: p.msg, retain: p.retain, buf };
    return buf;
  }

  /** The scheduled flush. */
  private flushAll(): void {
    this.flushScheduled = false;
    this.flushTurn(FLUSHES_PER_TURN_MAX, FLUSH_BYTES_PER_TURN_MAX);
  }

  /** Writes the output of at most `conns` dirty connections, stopping early once `bytes` were
   * written; what is left is written in a later turn. */
  private flushTurn(conns: number, bytes: number): void {
    this.sharedPublish.fill(null);
    if (this.dirty.length === 0) return;
    if (this.period !== 0 && !this.log.serving) {
      // Each write checks the lease (DESIGN.md "One server at a time"): it lapsed since the last
      // event, so this node stops serving before anything more goes out.
      this.logger.info({ period: this.period }, 'serve-end at write');
      void this.stopServing(RC.SERVER_SHUTTING_DOWN, true);
      return;
    }
    let written = 0;
    for (let n = 0; n < conns && written < bytes; n++) {
      const c = this.dirty.shift();
      if (c === undefined) return;
      written += c.flush();
    }
    if (this.dirty.length > 0) {
      this.event('flush-continued', { left: this.dirty.length });
      this.scheduleFlush();
    }
  }

  // ---- listening ----

  private startListening(): void {
    if (this.listeners !== null) return;
    const gen = ++this.listenGen;
    const limits = {
      maxPacketSize: this.opts.maxPacketSize,
      handshakeTimeoutMs: this.limits.connectTimeoutMs,
      maxWriteBufferBytes: this.limits.maxWriteBufferBytes,
      backlog: this.limits.listenBacklog,
    };
    const listeners = this.specs.map((spec) => new Listener(spec, this, this.opts.tls ?? null, limits));
    this.listeners = listeners;
    const bound = listeners.map((l, i) =>
      l.listen(this.boundPorts[i] || l.spec.port).then((port) => {
        this.boundPorts[i] = port;
        if (gen === this.listenGen) this.logger.info({ url: listenerUrl(l.spec, port), host: l.spec.host, port }, 'listening');
      }),
    );
    Promise.all(bound).then(
      () => {
        if (gen !== this.listenGen) {
          for (const l of listeners) void l.close(0);
          return;
        }
        this.firstListen?.resolve();
        this.firstListen = null;
      },
      (err: Error) => {
        for (const l of listeners) void l.close(0);
        if (this.listeners === listeners) this.listeners = null;
        this.logger.error({ err: err.message }, 'cannot listen');
        this.firstListen?.reject(err);
        this.firstListen = null;
      },
    );
  }

  /** Sockets not yet past CONNECT: in a handshake, or connections awaiting or in authentication. */
  private pendingCount(): number {
    return this.handshaking + this.conns.size - this.admitted.size;
  }

  /** Sockets that have not sent CONNECT cost memory and a timer each, and a TLS handshake costs
   * CPU: the bound counts them from accept, so a flood of handshakes is refused at accept too. */
  admitSocket(): boolean {
    if (this.pendingCount() >= this.limits.maxPendingConnections) {
      this.event('limit-pending-connections', { pending: this.pendingCount() });
      return false;
    }
    this.handshaking++;
    return true;
  }

  handshakeEnded(): void {
    this.handshaking--;
  }

  /** A socket past its handshake; its slot of the pending bound was released just before, and its
   * connection takes it. */
  accept(stream: ByteStream, transport: Transport): void {
    if (!this.log.serving || this.halted || this.stopped) {
      stream.destroy();
      return;
    }
    const id: ConnId = `${this.period}.${++this.seq}`;
    this.conns.set(id, new Connection(id, stream, transport, this));
  }

  refused(key: string, fields: Record<string, unknown>, message: string): void {
    this.counters.set(key, (this.counters.get(key) ?? 0) + 1);
    this.limited.warn(key, fields, message);
  }

  /** Closes every listener and every connection. `reason`: v5 DISCONNECT to send, if any.
   * `discard`: serving no longer holds, so what connections buffered this turn is never written. */
  private async stopServing(reason: number | undefined, discard: boolean): Promise<void> {
    this.listenGen++;
    this.clearTick();
    const listeners = this.listeners;
    this.listeners = null;
    // Before closing, so the flush inside closeAll sends the DISCONNECTs instead of re-entering.
    this.period = 0;
    this.closeAll(reason, discard);
    if (listeners !== null) await Promise.all(listeners.map((l) => l.close(STOP_GRACE_MS)));
  }

  private closeAll(reason: number | undefined, discard: boolean): void {
    for (const c of this.conns.values()) c.shutdown(reason ?? -1, discard);
    this.conns.clear();
    this.admitted.clear();
    // Every connection is closed now, so everything they hold goes out in this turn.
    this.flushTurn(Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY);
  }

  // ---- the deadline timer ----

  /** One timer on the state's next deadline, in log time; when it passes a `tick` is proposed so
   * idle time still advances (DESIGN.md "Deadlines live in the state"). */
  private armTick(): void {
    if (!this.log.serving || this.halted || this.stopped) {
      this.clearTick();
      return;
    }
    const deadline = this.broker.nextDeadline();
    if (deadline === undefined) {
      this.clearTick();
      return;
    }
    if (deadline === this.tickDeadline && this.tickTimer !== null) return;
    this.clearTick();
    let delay = deadline - this.log.now();
    if (deadline <= this.broker.appliedTime && this.broker.deadlinesBacklogged) {
      // The last entry fired its share of due deadlines (DEADLINES_PER_ENTRY_MAX): the next tick
      // fires more, in a later turn.
      delay = 0;
    } else if (deadline <= this.broker.appliedTime) {
      // Apply processes every deadline ≤ the entry's time; one still pending is a state bug,
      // and ticking at once would spin.
      this.event('stale-deadline', { deadline, appliedTime: this.broker.appliedTime });
      delay = STALE_DEADLINE_RETRY_MS;
    }
    this.tickDeadline = deadline;
    this.tickTimer = setTimeout(this.tickBound, Math.min(Math.max(delay, 0), TIMER_MAX_MS));
  }

  private clearTick(): void {
    if (this.tickTimer !== null) clearTimeout(this.tickTimer);
    this.tickTimer = null;
    this.tickDeadline = undefined;
  }

  private onTick(): void {
    this.tickTimer = null;
    this.tickDeadline = undefined;
    if (this.log.serving && !this.stopped) this.log.propose({ t: 'tick' });
  }
}
