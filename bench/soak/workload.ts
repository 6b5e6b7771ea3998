// The soak's load, MQTT.js clients against one port: checked QoS 0/1/2 traffic at a fixed rate to
// a persistent subscriber that reconnects now and then but never leaves its session; connection
// churn (clean and persistent sessions, 3.1.1 and 5, wills, normal and abrupt closes); subscription
// churn with shared subscriptions; and a slow subscriber whose broker-side queue is measured after
// each burst. Every loop stops at the deadline and after a bounded count; every wait is bounded.
import mqtt, { type IClientOptions, type IPublishPacket, type MqttClient, Store } from 'mqtt';
import { seededRandom } from '../../src/log/wal/mem-storage.js';
import { sleep } from '../../test/support/wait.js';
import type { WorkloadFigures } from './verdict.js';

/** A seeded PRNG, so a run's choices replay from its seed (the WAL tests' mulberry32). */
export const rng = seededRandom;

export interface WorkloadOptions {
  port: number;
  seed: number;
  /** When the load stops (Date.now()). */
  deadline: number;
  /** The broker's --max-queued-messages. */
  maxQueued: number;
}

/** Checked messages per second (QoS 0, 1 and 2 in turn). */
const CHECKED_RATE_PER_S = 20;
/** The checked subscriber leaves (normal DISCONNECT, session kept) after this long connected, for
 * this long (ms). */
const CHECKER_AWAY_EVERY_MS = 15_000;
const CHECKER_AWAY_MS = 1_000;
const CHURN_WORKERS = 3;
/** Client ids per churn worker: persistent sessions stay bounded by this pool. */
const CHURN_IDS = 12;
const ABRUPT_SHARE = 0.4;
/** Filters the subscription churn client holds at most. */
const SUBS_HELD_MAX = 8;
const SLOW_RECEIVE_MAXIMUM = 4;
/** The slow subscriber acknowledges one message per this many ms. */
const SLOW_READ_MS = 25;
const SLOW_BURST = 300;
const SLOW_BURST_CONCURRENCY = 16;
/** The slow subscriber is drained once nothing arrived for this long (ms). */
const SLOW_IDLE_MS = 1_500;
const SLOW_DRAIN_MAX_MS = 30_000;
/** Any one connect, subscribe, publish or end waits at most this long (ms). */
const OP_TIMEOUT_MS = 10_000;
/** After the load, acknowledged messages and wills may take this long to arrive (ms). */
const SETTLE_MS = 30_000;
/** Iterations of any loop, whatever the clock says: far above what a 24-hour run reaches. */
const LOOP_MAX = 10_000_000;

function bounded<T>(p: Promise<T>, what: string, ms = OP_TIMEOUT_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/** Extra figures the report prints beside the criteria's. */
export interface WorkloadReport extends WorkloadFigures {
  checkedSent: number;
  checkerReconnects: number;
  connections: number;
  persistentConnections: number;
  subscribes: number;
  unsubscribes: number;
  sharedPublished: number;
  sharedReceived: number;
  slowReceived: number;
  /** Connects, subscribes or publishes that failed or timed out (the error of the first). */
  /** The first lost sequence numbers, for a replay. */
  lostSeqs: number[];
  errors: number;
  firstError: string | null;
}

export class Workload {
  private readonly r: () => number;
  private readonly o: WorkloadOptions;
  readonly f: WorkloadReport;
  private readonly clients = new Set<MqttClient>();
  /** seq → how often the checker received it; acked: seqs of QoS 1/2 acknowledged, with their QoS. */
  private readonly got = new Map<number, number>();
  private readonly ackedQos = new Map<number, number>();
  private readonly willsGot = new Set<string>();
  private readonly abrupt = new Set<string>();
  private readonly normal = new Set<string>();

  constructor(o: WorkloadOptions) {
    this.o = o;
    this.r = rng(o.seed);
    this.f = {
      acked: 0,
      lost: 0,
      qos2Duplicates: 0,
      slowBound: o.maxQueued + SLOW_RECEIVE_MAXIMUM,
      slowHeldMax: 0,
      slowBursts: 0,
      abruptCloses: 0,
      willsOfAbrupt: 0,
      willsOfNormal: 0,
      checkedSent: 0,
      checkerReconnects: 0,
      connections: 0,
      persistentConnections: 0,
      subscribes: 0,
      unsubscribes: 0,
      sharedPublished: 0,
      sharedReceived: 0,
      slowReceived: 0,
      lostSeqs: [],
      errors: 0,
      firstError: null,
    };
  }

  private get running(): boolean {
    return Date.now() < this.o.deadline;
  }

  private error(err: unknown): void {
    this.f.errors++;
    this.f.firstError ??= (err as Error).message ?? String(err);
  }

  /** Connects; `onMessage` is attached before the CONNACK, so messages a resumed session sends
   * right behind it are not missed. */
  private async connect(opts: IClientOptions, onMessage?: (topic: string, payload: Buffer) => void): Promise<MqttClient> {
    const c = mqtt.connect({ host: '127.0.0.1', port: this.o.port, reconnectPeriod: 0, connectTimeout: OP_TIMEOUT_MS, ...opts });
    this.clients.add(c);
    c.once('close', () => this.clients.delete(c));
    if (onMessage !== undefined) c.on('message', onMessage);
    try {
      await bounded(
        new Promise<void>((resolve, reject) => {
          c.once('connect', () => resolve());
          c.once('error', reject);
          c.once('close', () => reject(new Error(`connect ${opts.clientId}: closed before CONNACK`)));
        }),
        `connect ${opts.clientId}`,
      );
    } catch (err) {
      c.end(true);
      throw err;
    }
    c.on('error', () => {});
    this.f.connections++;
    if (opts.clean === false) this.f.persistentConnections++;
    return c;
  }

  private async end(c: MqttClient): Promise<void> {
    await bounded(c.endAsync(), 'disconnect').catch(() => c.end(true));
  }

  /** Runs every part until the deadline, then waits (bounded) for what was acknowledged to arrive. */
  async run(): Promise<WorkloadReport> {
    const wills = await this.connect(
      { clientId: 'soak-wills', protocolVersion: 5, clean: false, properties: { sessionExpiryInterval: 3600 } },
      (topic) => this.willsGot.add(topic.slice('soak/will/'.length)),
    );
    await bounded(wills.subscribeAsync('soak/will/#', { qos: 1 }), 'subscribe wills');
    try {
      await Promise.all([
        this.checked(),
        ...Array.from({ length: CHURN_WORKERS }, (_, w) => this.churn(w)),
        this.subscriptionChurn(),
        this.shared(),
        this.slow(),
      ]);
      await this.settle();
    } finally {
      for (const c of this.clients) c.end(true);
    }
    return this.f;
  }

  /** QoS 0/1/2 at a fixed rate from one publisher to one persistent subscriber that reconnects. */
  private async checked(): Promise<void> {
    const store = new Store({ clean: false });
    const checkerOpts: IClientOptions = {
      clientId: 'soak-checker',
      protocolVersion: 5,
      clean: false,
      properties: { sessionExpiryInterval: 3600 },
      // One store across the checker's connections: a QoS 2 message whose PUBREL arrives on the next
      // connection is still known (MQTT.js emits it on PUBREL).
      incomingStore: store,
    };
    const onMessage = (_t: string, payload: Buffer): void => {
      const seq = Number(payload.toString());
      this.got.set(seq, (this.got.get(seq) ?? 0) + 1);
    };
    let checker = await this.connect(checkerOpts, onMessage);
    await bounded(checker.subscribeAsync('soak/data/#', { qos: 2 }), 'subscribe checker');
    const away = async (): Promise<void> => {
      for (let i = 0; i < LOOP_MAX && this.running; i++) {
        await sleep(Math.min(CHECKER_AWAY_EVERY_MS, Math.max(0, this.o.deadline - Date.now())));
        if (!this.running) break;
        await this.end(checker);
        await sleep(CHECKER_AWAY_MS);
        try {
          checker = await this.connect(checkerOpts, onMessage);
          this.f.checkerReconnects++;
        } catch (err) {
          this.error(err);
        }
      }
      // The settle phase needs the checker connected.
      if (!checker.connected) {
        checker = await this.connect(checkerOpts, onMessage);
      }
    };
    const pub = await this.connect({ clientId: 'soak-pub', protocolVersion: 5, clean: true });
    const period = 1000 / CHECKED_RATE_PER_S;
    const start = Date.now();
    const pending: Promise<void>[] = [];
    const publishing = async (): Promise<void> => {
      for (let seq = 0; seq < LOOP_MAX && this.running; seq++) {
        const qos = (seq % 3) as 0 | 1 | 2;
        this.f.checkedSent++;
        pending.push(
          bounded(pub.publishAsync(`soak/data/q${qos}`, String(seq), { qos }), `publish ${seq}`).then(
            (ack) => {
              const code = (ack as { reasonCode?: number } | undefined)?.reasonCode ?? 0;
              if (qos > 0 && code < 0x80) this.ackedQos.set(seq, qos);
            },
            (err) => this.error(err),
          ),
        );
        if (pending.length > 64) await pending.shift();
        const next = start + (seq + 1) * period;
        await sleep(Math.max(0, next - Date.now()));
      }
      await Promise.all(pending);
    };
    await Promise.all([away(), publishing()]);
  }

  /** Workers that connect, subscribe, publish and leave, normally or by dropping the socket. */
  private async churn(w: number): Promise<void> {
    for (let i = 0; i < LOOP_MAX && this.running; i++) {
      const v5 = this.r() < 0.5;
      const persistent = this.r() < 0.5;
      const key = `${w}/${i}`;
      try {
        const c = await this.connect({
          clientId: `soak-churn-${w}-${Math.floor(this.r() * CHURN_IDS)}`,
          protocolVersion: v5 ? 5 : 4,
          clean: !persistent,
          ...(v5 && persistent ? { properties: { sessionExpiryInterval: 60 } } : {}),
          will: { topic: `soak/will/${key}`, payload: Buffer.from('gone'), qos: 1, retain: false },
        });
        const k = Math.floor(this.r() * 10);
        await bounded(c.subscribeAsync(`soak/churn/${k}/#`, { qos: Math.floor(this.r() * 3) as 0 | 1 | 2 }), 'subscribe churn');
        this.f.subscribes++;
        const n = 1 + Math.floor(this.r() * 3);
        for (let j = 0; j < n; j++) {
          const qos = Math.floor(this.r() * 3) as 0 | 1 | 2;
          await bounded(c.publishAsync(`soak/churn/${Math.floor(this.r() * 10)}/x`, 'churn', { qos }), 'publish churn');
        }
        if (this.r() < ABRUPT_SHARE) {
          this.abrupt.add(key);
          c.stream.destroy();
          c.end(true);
        } else {
          await bounded(c.endAsync(), 'disconnect churn');
          this.normal.add(key);
        }
      } catch (err) {
        this.error(err);
      }
      await sleep(100 + this.r() * 200);
    }
  }

  /** One client that subscribes to and unsubscribes from changing filters, shared ones among them. */
  private async subscriptionChurn(): Promise<void> {
    const c = await this.connect({ clientId: 'soak-subs', protocolVersion: 5, clean: true });
    const held: string[] = [];
    for (let i = 0; i < LOOP_MAX && this.running; i++) {
      const k = Math.floor(this.r() * 20);
      const pool = [`soak/sub/${k}/#`, `soak/sub/+/${k}`, `$share/g${k % 3}/soak/shared/#`, `soak/+/${k}`, `soak/churn/${k % 10}/+`];
      const filter = pool[Math.floor(this.r() * pool.length)]!;
      try {
        if (!held.includes(filter)) {
          await bounded(c.subscribeAsync(filter, { qos: Math.floor(this.r() * 3) as 0 | 1 | 2 }), 'subscribe');
          held.push(filter);
          this.f.subscribes++;
        }
        if (held.length > SUBS_HELD_MAX || this.r() < 0.3) {
          const gone = held.splice(Math.floor(this.r() * held.length), 1)[0]!;
          await bounded(c.unsubscribeAsync(gone), 'unsubscribe');
          this.f.unsubscribes++;
        }
      } catch (err) {
        this.error(err);
      }
      await sleep(100);
    }
  }

  /** Two members of one shared group and a QoS 1 publisher to it. */
  private async shared(): Promise<void> {
    const members = [];
    for (const id of ['soak-share-a', 'soak-share-b']) {
      const m = await this.connect({ clientId: id, protocolVersion: 5, clean: true }, () => this.f.sharedReceived++);
      await bounded(m.subscribeAsync('$share/soak/soak/shared/#', { qos: 1 }), 'subscribe shared');
      members.push(m);
    }
    const pub = await this.connect({ clientId: 'soak-share-pub', protocolVersion: 5, clean: true });
    for (let i = 0; i < LOOP_MAX && this.running; i++) {
      await bounded(pub.publishAsync(`soak/shared/${i % 7}`, String(i), { qos: 1 }), 'publish shared').then(
        () => this.f.sharedPublished++,
        (err) => this.error(err),
      );
      await sleep(200);
    }
  }

  /** Bursts to a subscriber that reads one message per SLOW_READ_MS with a small Receive Maximum:
   * what it receives after the burst's last acknowledgement is what the broker held for it. */
  private async slow(): Promise<void> {
    let received = 0;
    let lastAt = Date.now();
    const sub = await this.connect({
      clientId: 'soak-slow',
      protocolVersion: 5,
      clean: false,
      properties: { sessionExpiryInterval: 3600, receiveMaximum: SLOW_RECEIVE_MAXIMUM },
    });
    // MQTT.js sends the PUBACK, and reads the next packet, only once handleMessage calls back.
    sub.handleMessage = (_p: IPublishPacket, done: (err?: Error) => void): void => {
      received++;
      this.f.slowReceived++;
      lastAt = Date.now();
      setTimeout(() => done(), SLOW_READ_MS);
    };
    await bounded(sub.subscribeAsync('soak/slow', { qos: 1 }), 'subscribe slow');
    const pub = await this.connect({ clientId: 'soak-slow-pub', protocolVersion: 5, clean: true });
    for (let round = 0; round < LOOP_MAX && this.running; round++) {
      let sent = 0;
      const worker = async (): Promise<void> => {
        while (sent < SLOW_BURST) {
          sent++;
          await bounded(pub.publishAsync('soak/slow', 'slow', { qos: 1 }), 'publish slow');
        }
      };
      try {
        await Promise.all(Array.from({ length: SLOW_BURST_CONCURRENCY }, worker));
      } catch (err) {
        this.error(err);
        await sleep(1_000);
        continue;
      }
      const atLastAck = received;
      const drainEnd = Date.now() + SLOW_DRAIN_MAX_MS;
      lastAt = Date.now();
      while (Date.now() - lastAt < SLOW_IDLE_MS && Date.now() < drainEnd) await sleep(100);
      this.f.slowHeldMax = Math.max(this.f.slowHeldMax, received - atLastAck);
      this.f.slowBursts++;
      await sleep(1_000);
    }
  }

  /** Waits (bounded) until every acknowledged message and every will of an abrupt close arrived,
   * then counts what is missing. */
  private async settle(): Promise<void> {
    const end = Date.now() + SETTLE_MS;
    const missing = (): number => [...this.ackedQos.keys()].filter((s) => !this.got.has(s)).length;
    const willsMissing = (): number => [...this.abrupt].filter((k) => !this.willsGot.has(k)).length;
    while ((missing() > 0 || willsMissing() > 0) && Date.now() < end) await sleep(200);
    // Wills after a normal DISCONNECT would arrive as soon as the others: a short extra wait.
    await sleep(500);
    this.f.acked = this.ackedQos.size;
    this.f.lost = missing();
    this.f.lostSeqs = [...this.ackedQos.keys()].filter((s) => !this.got.has(s)).slice(0, 20);
    this.f.qos2Duplicates = [...this.ackedQos].filter(([s, q]) => q === 2 && (this.got.get(s) ?? 0) > 1).length;
    this.f.abruptCloses = this.abrupt.size;
    this.f.willsOfAbrupt = [...this.abrupt].filter((k) => this.willsGot.has(k)).length;
    this.f.willsOfNormal = [...this.normal].filter((k) => this.willsGot.has(k)).length;
  }
}
