// The referral path alone (src/server/referrer.ts) behind a loopback socket server, with MQTT.js
// clients and a leader source the test sets: MQTT 5 CONNECTs wait while no leader is known and are
// answered once one is, or, when the node begins to serve, handed to it with what was read.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { afterEach, describe, it } from 'node:test';
import mqtt from 'mqtt';
import { Placement } from '../scale/placement.js';
import { Referrer } from './referrer.js';
import { ShardGate } from './shard-gate.js';
import type { ByteStream } from './transport.js';

const LIMITS = { maxPacketSize: 1 << 20, handshakeTimeoutMs: 10_000 };

interface Answer {
  code: number;
  reference: string | undefined;
}

function connack(port: number, clientId?: string, protocolVersion: 4 | 5 = 5): Promise<Answer> {
  const client = mqtt.connect({
    host: '127.0.0.1',
    port,
    protocolVersion,
    reconnectPeriod: 0,
    connectTimeout: 8_000,
    ...(clientId === undefined ? {} : { clientId }),
  });
  return new Promise<Answer>((resolve, reject) => {
    client.on('error', () => {});
    client.once('packetreceive', (p) => {
      if (p.cmd === 'connack') resolve({ code: p.reasonCode ?? p.returnCode ?? -1, reference: p.properties?.serverReference });
    });
    client.once('close', () => reject(new Error('closed without a CONNACK')));
  }).finally(() => client.end(true));
}

let open: Array<{ r: Referrer; server: Server }> = [];
afterEach(async () => {
  for (const { r, server } of open) {
    r.stop();
    await new Promise((res) => server.close(res));
  }
  open = [];
});

type Adopted = { stream: ByteStream; read: readonly Buffer[] };

async function referrer(
  leader: () => string | null,
  adopted: Adopted[] = [],
  shards: ShardGate | null = null,
): Promise<{ r: Referrer; port: number }> {
  const host = {
    refused: () => {},
    event: () => {},
    adopt: (stream: ByteStream, _t: unknown, read: readonly Buffer[]) => adopted.push({ stream, read }),
  };
  const r = new Referrer({ leader, own: 'me.example:1883' }, host, LIMITS, shards);
  const server = createServer((socket) =>
    r.accept(socket, { kind: 'mqtt', remoteAddress: '127.0.0.1', remotePort: 0, certIdentity: null, clientIdMustMatchIdentity: false }),
  );
  open.push({ r, server });
  await new Promise<void>((res) => server.listen(0, '127.0.0.1', res));
  return { r, port: (server.address() as { port: number }).port };
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

  it('hands a held socket, with its CONNECT, to the node when it begins to serve', async () => {
    const adopted: Adopted[] = [];
    const { r, port } = await referrer(() => null, adopted);
    const answer = connack(port);
    await new Promise((res) => setTimeout(res, 200));
    r.serving();
    await new Promise((res) => setImmediate(res));
    assert.equal(adopted.length, 1);
    const a = adopted[0] as Adopted;
    assert.equal(a.read[0]?.[0], 0x10, 'the bytes read so far begin with the CONNECT');
    assert.equal(r.referred + r.unavailable, 0, 'nothing was answered by the referrer');
    // The node answers on the same socket (here by hand: CONNACK, success, no properties).
    a.stream.write(Buffer.from([0x20, 0x03, 0x00, 0x00, 0x00]));
    assert.deepEqual(await answer, { code: 0, reference: undefined });
  });

  it("sends a client of another shard to that shard's address, not to this shard's leader", async () => {
    const placement = new Placement(['a', 'b']);
    const addresses = new Map([
      ['a', 'a.example:1883'],
      ['b', 'b.example:1883'],
    ]);
    const gate = new ShardGate({ shard: 'a', placement, addresses });
    const { port } = await referrer(() => 'leader-a.example:1883', [], gate);
    const idOf = (shard: string): string => {
      for (let i = 0; i < 1_000; i++) if (placement.owner(`dev-${i}`) === shard) return `dev-${i}`;
      throw new Error(`no id of shard ${shard} in 1000`);
    };
    assert.deepEqual(await connack(port, idOf('b')), { code: 0x9c, reference: 'b.example:1883' });
    assert.equal(gate.refused.get('b'), 1);
    assert.deepEqual(await connack(port, idOf('a')), { code: 0x9c, reference: 'leader-a.example:1883' });
    assert.deepEqual(await connack(port, idOf('b'), 4), { code: 3, reference: undefined }, '3.1.1: Server unavailable');
  });
});
