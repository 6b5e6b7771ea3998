// The route bucket (src/scale/route-bucket.ts) against a real nats-server -js: a watcher starts with
// the routes already there and follows every change; a shard's own routes stay out of its table; a
// write whose stamp is older than the stored one is refused (a deposed leader cannot overwrite its
// successor), also when two writers race; a removal keeps its stamp; and a key or value that does
// not decode, names an unknown shard, or carries an older stamp is refused, logged with its key and
// counted, never put in the table.
import assert from 'node:assert/strict';
import { Buffer } from 'node:buffer';
import { after, before, describe, it } from 'node:test';
import { type KV, Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Placement } from '../src/scale/placement.js';
import { RouteBucket, type RouteRefusal, type RouteWatcher } from '../src/scale/route-bucket.js';
import { encodeRouteValue, RouteTable, routeKey } from '../src/scale/routes.js';
import { NatsServer } from './support/nats-server.js';
import { until } from './support/wait.js';

const placement = new Placement(['a', 'b', 'c']);
const stamp = (epoch: number, term: number, index: number) => ({ epoch, term, index });

let server: NatsServer;
const connections: NatsConnection[] = [];
const watchers: RouteWatcher[] = [];
let bucketSeq = 0;

before(async () => {
  server = await NatsServer.start();
});
after(async () => {
  for (const w of watchers) w.stop();
  for (const nc of connections) await nc.close().catch(() => undefined);
  await server?.dispose();
});

async function nats(): Promise<NatsConnection> {
  const nc = await connect({ servers: server.url, reconnect: false, timeout: 5_000 });
  connections.push(nc);
  return nc;
}

interface Shard {
  bucket: RouteBucket;
  refusals: RouteRefusal[];
}

/** A shard's view of one bucket, on its own NATS connection. */
async function shard(name: string, bucket: string): Promise<Shard> {
  const refusals: RouteRefusal[] = [];
  const b = await RouteBucket.open(await nats(), { shard: name, placement, bucket, log: (r) => refusals.push(r) });
  return { bucket: b, refusals };
}

async function watch(s: Shard, self: string): Promise<RouteWatcher> {
  const w = await s.bucket.watch(new RouteTable(self));
  watchers.push(w);
  return w;
}

/** A fresh bucket per test, so no test sees another's routes. */
const freshBucket = (): string => `routes-t${++bucketSeq}`;

async function rawKv(bucket: string): Promise<KV> {
  return new Kvm(await nats()).open(bucket);
}

const routesOf = (w: RouteWatcher, topic: string): string[] =>
  w.table
    .match(topic)
    .map((e) => `${e.shard} ${e.filter} q${e.qos}`)
    .sort();

describe('route bucket on JetStream KV', { timeout: 60_000 }, () => {
  it('gives a new watcher the current routes, then every change; its own routes stay out', async () => {
    const bucket = freshBucket();
    const a = await shard('a', bucket);
    const b = await shard('b', bucket);
    assert.equal((await a.bucket.put('x/+', 1, stamp(1, 1, 1))).kind, 'written');
    assert.equal((await a.bucket.put('$share/g/x/#', 2, stamp(1, 1, 2))).kind, 'written');
    assert.equal((await b.bucket.put('x/y', 0, stamp(1, 1, 1))).kind, 'written');

    const wb = await watch(b, 'b');
    assert.deepEqual(routesOf(wb, 'x/y'), ['a $share/g/x/# q2', 'a x/+ q1'], 'present when watch() resolves');
    const wa = await watch(a, 'a');
    assert.deepEqual(routesOf(wa, 'x/y'), ['b x/y q0']);

    await a.bucket.put('z/#', 1, stamp(1, 1, 3));
    await until('the new route on b', () => routesOf(wb, 'z/1').length === 1);
    await a.bucket.put('x/+', 2, stamp(1, 2, 4));
    await until('the raised QoS on b', () => routesOf(wb, 'x/q').includes('a x/+ q2'));
    await a.bucket.remove('z/#', stamp(1, 2, 5));
    await until('the removal on b', () => routesOf(wb, 'z/1').length === 0);
    assert.deepEqual(routesOf(wa, 'z/1'), [], 'a never held its own route');
    assert.equal(a.bucket.refused + b.bucket.refused, 0);
  });

  it('refuses a write older than the stored stamp: a deposed leader cannot overwrite its successor', async () => {
    const bucket = freshBucket();
    const leader = await shard('a', bucket);
    const deposed = await shard('a', bucket);
    assert.equal((await leader.bucket.put('t/#', 1, stamp(2, 5, 100))).kind, 'written');
    assert.deepEqual(await deposed.bucket.put('t/#', 0, stamp(2, 4, 900)), { kind: 'stale', stored: stamp(2, 5, 100) });
    assert.deepEqual(await deposed.bucket.remove('t/#', stamp(1, 9, 9)), { kind: 'stale', stored: stamp(2, 5, 100) });
    assert.deepEqual(await leader.bucket.put('t/#', 1, stamp(2, 5, 100)), { kind: 'unchanged' });
    const kv = await rawKv(bucket);
    const stored = await kv.get(routeKey('a', 't/#'));
    assert.deepEqual(JSON.parse(stored?.string() ?? ''), { v: 1, qos: 1, stamp: [2, 5, 100] });

    // A removal keeps its stamp: an older put cannot bring the route back.
    assert.equal((await leader.bucket.remove('t/#', stamp(2, 6, 1))).kind, 'written');
    assert.equal((await deposed.bucket.put('t/#', 2, stamp(2, 5, 999))).kind, 'stale');
    assert.equal((await leader.bucket.put('t/#', 2, stamp(2, 6, 2))).kind, 'written');
  });

  it('keeps the newest stamp when two writers race on one key', async () => {
    const bucket = freshBucket();
    const w1 = await shard('a', bucket);
    const w2 = await shard('a', bucket);
    const kv = await rawKv(bucket);
    for (let round = 1; round <= 20; round++) {
      const older = stamp(1, round, 1);
      const newer = stamp(1, round, 2);
      // The older write is sent second, so a plain put without the revision would often win.
      // Either may land first; the older one may land only before the newer one.
      const results = await Promise.all([w1.bucket.put('race', 1, newer), w2.bucket.put('race', 0, older)]);
      assert.ok(
        results.every((r) => r.kind !== 'conflict'),
        JSON.stringify(results),
      );
      const stored = await kv.get(routeKey('a', 'race'));
      assert.deepEqual(JSON.parse(stored?.string() ?? ''), { v: 1, qos: 1, stamp: [1, round, 2] }, `round ${round}`);
    }
  });

  it('refuses, logs with the key and counts what does not decode, names an unknown shard or is older', async () => {
    const bucket = freshBucket();
    const b = await shard('b', bucket);
    const w = await watch(b, 'b');
    const kv = await rawKv(bucket);
    const good = routeKey('a', 'ok/#');
    await kv.put(good, encodeRouteValue({ removed: false, qos: 1, stamp: stamp(3, 3, 3) }));
    await until('the good route', () => routesOf(w, 'ok/1').length === 1);

    const bad: Array<[string, string | Uint8Array, RegExp]> = [
      [routeKey('zz', 'x'), encodeRouteValue({ removed: false, qos: 1, stamp: stamp(1, 1, 1) }), /unknown shard zz/],
      ['a.eB', encodeRouteValue({ removed: false, qos: 1, stamp: stamp(1, 1, 1) }), /not canonical/],
      [
        `a.${Buffer.from('x/#/y').toString('base64url')}`,
        encodeRouteValue({ removed: false, qos: 1, stamp: stamp(1, 1, 1) }),
        /bad filter/,
      ],
      ['nodot', encodeRouteValue({ removed: false, qos: 1, stamp: stamp(1, 1, 1) }), /not SHARD.FILTER/],
      [routeKey('a', 'junk/1'), 'not json', /not JSON/],
      [routeKey('a', 'junk/2'), '{"v":1,"qos":7,"stamp":[1,1,1]}', /qos/],
      [routeKey('a', 'junk/3'), Buffer.from([0xff, 0x00]), /not JSON/],
      [good, encodeRouteValue({ removed: false, qos: 0, stamp: stamp(3, 3, 2) }), /older than \(3, 3, 3\)/],
      [good, encodeRouteValue({ removed: true, stamp: stamp(3, 2, 9) }), /older than/],
    ];
    for (const [key, value, _] of bad) await kv.put(key, value);
    await until('every bad entry refused', () => b.refusals.length >= bad.length);
    assert.equal(b.bucket.refused, bad.length);
    for (const [key, , why] of bad) {
      assert.ok(
        b.refusals.some((r) => r.key === key && why.test(r.reason)),
        `${key} refused for ${why}: ${JSON.stringify(b.refusals)}`,
      );
    }
    assert.deepEqual(routesOf(w, 'ok/1'), ['a ok/# q1'], 'the good route is untouched by the older values');
    assert.deepEqual(routesOf(w, 'junk/1'), []);
    assert.deepEqual(routesOf(w, 'x'), []);
    assert.equal(w.table.size, 1);
    assert.equal(w.ended, null);

    // An operator's delete removes the route.
    await kv.delete(good);
    await until('the deleted route gone', () => w.table.size === 0);
  });
});
