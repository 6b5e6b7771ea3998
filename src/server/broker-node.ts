// A broker node: the log, the state machine applied in log order, and the MQTT listener that is
// open only while the log says this node serves (docs/design.md "The seam").
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { BridgeRule } from '../broker/bridge-rules.js';
import { Broker, type StateTotals } from '../broker/broker.js';
import type { AclRule, Command, ConnId, Effect, Entry, Message, PublishCommand, PubrelCommand, Settings } from '../broker/commands.js';
import { pickSettings } from '../broker/settings.js';
import type { ShardOutbox } from '../broker/shard-outbox.js';
import type { SnapshotCursor } from '../broker/snapshot-cursor.js';
import { type CounterKey, type EventKind, eventLevel, type RefusalKey } from '../events.js';
import type { BrokerLog, LogListener } from '../log/broker-log.js';
import { LocalLog } from '../log/local-log.js';
import type { ConnectPacket } from '../protocol/packets.js';
import { RC } from '../protocol/reason-codes.js';
import type { RouteRules, RouteStamp } from '../scale/routes.js';
import type { NatsClientSettings } from '../scale/shard-config.js';
import { ShardLink } from '../scale/shard-link.js';
import type { AuditSink } from './audit-sink.js';
import type { HookAuthorizer } from './auth/hook-authorizer.js';
import { type Authenticator, allowAll } from './authenticator.js';
import type { BridgeSpec } from './bridge/bridge-config.js';
import { type BridgeHost, BridgeSet, type BridgeState } from './bridge/bridge-link.js';
import { Connection, type ConnectionHost, type ConnectionLimits } from './connection.js';
import { DIGEST_CURSOR, DIGEST_SLICE_MS, DigestRunner, type RunStats, type Verdict } from './digest-runner.js';
import { OPEN_STORAGE_GATE, type StorageGate } from './disk-space.js';
import { type EnhancedAuthMethod, methodTable } from './enhanced-auth.js';
import { connectExpiryS } from './inbound.js';
import { LatencyBuckets } from './latency-buckets.js';
import { ConnectRateLimiter, DEFAULT_NODE_LIMITS, type NodeLimits, WRITE_BUFFER_BYTES_DEFAULT } from './limits.js';
import { type ListenerSpec, listenerUrl } from './listeners/listen-url.js';
import { Listener, type ListenerHost, type ListenerLimits } from './listeners/listener.js';
import type { TlsMaterial } from './listeners/tls-material.js';
import type { NodeObserver } from './node-observer.js';
import { Outbox, type OutboxGate } from './outbox.js';
import { PublishTracer } from './publish-trace.js';
import { RateLimitedLog } from './rate-limited-log.js';
import { type ReferenceSource, Referrer } from './referrer.js';
import { ShardGate, type ShardGateOptions } from './shard-gate.js';
import { filterReachesSys, type SysReadings, SysTopics } from './sys-topics.js';
import { DROP_EVENTS, PROBE_EVERY, sum, Traffic } from './traffic.js';
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
  /** An embedding application's authorizePublish / authorizeSubscribe hooks; absent: none. */
  authorizer?: HookAuthorizer;
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
  /** Consulted before storing a new QoS 1/2 message or persistent session (--data-dir's free-space
   * watch); absent: always open. */
  storageGate?: StorageGate;
  /** The audit stream (--audit-log): every ack and delivery this node executes. */
  audit?: AuditSink | null;
  /** Seconds between updates of the $SYS topics while serving (--sys-interval); 0 or absent: off. */
  sysIntervalS?: number;
  /** The version $SYS/broker/version names. */
  version?: string;
  /** A cluster node's raft view, for $SYS/broker/cluster/...; absent on a single node. */
  sysCluster?: () => { role: string; leader: number; term: number; redundant: boolean };
  /** --cluster-server-reference: while this node does not serve it listens anyway and answers
   * every CONNECT with the leader's address this gives (src/server/referrer.ts); one waiting for a
   * leader when this node starts to serve becomes a connection here. Absent: nothing listens
   * unless serving. */
  serverReference?: ReferenceSource;
  /** The embedding API's events (src/server/node-observer.ts); absent: none. */
  observer?: NodeObserver;
  /** Bridges to other brokers (docs/bridges.md): the node-local part; absent: none. */
  bridges?: BridgeSpec[];
  /** The replicated bridge settings (src/broker/settings.ts); absent: their initial values. */
  bridgeRules?: BridgeRule[];
  bridgeOutboxMessages?: number;
  bridgeOutboxBytes?: number;
  /** --shard: this node serves only the client ids of its shard (docs/scale-out.md); absent or
   * null: every client id. */
  shard?: ShardGateOptions | null;
  /** --nats with --shard: the NATS link that joins this shard to the others (docs/scale-out.md "The
   * serving node's routes"); absent or null: not joined. */
  nats?: NatsLinkOptions | null;
}

export interface NatsLinkOptions {
  /** --nats URLs. */
  servers: readonly string[];
  /** --shard-route rules: a filter they cover needs no route entry. */
  rules: RouteRules;
  /** The route bucket's name; absent: the deployment's default. */
  bucket?: string;
  /** --nats-user and the rest: how this node logs in to NATS, and its TLS files; absent: none. */
  client?: NatsClientSettings;
  /** The first field of this node's route stamps: it must grow across the node's restarts, since a
   * single node's log index starts again; absent: the wall clock at the node's creation (ms). */
  epoch?: number;
}

export interface BridgeStatus {
  name: string;
  state: BridgeState;
  /** Messages and bytes in its outbox (replicated state). */
  outbox: number;
  outboxBytes: number;
  /** Everything of the outbox below this log index was completed at the remote. */
  position: number;
  /** Completed at the remote by this process. */
  forwarded: number;
  /** Messages from the remote published here by this process (QoS 1: committed, then acknowledged). */
  received: number;
  /** Messages or packets from the remote refused as bad input by this process. */
  rejected: number;
  /** QoS 1/2 publishes refused while its outbox was full, while this node served. */
  refused: number;
  /** Messages not forwarded while this node served: QoS 0 or wills beyond a full outbox, and
   * messages larger than the remote takes. */
  dropped: number;
  /** Messages whose Message Expiry Interval passed while they waited in its outbox, dropped while
   * this node served. */
  expired: number;
  lastError: string | null;
}

const EMPTY_FILTERS: ReadonlySet<string> = new Set();

/** A latency probe not delivered within this is dropped, so another can start (ms). */
const PROBE_STALE_MS = 10_000;

/** At most one log line per key per window (protocol errors, apply events). */
const LOG_WINDOW_MS = 10_000;
/** stop(): peers that do not close within this time after DISCONNECT 0x8B are destroyed. */
const STOP_GRACE_MS = 1_000;
/** setTimeout's largest delay. */
const TIMER_MAX_MS = 0x7fffffff;
/** Back-off when the state reports a deadline it should already have processed. */
const STALE_DEADLINE_RETRY_MS = 1_000;

/** The Settings that apply() consults, from the node's options. */
export function settingsFrom(o: NodeOptions): Settings {
  return pickSettings(o);
}

/** The connection a command came from, if any: its proposer counts it as pending until applied. */
function connOf(cmd: Command): ConnId | undefined {
  switch (cmd.t) {
    case 'connect':
    case 'disconnect':
    case 'subscribe':
    case 'unsubscribe':
    case 'publish':
    case 'publishes':
    case 'pubrel':
    case 'ack':
    case 'acks':
      return cmd.conn;
    case 'serve-start':
    case 'settings':
    case 'tick':
    case 'check':
    case 'bridge-position':
    case 'bridge-pubrec':
    case 'bridge-in':
    case 'bridge-in-rel':
    case 'bridge-in-reset':
    case 'shard-position':
    case 'shard-in':
      return undefined;
    default: {
      const _: never = cmd;
      void _;
    }
  }
}

/** The message of the publish from `conn` with packet id `pid` that `cmd` carries, if any. */
function probedIn(cmd: Command, conn: ConnId, pid: number): Message | null {
  if (cmd.t === 'publish') return cmd.conn === conn && cmd.pid === pid ? cmd.msg : null;
  if (cmd.t !== 'publishes' || cmd.conn !== conn) return null;
  for (let i = 0; i < cmd.pubs.length; i++) {
    const p = cmd.pubs[i] as PublishCommand | PubrelCommand;
    if (p.t === 'publish' && p.pid === pid) return p.msg;
  }
  return null;
}

export class BrokerNode implements LogListener, ConnectionHost, ListenerHost, OutboxGate {
  readonly limits: ConnectionLimits;
  readonly authenticator: Authenticator;
  readonly authorizer: HookAuthorizer | null;
  readonly enhancedAuth: ReadonlyMap<string, EnhancedAuthMethod>;
  /** Event counts (apply events, protocol errors, drops), for metrics. */
  readonly counters = new Map<CounterKey, number>();
  /** Bytes, PUBLISH packets and connections of this process, for metrics and $SYS. */
  readonly traffic = new Traffic();
  /** PUBLISH read to the socket write of its first delivery, sampled (Traffic.probeCountdown). */
  readonly deliveryLatency = new LatencyBuckets();
  readonly storageGate: StorageGate;
  /** The status page's live trace of publishes (docs/operations.md "Live trace"). */
  readonly tracer = new PublishTracer();
  /** The probe: its message once known (a QoS 0 one at once, a QoS 1/2 one when applied), else the
   * connection and packet id that find its entry; the time of its read; the connection that got
   * its first delivery, whose next write ends the probe. probeAt 0: no probe. */
  private probeMsg: Message | null = null;
  private probeConn: ConnId | null = null;
  private probePid = 0;
  private probeAt = 0;
  private probeTarget: Connection | null = null;
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
  private readonly referrer: Referrer | null;
  /** --shard: which client ids are served here; null: every one. */
  readonly shardGate: ShardGate | null;
  /** Where the connections' output waits for its socket write (src/server/outbox.ts). */
  private readonly outbox: Outbox = new Outbox(this);
  private observedServing = false;
  private readonly clientIdOfBound = (conn: ConnId): string | null => this.broker.clientIdOf(conn);
  private readonly applyOut: Effect[] = [];
  private readonly routeOut: Effect[] = [];
  /** The $SYS table, local to this process; null with --sys-interval 0. */
  private readonly sys: SysTopics | null;
  private sysTimer: NodeJS.Timeout | null = null;
  private readonly startedAt = performance.now();
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
  /** Bridges to other brokers, connected only while this node serves (docs/bridges.md). */
  readonly bridges: BridgeSet;
  /** A digest mismatch found here; local, since the other replicas found none. */
  private digestFailure: string | null = null;
  /** --nats: the link to the other shards (routes); null when not joined. */
  readonly shardLink: ShardLink | null;
  private readonly routeEpoch: number;

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
    this.sys = (opts.sysIntervalS ?? 0) > 0 ? new SysTopics(opts.version ?? 'unknown') : null;
    this.authenticator = opts.authenticator ?? allowAll;
    this.authorizer = opts.authorizer ?? null;
    this.specs = opts.listeners?.length ? opts.listeners : [{ kind: 'mqtt', host: opts.host, port: opts.port, path: '', proxy: null }];
    this.boundPorts = this.specs.map(() => 0);
    this.enhancedAuth = methodTable(opts.enhancedAuth);
    this.storageGate = opts.storageGate ?? OPEN_STORAGE_GATE;
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
    const bridgeHost: BridgeHost = {
      outbox: (name) => this.broker.bridgeOutbox(name),
      rules: () => this.broker.bridgeRules,
      mayWrite: () => this.period !== 0 && !this.stopped && this.mayWrite(),
      now: () => this.log.now(),
      propose: (cmd) => this.propose(cmd),
      event: (kind, fields) => this.event(kind, fields),
      logger: this.logger,
      maxPacketSize: opts.maxPacketSize,
      newConnId: () => `${this.period}.${++this.seq}`,
      routeIn: (bridge, msg) => this.routeBridgeQos0(bridge, msg),
    };
    this.bridges = new BridgeSet(opts.bridges ?? [], bridgeHost);
    const shard = opts.shard ?? null;
    this.shardGate = shard === null ? null : new ShardGate(shard);
    const nats = opts.nats ?? null;
    this.routeEpoch = nats?.epoch ?? Date.now();
    if (shard !== null && nats !== null && nats.servers.length > 0) {
      this.broker.trackFilters();
      this.shardLink = new ShardLink(
        {
          shard: shard.shard,
          placement: shard.placement,
          rules: nats.rules,
          servers: nats.servers,
          ...(nats.bucket === undefined ? {} : { bucket: nats.bucket }),
          ...(nats.client === undefined ? {} : { client: nats.client }),
        },
        {
          mayWrite: () => this.period !== 0 && !this.stopped && this.mayWrite(),
          ownRoutes: () => (this.period === 0 ? null : { routes: this.broker.subscribedFilters(), stamp: this.routeStamp() }),
          event: (kind, fields) => this.event(kind, fields),
          outbox: (dest) => this.broker.shardOutbox(dest),
          dests: () => this.broker.shardDests,
          propose: (cmd) => this.propose(cmd),
          newConnId: () => `${this.period}.${++this.seq}`,
          maxPayload: opts.maxPacketSize,
        },
      );
    } else this.shardLink = null;
    this.referrer =
      opts.serverReference === undefined
        ? null
        : new Referrer(
            opts.serverReference,
            this,
            { maxPacketSize: opts.maxPacketSize, handshakeTimeoutMs: this.limits.connectTimeoutMs },
            this.shardGate,
          );
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

  /** PUBLISH packets received from clients (every QoS). */
  get messagesIn(): number {
    return sum(this.traffic.publishIn);
  }

  /** PUBLISH packets handed to client sockets (every QoS). */
  get messagesOut(): number {
    return sum(this.traffic.publishOut);
  }

  /** Connections holding an admitted CONNECT (counted from CONNECT to the socket's close). */
  get connectedCount(): number {
    return this.admitted.size;
  }

  /** Sizes of the replicated state (sessions, subscriptions, retained, queues); O(sessions). */
  stateTotals(): StateTotals {
    return this.broker.totals();
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
    this.shardLink?.start();
    if (!this.log.checkServing()) this.startReferring();
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
    this.referrer?.stop();
    this.observeServing(false);
    const closing = this.stopServing(RC.SERVER_SHUTTING_DOWN, !this.log.checkServing());
    this.firstListen?.resolve();
    this.firstListen = null;
    // Nothing is written once stopServing returns, so the log (a cluster leader's handover) need
    // not wait for clients to close their sockets.
    await Promise.all([closing, this.log.stop(), this.shardLink?.stop()]);
  }

  // ---- LogListener ----

  committed(entries: readonly Entry[]): void {
    // The serving rule is judged before the batch and again after each entry's apply; the
    // judgement after one entry is the one before the next (nothing runs between them but that
    // entry's effects), so a batch of N reads the clock N + 1 times, not 2N.
    let serving = this.log.checkServing();
    for (let i = 0; i < entries.length; i++) serving = this.applyEntry(entries[i] as Entry, serving);
    this.outbox.writeCommitted(this.log.commitsMidTurn === true);
    if (this.period !== 0) this.bridges.pump();
    if (this.shardLink !== null) {
      this.routesChanged(this.shardLink);
      if (this.period !== 0) this.shardLink.forwarder.pump();
    }
    if (this.broker.failed !== null && !this.halted) this.halt(this.broker.failed);
    this.armTick();
  }

  serving(on: boolean, servePeriod: number): void {
    if (this.stopped) return;
    if (!on) {
      this.logger.info({ period: this.period }, 'serve-end');
      this.observeServing(false);
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
    this.startSys();
    this.bridges.start();
    this.shardLink?.serve();
  }

  /** The stamp of this node's route writes at the last applied entry: (epoch, serving period,
   * index). The serving period is the index of the serve-start entry, so a later serving node's
   * writes (a higher period) are newer than every write of an earlier one. */
  private routeStamp(): RouteStamp {
    return { epoch: this.routeEpoch, term: this.period, index: this.broker.appliedIndex };
  }

  /** The filters whose subscriptions changed in the batch just applied go to the route bucket,
   * while this node serves; a node that does not serve drops them (the next serving node writes
   * the whole set from its state). */
  private routesChanged(link: ShardLink): void {
    const touched = this.broker.takeTouchedFilters();
    if (touched.size === 0 || this.period === 0) return;
    const stamp = this.routeStamp();
    for (const f of touched) link.changed(f, this.broker.subscribedQos(f), stamp);
  }

  drain(): void {
    if (!this.paused) return;
    this.paused = false;
    for (const c of this.conns.values()) c.setReadsPaused(false);
    this.bridges.setReadsPaused(false);
  }

  // ---- applying ----

  /** Applies `e`; `serving` is the serving rule's judgement just before. Answers the judgement
   * after apply (false when it was false before). */
  private applyEntry(e: Entry, serving: boolean): boolean {
    // Effects only while serving, only for this period's open connections (the map holds no
    // others). A node that does not serve applies the same entry to the same state but builds no
    // effects, which it would drop. Serving begins only between batches (after committed()), so
    // a node that does not serve before apply does not serve after it; one that does is asked
    // again after apply, since its lease may have lapsed meanwhile (a long pause in apply).
    const out = serving ? this.applyOut : null;
    if (out !== null) out.length = 0;
    // A subscription that may reach a $SYS topic gets the local table after its SUBACK; Retain
    // Handling 1 needs the filters held before this entry.
    const sysSub =
      out !== null && this.sys !== null && e.cmd.t === 'subscribe' && e.cmd.subs.some((r) => filterReachesSys(r.filter)) ? e.cmd : null;
    const existed = sysSub === null ? EMPTY_FILTERS : this.broker.filtersOf(sysSub.conn);
    // The table is brought up to date first (its changes go to live subscribers as at the
    // interval), so the new subscriber gets current values: O(1) readings, about 50 topics.
    if (sysSub !== null) this.publishSys();
    const observer = out !== null && this.opts.observer?.active === true ? this.opts.observer : null;
    const leaving = observer !== null && e.cmd.t === 'disconnect' ? this.broker.clientIdOf(e.cmd.conn) : null;
    this.broker.apply(e, out);
    if (observer !== null) observer.applied(e.cmd, out as Effect[], leaving, this.clientIdOfBound);
    if (e.cmd.t === 'check') this.checkApplied(e.index, e.cmd.atIndex, e.cmd.digest);
    const probed = this.probeConn === null ? null : probedIn(e.cmd, this.probeConn, this.probePid);
    if (probed !== null) this.probeMsg = probed;
    if (sysSub !== null && out !== null) this.sendSysRetained(sysSub, existed, out);
    const after = out !== null && this.log.checkServing();
    if (after) this.execute(out);
    if (this.tracer.on) this.tracer.applied(e, out);
    if (probed !== null && this.probeTarget === null) this.clearProbe();
    const id = connOf(e.cmd);
    const conn = id === undefined ? undefined : this.conns.get(id);
    if (conn === undefined) return after;
    try {
      conn.applied();
    } catch (err) {
      conn.internalError(err);
    }
    return after;
  }

  private execute(out: readonly Effect[]): void {
    for (let i = 0; i < out.length; i++) {
      const e = out[i] as Effect;
      if (e.t === 'event') {
        this.event(e.kind, e.detail);
        continue;
      }
      const conn = this.conns.get(e.conn);
      if (conn === undefined) {
        // Not a client's: a bridge's connection to its remote (a PUBACK for the remote), or gone.
        if (e.t === 'send') {
          this.bridges.onEffect(e.conn, e.packet);
          this.shardLink?.receiver.onEffect(e.conn, e.packet);
        }
        continue;
      }
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
        if (this.probeMsg !== null && e.packet.type === 'publish' && e.packet.msg === this.probeMsg && this.probeTarget === null) {
          this.setProbeTarget(conn);
        }
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

  /** The $SYS values matching the filters just granted, after the SUBACK in `out`. */
  private sendSysRetained(cmd: Extract<Command, { t: 'subscribe' }>, existed: ReadonlySet<string>, out: Effect[]): void {
    const sys = this.sys as SysTopics;
    let codes: readonly number[] | null = null;
    for (let i = 0; i < out.length && codes === null; i++) {
      const f = out[i] as Effect;
      if (f.t === 'send' && f.conn === cmd.conn && f.packet.type === 'suback' && f.packet.pid === cmd.pid) codes = f.packet.codes;
    }
    if (codes === null) return;
    this.broker.sendLocalRetained(
      cmd,
      codes,
      existed,
      (filter, fn) => {
        if (filterReachesSys(filter)) sys.match(filter, fn);
      },
      out,
    );
  }

  // ---- $SYS ----

  private startSys(): void {
    const every = this.opts.sysIntervalS ?? 0;
    if (this.sys === null || every <= 0) return;
    this.stopSys();
    this.publishSys();
    this.sysTimer = setInterval(() => this.publishSys(), every * 1000);
    this.sysTimer.unref();
  }

  private stopSys(): void {
    if (this.sysTimer !== null) clearInterval(this.sysTimer);
    this.sysTimer = null;
  }

  /** Updates the local table and routes the values that changed to live subscribers, QoS 0 and
   * without a log entry (Broker.routeLocal); only while serving. */
  private publishSys(): void {
    const sys = this.sys;
    if (sys === null || !this.log.checkServing() || this.halted || this.stopped) return;
    const changed = sys.update(this.sysReadings());
    for (const msg of changed) {
      const out = this.routeOut;
      out.length = 0;
      this.broker.routeLocal(msg, out);
      this.execute(out);
    }
  }

  private sysReadings(): SysReadings {
    const t = this.traffic;
    const s = this.broker.counts();
    let dropped = 0;
    for (const k of DROP_EVENTS) dropped += this.counters.get(k) ?? 0;
    const r: SysReadings = {
      uptimeS: (performance.now() - this.startedAt) / 1000,
      connected: s.online,
      disconnected: s.sessions - s.online,
      maximum: t.connectedMax,
      packetsIn: t.packetsIn,
      packetsOut: t.packetsOut,
      publishIn: sum(t.publishIn),
      publishOut: sum(t.publishOut),
      publishDropped: dropped,
      bytesIn: t.bytesIn,
      bytesOut: t.bytesOut,
      connections: t.connectionsAccepted,
      subscriptions: s.subscriptions,
      retained: s.retained,
      heapBytes: process.memoryUsage().heapUsed,
    };
    const c = this.opts.sysCluster?.();
    if (c !== undefined) r.cluster = { role: c.role, leader: c.leader, term: c.term, redundant: c.redundant };
    const links = this.bridges.links;
    if (links.length > 0) r.bridges = links.map((l) => ({ name: l.spec.name, up: l.state === 'up' }));
    if (this.shardGate !== null) r.shard = this.shardGate.shard;
    return r;
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

  /** A broken invariant in apply: this node stops serving and says why (docs/design.md "The seam"). */
  private halt(reason: string): void {
    this.halted = true;
    this.logger.error({ reason }, 'state machine failed; this node stops serving');
    void this.stopServing(undefined, true);
  }

  /** The highest sequence applied from (origin shard, log identity) (docs/scale-out.md "Receiving"). */
  highestFrom(origin: string, log: string): number {
    return this.broker.highestFrom(origin, log);
  }

  /** The outbox of messages forwarded to shard `dest` (docs/scale-out.md "Forwarding"). */
  shardOutbox(dest: string): Readonly<ShardOutbox> | undefined {
    return this.broker.shardOutbox(dest);
  }

  /** The shards with an outbox here, in name order. */
  get shardDests(): string[] {
    return this.broker.shardDests;
  }

  /** Each bridge: its connection's state, its outbox in the replicated state, and what this
   * process forwarded. */
  bridgeStatus(): BridgeStatus[] {
    return this.bridges.links.map((l) => {
      const o = this.broker.bridgeOutbox(l.spec.name);
      return {
        name: l.spec.name,
        state: l.state,
        outbox: o?.items.length ?? 0,
        outboxBytes: o?.bytes ?? 0,
        position: o?.position ?? 0,
        forwarded: l.forwarded,
        received: l.received,
        rejected: l.rejected,
        refused: l.refused,
        dropped: l.dropped,
        expired: l.expired,
        lastError: l.lastError,
      };
    });
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
      ...(this.referrer === null ? {} : { referred: this.referrer.referred, referredNoLeader: this.referrer.unavailable }),
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
    if (this.log.checkServing() && !this.stopped) this.log.propose({ t: 'settings', settings: this.settings });
  }

  // ---- ConnectionHost ----

  /** The refusal of a CONNECT by a node limit, or null when admitted (and then counted until the
   * socket closes): the per-address connect rate first, then max-connections. */
  admitConnect(address: string, conn: Connection, connect: ConnectPacket): number | null {
    if (!this.connectRate.admit(address, performance.now())) {
      this.event('limit-connect-rate', { address });
      return RC.CONNECTION_RATE_EXCEEDED;
    }
    if (this.storageGate.low && this.newPersistentSession(connect)) {
      this.event('limit-storage-low', { connect: true });
      return RC.QUOTA_EXCEEDED;
    }
    const max = this.limits.maxConnections;
    if (max > 0 && this.admitted.size >= max) {
      this.event('limit-max-connections', { connected: this.admitted.size });
      return RC.QUOTA_EXCEEDED;
    }
    this.admitted.add(conn.id);
    if (this.admitted.size > this.traffic.connectedMax) this.traffic.connectedMax = this.admitted.size;
    return null;
  }

  /** A CONNECT that asks for a session outliving its connection (3.1.1 Clean Session 0, MQTT 5 a
   * Session Expiry Interval) that does not exist yet: refused while the data directory is low on
   * space (docs/operations.md "Disk trouble"); resuming one is admitted, so its queue can drain. */
  private newPersistentSession(c: ConnectPacket): boolean {
    if (connectExpiryS(c) === 0) return false;
    return c.clientId === '' || c.clean || !this.broker.hasSession(c.clientId);
  }

  propose(cmd: Command): void {
    // A client's QoS 1 publish names the other shards it goes to (docs/scale-out.md "Forwarding"),
    // decided here, by the routes this node holds now, and carried in the entry.
    if (this.shardLink !== null) {
      if (cmd.t === 'publish') this.addShards(this.shardLink, cmd);
      else if (cmd.t === 'publishes') for (const p of cmd.pubs) if (p.t === 'publish') this.addShards(this.shardLink, p);
    }
    this.log.propose(cmd);
    if (!this.paused && !this.log.accepting) {
      this.paused = true;
      this.event('reads-paused');
      for (const c of this.conns.values()) c.setReadsPaused(true);
      this.bridges.setReadsPaused(true);
    }
  }

  private addShards(link: ShardLink, cmd: PublishCommand): void {
    if (cmd.msg.qos !== 1) return;
    const fwd = link.destinationsOf(cmd.msg.topic);
    if (fwd !== null) cmd.fwd = fwd;
  }

  /** A QoS 0 message without retain from a bridge's remote: routed like a client's QoS 0 publish,
   * without a log entry and without the publish ACL, and forwarded to the other bridges. */
  private routeBridgeQos0(bridge: string, msg: Message): void {
    if (!this.log.checkServing()) return;
    const out = this.routeOut;
    out.length = 0;
    this.broker.routeLocal(msg, out);
    this.bridges.forwardQos0(msg, bridge);
    this.execute(out);
  }

  routeQos0(from: ConnId, msg: Message): void {
    if (!this.log.checkServing()) return;
    const out = this.routeOut;
    out.length = 0;
    this.broker.routeQos0(from, msg, out);
    if (this.broker.bridgeRules.length > 0 && this.broker.publishAllowed(from, msg)) this.bridges.forwardQos0(msg);
    if (this.opts.observer?.active === true) this.opts.observer.routed(from, msg, this.clientIdOfBound);
    this.execute(out);
    if (this.tracer.on) this.tracer.routed(msg, out);
    // Nobody to deliver the probe to: the next one may start.
    if (msg === this.probeMsg && this.probeTarget === null) this.clearProbe();
  }

  probePublish(conn: ConnId, msg: Message | null, pid: number, readAt: number): void {
    this.traffic.probeCountdown = PROBE_EVERY;
    if (this.probeAt !== 0 && readAt - this.probeAt < PROBE_STALE_MS) return;
    this.probeMsg = msg;
    this.probeConn = msg === null ? conn : null;
    this.probePid = pid;
    this.probeAt = readAt;
    this.setProbeTarget(null);
  }

  private clearProbe(): void {
    this.probeMsg = null;
    this.probeConn = null;
    this.probeAt = 0;
    this.setProbeTarget(null);
  }

  /** The connection that got the probe's first delivery; the outbox reports its next write. */
  private setProbeTarget(c: Connection | null): void {
    this.probeTarget = c;
    this.outbox.watched = c;
  }

  /** The probe's first delivery went to its socket. */
  private endProbe(): void {
    this.deliveryLatency.observe((performance.now() - this.probeAt) / 1000);
    this.clearProbe();
  }

  closed(c: Connection): void {
    if (c === this.probeTarget) this.clearProbe();
    if (this.conns.get(c.id) === c) {
      this.conns.delete(c.id);
      this.admitted.delete(c.id);
    }
  }

  event(kind: EventKind, fields?: Record<string, unknown>): void {
    this.counters.set(kind, (this.counters.get(kind) ?? 0) + 1);
    if (typeof fields?.bridge === 'string') this.bridges.counted(fields.bridge, kind);
    this.limited.log(eventLevel(kind), `event:${kind}`, fields ?? {}, kind);
  }

  protocolError(key: string, fields: Record<string, unknown>, message: string): void {
    this.counters.set(`protocol-error:${key}`, (this.counters.get(`protocol-error:${key}`) ?? 0) + 1);
    this.limited.warn(`protocol:${key}`, fields, message);
  }

  // ---- OutboxGate ----

  mayWrite(): boolean {
    if (this.period === 0 || this.log.checkServing()) return true;
    // Each write checks the lease (docs/design.md "One server at a time"): it lapsed since the last
    // event, so this node stops serving before anything more goes out.
    this.logger.info({ period: this.period }, 'serve-end at write');
    void this.stopServing(RC.SERVER_SHUTTING_DOWN, true);
    return false;
  }

  watchedWritten(): void {
    this.endProbe();
  }

  // ---- listening ----

  private listenerLimits(): ListenerLimits {
    return {
      maxPacketSize: this.opts.maxPacketSize,
      handshakeTimeoutMs: this.limits.connectTimeoutMs,
      maxWriteBufferBytes: this.limits.maxWriteBufferBytes,
      backlog: this.limits.listenBacklog,
    };
  }

  /** Opens the listeners if they are not open; with --cluster-server-reference they stay open
   * between serving periods, so CONNECTs held for want of a leader go to this node now. */
  private startListening(): void {
    this.referrer?.serving();
    this.openListeners();
  }

  /** Tells the observer once per change: serving from when the listeners are bound. */
  private observeServing(on: boolean): void {
    if (on === this.observedServing || (on && !this.log.serving)) return;
    this.observedServing = on;
    this.opts.observer?.serving(on, this.period);
  }

  private openListeners(): void {
    if (this.listeners !== null) {
      this.observeServing(true);
      return;
    }
    const gen = ++this.listenGen;
    const listeners = this.specs.map((spec) => new Listener(spec, this, this.opts.tls ?? null, this.listenerLimits()));
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
        this.observeServing(true);
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
    return this.handshaking + this.conns.size - this.admitted.size + (this.referrer?.pending ?? 0);
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
    if (!this.log.checkServing() || this.halted || this.stopped) {
      // --cluster-server-reference: a node that does not serve answers with the leader's address.
      if (this.referrer !== null && !this.stopped) this.referrer.accept(stream, transport);
      else stream.destroy();
      return;
    }
    const id: ConnId = `${this.period}.${++this.seq}`;
    this.traffic.connectionsAccepted++;
    this.conns.set(id, new Connection(id, stream, transport, this, this.outbox));
  }

  refused(key: RefusalKey, fields: Record<string, unknown>, message: string): void {
    this.counters.set(key, (this.counters.get(key) ?? 0) + 1);
    this.limited.warn(key, fields, message);
  }

  /** --cluster-server-reference: a socket whose CONNECT waited for a leader while this node began
   * to serve becomes a connection of this period; what was read from it is handed over. */
  adopt(stream: ByteStream, transport: Transport, read: readonly Buffer[]): void {
    if (!this.log.checkServing() || this.halted || this.stopped) {
      stream.destroy();
      return;
    }
    const id: ConnId = `${this.period}.${++this.seq}`;
    this.traffic.connectionsAccepted++;
    const c = new Connection(id, stream, transport, this, this.outbox);
    this.conns.set(id, c);
    for (const chunk of read) if (c.isOpen) c.onData(chunk);
  }

  /** Closes every listener and every connection. `reason`: v5 DISCONNECT to send, if any.
   * `discard`: serving no longer holds, so what connections buffered this turn is never written. */
  private async stopServing(reason: number | undefined, discard: boolean): Promise<void> {
    this.clearTick();
    this.bridges.stop();
    this.shardLink?.servingEnded();
    this.stopSys();
    // --cluster-server-reference: the listeners stay open and refer clients (accept()).
    const keep = this.referrer !== null && !this.stopped;
    const listeners = keep ? null : this.listeners;
    if (!keep) {
      this.listenGen++;
      this.listeners = null;
    }
    // Before closing, so the flush inside closeAll sends the DISCONNECTs instead of re-entering.
    this.period = 0;
    this.clearProbe();
    this.closeAll(reason, discard);
    if (keep) this.startReferring();
    if (listeners !== null) await Promise.all(listeners.map((l) => l.close(STOP_GRACE_MS)));
  }

  /** --cluster-server-reference: while not serving (and not stopped) the ports are open and answer
   * CONNECTs with the leader's address. */
  private startReferring(): void {
    if (this.referrer === null || this.stopped) return;
    this.openListeners();
    this.logger.info({ ports: this.boundPorts }, 'referring clients to the leader');
  }

  private closeAll(reason: number | undefined, discard: boolean): void {
    for (const c of this.conns.values()) c.shutdown(reason ?? -1, discard);
    this.conns.clear();
    this.admitted.clear();
    // Every connection is closed now, so everything they hold goes out in this turn.
    this.outbox.writeAll();
  }

  // ---- the deadline timer ----

  /** One timer on the state's next deadline, in log time; when it passes a `tick` is proposed so
   * idle time still advances (docs/design.md "Deadlines live in the state"). */
  private armTick(): void {
    if (!this.log.checkServing() || this.halted || this.stopped) {
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
    if (this.log.checkServing() && !this.stopped) this.log.propose({ t: 'tick' });
  }
}
