// A real node under hostile sockets: a BrokerNode on 127.0.0.1 port 0 with a ws:// and an
// mqtt:// listener, shared by two targets.
// ws-frames: a raw TCP socket makes a valid upgrade and then writes the input (frames as a client
// sends them, masked, carrying MQTT packets, mutated) in the chunks the cuts make. The frames are
// parsed by the ws library and handed to the connection by our adapter
// (src/server/listeners/ws-stream.ts).
// mqtt-node: a TCP socket writes the input (a client's session of MQTT packets, mutated) to the
// mqtt:// listener: the decoder, the connection and the broker behind it.
// Rules: the node logs no internal error and no error line; it still answers a well-behaved
// client (CONNECT gets its CONNACK) after every input. Each input's exchange ends at a ping's
// answer, the server's close, or a wait of WAIT_MS: the bound is on the wait, and no duration is
// asserted.
import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import fc from 'fast-check';
import pino from 'pino';
import * as arb from '../../src/protocol/codec-arbitraries.testkit.js';
import { encode } from '../../src/protocol/encoder.js';
import type { ConnectPacket, Packet } from '../../src/protocol/packets.js';
import { BrokerNode } from '../../src/server/broker-node.js';
import { check, FuzzFailure, type FuzzInput, type FuzzTarget, split } from '../harness.js';

/** How long one input's exchange may take before it is ended (not a rule: a partial frame makes
 * the server wait for more, which is right). */
const WAIT_MS = 300;
/** Bound of the liveness probe; a node that does not answer within it fails the input. */
const PROBE_MS = 5_000;
const MAX_PACKET = 4096;

const OP = { continuation: 0, text: 1, binary: 2, close: 8, ping: 9, pong: 10 } as const;

/** A client frame (RFC 6455 §5.2): masked, with the payload length in the shortest form. */
export function wsFrame(opcode: number, payload: Uint8Array, fin = true, mask: Uint8Array = Uint8Array.of(1, 2, 3, 4)): Uint8Array {
  const n = payload.length;
  const head: number[] = [(fin ? 0x80 : 0) | opcode];
  if (n < 126) head.push(0x80 | n);
  else if (n < 65536) head.push(0x80 | 126, n >> 8, n & 0xff);
  else head.push(0x80 | 127, 0, 0, 0, 0, (n >>> 24) & 0xff, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
  const masked = payload.map((b, i) => b ^ (mask[i % 4] as number));
  return new Uint8Array(Buffer.concat([Buffer.from(head), Buffer.from(mask), Buffer.from(masked)]));
}

const CONNECT: ConnectPacket = {
  type: 'connect',
  protocolName: 'MQTT',
  level: 4,
  clean: true,
  keepAlive: 60,
  clientId: 'fuzz',
  will: null,
  username: null,
  password: null,
  props: {},
};

/** MQTT packets in binary frames, now and then split across continuation frames or beside a
 * control frame. */
const validFrames: fc.Arbitrary<Uint8Array> = fc
  .tuple(
    arb.level.chain((level) =>
      fc
        .tuple(arb.connect(level), fc.array(arb.toServer(level), { maxLength: 3 }))
        .map(([c, rest]) => [c, ...rest].map((p) => encode(p, level))),
    ),
    fc.array(fc.constantFrom('whole', 'fragmented', 'ping', 'text'), { minLength: 1, maxLength: 4 }),
  )
  .map(([packets, shapes]) => {
    const frames: Uint8Array[] = [];
    packets.forEach((bytes, i) => {
      const shape = shapes[i % shapes.length];
      if (shape === 'fragmented' && bytes.length > 1) {
        const half = bytes.length >> 1;
        frames.push(wsFrame(OP.binary, bytes.subarray(0, half), false), wsFrame(OP.continuation, bytes.subarray(half)));
      } else if (shape === 'ping') {
        frames.push(wsFrame(OP.ping, Uint8Array.of(1)), wsFrame(OP.binary, bytes));
      } else if (shape === 'text') {
        frames.push(wsFrame(OP.text, bytes));
      } else frames.push(wsFrame(OP.binary, bytes));
    });
    return new Uint8Array(Buffer.concat(frames));
  });

interface Node {
  node: BrokerNode;
  port: number;
  mqttPort: number;
  errors: string[];
}

let started: Promise<Node> | null = null;

function startNode(): Promise<Node> {
  started ??= (async () => {
    const errors: string[] = [];
    const logger = pino({ level: 'error' }, { write: (line: string) => errors.push(line) });
    const node = new BrokerNode({
      host: '127.0.0.1',
      port: 0,
      listeners: [
        { kind: 'ws', host: '127.0.0.1', port: 0, path: '/mqtt', proxy: null },
        { kind: 'mqtt', host: '127.0.0.1', port: 0, path: '', proxy: null },
      ],
      maxPacketSize: MAX_PACKET,
      maxQueuedMessages: 100,
      maxQueuedBytes: 1 << 20,
      maxInflight: 8,
      receiveMaximum: 8,
      maxKeepalive: 65535,
      topicAliasMaximum: 4,
      maxQos: 2,
      retainAvailable: true,
      willGraceS: 1,
      logger,
    });
    await node.start();
    return { node, port: node.ports[0] as number, mqttPort: node.ports[1] as number, errors };
  })();
  return started;
}

/** Opens a TCP socket and makes the upgrade; resolves once the 101 has come. */
function upgraded(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1');
    const timer = setTimeout(() => {
      s.destroy();
      reject(new FuzzFailure(`no upgrade answer within ${PROBE_MS} ms`));
    }, PROBE_MS);
    let head = '';
    s.once('connect', () => {
      const key = randomBytes(16).toString('base64');
      s.write(
        `GET /mqtt HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n`,
      );
    });
    const onData = (d: Buffer): void => {
      head += d.toString('latin1');
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      clearTimeout(timer);
      s.off('data', onData);
      if (!head.startsWith('HTTP/1.1 101')) {
        s.destroy();
        reject(new FuzzFailure(`upgrade refused: ${head.slice(0, 40)}`));
        return;
      }
      // Bytes the server sent behind the 101 stay with the socket's later reads.
      const rest = Buffer.from(head.slice(end + 4), 'latin1');
      if (rest.length > 0) s.unshift(rest);
      resolve(s);
    };
    s.on('data', onData);
    s.once('error', (e) => {
      clearTimeout(timer);
      reject(new FuzzFailure(`upgrade socket error: ${e.message}`));
    });
  });
}

/** Writes the chunks, then `ping`; waits until the bytes read end with `pong` (within the last 16),
 * the server's close, or WAIT_MS; then drops the socket. */
async function exchange(s: Socket, chunks: readonly Uint8Array[], ping: Uint8Array, pong: Buffer): Promise<void> {
  await new Promise<void>((resolve) => {
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.off('data', onData);
      resolve();
    };
    const timer = setTimeout(finish, WAIT_MS);
    let seen = Buffer.alloc(0);
    const onData = (d: Buffer): void => {
      seen = Buffer.concat([seen, d]).subarray(-16);
      if (seen.includes(pong)) finish();
    };
    s.on('data', onData);
    s.once('close', finish);
    s.on('error', finish);
    for (const c of chunks) if (c.length > 0 && !s.destroyed) s.write(c);
    if (!s.destroyed) s.write(ping);
  });
  s.destroy();
}

/** A well-behaved client after the input: writes `connect` and waits for the bytes read so far to
 * pass `isConnack`; fails on the node's close or after PROBE_MS. `over` names the transport. */
async function probe(s: Socket, connect: Uint8Array, isConnack: (got: Buffer) => boolean, over: string): Promise<void> {
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new FuzzFailure(`no CONNACK over ${over} within ${PROBE_MS} ms after the input`)), PROBE_MS);
      let got = Buffer.alloc(0);
      s.on('data', (d: Buffer) => {
        got = Buffer.concat([got, d]);
        if (isConnack(got)) {
          clearTimeout(timer);
          resolve();
        }
      });
      s.once('close', () => {
        clearTimeout(timer);
        reject(new FuzzFailure(`the node closed a well-behaved ${over} client after the input`));
      });
      s.write(connect);
    });
  } finally {
    s.destroy();
  }
}

/** A pong carrying our ping's payload (0x8a 0x04 'f' 'u' 'z' 'z'). */
const WS_PONG = Buffer.from([0x8a, 0x04, 0x66, 0x75, 0x7a, 0x7a]);

/** Server frames are unmasked: 0x82, length, then the MQTT bytes; CONNACK starts 0x20. */
const wsConnack = (got: Buffer): boolean => got.length >= 3 && got[0] === 0x82 && got[2] === 0x20;

export async function runWsFrames(input: FuzzInput): Promise<void> {
  const n = await startNode();
  const s = await upgraded(n.port);
  await exchange(s, split(input.data, input.cuts), wsFrame(OP.ping, Buffer.from('fuzz')), WS_PONG);
  await probe(await upgraded(n.port), wsFrame(OP.binary, encode(CONNECT, 4)), wsConnack, 'WebSocket');
  check(n.node.counters.get('protocol-error:internal') === undefined, 'the node logged an internal error');
  check(n.errors.length === 0, `the node logged at error level: ${n.errors[0]}`);
}

async function stopNode(): Promise<void> {
  if (started === null) return;
  const n = await started;
  started = null;
  await n.node.stop();
}

export const wsFrames: FuzzTarget = {
  name: 'ws-frames',
  modules: ['src/server/listeners/ws-stream.ts', 'src/server/listeners/listener.ts'],
  valid: validFrames,
  maxBytes: 256,
  run: runWsFrames,
  quickRuns: 60,
  batchRuns: 20,
  close: stopNode,
};

// ---- MQTT over TCP into the same node ----

const PINGREQ = Uint8Array.of(0xc0, 0x00);
const PINGRESP = Buffer.from([0xd0, 0x00]);

function tcp(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1');
    const timer = setTimeout(() => {
      s.destroy();
      reject(new FuzzFailure(`no TCP connection within ${PROBE_MS} ms`));
    }, PROBE_MS);
    s.once('connect', () => {
      clearTimeout(timer);
      resolve(s);
    });
    s.once('error', (e) => {
      clearTimeout(timer);
      reject(new FuzzFailure(`TCP socket error: ${e.message}`));
    });
  });
}

export async function runMqttNode(input: FuzzInput): Promise<void> {
  const n = await startNode();
  const s = await tcp(n.mqttPort);
  await exchange(s, split(input.data, input.cuts), PINGREQ, PINGRESP);
  await probe(await tcp(n.mqttPort), encode(CONNECT, 4), (got) => got[0] === 0x20, 'TCP');
  check(n.node.counters.get('protocol-error:internal') === undefined, 'the node logged an internal error');
  check(n.errors.length === 0, `the node logged at error level: ${n.errors[0]}`);
}

/** A client's session: a CONNECT of some level, then packets a client sends. */
const validSession: fc.Arbitrary<Uint8Array> = arb.level.chain((level) =>
  fc
    .tuple(arb.connect(level), fc.array(arb.toServer(level), { maxLength: 5 }))
    .map(([c, rest]) => new Uint8Array(Buffer.concat([c, ...rest].map((p) => encode(p, level))))),
);

export const mqttNode: FuzzTarget = {
  name: 'mqtt-node',
  modules: [
    'src/server/connection.ts',
    'src/server/inbound.ts',
    'src/server/outbound.ts',
    'src/server/broker-node.ts',
    'src/broker/broker.ts',
  ],
  valid: validSession,
  maxBytes: 256,
  run: runMqttNode,
  quickRuns: 60,
  batchRuns: 20,
  close: stopNode,
};

/** Seed corpus: sessions of each level that subscribe, publish at each QoS and disconnect. */
export function mqttNodeCorpus(): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const level of [3, 4, 5] as const) {
    const connect: Packet = {
      ...CONNECT,
      level,
      protocolName: level === 3 ? 'MQIsdp' : 'MQTT',
      clientId: `fuzz-${level}`,
      clean: level !== 5,
    };
    const packets: Packet[] = [
      connect,
      { type: 'subscribe', pid: 1, subs: [{ filter: 'a/#', qos: 2, nl: false, rap: false, rh: 0 }], props: {} },
      { type: 'publish', topic: 'a/b', qos: 0, retain: true, dup: false, payload: Buffer.from('x'), props: {} },
      { type: 'publish', topic: 'a/c', qos: 1, pid: 2, retain: false, dup: false, payload: Buffer.from('y'), props: {} },
      { type: 'publish', topic: 'a/d', qos: 2, pid: 3, retain: false, dup: false, payload: Buffer.from('z'), props: {} },
      { type: 'pubrel', pid: 3, code: 0, props: {} },
      { type: 'unsubscribe', pid: 4, filters: ['a/#'], props: {} },
      { type: 'disconnect', code: 0, props: {} },
    ];
    out.push(new Uint8Array(Buffer.concat(packets.map((p) => encode(p, level)))));
  }
  return out;
}

/** Seed corpus: CONNECT in one frame, fragmented, beside a ping; a PUBLISH after it; a text
 * frame; a close frame. */
export function wsCorpus(): Uint8Array[] {
  const connect = encode(CONNECT, 4);
  const publish = encode(
    { type: 'publish', topic: 'a/b', qos: 1, pid: 1, retain: false, dup: false, payload: Buffer.from('x'), props: {} },
    4,
  );
  const cat = (...f: Uint8Array[]) => new Uint8Array(Buffer.concat(f));
  return [
    wsFrame(OP.binary, connect),
    cat(wsFrame(OP.binary, connect.subarray(0, 5), false), wsFrame(OP.continuation, connect.subarray(5))),
    cat(wsFrame(OP.ping, Uint8Array.of(7)), wsFrame(OP.binary, connect), wsFrame(OP.binary, publish)),
    wsFrame(OP.text, connect),
    cat(wsFrame(OP.binary, connect), wsFrame(OP.close, Uint8Array.of(0x03, 0xe8))),
  ];
}
