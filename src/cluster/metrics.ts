// Prometheus series of one node (docs/operations.md "Metrics"), read at scrape time from counters
// and tables the node keeps anyway: nothing here runs on the message path, and a scrape changes
// nothing, so any number of scrapers see the same series. Names follow the common exporters:
// prefix raftmq_, counters end in _total, bytes in _bytes, times in _seconds; labels take values
// from fixed sets only (never a client id or a topic).
import { type IntervalHistogram, monitorEventLoopDelay } from 'node:perf_hooks';
import { Counter, collectDefaultMetrics, Gauge, type Metric, type Registry } from 'prom-client';
import type { StateTotals } from '../broker/broker.js';
import type { CounterKey } from '../events.js';
import type { BrokerNode } from '../server/broker-node.js';
import type { DataDirStatus } from '../server/durable-node.js';
import type { LatencyBuckets } from '../server/latency-buckets.js';
import type { ClusterStatus, RaftLog } from './raft-log.js';

/** What /metrics reads. `raft` is null on a single node. */
export interface MetricsSource {
  status(): ClusterStatus;
  node: BrokerNode;
  raft: RaftLog | null;
  /** The --data-dir of a single node or a cluster node; absent without one. */
  dataDir?: () => DataDirStatus;
}

/** A labelled counter's series: label value → the node's event counters summed into it. */
type Reasons = Readonly<Record<string, readonly CounterKey[]>>;

/** Refused before or at CONNECT; each refusal is counted under one reason. A CONNACK refusal of
 * any reason code is `connack` (its cause is also under the auth and limit series). */
const CONNECTION_REFUSALS: Reasons = {
  pending_connections: ['limit-pending-connections'],
  tls_handshake: ['tls-handshake-refused'],
  tls_certificate: ['tls-certificate-refused'],
  proxy_header: ['proxy-malformed', 'proxy-timeout'],
  websocket: ['ws-wrong-path', 'ws-no-subprotocol'],
  connect_timeout: ['connect-timeout'],
  connack: ['connect-refused'],
};
const AUTH_REFUSALS: Reasons = {
  bad_credentials: ['auth-failed'],
  throttled: ['auth-throttled'],
  anonymous: ['auth-anonymous-refused'],
  enhanced_auth: ['protocol-error:enhanced-auth', 'protocol-error:reauth'],
  authenticator_error: ['protocol-error:authenticator'],
};
const ACL_DENIALS: Reasons = {
  write: ['acl-denied'],
  subscribe: ['acl-denied-subscribe'],
};
const TLS_REFUSALS: Reasons = {
  handshake: ['tls-handshake-refused'],
  certificate: ['tls-certificate-refused'],
  reload_failed: ['tls-reload-failed'],
};
const LIMIT_REFUSALS: Reasons = {
  max_connections: ['limit-max-connections'],
  pending_connections: ['limit-pending-connections'],
  connect_rate: ['limit-connect-rate'],
  publish_rate: ['limit-publish-rate'],
  topic: ['limit-topic'],
  storage_low: ['limit-storage-low'],
};
const DROPS: Reasons = {
  queue_full: ['queue-full'],
  slow_consumer: ['qos0-dropped-slow-consumer'],
  too_large: ['too-large'],
  expired: ['expired'],
  shared_no_member: ['shared-dropped'],
  will_after_failover: ['will-dropped'],
  publish_rate: ['limit-publish-rate'],
};
const ROLES = ['follower', 'pre-candidate', 'candidate', 'leader'] as const;
const QOS = ['0', '1', '2'] as const;

/** Event-loop delay is summarised over fixed windows of this length: the values of the last
 * complete window, the same for every scraper (prom-client's default resets at each scrape). */
export const LOOP_WINDOW_MS = 10_000;
const LOOP_RESOLUTION_MS = 10;
const LOOP_QUANTILES = [0.5, 0.9, 0.99, 0.999] as const;
const NS_PER_S = 1e9;

/** The prom-client defaults that reset at every collect; raftmq_event_loop_delay_seconds replaces them. */
const RESETTING_DEFAULTS = [
  'nodejs_eventloop_lag_seconds',
  'nodejs_eventloop_lag_min_seconds',
  'nodejs_eventloop_lag_max_seconds',
  'nodejs_eventloop_lag_mean_seconds',
  'nodejs_eventloop_lag_stddev_seconds',
  'nodejs_eventloop_lag_p50_seconds',
  'nodejs_eventloop_lag_p90_seconds',
  'nodejs_eventloop_lag_p99_seconds',
];

export class NodeMetrics {
  private readonly registry: Registry;
  private readonly source: MetricsSource;
  private readonly loop: IntervalHistogram;
  private readonly loopTimer: NodeJS.Timeout;
  private readonly loopWindowMs: number;
  /** Quantile → seconds, of the last complete window; empty before the first. */
  private loopWindow = new Map<string, number>();
  /** Read once per scrape, for the gauges that need the whole state. */
  private totals: StateTotals | null = null;
  private status: ClusterStatus | null = null;

  /** `loopWindowMs`: the event-loop window (tests shorten it). */
  constructor(registry: Registry, source: MetricsSource, loopWindowMs = LOOP_WINDOW_MS) {
    this.registry = registry;
    this.source = source;
    this.loopWindowMs = loopWindowMs;
    collectDefaultMetrics({ register: registry });
    for (const name of RESETTING_DEFAULTS) registry.removeSingleMetric(name);
    this.loop = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
    this.loop.enable();
    this.loopTimer = setInterval(() => this.closeLoopWindow(), loopWindowMs);
    this.loopTimer.unref();
    this.defineBroker();
    this.defineRefusals();
    this.defineRaft();
    this.defineLoop();
    this.defineLatencies();
    this.defineDataDir();
    this.defineTrace();
  }

  /** The Prometheus text of every series, read now. */
  async scrape(): Promise<string> {
    this.totals = this.source.node.stateTotals();
    this.status = this.source.status();
    try {
      return await this.registry.metrics();
    } finally {
      this.totals = null;
      this.status = null;
    }
  }

  close(): void {
    clearInterval(this.loopTimer);
    this.loop.disable();
  }

  private closeLoopWindow(): void {
    const h = this.loop;
    const w = new Map<string, number>();
    if (h.count > 0) {
      for (const q of LOOP_QUANTILES) w.set(String(q), h.percentile(q * 100) / NS_PER_S);
      w.set('1', h.max / NS_PER_S);
    }
    this.loopWindow = w;
    h.reset();
  }

  private get state(): StateTotals {
    this.totals ??= this.source.node.stateTotals();
    return this.totals;
  }

  private get cluster(): ClusterStatus {
    this.status ??= this.source.status();
    return this.status;
  }

  private gauge(name: string, help: string, read: () => number): void {
    new Gauge({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.set(read());
      },
    });
  }

  /** A gauge with one label; `read` gives every series, so a value gone since the last scrape
   * (a peer no longer led) disappears rather than keeping its old value. */
  private labelledGauge(name: string, help: string, label: string, read: () => Iterable<[string, number]>): void {
    new Gauge({
      name,
      help,
      labelNames: [label],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const [v, n] of read()) this.set({ [label]: v }, n);
      },
    });
  }

  /** Counters mirror totals the node keeps, which only grow: each scrape sets them afresh (the
   * prom-client counter is only the carrier; nothing the node holds is reset). */
  private counter(name: string, help: string, read: () => number): void {
    new Counter({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.reset();
        this.inc(read());
      },
    });
  }

  private labelledCounter(name: string, help: string, label: string, read: () => Iterable<[string, number]>): void {
    new Counter({
      name,
      help,
      labelNames: [label],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const [v, n] of read()) this.inc({ [label]: v }, n);
      },
    });
  }

  /** Sums of the node's event counters by reason (every reason present, 0 included). */
  private reasons(table: Reasons): () => Iterable<[string, number]> {
    const counters = this.source.node.counters;
    return () => Object.entries(table).map(([reason, keys]) => [reason, keys.reduce((n, k) => n + (counters.get(k) ?? 0), 0)]);
  }

  private defineBroker(): void {
    const node = this.source.node;
    const t = node.traffic;
    const byQos = (xs: readonly number[]) => (): Iterable<[string, number]> => QOS.map((q, i) => [q, xs[i] ?? 0]);
    const bridges = () => node.bridgeStatus();
    const perBridge = (read: (b: ReturnType<typeof bridges>[number]) => number) => (): Iterable<[string, number]> =>
      bridges().map((b) => [b.name, read(b)]);
    this.labelledGauge(
      'raftmq_bridge_up',
      '1 while the bridge is connected to its remote (serving node only)',
      'bridge',
      perBridge((b) => (b.state === 'up' ? 1 : 0)),
    );
    this.labelledGauge(
      'raftmq_bridge_outbox_messages',
      'messages in the bridge outbox (replicated state)',
      'bridge',
      perBridge((b) => b.outbox),
    );
    this.labelledGauge(
      'raftmq_bridge_outbox_bytes',
      'topic and payload bytes in the bridge outbox',
      'bridge',
      perBridge((b) => b.outboxBytes),
    );
    this.labelledCounter(
      'raftmq_bridge_forwarded_total',
      'messages the remote completed, forwarded by this process',
      'bridge',
      perBridge((b) => b.forwarded),
    );
    this.labelledCounter(
      'raftmq_bridge_received_total',
      'messages from the remote published here by this process (QoS 1: committed, then acknowledged to the remote)',
      'bridge',
      perBridge((b) => b.received),
    );
    this.labelledCounter(
      'raftmq_bridge_rejected_total',
      'messages or packets from the remote refused as bad input by this process',
      'bridge',
      perBridge((b) => b.rejected),
    );
    this.labelledCounter(
      'raftmq_bridge_refused_total',
      'QoS 1/2 publishes refused for a full bridge outbox while this node served',
      'bridge',
      perBridge((b) => b.refused),
    );
    this.labelledCounter(
      'raftmq_bridge_dropped_total',
      'messages not forwarded while this node served: beyond a full outbox (QoS 0, wills) or too large for the remote',
      'bridge',
      perBridge((b) => b.dropped),
    );
    this.labelledCounter(
      'raftmq_bridge_expired_total',
      'messages whose expiry passed while they waited in the bridge outbox, dropped while this node served',
      'bridge',
      perBridge((b) => b.expired),
    );
    this.gauge('raftmq_connections', 'open MQTT connections (past the transport handshake)', () => node.connectionCount);
    this.counter('raftmq_connections_total', 'MQTT connections accepted past the transport handshake', () => t.connectionsAccepted);
    this.gauge('raftmq_connections_max', 'most connections with an accepted CONNECT at once, since start', () => t.connectedMax);
    this.labelledGauge('raftmq_sessions', 'sessions by state: online (held by a connection) or offline', 'state', () => {
      const s = this.state;
      return [
        ['online', s.online],
        ['offline', s.sessions - s.online],
      ];
    });
    this.gauge('raftmq_subscriptions', 'subscriptions of every session (shared ones included)', () => this.state.subscriptions);
    this.gauge('raftmq_retained_messages', 'retained messages stored', () => this.state.retained);
    this.gauge('raftmq_queued_messages', 'QoS 1/2 messages queued for sessions, not yet sent', () => this.state.queuedMessages);
    this.gauge('raftmq_queued_bytes', 'topic and payload bytes of the queued messages', () => this.state.queuedBytes);
    this.gauge('raftmq_inflight_messages', 'QoS 1/2 messages sent and not yet acknowledged', () => this.state.inflight);
    this.labelledCounter('raftmq_messages_received_total', 'PUBLISH packets received from clients', 'qos', byQos(t.publishIn));
    this.labelledCounter(
      'raftmq_messages_received_bytes_total',
      'payload bytes of the PUBLISH packets received',
      'qos',
      byQos(t.publishInBytes),
    );
    this.labelledCounter('raftmq_messages_sent_total', 'PUBLISH packets written to clients, by delivered QoS', 'qos', byQos(t.publishOut));
    this.labelledCounter(
      'raftmq_messages_sent_bytes_total',
      'payload bytes of the PUBLISH packets written',
      'qos',
      byQos(t.publishOutBytes),
    );
    this.counter('raftmq_network_received_bytes_total', 'MQTT bytes read from client connections', () => t.bytesIn);
    this.counter('raftmq_network_sent_bytes_total', 'MQTT bytes written to client connections', () => t.bytesOut);
    this.labelledCounter('raftmq_messages_dropped_total', 'messages not delivered, by reason', 'reason', this.reasons(DROPS));
  }

  private defineRefusals(): void {
    const counters = this.source.node.counters;
    this.labelledCounter(
      'raftmq_connections_refused_total',
      'connections refused before or at CONNECT, by reason',
      'reason',
      this.reasons(CONNECTION_REFUSALS),
    );
    this.labelledCounter('raftmq_auth_refused_total', 'authentication refusals, by reason', 'reason', this.reasons(AUTH_REFUSALS));
    this.labelledCounter(
      'raftmq_acl_denied_total',
      'ACL denials: publishes and wills (write), subscriptions',
      'access',
      this.reasons(ACL_DENIALS),
    );
    this.labelledCounter('raftmq_tls_refused_total', 'TLS refusals, by reason', 'reason', this.reasons(TLS_REFUSALS));
    this.labelledCounter('raftmq_limit_refused_total', 'refusals by a configured limit', 'limit', this.reasons(LIMIT_REFUSALS));
    this.counter(
      'raftmq_sys_publish_refused_total',
      'client PUBLISH packets and wills to $SYS topics refused',
      () => counters.get('sys-publish-refused') ?? 0,
    );
    const gate = this.source.node.shardGate;
    if (gate !== null) {
      // docs/scale-out.md "Health and metrics": the label values are the configured shard names.
      this.labelledCounter(
        'raftmq_shard_refused_total',
        'CONNECTs refused because their client id belongs to another shard, by that shard',
        'shard',
        () => gate.refused,
      );
      this.labelledGauge('raftmq_shard_info', 'this node serves the client ids of the shard named by the label', 'shard', () => [
        [gate.shard, 1],
      ]);
    }
    this.defineShardLink();
    this.counter('raftmq_protocol_errors_total', 'connections closed for a protocol error', () => {
      let n = 0;
      for (const [k, v] of counters) if (k.startsWith('protocol-error:')) n += v;
      return n;
    });
  }

  /** --nats with --shard (docs/scale-out.md "Health and metrics"): the link's state, what it
   * forwarded and received, and the outbox to each other shard in the replicated state, labelled
   * by that shard's configured name (a fixed set). */
  private defineShardLink(): void {
    const node = this.source.node;
    const link = node.shardLink;
    if (link === null) return;
    this.gauge('raftmq_nats_connected', '1 while this node is connected to NATS (the serving node only)', () => (link.connected ? 1 : 0));
    this.gauge('raftmq_shard_remote_routes', "routes of other shards in this node's route table", () => link.table.size);
    this.gauge('raftmq_shard_route_writes_pending', "this shard's route writes not yet acknowledged by NATS", () => link.pendingWrites);
    this.counter(
      'raftmq_shard_forwarded_total',
      'messages published to another shard and acknowledged by JetStream, by this process',
      () => link.forwarder.forwarded,
    );
    this.counter(
      'raftmq_shard_received_total',
      'messages from other shards committed here and acknowledged to JetStream, by this process',
      () => link.receiver.received,
    );
    this.counter(
      'raftmq_shard_in_refused_total',
      'messages from other shards refused as bad input by this process',
      () => link.receiver.refused,
    );
    const outboxes = (read: (o: { items: { length: number }; bytes: number }) => number) => (): Iterable<[string, number]> =>
      node.shardDests.map((d) => {
        const o = node.shardOutbox(d);
        return [d, o === undefined ? 0 : read(o)];
      });
    this.labelledGauge(
      'raftmq_shard_outbox_messages',
      'messages in the outbox to another shard (replicated state), not yet acknowledged by JetStream',
      'shard',
      outboxes((o) => o.items.length),
    );
    this.labelledGauge(
      'raftmq_shard_outbox_bytes',
      'topic and payload bytes in the outbox to another shard',
      'shard',
      outboxes((o) => o.bytes),
    );
  }

  /** --data-dir (docs/operations.md "Disk trouble"): free space against its bound, the log and the
   * newest snapshot, and the group commits' fdatasync calls (fsyncs per second and entries per
   * fsync are rates of the two counters). */
  private defineDataDir(): void {
    const read = this.source.dataDir;
    if (read === undefined) return;
    this.gauge(
      'raftmq_data_dir_free_bytes',
      "free bytes on the data directory's file system at the last reading (-1: unreadable)",
      () => read().freeBytes ?? -1,
    );
    this.gauge(
      'raftmq_data_dir_min_free_bytes',
      'free bytes below which new QoS 1/2 messages and persistent sessions are refused',
      () => read().minFreeBytes,
    );
    this.gauge('raftmq_data_dir_low_space', '1 while new QoS 1/2 messages and persistent sessions are refused for lack of space', () =>
      read().lowSpace ? 1 : 0,
    );
    this.gauge('raftmq_data_dir_wal_bytes', 'bytes of the write-ahead log segments', () => read().walBytes);
    this.gauge('raftmq_data_dir_snapshot_index', 'log index of the newest snapshot on disk (0: none)', () => read().lastSnapshot.index);
    this.gauge('raftmq_data_dir_snapshot_bytes', 'bytes of the newest snapshot on disk', () => read().lastSnapshot.bytes);
    this.counter('raftmq_data_dir_fsyncs_total', 'fdatasync calls of group commits', () => read().fsyncs);
    this.counter('raftmq_data_dir_entries_written_total', 'log entries made durable by group commits', () => read().entriesWritten);
  }

  private defineRaft(): void {
    const raft = this.source.raft;
    this.gauge('raftmq_serving', '1 while this node serves MQTT clients', () => (this.cluster.serving ? 1 : 0));
    this.labelledGauge('raftmq_raft_role', '1 for the raft role this node has', 'role', () =>
      ROLES.map((r) => [r, this.cluster.role === r ? 1 : 0]),
    );
    this.gauge('raftmq_raft_leader', 'node id of the leader this node knows; 0: none', () => this.cluster.leader);
    this.gauge('raftmq_raft_term', 'current raft term', () => this.cluster.term);
    this.gauge('raftmq_raft_commit_index', 'raft commit index', () => this.cluster.commitIndex);
    this.gauge('raftmq_raft_applied_index', 'last raft index applied to the broker state', () => this.cluster.appliedIndex);
    this.gauge('raftmq_raft_redundant', '1 while every configured node is a caught-up voter (leader only)', () =>
      this.cluster.redundant ? 1 : 0,
    );
    this.gauge('raftmq_raft_needs_force_start', '1 when no configuration can elect a leader again', () =>
      this.cluster.needsForceStart ? 1 : 0,
    );
    this.gauge('raftmq_lease_remaining_seconds', 'time left of the leader lease', () => this.cluster.leaseRemainingMs / 1000);
    if (raft === null) return;
    this.gauge('raftmq_raft_last_index', 'last index of the raft log', () => raft.raftMetrics().lastIndex);
    this.labelledGauge('raftmq_raft_peer_match_lag', 'entries the peer lacks of the leader log (leader only)', 'peer', () =>
      raft
        .raftMetrics()
        .peers.filter((p) => p.matchLag !== null)
        .map((p) => [String(p.id), p.matchLag as number]),
    );
    this.labelledGauge('raftmq_raft_peer_last_contact_seconds', 'time since the last valid message from the peer', 'peer', () =>
      raft
        .raftMetrics()
        .peers.filter((p) => p.lastContactAgoMs !== null)
        .map((p) => [String(p.id), (p.lastContactAgoMs as number) / 1000]),
    );
    this.labelledGauge('raftmq_raft_peer_connected', '1 while the link to the peer is up', 'peer', () =>
      raft.raftMetrics().peers.map((p) => [String(p.id), p.connected ? 1 : 0]),
    );
    this.counter('raftmq_raft_elections_total', 'terms this node stood as a candidate in', () => raft.raftMetrics().elections);
    this.counter('raftmq_raft_leader_changes_total', 'times this node learned of a new leader', () => raft.raftMetrics().leaderChanges);
    this.labelledGauge(
      'raftmq_raft_clock_offset_seconds',
      "voter wall clock minus the median of the voters' clocks (leader only)",
      'node',
      () => [...raft.raftMetrics().clockOffsetsMs].map(([n, ms]) => [String(n), ms / 1000]),
    );
  }

  /** A histogram kept by the node as plain counts (LatencyBuckets), written out as Prometheus
   * cumulative buckets at scrape time. prom-client's Histogram cannot be set from counts, so this
   * is a metric object of the shape its registry reads (name, help, type, get()). */
  private histogram(name: string, help: string, read: () => LatencyBuckets): void {
    const metric = {
      name,
      help,
      type: 'histogram',
      aggregator: 'sum',
      get: async () => {
        const h = read();
        const values: { metricName: string; labels: Record<string, string | number>; value: number }[] = [];
        let cumulative = 0;
        for (let i = 0; i < h.counts.length; i++) {
          cumulative += h.counts[i] as number;
          const le = i < h.bounds.length ? String(h.bounds[i]) : '+Inf';
          values.push({ metricName: `${name}_bucket`, labels: { le }, value: cumulative });
        }
        values.push({ metricName: `${name}_sum`, labels: {}, value: h.sum });
        values.push({ metricName: `${name}_count`, labels: {}, value: h.count });
        return { name, help, type: 'histogram', aggregator: 'sum', values };
      },
      reset: () => {},
    };
    this.registry.registerMetric(metric as unknown as Metric);
  }

  private defineLatencies(): void {
    const node = this.source.node;
    this.histogram(
      'raftmq_publish_delivery_latency_seconds',
      'PUBLISH read from a socket to the socket write of its first delivery; one PUBLISH in 32 offered, one timed at a time',
      () => node.deliveryLatency,
    );
    const raft = this.source.raft;
    if (raft === null) return;
    this.histogram(
      'raftmq_raft_commit_latency_seconds',
      'proposal to commit of a raft entry; one proposal timed at a time',
      () => raft.raftMetrics().commitLatency,
    );
  }

  /** The status page's live trace: 0 evaluations while nobody watches (docs/operations.md "Live trace"). */
  private defineTrace(): void {
    const tracer = this.source.node.tracer;
    this.counter(
      'raftmq_trace_evaluations_total',
      'PUBLISH packets matched against the filters of open live traces',
      () => tracer.evaluations,
    );
    this.gauge('raftmq_trace_watchers', 'live traces open on the status page', () => tracer.watching);
  }

  private defineLoop(): void {
    this.labelledGauge(
      'raftmq_event_loop_delay_seconds',
      `event-loop delay over the last complete ${this.loopWindowMs / 1000} s window, by quantile (1: the maximum)`,
      'quantile',
      () => this.loopWindow,
    );
  }
}
