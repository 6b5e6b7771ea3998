import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { SortedStringMap, TopicTrie } from './topic-trie.js';

/** The reference matcher: MQTT 5.0 §4.7 read level by level, with no trie. */
function matches(filter: string, topic: string): boolean {
  const f = filter.split('/');
  const t = topic.split('/');
  // [MQTT-4.7.2-1] a leading wildcard does not match a topic starting with `$`.
  if (topic.startsWith('$') && (f[0] === '+' || f[0] === '#')) return false;
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '#') return true; // this level and everything below, including the parent
    if (i >= t.length) return false;
    if (f[i] !== '+' && f[i] !== t[i]) return false;
  }
  return f.length === t.length;
}

/** Every (key, filter) that match reports, in call order. */
function matched<V>(trie: TopicTrie<V>, topic: string): string[] {
  const out: string[] = [];
  trie.match(topic, (key, _value, filter) => out.push(`${filter} ${key}`));
  return out;
}

const topicLevel = fc.constantFrom('a', 'b', 'c', '', '$s', '$');
const filterLevel = fc.constantFrom('a', 'b', 'c', '', '$s', '$', '+', '+');
const arbTopic = fc.array(topicLevel, { minLength: 1, maxLength: 5 }).map((l) => l.join('/'));
const arbFilter = fc
  .tuple(fc.array(filterLevel, { minLength: 1, maxLength: 5 }), fc.boolean())
  .map(([levels, hash]) => (hash ? [...levels.slice(1), '#'] : levels).join('/'));
const arbKey: fc.Arbitrary<string> = fc.constantFrom('c1', 'c2', 'c3', 'c10');

describe('TopicTrie', { timeout: 30_000 }, () => {
  it('matches the examples of §4.7.1 and §4.7.2', () => {
    const trie = new TopicTrie<number>();
    const filters = [
      'sport/tennis/player1/#',
      'sport/#',
      '#',
      'sport/+',
      '+/+',
      '/+',
      '+',
      'sport/tennis/+',
      '$SYS/#',
      '+/monitor/Clients',
      '$SYS/monitor/+',
      'sport/+/player1',
      'a//b',
      'a/+/b',
      '/',
    ];
    for (const f of filters) trie.add(f, 'c', 0);
    const expect = (topic: string, want: string[]) =>
      assert.deepEqual(
        matched(trie, topic)
          .map((s) => s.slice(0, -2))
          .sort(),
        [...want].sort(),
        topic,
      );
    expect('sport/tennis/player1', ['sport/tennis/player1/#', 'sport/#', '#', 'sport/tennis/+', 'sport/+/player1']);
    expect('sport/tennis/player1/ranking', ['sport/tennis/player1/#', 'sport/#', '#']);
    expect('sport/tennis/player1/score/wimbledon', ['sport/tennis/player1/#', 'sport/#', '#']);
    expect('sport', ['sport/#', '#', '+']);
    expect('sport/', ['sport/#', '#', 'sport/+', '+/+']);
    expect('/finance', ['#', '+/+', '/+']);
    expect('/', ['#', '+/+', '/+', '/']);
    expect('$SYS/monitor/Clients', ['$SYS/#', '$SYS/monitor/+']);
    expect('$SYS', ['$SYS/#']);
    expect('a//b', ['#', 'a//b', 'a/+/b']);
    expect('a/x/b', ['#', 'a/+/b']);
  });

  it('replaces the value under an existing (filter, key) and reports whether it was new', () => {
    const trie = new TopicTrie<string>();
    assert.equal(trie.add('a/+', 'c1', 'first'), true);
    assert.equal(trie.add('a/+', 'c1', 'second'), false);
    assert.equal(trie.add('a/+', 'c2', 'other'), true);
    assert.equal(trie.size, 2);
    assert.equal(trie.get('a/+', 'c1'), 'second');
    const seen: string[] = [];
    trie.match('a/b', (key, value) => seen.push(`${key}=${value}`));
    assert.deepEqual(seen, ['c1=second', 'c2=other']);
  });

  it('removes entries, returns their value, and leaves nothing behind once empty', () => {
    const trie = new TopicTrie<number>();
    trie.add('a/b/#', 'c1', 1);
    trie.add('a/+/c', 'c1', 2);
    trie.add('a/+/c', 'c2', 3);
    assert.equal(trie.remove('a/+/c', 'c3'), undefined);
    assert.equal(trie.remove('a/x', 'c1'), undefined);
    assert.equal(trie.remove('a/+/c', 'c1'), 2);
    assert.equal(trie.remove('a/+/c', 'c1'), undefined);
    assert.deepEqual(matched(trie, 'a/b/c'), ['a/+/c c2', 'a/b/# c1']);
    assert.equal(trie.remove('a/b/#', 'c1'), 1);
    assert.equal(trie.remove('a/+/c', 'c2'), 3);
    assert.equal(trie.size, 0);
    // Pruned: the root holds no children at all.
    const root = (trie as unknown as { root: { isEmpty(): boolean } }).root;
    assert.equal(root.isEmpty(), true);
  });

  it('keeps wildcard levels apart from topic levels that spell + or #', () => {
    const trie = new TopicTrie<number>();
    trie.add('a/+', 'c1', 1);
    // An invalid topic must not match twice or crash; it matches `+` once like any other level.
    assert.deepEqual(matched(trie, 'a/+'), ['a/+ c1']);
    assert.deepEqual(matched(trie, 'a/#'), ['a/+ c1']);
  });

  it('calls back in an order that depends only on the entries, not on insertion order', () => {
    const entries = [
      ['#', 'z'],
      ['#', 'a'],
      ['a/#', 'm'],
      ['+/b', 'b'],
      ['a/b', 'c10'],
      ['a/b', 'c2'],
      ['a/+', 'c1'],
      ['+/+', 'q'],
      ['a/b/#', 'k'],
    ] as const;
    const forward = new TopicTrie<number>();
    for (const [f, k] of entries) forward.add(f, k, 0);
    const backward = new TopicTrie<number>();
    for (const [f, k] of [...entries].reverse()) backward.add(f, k, 0);
    // The documented order: `#` child first, then the `+` subtree, then the literal one; where the
    // topic ends, the node itself and then its `#`; keys ascending.
    const want = ['# a', '# z', '+/+ q', '+/b b', 'a/# m', 'a/+ c1', 'a/b c10', 'a/b c2', 'a/b/# k'];
    assert.deepEqual(matched(forward, 'a/b'), want);
    assert.deepEqual(matched(backward, 'a/b'), want);
  });

  it('matches exactly what the reference matcher matches, each entry once', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(arbFilter, arbKey), { maxLength: 40, size: 'max' }),
        fc.array(arbTopic, { minLength: 1 }),
        (entries, topics) => {
          const trie = new TopicTrie<string>();
          for (const [f, k] of entries) trie.add(f, k, `${f} ${k}`);
          const distinct = new Set(entries.map(([f, k]) => `${f} ${k}`));
          assert.equal(trie.size, distinct.size);
          for (const topic of topics) {
            const got: string[] = [];
            trie.match(topic, (key, value, filter) => {
              assert.equal(value, `${filter} ${key}`);
              got.push(value);
            });
            const want = [...distinct].filter((e) => matches(e.slice(0, e.lastIndexOf(' ')), topic));
            assert.deepEqual([...got].sort(), want.sort(), topic);
          }
        },
      ),
      { numRuns: 500 },
    );
  });

  it('matchValues writes the values match reports, in the same order, into a reused array, and counts the filters', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(arbFilter, arbKey), { maxLength: 40, size: 'max' }),
        fc.array(arbTopic, { minLength: 1 }),
        (entries, topics) => {
          const trie = new TopicTrie<string>();
          for (const [f, k] of entries) trie.add(f, k, `${f} ${k}`);
          const out: string[] = [];
          for (const topic of topics) {
            const want: string[] = [];
            const filters = new Set<string>();
            trie.match(topic, (_key, value, filter) => {
              want.push(value);
              filters.add(filter);
            });
            const stale = out.slice(want.length);
            assert.equal(trie.matchValues(topic, out), want.length);
            assert.equal(trie.matchedFilters, filters.size, 'distinct filters matched');
            assert.deepEqual(out.slice(0, want.length), want, topic);
            assert.deepEqual(out.slice(want.length), stale, 'entries beyond the count are left alone');
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('stays equal to a plain map through random adds and removes, and prunes to empty', () => {
    const op = fc.tuple(fc.boolean(), arbFilter, arbKey, fc.integer());
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60, size: 'max' }), arbTopic, (ops, topic) => {
        const trie = new TopicTrie<number>();
        const model = new Map<string, number>();
        for (const [isAdd, f, k, v] of ops) {
          const id = `${f} ${k}`;
          if (isAdd) {
            assert.equal(trie.add(f, k, v), !model.has(id));
            model.set(id, v);
          } else {
            assert.equal(trie.remove(f, k), model.get(id));
            model.delete(id);
          }
          assert.equal(trie.size, model.size);
        }
        for (const [id, v] of model) assert.equal(trie.get(id.slice(0, id.lastIndexOf(' ')), id.slice(id.lastIndexOf(' ') + 1)), v);
        const want = [...model.keys()].filter((id) => matches(id.slice(0, id.lastIndexOf(' ')), topic)).sort();
        assert.deepEqual(matched(trie, topic).sort(), want);
        for (const id of model.keys()) trie.remove(id.slice(0, id.lastIndexOf(' ')), id.slice(id.lastIndexOf(' ') + 1));
        assert.equal(trie.size, 0);
        assert.equal((trie as unknown as { root: { isEmpty(): boolean } }).root.isEmpty(), true);
      }),
      { numRuns: 500 },
    );
  });

  it('calls back in the same order for any insertion order of the same entries', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.tuple(arbFilter, arbKey), { selector: ([f, k]) => `${f} ${k}` }),
        fc.array(fc.nat()),
        arbTopic,
        (entries, swaps, topic) => {
          const shuffled = [...entries];
          for (let i = 0; i + 1 < shuffled.length && i < swaps.length; i++) {
            const j = i + (swaps[i] % (shuffled.length - i));
            [shuffled[i], shuffled[j]] = [shuffled[j], shuffled[i]];
          }
          const a = new TopicTrie<number>();
          for (const [f, k] of entries) a.add(f, k, 0);
          // The second trie also sees, and then loses, an unrelated entry, so its maps have a history.
          const b = new TopicTrie<number>();
          b.add('a/b', 'zz', 0);
          for (const [f, k] of shuffled) b.add(f, k, 0);
          if (!entries.some(([f, k]) => f === 'a/b' && k === 'zz')) b.remove('a/b', 'zz');
          assert.deepEqual(matched(b, topic), matched(a, topic));
        },
      ),
      { numRuns: 500 },
    );
  });

  it('handles topics and filters of many thousands of levels without overflowing the stack', () => {
    const trie = new TopicTrie<number>();
    const deep = '/'.repeat(60_000);
    trie.add(deep, 'c', 1);
    trie.add(`${'+/'.repeat(30_000)}#`, 'c', 2);
    const seen: number[] = [];
    trie.match(deep, (_k, v) => seen.push(v));
    assert.deepEqual(seen.sort(), [1, 2]);
    assert.equal(trie.remove(deep, 'c'), 1);
  });

  it('refuses changes from inside a match callback but allows a nested match', () => {
    const trie = new TopicTrie<number>();
    trie.add('a', 'c1', 1);
    trie.add('b', 'c1', 2);
    const nested: string[] = [];
    trie.match('a', () => {
      nested.push(...matched(trie, 'b'));
      assert.throws(() => trie.add('x', 'c', 0));
      assert.throws(() => trie.remove('a', 'c1'));
    });
    assert.deepEqual(nested, ['b c1']);
    assert.deepEqual(matched(trie, 'a'), ['a c1']);
    trie.add('x', 'c', 0); // allowed again once match has returned
  });

  it('keeps hundreds of keys under one filter in sorted order through splits and deletes', () => {
    // Enough keys to split the sorted chunks many times and empty some of them again.
    const op = fc.tuple(fc.integer({ min: 0, max: 9 }), fc.integer({ min: 0, max: 999 }));
    fc.assert(
      fc.property(fc.array(op, { minLength: 500, maxLength: 3_000 }), (ops) => {
        const trie = new TopicTrie<number>();
        const model = new Map<string, number>();
        for (const [kind, n] of ops) {
          const key = `k${n}`;
          if (kind < 7) {
            assert.equal(trie.add('x/+', key, n), !model.has(key));
            model.set(key, n);
          } else {
            assert.equal(trie.remove('x/+', key), model.get(key));
            model.delete(key);
          }
        }
        const got: string[] = [];
        trie.match('x/y', (key, value) => {
          assert.equal(value, model.get(key));
          got.push(key);
        });
        assert.deepEqual(got, [...model.keys()].sort());
      }),
      { numRuns: 100 },
    );
  });
});

describe('SortedStringMap', { timeout: 30_000 }, () => {
  it('holds no empty chunk and no chunk over its bound, whatever the order of changes', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 2_000 })), { minLength: 1_000, maxLength: 4_000 }), (ops) => {
        const map = new SortedStringMap<number>();
        const model = new Map<string, number>();
        for (const [isSet, n] of ops) {
          const key = String(n);
          if (isSet) assert.equal(map.set(key, n), !model.has(key));
          else assert.equal(map.delete(key), model.has(key));
          if (isSet) model.set(key, n);
          else model.delete(key);
        }
        assert.equal(map.size, model.size);
        for (const chunk of map.keyChunks) assert.ok(chunk.length > 0 && chunk.length <= 128);
        assert.deepEqual(map.keyChunks.flat(), [...model.keys()].sort());
        assert.deepEqual(
          map.valueChunks.flat(),
          [...model.keys()].sort().map((k) => model.get(k)),
        );
        for (const [k, v] of model) assert.equal(map.get(k), v);
        assert.equal(map.get('absent'), undefined);
      }),
      { numRuns: 100 },
    );
  });

  it('forEachAt visits exactly the entries of one filter, in key order, with no wildcard matching', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.constantFrom('a', 'a/b', 'a/+', '#', 'a/#', '+/b', ''), fc.constantFrom('k1', 'k2', 'k3', 'k10')), {
          maxLength: 30,
        }),
        fc.constantFrom('a', 'a/b', 'a/+', '#', 'a/#', '+/b', '', 'a/c'),
        (adds, filter) => {
          const trie = new TopicTrie<string>();
          const model = new Map<string, string>();
          for (const [f, k] of adds) {
            trie.add(f, k, `${f}|${k}`);
            if (f === filter) model.set(k, `${f}|${k}`);
          }
          const seen: [string, string][] = [];
          trie.forEachAt(filter, (k, v) => seen.push([k, v]));
          assert.deepEqual(
            seen,
            [...model].sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0)),
          );
        },
      ),
      { numRuns: 200 },
    );
  });
});
