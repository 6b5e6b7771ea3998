// Helpers for integration tests: an in-process node on 127.0.0.1 port 0, MQTT.js clients, a raw
// client built on our own codec for what MQTT.js will not do (silence, bad packets), and bounded
// waits everywhere.
import assert from 'node:assert/strict';
import { connect as netConnect, type Socket } from 'node:net';
import mqtt, { type IClientOptions, type IPublishPacket, type MqttClient } from 'mqtt';
import pino from 'pino';
import type { CounterKey } from '../src/events.js';
import { Decoder } from '../src/protocol/decoder.js';
import { encode } from '../src/protocol/encoder.js';
import type { Packet, ProtocolLevel } from '../src/protocol/packets.js';
import { BrokerNode, type NodeOptions } from '../src/server/broker-node.js';
import { sleep } from './support/wait.js';

export const WAIT_MS = 5_000;

export function nodeOptions(overrides: Partial<NodeOptions> = {}): NodeOptions {
  return {
    host: '127.0.0.1',
    port: 0,
    maxPacketSize: 1 << 20,
    maxQueuedMessages: 1000,
    maxQueuedBytes: 16 << 20,
    maxInflight: 32,
    receiveMaximum: 64,
    maxKeepalive: 65535,
    topicAliasMaximum: 10,
    maxQos: 2,
    retainAvailable: true,
    willGraceS: 30,
    logger: pino({ level: 'silent' }),
    ...overrides,
  };
}

export async function startNode(overrides: Partial<NodeOptions> = {}): Promise<BrokerNode> {
  const node = new BrokerNode(nodeOptions(overrides));
  await withTimeout(node.start(), WAIT_MS, 'node start');
  return node;
}

export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** An MQTT.js client with every message it received, in order. */
export interface TestClient {
  client: MqttClient;
  messages: Received[];
  connack: { sessionPresent: boolean; reasonCode?: number; properties?: Record<string, unknown> };
  /** Resolves with the first message (counting from `from`) that matches, or rejects on timeout. */
  waitFor(match: (m: Received) => boolean, what: string, ms?: number): Promise<Received>;
  /** Resolves once the client's socket has closed. */
  closed: Promise<void>;
}

export interface Received {
  topic: string;
  payload: string;
  packet: IPublishPacket;
}

/** `where`: a port on 127.0.0.1 (mqtt://), or a whole URL (mqtts://, ws://, wss://). */
export async function connectClient(where: number | string, opts: IClientOptions = {}): Promise<TestClient> {
  const client = mqtt.connect(typeof where === 'number' ? `mqtt://127.0.0.1:${where}` : where, {
    reconnectPeriod: 0,
    connectTimeout: WAIT_MS,
    protocolVersion: 4,
    ...opts,
  });
  const messages: Received[] = [];
  const waiters = new Set<() => void>();
  client.on('message', (topic, payload, packet) => {
    messages.push({ topic, payload: payload.toString(), packet });
    for (const w of waiters) w();
  });
  const closed = new Promise<void>((resolve) => client.once('close', () => resolve()));
  const connack = await withTimeout(
    new Promise<TestClient['connack']>((resolve, reject) => {
      client.once('connect', (p) => resolve({ sessionPresent: p.sessionPresent, reasonCode: p.reasonCode, properties: p.properties }));
      client.once('error', reject);
      client.once('close', () => reject(new Error('closed before CONNACK')));
    }),
    WAIT_MS,
    'CONNACK',
  );
  client.on('error', () => {}); // errors after CONNACK show up as closes in the tests
  const waitFor = (match: (m: Received) => boolean, what: string, ms = WAIT_MS): Promise<Received> =>
    withTimeout(
      new Promise<Received>((resolve) => {
        const check = (): void => {
          const found = messages.find(match);
          if (found !== undefined) {
            waiters.delete(check);
            resolve(found);
          }
        };
        waiters.add(check);
        check();
      }),
      ms,
      what,
    );
  return { client, messages, connack, waitFor, closed };
}

/** The code of a refused CONNECT as MQTT.js gives it (the CONNACK code); fails when admitted. */
export async function refusedConnect(port: number, opts: IClientOptions): Promise<number | undefined> {
  try {
    const c = await connectClient(port, opts);
    await disconnect(c);
  } catch (err) {
    return (err as { code?: number }).code;
  }
  assert.fail(`${opts.clientId}: CONNECT admitted`);
}

/** The reason code of a refused publish (within 5 s); fails when it was accepted. */
export async function rejection(p: Promise<unknown>): Promise<number | undefined> {
  const r = await withTimeout(
    p.then(
      () => null,
      (err: { code?: number }) => err,
    ),
    5_000,
    'the publish answer',
  );
  assert.ok(r !== null, 'the publish was refused');
  return r.code;
}

export async function subscribe(c: TestClient, filter: string | string[], qos: 0 | 1 | 2 = 0): Promise<number[]> {
  const granted = await withTimeout(c.client.subscribeAsync(filter, { qos }), WAIT_MS, `SUBACK ${filter}`);
  return granted.map((g) => g.qos);
}

export async function publish(c: TestClient, topic: string, payload: string, opts: mqtt.IClientPublishOptions = {}): Promise<void> {
  await withTimeout(c.client.publishAsync(topic, payload, opts), WAIT_MS, `publish ${topic}`);
}

/** Ends with a DISCONNECT. */
export async function disconnect(c: TestClient): Promise<void> {
  await withTimeout(c.client.endAsync(), WAIT_MS, 'end');
}

/** Drops the TCP connection without a DISCONNECT. */
export async function dropConnection(c: TestClient): Promise<void> {
  c.client.end(true);
  await withTimeout(c.closed, WAIT_MS, 'socket close');
}

/** The packet shapes whose type may be T (PUBACK, PUBREC, PUBREL, PUBCOMP share one interface). */
export type PacketOf<T extends Packet['type']> = Packet & { type: T };

/** A client speaking through our codec, for behaviour MQTT.js does not allow. */
export class RawClient {
  readonly packets: Packet[] = [];
  private readonly decoder: Decoder;
  private waiters = new Set<() => void>();
  readonly closed: Promise<void>;
  isClosed = false;

  private constructor(
    private readonly socket: Socket,
    private readonly level: ProtocolLevel,
  ) {
    this.decoder = new Decoder({ maxPacketSize: 1 << 24, role: 'client', level });
    socket.on('data', (chunk: Buffer) => {
      const { packets } = this.decoder.feed(chunk);
      this.packets.push(...packets);
      this.wake();
    });
    socket.on('error', () => {});
    this.closed = new Promise((resolve) =>
      socket.once('close', () => {
        this.isClosed = true;
        this.wake();
        resolve();
      }),
    );
  }

  static async open(port: number, level: ProtocolLevel): Promise<RawClient> {
    const socket = netConnect({ host: '127.0.0.1', port });
    await withTimeout(
      new Promise((resolve, reject) => {
        socket.once('connect', resolve);
        socket.once('error', reject);
      }),
      WAIT_MS,
      'TCP connect',
    );
    return new RawClient(socket, level);
  }

  send(p: Packet): void {
    this.socket.write(encode(p, this.level));
  }

  sendBytes(b: Uint8Array): void {
    this.socket.write(b);
  }

  /** The first received packet of `type` that matches, or a timeout. */
  waitFor<T extends Packet['type']>(type: T, match: (p: PacketOf<T>) => boolean = () => true, ms = WAIT_MS): Promise<PacketOf<T>> {
    return withTimeout(
      new Promise((resolve) => {
        const check = (): void => {
          const found = this.packets.find((p) => p.type === type && match(p as PacketOf<T>));
          if (found !== undefined) {
            this.waiters.delete(check);
            resolve(found as PacketOf<T>);
          }
        };
        this.waiters.add(check);
        check();
      }),
      ms,
      `${type} packet`,
    );
  }

  waitClosed(ms = WAIT_MS): Promise<void> {
    return withTimeout(this.closed, ms, 'server to close the connection');
  }

  destroy(): void {
    this.socket.destroy();
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }
}

/** A CONNECT packet with defaults that a test overrides. */
export function connectPacket(over: Partial<Extract<Packet, { type: 'connect' }>> = {}): Packet {
  return {
    type: 'connect',
    protocolName: 'MQTT',
    level: 4,
    clean: true,
    keepAlive: 0,
    clientId: 'raw',
    will: null,
    username: null,
    password: null,
    props: {},
    ...over,
  };
}

/** The node of one test and every client the test opened; cleanup() closes them all and stops the
 * node (call it in afterEach). Clients default to the fixture's protocol level. */
export class NodeFixture {
  node: BrokerNode | null = null;
  private readonly clients: TestClient[] = [];
  private readonly raws: RawClient[] = [];

  constructor(private readonly level: 4 | 5) {}

  get port(): number {
    if (this.node === null) throw new Error('no node started in this test');
    return this.node.port;
  }

  readonly start = async (over: Partial<NodeOptions> = {}): Promise<BrokerNode> => {
    this.node = await startNode(over);
    return this.node;
  };

  /** An MQTT.js client past its CONNACK. */
  readonly client = async (opts: IClientOptions = {}): Promise<TestClient> => {
    const c = await connectClient(this.port, { protocolVersion: this.level, ...opts });
    this.clients.push(c);
    return c;
  };

  /** A raw client with its TCP connection open and nothing sent. */
  readonly rawOpen = async (): Promise<RawClient> => {
    const r = await RawClient.open(this.port, this.level);
    this.raws.push(r);
    return r;
  };

  /** A raw client whose CONNECT was accepted. */
  readonly raw = async (over: Partial<Extract<Packet, { type: 'connect' }>> = {}): Promise<RawClient> => {
    const r = await this.rawOpen();
    r.send(connectPacket({ level: this.level, clientId: 'raw', ...over }));
    const ack = await r.waitFor('connack');
    if (ack.code !== 0) throw new Error(`CONNACK refused the raw client with 0x${ack.code.toString(16)}`);
    return r;
  };

  readonly cleanup = async (): Promise<void> => {
    for (const c of this.clients.splice(0)) c.client.end(true);
    for (const r of this.raws.splice(0)) r.destroy();
    await this.node?.stop();
    this.node = null;
  };
}

/** Connects until the broker accepts (its log may say nothing that says it listens), then a QoS 1
 * publish round trip through a subscription of its own; retried every 50 ms until `waitMs`. */
export async function publishRoundTrip(port: number, clientId: string, waitMs: number): Promise<void> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      const c = await connectClient(port, { clientId });
      await subscribe(c, 'probe', 1);
      const got = c.waitFor((m) => m.topic === 'probe', 'the probe publish');
      await publish(c, 'probe', 'x', { qos: 1 });
      await got;
      await disconnect(c);
      return;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(50);
    }
  }
}

/** A node's count of one event, refusal or protocol error. */
export const counter = (node: BrokerNode, kind: CounterKey): number => node.counters.get(kind) ?? 0;
