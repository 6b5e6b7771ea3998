// The referral listener alone (src/server/referrer.ts) on a loopback port, with MQTT.js clients and
// a leader source the test sets: MQTT 5 CONNECTs wait while no leader is known and are answered
// once one is, or, when the node begins to serve, with its own address.
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import mqtt from 'mqtt';
import { Referrer } from './referrer.js';

const LIMITS = { maxPacketSize: 1 << 20, handshakeTimeoutMs: 10_000, maxWriteBufferBytes: 1 << 20 };

interface Answer {
  code: number;
  reference: string | undefined;
}

function connack(port: number): Promise<Answer> {
  const client = mqtt.connect({ host: '127.0.0.1', port, protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 8_000 });
  return new Promise<Answer>((resolve, reject) => {
    client.on('error', () => {});
    client.once('packetreceive', (p) => {
      if (p.cmd === 'connack') resolve({ code: p.reasonCode ?? -1, reference: p.properties?.serverReference });
    });
    client.once('close', () => reject(new Error('closed without a CONNACK')));
  }).finally(() => client.end(true));
}

let open: Referrer[] = [];
afterEach(async () => {
  await Promise.all(open.map((r) => r.close()));
  open = [];
});

async function referrer(leader: () => string | null): Promise<{ r: Referrer; port: number }> {
  const refused: string[] = [];
  const r = new Referrer(
    [{ kind: 'mqtt', host: '127.0.0.1', port: 0, path: '', proxy: null }],
    null,
    LIMITS,
    { leader, own: 'me.example:1883' },
    { refused: (key) => refused.push(key) },
  );
  open.push(r);
  const [port] = await r.listen([0]);
  return { r, port: port as number };
}

describe('Referrer', { timeout: 30_000 }, () => {
  it('answers at once with the leader it knows', async () => {
    const { r, port } = await referrer(() => 'leader.example:1883');
    assert.deepEqual(await connack(port), { code: 0x9c, reference: 'leader.example:1883' });
    assert.equal(r.referred, 1);
  });

  it('holds a CONNECT while no leader is known and answers when one is', async () => {
    let leader: string | null = null;
    const { r, port } = await referrer(() => leader);
    const answer = connack(port);
    await new Promise((res) => setTimeout(res, 200));
    assert.equal(r.referred + r.unavailable, 0, 'not answered while no leader is known');
    leader = 'new.example:1883';
    assert.deepEqual(await answer, { code: 0x9c, reference: 'new.example:1883' });
  });

  it('sends a held CONNECT to this node when it begins to serve', async () => {
    const { r, port } = await referrer(() => null);
    const answer = connack(port);
    await new Promise((res) => setTimeout(res, 200));
    await r.close(true);
    assert.deepEqual(await answer, { code: 0x9c, reference: 'me.example:1883' });
  });
});
