// Routes (src/scale/routes.ts): the placement rule's syntax and its refusals naming the rule, the
// owner it gives a topic, and as a property that no message is lost by skipping route entries (a
// subscription the rules cover only ever matches topics that the rules send to its own shard);
// the route table against a brute-force match; the bucket's keys (valid NATS keys, reversible) and
// values (round trip, every malformed value refused with a reason).
import assert from 'node:assert/strict';
import { Buffer } from 'node:buffer';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { topicMatches } from '../broker/acl.js';
import { Placement } from './placement.js';
import {
  compareStamps,
  decodeRouteValue,
  encodeRouteValue,
  parseRouteKey,
  parseRouteRule,
  ROUTE_FILTER_BYTES_MAX,
  type Route,
  RouteRules,
  RouteTable,
  type RouteValue,
  routeKey,
  routeRuleProblem,
} from './routes.js';

const placement = new Placement(['a', 'b', 'c']);
/** What nats.js accepts as a KV key (its validKeyRe, and no leading or trailing dot). */
const natsKeyOk = (k: string): boolean => /^[-/=.\w]+$/.test(k) && !k.startsWith('.') && !k.endsWith('.');

describe('route rules', () => {
  it('accepts a topic pattern with one client level', () => {
    for (const p of ['devices/{client}/cmd', '{client}/#', 'a/+/{client}', '$dev/{client}', 'x/{client}']) {
      assert.equal(routeRuleProblem(p), null, p);
    }
    const r = parseRouteRule('devices/{client}/cmd');
    assert.equal(r.clientLevel, 1);
    assert.equal(r.filter, 'devices/+/cmd');
  });

  it('refuses bad syntax, naming the rule', () => {
    const bad: Array<[string, RegExp]> = [
      ['devices/+/cmd', /exactly one level \{client\} \(found 0\)/],
      ['{client}/{client}', /found 2/],
      ['devices/{clientid}/cmd', /found 0/],
      ['devices/x{client}/cmd', /found 0/],
      ['devices/{client}/c}md', /\{ and \} only/],
      ['devices/#/{client}', /# not alone as the last level/],
      ['devices/{client}/a+', /\+ not alone/],
      ['$share/g/{client}', /shared subscription/],
      ['', /found 0/],
    ];
    for (const [p, why] of bad) {
      assert.throws(
        () => parseRouteRule(p),
        (err: Error) => err instanceof RangeError && err.message.startsWith(`route rule ${JSON.stringify(p)}: `) && why.test(err.message),
        p,
      );
    }
  });

  it('refuses two rules that match a common topic, naming both', () => {
    assert.throws(
      () => new RouteRules(['devices/{client}/cmd', 'devices/+/{client}'], placement),
      /route rules "devices\/\{client\}\/cmd" and "devices\/\+\/\{client\}" match common topics/,
    );
    assert.throws(() => new RouteRules(['{client}/#', 'x/{client}'], placement), /match common topics/);
    assert.equal(new RouteRules(['devices/{client}/cmd', 'devices/{client}/cfg'], placement).rules.length, 2);
  });

  it('sends a topic naming a client id to the shard that owns the id, and decides nothing else', () => {
    const rules = new RouteRules(['devices/{client}/cmd', 'u/{client}/#'], placement);
    for (const id of ['d1', 'd2', 'sensor-77', 'é']) {
      assert.equal(rules.ownerOf(`devices/${id}/cmd`), placement.owner(id), id);
      assert.equal(rules.ownerOf(`u/${id}`), placement.owner(id), id);
      assert.equal(rules.ownerOf(`u/${id}/x/y`), placement.owner(id), id);
    }
    assert.equal(rules.ownerOf('devices/d1/telemetry'), null);
    assert.equal(rules.ownerOf('devices/d1/cmd/x'), null);
    assert.equal(rules.ownerOf('devices//cmd'), null, 'no client has the empty id');
    assert.equal(new RouteRules(['{client}/cmd'], placement).ownerOf('$SYS/cmd'), null, 'a client level is a wildcard for $ topics');
  });

  it('says which subscriptions need no route entry', () => {
    const rules = new RouteRules(['devices/{client}/cmd'], placement);
    const own = placement.owner('d1');
    const other = placement.shards.find((s) => s !== own) as string;
    assert.equal(rules.coveredOn('devices/d1/cmd', own), true);
    assert.equal(rules.coveredOn('$share/g/devices/d1/cmd', own), true);
    assert.equal(rules.coveredOn('devices/d1/cmd', other), false, 'd1 belongs elsewhere: its messages do not come here by the rule');
    assert.equal(rules.coveredOn('devices/+/cmd', own), false);
    assert.equal(rules.coveredOn('devices/d1/#', own), false, 'also matches devices/d1/telemetry');
    assert.equal(rules.coveredOn('devices/#', own), false);
    const top = new RouteRules(['{client}/cmd'], placement);
    assert.equal(top.coveredOn('$d/cmd', placement.owner('$d')), false, 'the rule does not decide $d/cmd');
  });

  it('loses no message: a covered subscription matches only topics the rules send to its shard', () => {
    const level = fc.constantFrom('devices', 'cmd', 'u', 'd1', 'd2', 'x', '', '$d');
    const filterLevel = fc.oneof(level, fc.constant('+'));
    const randomFilter = fc
      .tuple(fc.array(filterLevel, { minLength: 1, maxLength: 4 }), fc.boolean())
      .map(([ls, hash]) => (hash ? [...ls, '#'] : ls).join('/'));
    const ruleSets = [['devices/{client}/cmd'], ['u/{client}/#', 'devices/{client}/cmd'], ['{client}/cmd'], ['x/+/{client}']];
    // Filters made from a rule (its client level and wildcards filled in) hit the covered case
    // often; topics made from the filter (its wildcards filled in) match it often.
    const fromRule = (patterns: string[]) =>
      fc
        .tuple(fc.constantFrom(...patterns), fc.array(filterLevel, { minLength: 6, maxLength: 6 }), fc.boolean())
        .map(([p, subs, keepHash]) =>
          p
            .split('/')
            .map((l, i) => (l === '{client}' || l === '+' || (l === '#' && !keepHash) ? (subs[i] as string) : l))
            .join('/'),
        );
    const arbCase = fc.constantFrom(...ruleSets).chain((patterns) =>
      fc.record({
        patterns: fc.constant(patterns),
        filter: fc.oneof(randomFilter, fromRule(patterns)),
        fill: fc.array(level, { minLength: 8, maxLength: 8 }),
        hashLevels: fc.nat({ max: 2 }),
        shard: fc.constantFrom('a', 'b', 'c'),
      }),
    );
    let covered = 0;
    fc.assert(
      fc.property(arbCase, ({ patterns, filter, fill, hashLevels, shard }) => {
        const topic = filter
          .split('/')
          .flatMap((l, i) => (l === '+' ? [fill[i] as string] : l === '#' ? fill.slice(i, i + hashLevels) : [l]))
          .join('/');
        const rules = new RouteRules(patterns, placement);
        if (topic !== '' && rules.coveredOn(filter, shard) && topicMatches(filter, topic)) {
          covered++;
          assert.equal(rules.ownerOf(topic), shard, `${filter} on ${shard} matches ${topic}`);
        }
      }),
      { numRuns: 3_000 },
    );
    assert.ok(covered > 100, `the covered case was reached ${covered} times`);
  });
});

const route = (shard: string, filter: string, qos: 0 | 1 | 2 = 1): Route => ({
  shard,
  filter,
  qos,
  stamp: { epoch: 1, term: 1, index: 1 },
});

describe('route table', () => {
  it('matches the other shards routes, one entry per shard and filter as subscribed', () => {
    const t = new RouteTable('a');
    t.set(route('a', 'x/#'));
    t.set(route('b', 'x/#', 0));
    t.set(route('b', 'x/#', 2));
    t.set(route('b', '$share/g/x/+'));
    t.set(route('c', 'x/y'));
    t.set(route('c', 'z'));
    assert.equal(t.size, 4, 'own routes are not kept; a second write replaces');
    const got = t.match('x/y').map((e) => [e.shard, e.topicFilter, e.group, e.qos]);
    assert.deepEqual(
      got.sort((p, q) => JSON.stringify(p).localeCompare(JSON.stringify(q))),
      [
        ['b', 'x/#', null, 2],
        ['b', 'x/+', 'g', 1],
        ['c', 'x/y', null, 1],
      ],
    );
    assert.equal(t.delete('b', '$share/g/x/+'), true);
    assert.equal(t.delete('b', '$share/g/x/+'), false);
    assert.deepEqual(
      t.match('x/q').map((e) => e.shard),
      ['b'],
    );
    t.set(route('c', '#'));
    assert.deepEqual(
      t.match('$SYS/x').map((e) => e.filter),
      [],
      'no wildcard first level for $ topics',
    );
  });

  it('matches as a brute force over its routes would', () => {
    const level = fc.constantFrom('a', 'b', '$s', '');
    const arbFilter = fc
      .tuple(
        fc.array(fc.oneof(level, fc.constant('+')), { minLength: 1, maxLength: 3 }),
        fc.boolean(),
        fc.option(fc.constantFrom('g', 'h')),
      )
      .map(([ls, hash, group]) => `${group === null ? '' : `$share/${group}/`}${(hash ? [...ls, '#'] : ls).join('/')}`);
    const arbRoute = fc.record({ shard: fc.constantFrom('a', 'b', 'c'), filter: arbFilter });
    const arbTopic = fc.array(level, { minLength: 1, maxLength: 4 }).map((ls) => ls.join('/'));
    fc.assert(
      fc.property(fc.array(arbRoute, { maxLength: 20 }), arbTopic, (routes, topic) => {
        const t = new RouteTable('a');
        const live = new Map<string, { shard: string; filter: string }>();
        for (const r of routes) {
          t.set(route(r.shard, r.filter));
          if (r.shard !== 'a') live.set(`${r.shard} ${r.filter}`, r);
        }
        const bare = (f: string): string => f.replace(/^\$share\/[^/]+\//, '');
        const want = [...live.values()].filter((r) => topicMatches(bare(r.filter), topic)).map((r) => `${r.shard} ${r.filter}`);
        const got = t.match(topic).map((e) => `${e.shard} ${e.filter}`);
        assert.deepEqual(got.sort(), want.sort());
      }),
      { numRuns: 1_000 },
    );
  });

  it('orders stamps by epoch, then term, then index', () => {
    const s = (epoch: number, term: number, index: number) => ({ epoch, term, index });
    assert.ok(compareStamps(s(1, 9, 9), s(2, 0, 0)) < 0);
    assert.ok(compareStamps(s(2, 3, 9), s(2, 4, 1)) < 0);
    assert.ok(compareStamps(s(2, 4, 2), s(2, 4, 1)) > 0);
    assert.equal(compareStamps(s(2, 4, 1), s(2, 4, 1)), 0);
  });
});

describe('route bucket keys and values', () => {
  it('encodes (shard, filter) into a valid NATS key, reversibly', () => {
    fc.assert(
      fc.property(
        fc.constantFrom('a', 'b', 'c'),
        fc.array(
          fc.oneof(
            fc
              .string({ unit: 'grapheme', minLength: 1, maxLength: 6 })
              .filter((l) => !['+', '#', '/', '\u0000'].some((c) => l.includes(c))),
            fc.constant('+'),
          ),
          {
            minLength: 1,
            maxLength: 5,
          },
        ),
        fc.boolean(),
        (shard, levels, hash) => {
          const filter = (hash ? [...levels, '#'] : levels).join('/');
          const key = routeKey(shard, filter);
          assert.ok(natsKeyOk(key), key);
          assert.deepEqual(parseRouteKey(key, placement), { ok: true, shard, filter });
        },
      ),
      { numRuns: 500 },
    );
    assert.deepEqual(parseRouteKey(routeKey('b', '$share/g/devices/+/telemetry'), placement), {
      ok: true,
      shard: 'b',
      filter: '$share/g/devices/+/telemetry',
    });
  });

  it('refuses a filter too long for a key', () => {
    assert.ok(natsKeyOk(routeKey('a', 'x'.repeat(ROUTE_FILTER_BYTES_MAX))));
    assert.throws(() => routeKey('a', 'x'.repeat(ROUTE_FILTER_BYTES_MAX + 1)), RangeError);
  });

  it('refuses a key of an unknown shard, or whose filter does not decode or is no filter', () => {
    const enc = (s: string): string => Buffer.from(s, 'utf8').toString('base64url');
    const cases: Array<[string, RegExp]> = [
      [`d.${enc('x')}`, /unknown shard d/],
      [`A.${enc('x')}`, /not a shard name/],
      ['a', /not SHARD.FILTER/],
      ['a.', /not base64url/],
      ['a.eA==', /not base64url/],
      ['a.eB', /not canonical/],
      [`a.${Buffer.from([0xff, 0xfe]).toString('base64url')}`, /not canonical/],
      [`a.${enc('x/#/y')}`, /bad filter: # not alone/],
      [`a.${enc('$share/g')}`, /bad filter/],
      [`a.${enc('a/b')}.x`, /not base64url/],
    ];
    for (const [key, why] of cases) {
      const r = parseRouteKey(key, placement);
      assert.equal(r.ok, false, key);
      if (!r.ok) assert.match(r.reason, why, key);
    }
  });

  it('round-trips a value, present or removed', () => {
    const n = fc.nat({ max: Number.MAX_SAFE_INTEGER });
    // Plain objects: fast-check's records have no prototype, which deepEqual would tell apart.
    const stamp = fc.record({ epoch: n, term: n, index: n }).map((r) => ({ ...r }));
    const value: fc.Arbitrary<RouteValue> = fc.oneof(
      fc
        .record({ removed: fc.constant(false as const), qos: fc.constantFrom(0 as const, 1 as const, 2 as const), stamp })
        .map((r) => ({ ...r })),
      fc.record({ removed: fc.constant(true as const), stamp }).map((r) => ({ ...r })),
    );
    fc.assert(
      fc.property(value, (v) => {
        assert.deepEqual(decodeRouteValue(encodeRouteValue(v)), { ok: true, value: v });
      }),
    );
  });

  it('refuses every malformed value with a reason', () => {
    const cases: Array<[string | Uint8Array, RegExp]> = [
      ['', /not JSON/],
      ['{', /not JSON/],
      [Buffer.from([0x7b, 0xff, 0x7d]), /not JSON/],
      ['[1]', /not an object/],
      ['null', /not an object/],
      ['{"v":2,"qos":1,"stamp":[1,1,1]}', /version/],
      ['{"v":1,"qos":3,"stamp":[1,1,1]}', /qos/],
      ['{"v":1,"qos":1,"stamp":[1,1]}', /stamp/],
      ['{"v":1,"qos":1,"stamp":[1,-1,1]}', /stamp/],
      ['{"v":1,"qos":1,"stamp":[1,1.5,1]}', /stamp/],
      ['{"v":1,"qos":1,"stamp":[1,1,"1"]}', /stamp/],
      ['{"v":1,"qos":1,"stamp":[1,1,1],"x":0}', /unexpected fields/],
      ['{"v":1,"removed":true,"qos":1,"stamp":[1,1,1]}', /unexpected fields/],
      ['{"v":1,"stamp":[1,1,1]}', /unexpected fields/],
      [`{"v":1,"qos":1,"stamp":[1,1,1],"pad":"${'x'.repeat(300)}"}`, /bytes/],
    ];
    for (const [text, why] of cases) {
      const r = decodeRouteValue(typeof text === 'string' ? Buffer.from(text, 'utf8') : text);
      assert.equal(r.ok, false, String(text));
      if (!r.ok) assert.match(r.reason, why, String(text));
    }
  });
});
