// Workloads with MQTT.js: QoS 1 and QoS 2 publishers with unique payloads, and persistent-session
// subscribers (clean=false). Every client keeps one MQTT.js client object for the whole run (its
// session's packet-id stores live there) and reconnects, like a client behind a load balancer, to
// whichever node /health names as serving. The history records what each client saw, with
// host-monotonic times comparable with the audit logs. Two sticky clients (a QoS 0 publisher and
// its subscriber, clean sessions, a long keep-alive) stay on the node they reached until it closes
// their connection, as devices with a long keep-alive do, so a node that goes on serving after a
// rival began (a paused leader resumed) is seen by a client: a QoS 0 route needs no commit.
import mqtt, { type MqttClient } from 'mqtt';
import { hostMonotonicMs } from '../src/cluster/audit-log.js';
import { type JepsenCluster, LOOPBACK } from './cluster.js';

export const TOPIC = 'jepsen/data';
export const STICKY_TOPIC = 'jepsen/sticky';

/** A QoS 0 message the sticky subscriber got, and the node it was connected to then. */
export interface StickyReceipt {
  payload: string;
  node: number;
  mono: number;
}

export interface PublishRecord {
  client: string;
  payload: string;
  qos: 1 | 2;
  sentMono: number;
  /** PUBACK (QoS 1) or PUBCOMP (QoS 2) received; null: never acknowledged. */
  ackMono: number | null;
}

export interface Receipt {
  client: string;
  payload: string;
  qos: number;
  dup: boolean;
  mono: number;
}

export interface ConnackRecord {
  client: string;
  node: number;
  mono: number;
  sessionPresent: boolean;
}

export interface History {
  publishes: PublishRecord[];
  receipts: Receipt[];
  connacks: ConnackRecord[];
  /** Subscriber → host-monotonic ms of its SUBACK. */
  subscribedAt: Map<string, number>;
  /** Client errors, bounded. */
  errors: string[];
  stickyReceipts: StickyReceipt[];
  /** Clients with clean sessions (the sticky pair): no session to lose. */
  cleanClients: Set<string>;
}

export interface WorkloadOptions {
  subscribers: number;
  qos1Publishers: number;
  qos2Publishers: number;
  /** Publishes per second per publisher. */
  ratePerS: number;
  /** Unacknowledged publishes a publisher may have at once. */
  outstandingMax: number;
}

const ERRORS_MAX = 200;
const KEEPALIVE_S = 2;
/** The sticky clients' keep-alive: they notice a paused node only when it closes them. */
const STICKY_KEEPALIVE_S = 60;
/** The sticky publisher's QoS 0 messages per second. */
const STICKY_RATE_PER_S = 50;
const RECONNECT_MS = 100;
const CONNECT_TIMEOUT_MS = 2_000;
/** How often the load balancer asks each node's /health, and how long it waits for the answer
 * (cluster-scripts/haproxy.cfg: inter 250ms, fall 1). */
const LEADER_POLL_MS = 100;
const HEALTH_TIMEOUT_MS = 250;

/** Follows the serving node as a load balancer does (cluster-scripts/haproxy.cfg): points
 * reconnecting clients at it, and shuts the sessions to a node that fails its check
 * (`on-marked-down shutdown-sessions`). */
class LeaderFinder {
  port = 0;
  node = 0;
  private timer: NodeJS.Timeout | null = null;
  private busy = false;

  constructor(
    private readonly cluster: JepsenCluster,
    private readonly markedDown: (port: number) => void,
  ) {}

  async first(timeoutMs: number): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (this.port === 0) {
      if (performance.now() > deadline) throw new Error(`no serving node within ${timeoutMs} ms`);
      await this.poll();
      if (this.port === 0) await new Promise((r) => setTimeout(r, LEADER_POLL_MS));
    }
    this.timer = setInterval(() => void this.poll(), LEADER_POLL_MS);
  }

  private async poll(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      const { serving: n, downPorts } = await this.cluster.healthCheck(HEALTH_TIMEOUT_MS);
      for (const port of downPorts) this.markedDown(port);
      if (n !== null) {
        this.port = n.mqttPort;
        this.node = n.id;
      }
    } finally {
      this.busy = false;
    }
  }

  nodeOfPort(port: number): number {
    return this.cluster.nodes.find((n) => n.mqttPort === port)?.id ?? 0;
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }
}

export class Workload {
  readonly history: History = {
    publishes: [],
    receipts: [],
    connacks: [],
    subscribedAt: new Map(),
    errors: [],
    stickyReceipts: [],
    cleanClients: new Set(),
  };
  /** The sticky pair: never cut by shutdownSessions. */
  private readonly sticky = new Set<MqttClient>();
  private readonly finder: LeaderFinder;
  private readonly clients: MqttClient[] = [];
  private readonly timers: NodeJS.Timeout[] = [];
  private publishing = false;

  constructor(
    cluster: JepsenCluster,
    private readonly o: WorkloadOptions,
  ) {
    this.finder = new LeaderFinder(cluster, (port) => this.shutdownSessions(port));
  }

  /** Cuts every client connected or connecting to `port` (a stopped process's kernel still
   * completes TCP handshakes, so a CONNECT to it would wait out the connect timeout); each
   * reconnects to the serving node. */
  private shutdownSessions(port: number): void {
    for (const c of this.clients) {
      if (this.sticky.has(c)) continue;
      if (c.options.port === port && c.stream != null && !c.stream.destroyed) c.stream.destroy();
    }
  }

  /** Connects and subscribes every subscriber (waiting for each SUBACK), then starts publishing. */
  async start(timeoutMs: number): Promise<void> {
    await this.finder.first(timeoutMs);
    const subs: Promise<void>[] = [];
    for (let i = 1; i <= this.o.subscribers; i++) subs.push(this.subscriber(`sub-${i}`, timeoutMs));
    await Promise.all(subs);
    await this.stickyPair(timeoutMs);
    this.publishing = true;
    for (let i = 1; i <= this.o.qos1Publishers; i++) this.publisher(`pub1-${i}`, 1);
    for (let i = 1; i <= this.o.qos2Publishers; i++) this.publisher(`pub2-${i}`, 2);
  }

  stopPublishing(): void {
    this.publishing = false;
    for (const t of this.timers) clearInterval(t);
    this.timers.length = 0;
  }

  /** Publishes not yet acknowledged. */
  unacknowledged(): number {
    let n = 0;
    for (const p of this.history.publishes) if (p.ackMono === null) n++;
    return n;
  }

  async close(): Promise<void> {
    this.stopPublishing();
    this.finder.stop();
    await Promise.all(this.clients.map((c) => new Promise<void>((resolve) => c.end(true, {}, () => resolve()))));
  }

  private client(clientId: string, sticky = false): MqttClient {
    const c = mqtt.connect({
      host: LOOPBACK,
      port: this.finder.port,
      clientId,
      clean: sticky,
      protocolVersion: 4,
      keepalive: sticky ? STICKY_KEEPALIVE_S : KEEPALIVE_S,
      reconnectPeriod: RECONNECT_MS,
      connectTimeout: CONNECT_TIMEOUT_MS,
    });
    c.on('reconnect', () => {
      c.options.port = this.finder.port;
    });
    c.on('connect', (ack) => {
      this.history.connacks.push({
        client: clientId,
        node: this.finder.nodeOfPort(c.options.port ?? 0),
        mono: hostMonotonicMs(),
        sessionPresent: ack.sessionPresent,
      });
    });
    c.on('error', (err) => this.noteError(`${clientId}: ${err.message}`));
    this.clients.push(c);
    if (sticky) {
      this.sticky.add(c);
      this.history.cleanClients.add(clientId);
    }
    return c;
  }

  /** The sticky subscriber (subscribed again on every connect: its session is clean) and the
   * sticky QoS 0 publisher. */
  private async stickyPair(timeoutMs: number): Promise<void> {
    const sub = this.client('sticky-sub', true);
    sub.on('message', (_topic, payload) => {
      this.history.stickyReceipts.push({
        payload: payload.toString(),
        node: this.finder.nodeOfPort(sub.options.port ?? 0),
        mono: hostMonotonicMs(),
      });
    });
    const subscribed = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`sticky-sub: no SUBACK within ${timeoutMs} ms`)), timeoutMs);
      sub.on('connect', () =>
        sub.subscribe(STICKY_TOPIC, { qos: 0 }, (err) => {
          if (err == null) {
            clearTimeout(timer);
            resolve();
          }
        }),
      );
    });
    await subscribed;
    const pub = this.client('sticky-pub', true);
    let seq = 0;
    this.timers.push(
      setInterval(
        () => {
          if (this.publishing && pub.connected) pub.publish(STICKY_TOPIC, `sticky:${++seq}`, { qos: 0 });
        },
        Math.round(1000 / STICKY_RATE_PER_S),
      ),
    );
  }

  private subscriber(clientId: string, timeoutMs: number): Promise<void> {
    const c = this.client(clientId);
    c.on('message', (_topic, payload, packet) => {
      this.history.receipts.push({
        client: clientId,
        payload: payload.toString(),
        qos: packet.qos,
        dup: packet.dup,
        mono: hostMonotonicMs(),
      });
    });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${clientId}: no SUBACK within ${timeoutMs} ms`)), timeoutMs);
      const subscribe = (): void => {
        c.subscribe(TOPIC, { qos: 2 }, (err, granted) => {
          if (err != null || granted?.[0]?.qos !== 2) {
            // Lost with a failover before it committed: the session may lack it, so ask again.
            if (performance.now() < deadline) setTimeout(subscribe, RECONNECT_MS);
            return;
          }
          clearTimeout(timer);
          this.history.subscribedAt.set(clientId, hostMonotonicMs());
          resolve();
        });
      };
      const deadline = performance.now() + timeoutMs;
      c.once('connect', subscribe);
    });
  }

  private publisher(clientId: string, qos: 1 | 2): void {
    const c = this.client(clientId);
    let seq = 0;
    let outstanding = 0;
    const tick = (): void => {
      if (!this.publishing || !c.connected || outstanding >= this.o.outstandingMax) return;
      const rec: PublishRecord = { client: clientId, payload: `${clientId}:${++seq}`, qos, sentMono: hostMonotonicMs(), ackMono: null };
      this.history.publishes.push(rec);
      outstanding++;
      c.publish(TOPIC, rec.payload, { qos }, (err) => {
        outstanding--;
        if (err == null) rec.ackMono = hostMonotonicMs();
        else this.noteError(`${clientId} publish ${rec.payload}: ${err.message}`);
      });
    };
    this.timers.push(setInterval(tick, Math.max(1, Math.round(1000 / this.o.ratePerS))));
  }

  private noteError(text: string): void {
    if (this.history.errors.length < ERRORS_MAX) this.history.errors.push(`${Math.round(hostMonotonicMs())} ${text}`);
  }
}
