// A client that subscribes to its own flood of QoS 0 publishes and never reads: above
// --max-write-buffer-bytes the broker drops that client's QoS 0 deliveries and stops reading from it,
// so its memory stays bounded, while other clients keep publishing and receiving. RSS is reported,
// not asserted.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect as netConnect, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { encode } from '../src/protocol/encoder.js';
import { BrokerProcess, type LogLine } from './broker-process.js';
import { connectClient, connectPacket, disconnect, publish, subscribe, WAIT_MS, withTimeout } from './helpers.js';

function rssKiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m === null ? -1 : Number(m[1]);
}

/** PUBLISH packets per write, and writes: 32 MiB of QoS 0 traffic, far more than the socket
 * buffers of loopback and the write bound hold. */
const PER_CHUNK = 1_000;
const CHUNKS = 32;
const PAYLOAD_BYTES = 1_000;

/** A raw MQTT 3.1.1 client that never reads: it connects, subscribes to `flood` and publishes
 * there. The socket is paused before any byte arrives, so nothing is read past Node's small buffer. */
async function floodWithoutReading(port: number): Promise<Socket> {
  const socket = netConnect({ host: '127.0.0.1', port });
  socket.pause();
  socket.on('error', () => {});
  await withTimeout(
    new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('error', reject);
    }),
    WAIT_MS,
    'TCP connect',
  );
  socket.write(encode(connectPacket({ clientId: 'slow' }), 4));
  socket.write(encode({ type: 'subscribe', pid: 1, subs: [{ filter: 'flood', qos: 0, nl: false, rap: false, rh: 0 }], props: {} }, 4));
  const one = encode(
    { type: 'publish', topic: 'flood', payload: new Uint8Array(PAYLOAD_BYTES).fill(0x61), qos: 0, retain: false, dup: false, props: {} },
    4,
  );
  const chunk = Buffer.concat(Array.from({ length: PER_CHUNK }, () => one));
  for (let i = 0; i < CHUNKS; i++) socket.write(chunk);
  return socket;
}

const counter = (l: LogLine, kind: string): number => (l.counters as Record<string, number> | undefined)?.[kind] ?? 0;

describe('slow consumer', { timeout: 90_000 }, () => {
  it('drops QoS 0 to a client that does not read and pauses its input, other clients unaffected', async (t) => {
    const broker = await BrokerProcess.start(['--log-level', 'info', '--stats-interval-ms', '200']);
    const pid = broker.proc.pid as number;
    try {
      const watcher = await connectClient(broker.port, { protocolVersion: 5, clientId: 'watcher' });
      await subscribe(watcher, 'other', 1);
      const rssBefore = rssKiB(pid);
      const slow = await floodWithoutReading(broker.port);
      const paused = await broker.waitForLog(
        (l) => l.msg === 'stats' && counter(l, 'reads-paused-slow-consumer') > 0 && counter(l, 'qos0-dropped-slow-consumer') > 0,
        30_000,
      );
      const dropped = counter(paused, 'qos0-dropped-slow-consumer');
      // While the slow client is stuck, another publisher and the watcher work as before.
      const pub = await connectClient(broker.port, { protocolVersion: 4, clientId: 'pub' });
      await publish(pub, 'other', 'still here', { qos: 1 });
      await watcher.waitFor((m) => m.topic === 'other', 'message on other');
      const rssAfter = rssKiB(pid);
      t.diagnostic(
        `broker RSS before ${rssBefore} KiB, while the slow client is stuck ${rssAfter} KiB; ` +
          `${CHUNKS * PER_CHUNK} publishes of ${PAYLOAD_BYTES} B written, ${dropped} QoS 0 deliveries to the slow client dropped`,
      );
      assert.deepEqual(
        watcher.messages.map((m) => m.topic),
        ['other'],
      );
      slow.destroy();
      await disconnect(pub);
      await disconnect(watcher);
    } finally {
      await broker.stop();
    }
  });
});
