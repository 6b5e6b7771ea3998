// Clients that close the network connection (TCP FIN, no DISCONNECT): the plain TCP listener keeps
// such sockets half-open until the node ends them, a bounded number per event-loop turn, so that a
// mass disconnect is spread over turns. These tests check that every such socket is still closed
// by the broker and that every will is published [MQTT-3.1.2-8], one client and many at once.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, it } from 'node:test';
import { DEADLINES_PER_ENTRY_MAX } from '../src/broker/broker.js';
import { encode } from '../src/protocol/encoder.js';
import { RC } from '../src/protocol/reason-codes.js';
import type { BrokerNode } from '../src/server/broker-node.js';
import { PEER_ENDS_PER_TURN_MAX } from '../src/server/outbox.js';
import { connectClient, connectPacket, startNode, subscribe, type TestClient, WAIT_MS, withTimeout } from './helpers.js';
import { until } from './support/wait.js';

/** More than a few turns' worth of peer ends. */
const CLIENTS = PEER_ENDS_PER_TURN_MAX * 5 + 7;

/** A raw client past its CONNACK, with a QoS 0 will on `will/<id>`; MQTT 5 with will delay and
 * session expiry `delayS` when given. */
async function clientWithWill(port: number, id: string, delayS?: number): Promise<Socket> {
  const socket = connect({ host: '127.0.0.1', port });
  socket.on('error', () => {});
  await withTimeout(once(socket, 'connect'), WAIT_MS, 'TCP connect');
  const connack = withTimeout(once(socket, 'data'), WAIT_MS, 'CONNACK');
  const v5 = delayS !== undefined;
  const will = { topic: `will/${id}`, payload: Buffer.from(id), qos: 0 as const, retain: false, props: v5 ? { willDelay: delayS } : {} };
  socket.write(encode(connectPacket({ level: v5 ? 5 : 4, clientId: id, will, props: v5 ? { sessionExpiry: delayS } : {} }), v5 ? 5 : 4));
  const [chunk] = (await connack) as [Buffer];
  assert.equal(chunk[0], 0x20, `${id}: CONNACK`);
  assert.equal(chunk[3], 0, `${id}: accepted`);
  return socket;
}

describe('clients that close the network connection', { timeout: 60_000 }, () => {
  let node: BrokerNode | null = null;
  let watcher: TestClient | null = null;
  const sockets: Socket[] = [];

  afterEach(async () => {
    for (const s of sockets.splice(0)) s.destroy();
    await watcher?.client.endAsync();
    watcher = null;
    await node?.stop();
    node = null;
  });

  it('a client that half-closes without DISCONNECT is closed by the broker and its will is published', async () => {
    node = await startNode();
    watcher = await connectClient(node.port);
    await subscribe(watcher, 'will/#');
    const s = await clientWithWill(node.port, 'half');
    sockets.push(s);
    const closed = once(s, 'close');
    s.end(); // FIN; the socket can still read
    const will = new Promise<string>((resolve) => watcher?.client.once('message', (_t: string, p: Buffer) => resolve(p.toString())));
    assert.equal(await withTimeout(will, WAIT_MS, 'the will'), 'half');
    await withTimeout(closed, WAIT_MS, 'the broker to close the half-closed socket');
    await until('the node to forget the connection', () => node?.connectionCount === 1, WAIT_MS);
  });

  it('many clients leaving in one turn are all closed, over several turns, with every will published', async () => {
    node = await startNode();
    watcher = await connectClient(node.port);
    await subscribe(watcher, 'will/#');
    const wills = new Set<string>();
    watcher.client.on('message', (_topic: string, payload: Buffer) => wills.add(payload.toString()));
    for (let i = 0; i < CLIENTS; i++) sockets.push(await clientWithWill(node.port, `c${i}`));
    let closed = 0;
    for (const s of sockets) s.once('close', () => closed++);
    for (const s of sockets) s.end();
    await until(`${CLIENTS} wills`, () => wills.size === CLIENTS, WAIT_MS);
    await until(`${CLIENTS} sockets closed by the broker`, () => closed === CLIENTS, WAIT_MS);
    await until('the node to hold only the watcher', () => node?.connectionCount === 1, WAIT_MS);
    for (let i = 0; i < CLIENTS; i++) assert.ok(wills.has(`c${i}`), `will of c${i}`);
  });

  it('publishes every will when more fall due at one time than one entry fires, without a stale deadline', async () => {
    node = await startNode();
    watcher = await connectClient(node.port);
    await subscribe(watcher, 'will/#');
    const wills = new Set<string>();
    watcher.client.on('message', (_topic: string, payload: Buffer) => wills.add(payload.toString()));
    // A will and a session end per client, all due at the time of the one commit turn that
    // applies the DISCONNECTs: more than DEADLINES_PER_ENTRY_MAX, so ticks follow at once.
    const n = DEADLINES_PER_ENTRY_MAX + 5;
    for (let i = 0; i < n; i++) sockets.push(await clientWithWill(node.port, `d${i}`, 1));
    const bye = encode({ type: 'disconnect', code: RC.DISCONNECT_WITH_WILL, props: {} }, 5);
    for (const s of sockets) s.write(bye);
    await until(`${n} wills`, () => wills.size === n, WAIT_MS);
    assert.equal(node.counters.get('stale-deadline'), undefined);
  });
});
