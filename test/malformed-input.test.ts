// What a good client never sends, from a raw socket: each bad input closes only that connection,
// logs one line per reason (rate-limited, with a count of suppressed lines later), and a well
// behaved MQTT.js client on the same broker is unaffected throughout.
import assert from 'node:assert/strict';
import { type Socket, connect as tcpConnect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import mqtt from 'mqtt';
import { BrokerProcess, type LogLine } from './broker-process.js';

const MAX_PACKET = 4096;

function str(s: string | Buffer): Buffer {
  const b = typeof s === 'string' ? Buffer.from(s, 'utf8') : s;
  return Buffer.concat([Buffer.from([b.length >> 8, b.length & 0xff]), b]);
}
function packet(first: number, body: Buffer): Buffer {
  const len: number[] = [];
  let n = body.length;
  do {
    let d = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) d |= 0x80;
    len.push(d);
  } while (n > 0);
  return Buffer.concat([Buffer.from([first, ...len]), body]);
}
function connectPacket(opts: { name?: string; level?: number; flags?: number; clientId?: string | Buffer } = {}): Buffer {
  return packet(
    0x10,
    Buffer.concat([str(opts.name ?? 'MQTT'), Buffer.from([opts.level ?? 4, opts.flags ?? 0x02, 0, 60]), str(opts.clientId ?? 'raw')]),
  );
}
const goodConnect = (id: string) => connectPacket({ clientId: id });

interface RawResult {
  closed: boolean;
  received: Buffer;
}

/** Sends bytes, then waits until the broker closes the socket or the timeout passes. */
async function sendRaw(port: number, bytes: Buffer[], timeoutMs = 5000): Promise<RawResult> {
  const sock: Socket = tcpConnect(port, '127.0.0.1');
  const chunks: Buffer[] = [];
  sock.on('data', (c: Buffer) => chunks.push(c));
  sock.on('error', () => {});
  await new Promise<void>((resolve, reject) => sock.once('connect', resolve).once('error', reject));
  const closed = new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    sock.once('close', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
  for (const b of bytes) {
    sock.write(b);
    await new Promise((r) => setTimeout(r, 20));
  }
  const result = { closed: await closed, received: Buffer.concat(chunks) };
  sock.destroy();
  return result;
}

const cases: { name: string; key: string; bytes: () => Buffer[] }[] = [
  { name: 'a remaining length of five bytes', key: 'remaining-length', bytes: () => [Buffer.from([0x10, 0xff, 0xff, 0xff, 0xff, 0x01])] },
  { name: 'a wrong protocol name', key: 'protocol-name', bytes: () => [connectPacket({ name: 'MQTX' })] },
  { name: 'the reserved CONNECT flag set', key: 'connect-reserved', bytes: () => [connectPacket({ flags: 0x03 })] },
  {
    name: 'reserved fixed-header bits on SUBSCRIBE',
    key: 'header-flags',
    bytes: () => [goodConnect('r1'), packet(0x80, Buffer.concat([Buffer.from([0, 1]), str('a'), Buffer.from([0])]))],
  },
  {
    name: 'a PUBLISH with a wildcard topic',
    key: 'topic-wildcard',
    bytes: () => [goodConnect('r2'), packet(0x30, Buffer.concat([str('a/#'), Buffer.from('x')]))],
  },
  {
    name: 'invalid UTF-8 in a topic',
    key: 'utf8',
    bytes: () => [goodConnect('r3'), packet(0x30, Buffer.concat([str(Buffer.from([0x61, 0xc3, 0x28])), Buffer.from('x')]))],
  },
  { name: 'U+0000 in a client id', key: 'utf8', bytes: () => [connectPacket({ clientId: Buffer.from([0x61, 0x00]) })] },
  {
    name: 'a PUBLISH at QoS 3',
    key: 'qos3',
    bytes: () => [goodConnect('r4'), packet(0x36, Buffer.concat([str('a'), Buffer.from([0, 1]), Buffer.from('x')]))],
  },
  { name: 'a SUBSCRIBE with no filters', key: 'no-filters', bytes: () => [goodConnect('r5'), packet(0x82, Buffer.from([0, 1]))] },
  {
    name: 'a packet larger than the maximum packet size',
    key: 'packet-too-large',
    bytes: () => [goodConnect('r6'), Buffer.from([0x30, 0xc0, 0x84, 0x3d])],
  },
  { name: 'a packet before CONNECT', key: 'first-packet', bytes: () => [Buffer.from([0xc0, 0x00])] },
  { name: 'a second CONNECT', key: 'second-connect', bytes: () => [goodConnect('r7'), goodConnect('r7')] },
];

describe('malformed input from a raw socket', { timeout: 120_000 }, () => {
  let broker: BrokerProcess;
  let good: mqtt.MqttClient;
  const received: string[] = [];

  before(async () => {
    broker = await BrokerProcess.start(['--log-level', 'info', '--max-packet-size', String(MAX_PACKET)]);
    good = await mqtt.connectAsync(`mqtt://127.0.0.1:${broker.port}`, { clientId: 'good', reconnectPeriod: 0 });
    good.on('message', (topic, payload) => received.push(`${topic}:${payload.toString()}`));
    await good.subscribeAsync('good/#', { qos: 1 });
  });
  after(async () => {
    await good?.endAsync();
    await broker?.stop();
  });

  let n = 0;
  for (const c of cases) {
    it(`closes the connection on ${c.name}, logs the reason, and leaves other clients alone`, async () => {
      const r = await sendRaw(broker.port, c.bytes());
      assert.ok(r.closed, 'the broker closed the bad connection');
      const line = await broker.waitForLog((l: LogLine) => l.key === `protocol:${c.key}`, 5000);
      assert.ok(line.level >= 30, 'logged at info or above');
      n++;
      await good.publishAsync('good/check', String(n), { qos: 1 });
      const want = `good/check:${n}`;
      const deadline = Date.now() + 5000;
      while (!received.includes(want)) {
        assert.ok(Date.now() < deadline, `good client still receives (${want})`);
        await new Promise((res) => setTimeout(res, 20));
      }
      assert.ok(good.connected, 'the good client stayed connected');
    });
  }

  it('answers an unknown protocol level with CONNACK return code 1, then closes', async () => {
    const r = await sendRaw(broker.port, [connectPacket({ level: 9 })]);
    assert.ok(r.closed);
    assert.deepEqual([...r.received], [0x20, 0x02, 0x00, 0x01]);
  });

  it('answers an empty client id without clean session with CONNACK return code 2, then closes', async () => {
    const r = await sendRaw(broker.port, [connectPacket({ flags: 0x00, clientId: '' })]);
    assert.ok(r.closed);
    assert.deepEqual([...r.received], [0x20, 0x02, 0x00, 0x02]);
  });

  it('logs a repeated reason once per window and counts what it suppressed', async () => {
    const key = 'qos3';
    const before = broker.logs.filter((l) => l.key === `protocol:${key}`).length;
    for (let i = 0; i < 5; i++) {
      const r = await sendRaw(broker.port, [goodConnect(`rep${i}`), packet(0x36, Buffer.concat([str('a'), Buffer.from([0, 1])]))]);
      assert.ok(r.closed);
    }
    const afterCount = broker.logs.filter((l) => l.key === `protocol:${key}`).length;
    assert.equal(afterCount, before, 'no new line for the same reason within the window');
  });
});
