// The serving node's routes (docs/scale-out.md "The serving node's routes"), with two single-node
// shards a and b joined by a real nats-server -js: a subscription committed on b reaches a's table
// of remote routes, with the highest QoS granted; an unsubscribe of the last subscription to a filter
// removes it; a filter that a placement rule covers gets no route entry; a restart of b's node
// writes again what its state holds and removes what it no longer holds; and a node whose NATS is
// unreachable keeps serving, retries, and says why.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type KV, Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import pino from 'pino';
import { Placement } from '../src/scale/placement.js';
import { encodeRouteValue, RouteRules, routeKey } from '../src/scale/routes.js';
import type { BrokerNode, NodeOptions } from '../src/server/broker-node.js';
import { type RunningDurable, startDurableNode } from '../src/server/durable-node.js';
import { BrokerProcess } from './broker-process.js';
import { connectClient, counter, disconnect, nodeOptions, startNode, type TestClient, withTimeout } from './helpers.js';
import { NatsServer } from './support/nats-server.js';
import { freePort, httpGet } from './support/net.js';
import { idsOf } from './support/shards.js';
import { until } from './support/wait.js';

const SHARDS = ['a', 'b'];
const placement = new Placement(SHARDS);
const rules = new RouteRules(['devices/{client}/cmd'], placement);

let server: NatsServer;
const nodes: BrokerNode[] = [];
const procs: BrokerProcess[] = [];
const durables: RunningDurable[] = [];
const clients: TestClient[] = [];
const connections: NatsConnection[] = [];
const dirs: string[] = [];
let bucketSeq = 0;

before(async () => {
  server = await NatsServer.start();
});
after(async () => {
  for (const c of clients) c.client.end(true);
  for (const n of nodes) await n.stop();
  for (const d of durables) await d.stop();
  for (const p of procs) await p.stop();
  for (const nc of connections) await nc.close().catch(() => undefined);
  await server?.dispose();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function shardOptions(shard: string, bucket: string, servers = [server.url]): Partial<NodeOptions> {
  return { shard: { shard, placement, addresses: null }, nats: { servers, rules, bucket } };
}

async function shardNode(shard: string, bucket: string): Promise<BrokerNode> {
  const n = await startNode(shardOptions(shard, bucket));
  nodes.push(n);
  await until(`shard ${shard} connected to NATS`, () => n.shardLink?.connected === true);
  return n;
}

/** `persistent`: a session that outlives its connection (MQTT 5 Session Expiry Interval of an hour). */
async function client(node: BrokerNode, clientId: string, persistent = false): Promise<TestClient> {
  const c = await connectClient(node.port, {
    clientId,
    clean: !persistent,
    protocolVersion: 5,
    ...(persistent ? { properties: { sessionExpiryInterval: 3600 } } : {}),
  });
  clients.push(c);
  return c;
}

async function rawKv(bucket: string): Promise<KV> {
  const nc = await connect({ servers: server.url, reconnect: false, timeout: 5_000 });
  connections.push(nc);
  return new Kvm(nc).open(bucket);
}

/** The remote routes `node` holds that match `topic`, as `shard filter qQOS`. */
const routesOf = (node: BrokerNode, topic: string): string[] =>
  (node.shardLink?.table.match(topic) ?? []).map((e) => `${e.shard} ${e.filter} q${e.qos}`).sort();

const freshBucket = (): string => `shard-routes-t${++bucketSeq}`;

describe("the serving node's routes over a real nats-server", { timeout: 90_000 }, () => {
  it('puts a committed subscription on b into a’s table, and removes it with the last unsubscribe', async () => {
    const bucket = freshBucket();
    const a = await shardNode('a', bucket);
    const b = await shardNode('b', bucket);
    const [id1, id2] = idsOf(SHARDS, 'b', 2, 'sub');
    const c1 = await client(b, id1 as string);
    await withTimeout(c1.client.subscribeAsync({ 't/#': { qos: 1 }, '$share/g/x/+': { qos: 0 } }), 5_000, 'SUBACK');
    await until('b’s routes in a’s table', () => routesOf(a, 't/x').length === 1 && routesOf(a, 'x/1').length === 1);
    assert.deepEqual(routesOf(a, 't/x'), ['b t/# q1']);
    assert.deepEqual(routesOf(a, 'x/1'), ['b $share/g/x/+ q0']);
    assert.deepEqual(routesOf(b, 't/x'), [], 'b holds no route of its own');
    const stamp = a.shardLink?.table.get('b', 't/#')?.stamp;
    assert.ok(stamp !== undefined && stamp.term > 0 && stamp.index >= stamp.term, JSON.stringify(stamp));

    // A second subscriber to the same filter with a higher QoS raises the route's QoS; when it
    // goes, the route falls back to the QoS of the one left; when that goes, the route is removed.
    const c2 = await client(b, id2 as string);
    await withTimeout(c2.client.subscribeAsync('t/#', { qos: 2 }), 5_000, 'SUBACK');
    await until('the raised QoS in a’s table', () => routesOf(a, 't/x').includes('b t/# q2'));
    await withTimeout(c2.client.unsubscribeAsync('t/#'), 5_000, 'UNSUBACK');
    await until('the QoS of the subscription left', () => routesOf(a, 't/x').includes('b t/# q1'));
    await withTimeout(c1.client.unsubscribeAsync('t/#'), 5_000, 'UNSUBACK');
    await until('the route removed from a’s table', () => routesOf(a, 't/x').length === 0);
    assert.deepEqual(routesOf(a, 'x/1'), ['b $share/g/x/+ q0'], 'the other filter stays');

    // A clean session that ends takes its subscriptions, and so their routes, with it.
    await disconnect(c1);
    await until('the shared route removed with the session', () => routesOf(a, 'x/1').length === 0);
    const kv = await rawKv(bucket);
    const removed = await kv.get(routeKey('b', 't/#'));
    assert.equal(JSON.parse(removed?.string() ?? '{}').removed, true, 'a tombstone keeps the stamp');
    assert.equal(a.shardLink?.routesRefused, 0);
    assert.equal(b.shardLink?.routesRefused, 0);
  });

  it('writes no route for a filter a placement rule covers on its own shard', async () => {
    const bucket = freshBucket();
    const a = await shardNode('a', bucket);
    const b = await shardNode('b', bucket);
    const [idB] = idsOf(SHARDS, 'b', 1, 'dev');
    const [idA] = idsOf(SHARDS, 'a', 1, 'dev');
    const c = await client(b, idB as string);
    // Its own command topic is covered; another shard's id's command topic and a wildcard are not.
    await withTimeout(
      c.client.subscribeAsync({ [`devices/${idB}/cmd`]: { qos: 1 }, [`devices/${idA}/cmd`]: { qos: 1 }, 'devices/+/cmd': { qos: 0 } }),
      5_000,
      'SUBACK',
    );
    await until('the uncovered routes in a’s table', () => routesOf(a, `devices/${idA}/cmd`).length === 2);
    assert.deepEqual(routesOf(a, `devices/${idA}/cmd`), ['b devices/+/cmd q0', `b devices/${idA}/cmd q1`]);
    assert.deepEqual(routesOf(a, `devices/${idB}/cmd`), ['b devices/+/cmd q0'], 'no entry for the covered filter');
    const kv = await rawKv(bucket);
    assert.equal(await kv.get(routeKey('b', `devices/${idB}/cmd`)), null, 'the covered filter has no key');
  });

  it('writes again what its state holds when b restarts, and removes what it no longer holds', async () => {
    const bucket = freshBucket();
    const a = await shardNode('a', bucket);
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-routes-'));
    dirs.push(dir);
    const port = await freePort();
    const startB = async (): Promise<RunningDurable> => {
      const d = await startDurableNode(
        { dataDir: dir, snapshotLogBytes: 64 << 20, minFreeBytes: 0 },
        nodeOptions({ ...shardOptions('b', bucket), port }),
        pino({ level: 'silent' }),
        () => undefined,
        (err) => assert.fail(err),
      );
      durables.push(d);
      await until('b connected to NATS', () => d.node.shardLink?.connected === true);
      return d;
    };
    let b = await startB();
    const [id] = idsOf(SHARDS, 'b', 1, 'persistent');
    const c = await client(b.node, id as string, true);
    await withTimeout(c.client.subscribeAsync({ 'r/+': { qos: 2 }, 'gone/#': { qos: 1 } }), 5_000, 'SUBACK');
    await until('b’s routes in a’s table', () => routesOf(a, 'r/1').length === 1 && routesOf(a, 'gone/1').length === 1);
    await withTimeout(c.client.unsubscribeAsync('gone/#'), 5_000, 'UNSUBACK');
    await until('gone/# removed', () => routesOf(a, 'gone/1').length === 0);
    const before = a.shardLink?.table.get('b', 'r/+')?.stamp;
    c.client.end(true);
    await b.stop();
    durables.splice(durables.indexOf(b), 1);

    // While b is down its bucket loses r/+ (an operator's purge) and gains a route its state does
    // not hold, written with an older stamp than anything b's new start writes.
    const kv = await rawKv(bucket);
    await kv.purge(routeKey('b', 'r/+'));
    await kv.put(routeKey('b', 'stray/#'), encodeRouteValue({ removed: false, qos: 1, stamp: { epoch: 1, term: 1, index: 1 } }));
    await until(
      'a’s table follows the purge and the stray route',
      () => routesOf(a, 'r/1').length === 0 && routesOf(a, 'stray/1').length === 1,
    );

    b = await startB();
    await until('r/+ back in a’s table', () => routesOf(a, 'r/1').length === 1);
    await until('the stray route removed', () => routesOf(a, 'stray/1').length === 0);
    assert.deepEqual(routesOf(a, 'r/1'), ['b r/+ q2']);
    const later = a.shardLink?.table.get('b', 'r/+')?.stamp;
    assert.ok(
      before !== undefined && later !== undefined && later.epoch > before.epoch,
      `${JSON.stringify(before)} then ${JSON.stringify(later)}`,
    );
    assert.equal(routesOf(a, 'gone/1').length, 0, 'an unsubscribed filter stays removed');
  });

  it('keeps serving while NATS is unreachable, retries with backoff, and says why', async () => {
    const closed = await freePort();
    const n = await startNode(shardOptions('a', freshBucket(), [`nats://127.0.0.1:${closed}`]));
    nodes.push(n);
    await until('two failed attempts', () => counter(n, 'nats-connect-failed') >= 2);
    assert.equal(n.shardLink?.connected, false);
    assert.match(n.shardLink?.lastError ?? '', /CONNECTION_REFUSED|ECONNREFUSED|refused/i);
    const [id] = idsOf(SHARDS, 'a', 1, 'local');
    const c = await client(n, id as string);
    await withTimeout(c.client.subscribeAsync('l/#', { qos: 1 }), 5_000, 'SUBACK');
    await withTimeout(c.client.publishAsync('l/1', 'here', { qos: 1 }), 5_000, 'PUBACK');
    await c.waitFor((m) => m.topic === 'l/1', 'the local message');
  });

  it('stores the shard list in NATS; a node whose --shards differs does not join, naming both lists', async () => {
    const bucket = freshBucket();
    const a = await shardNode('a', bucket);
    // The same list in another order is the same list.
    const reordered = new Placement(['b', 'a']);
    const b = await startNode({
      shard: { shard: 'b', placement: reordered, addresses: null },
      nats: { servers: [server.url], rules: new RouteRules([], reordered), bucket },
    });
    nodes.push(b);
    await until('b joined with the list in another order', () => b.shardLink?.connected === true);
    const stored = await (await rawKv(`${bucket}-shards`)).get('shards');
    assert.equal(stored?.string(), 'a,b');

    const wider = new Placement(['a', 'b', 'c']);
    const c = await startNode({
      shard: { shard: 'c', placement: wider, addresses: null },
      nats: { servers: [server.url], rules: new RouteRules([], wider), bucket },
    });
    nodes.push(c);
    await until('c refused', () => counter(c, 'shard-list-differs') >= 1);
    assert.equal(c.shardLink?.connected, false);
    assert.match(String(c.shardLink?.lastError), /the shard list differs: NATS holds a,b .*this node has --shards a,b,c/);
    // c writes no route: a subscription on c stays out of a's table.
    const [id] = idsOf(['a', 'b', 'c'], 'c', 1, 'outside');
    const sub = await client(c, id as string);
    await withTimeout(sub.client.subscribeAsync('wide/#', { qos: 1 }), 5_000, 'SUBACK on c');
    assert.equal(a.shardLink?.connected, true, 'a is not disturbed');
    assert.equal((await (await rawKv(bucket)).get(routeKey('c', 'wide/#'))) ?? null, null, 'no route of c in the bucket');
  });

  it('refuses to join when what NATS holds as the shard list is not a list', async () => {
    const bucket = freshBucket();
    const nc = await connect({ servers: server.url, reconnect: false, timeout: 5_000 });
    connections.push(nc);
    const kv = await new Kvm(nc).create(`${bucket}-shards`, { history: 1 });
    await kv.put('shards', 'a,,B');
    const n = await startNode(shardOptions('a', bucket));
    nodes.push(n);
    await until('a refused', () => counter(n, 'shard-list-differs') >= 1);
    assert.match(String(n.shardLink?.lastError), /is not a list: an empty shard name/);
    assert.equal(n.shardLink?.connected, false);
  });

  it('says on /health whether NATS is connected, and logs a failed connection with its URL', async () => {
    const nats = async (url: string): Promise<{ health: () => Promise<{ nats?: { connected: boolean } }>; proc: BrokerProcess }> => {
      const healthPort = await freePort();
      const proc = await BrokerProcess.start(['--health-port', String(healthPort), '--shard', 'a', '--shards', 'a,b', '--nats', url]);
      procs.push(proc);
      return { proc, health: async () => JSON.parse((await httpGet(healthPort, '/health')).text) };
    };
    const down = `nats://127.0.0.1:${await freePort()}`;
    const bad = await nats(down);
    const line = await bad.proc.waitForLog((l) => l.msg === 'nats-connect-failed');
    assert.equal(line.nats, down);
    assert.equal((await bad.health()).nats?.connected, false);
    const good = await nats(server.url);
    await until('/health says connected', async () => (await good.health()).nats?.connected === true);
  });

  // Last: it stops the shared nats-server for a while.
  it('connects again after nats-server restarts, and writes what committed meanwhile', async () => {
    const bucket = freshBucket();
    const a = await shardNode('a', bucket);
    const b = await shardNode('b', bucket);
    const [id] = idsOf(SHARDS, 'b', 1, 'again');
    const c = await client(b, id as string);
    await withTimeout(c.client.subscribeAsync('before/#', { qos: 1 }), 5_000, 'SUBACK');
    await until('the first route in a’s table', () => routesOf(a, 'before/1').length === 1);
    await server.stop();
    await until('both links down', () => a.shardLink?.connected === false && b.shardLink?.connected === false);
    // Local traffic goes on without NATS; the route waits.
    await withTimeout(c.client.subscribeAsync('during/#', { qos: 0 }), 5_000, 'SUBACK while NATS is down');
    await withTimeout(c.client.publishAsync('during/1', 'local', { qos: 1 }), 5_000, 'PUBACK while NATS is down');
    await c.waitFor((m) => m.topic === 'during/1', 'the local message while NATS is down');
    assert.deepEqual(routesOf(a, 'before/1'), ['b before/# q1'], 'a keeps the last routes it knew');
    await server.run();
    await until('both links up again', () => a.shardLink?.connected === true && b.shardLink?.connected === true, 40_000);
    await until('the route written while down reaches a', () => routesOf(a, 'during/1').length === 1);
    assert.deepEqual(routesOf(a, 'before/1'), ['b before/# q1']);
    assert.ok(counter(b, 'nats-disconnected') >= 1);
  });
});
