import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { RetainedTrie } from './retained-trie.js';

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

/** The documented order: level by level, code-unit order within a level, parents first. */
function byLevels(a: string, b: string): number {
  const x = a.split('/');
  const y = b.split('/');
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
  }
  return x.length - y.length;
}

function matched<V>(trie: RetainedTrie<V>, filter: string): string[] {
  const out: string[] = [];
  trie.match(filter, (topic) => out.push(topic));
  return out;
}

const topicLevel = fc.constantFrom('a', 'b', 'a!', 'B', '', '$s', '$');
const filterLevel = fc.constantFrom('a', 'b', 'a!', '', '$s', '+', '+');
const arbTopic = fc.array(topicLevel, { minLength: 1, maxLength: 5 }).map((l) => l.join('/'));
const arbFilter = fc
  .tuple(fc.array(filterLevel, { minLength: 1, maxLength: 5 }), fc.boolean())
  .map(([levels, hash]) => (hash ? [...levels.slice(1), '#'] : levels).join('/'));

describe('RetainedTrie', { timeout: 30_000 }, () => {
  it('finds retained topics for the filters of §4.7, in level order', () => {
    const trie = new RetainedTrie<number>();
    const topics = [
      'sport/tennis/player1',
      'sport/tennis/player1/ranking',
      'sport/tennis/player1/score/wimbledon',
      'sport',
      'sport/',
      '/finance',
      '/',
      '$SYS/monitor/Clients',
      '$SYS',
      'a//b',
      'sport/tennis/player2',
    ];
    topics.forEach((t, i) => {
      trie.set(t, i);
    });
    assert.deepEqual(matched(trie, 'sport/tennis/player1/#'), [
      'sport/tennis/player1',
      'sport/tennis/player1/ranking',
      'sport/tennis/player1/score/wimbledon',
    ]);
    assert.deepEqual(matched(trie, 'sport/#'), [
      'sport',
      'sport/',
      'sport/tennis/player1',
      'sport/tennis/player1/ranking',
      'sport/tennis/player1/score/wimbledon',
      'sport/tennis/player2',
    ]);
    assert.deepEqual(matched(trie, 'sport/+'), ['sport/']);
    assert.deepEqual(matched(trie, '+'), ['sport']);
    assert.deepEqual(matched(trie, '+/+'), ['/', '/finance', 'sport/']);
    assert.deepEqual(matched(trie, '/+'), ['/', '/finance']);
    assert.deepEqual(
      matched(trie, '#').filter((t) => t.startsWith('$')),
      [],
    );
    assert.deepEqual(matched(trie, '#').length, topics.length - 2);
    assert.deepEqual(matched(trie, '+/monitor/Clients'), []);
    assert.deepEqual(matched(trie, '$SYS/#'), ['$SYS', '$SYS/monitor/Clients']);
    assert.deepEqual(matched(trie, '$SYS/monitor/+'), ['$SYS/monitor/Clients']);
    assert.deepEqual(matched(trie, 'a/+/b'), ['a//b']);
    assert.deepEqual(matched(trie, 'sport/tennis/+'), ['sport/tennis/player1', 'sport/tennis/player2']);
  });

  it('replaces, reads and deletes values, and prunes to an empty root', () => {
    const trie = new RetainedTrie<string | undefined>();
    trie.set('a/b', 'one');
    trie.set('a/b', 'two');
    trie.set('a', undefined);
    assert.equal(trie.size, 2);
    assert.equal(trie.get('a/b'), 'two');
    assert.deepEqual(matched(trie, 'a/#'), ['a', 'a/b']);
    assert.equal(trie.delete('a/c'), false);
    assert.equal(trie.delete('a/b/c'), false);
    assert.equal(trie.delete('a/b'), true);
    assert.equal(trie.delete('a/b'), false);
    assert.equal(trie.get('a/b'), undefined);
    assert.equal(trie.delete('a'), true);
    assert.equal(trie.size, 0);
    assert.equal((trie as unknown as { root: { children: unknown } }).root.children, undefined);
  });

  it('matches exactly what the reference matcher matches, in level order', () => {
    fc.assert(
      fc.property(fc.array(arbTopic, { maxLength: 40, size: 'max' }), fc.array(arbFilter, { minLength: 1 }), (topics, filters) => {
        const trie = new RetainedTrie<string>();
        for (const t of topics) trie.set(t, `v:${t}`);
        const stored = [...new Set(topics)];
        assert.equal(trie.size, stored.length);
        for (const filter of filters) {
          const got: string[] = [];
          trie.match(filter, (topic, value) => {
            assert.equal(value, `v:${topic}`);
            got.push(topic);
          });
          assert.deepEqual(got, stored.filter((t) => matches(filter, t)).sort(byLevels), filter);
        }
      }),
      { numRuns: 500 },
    );
  });

  it('stays equal to a plain map through random sets and deletes, and prunes to empty', () => {
    const op = fc.tuple(fc.boolean(), arbTopic, fc.integer());
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60, size: 'max' }), arbFilter, (ops, filter) => {
        const trie = new RetainedTrie<number>();
        const model = new Map<string, number>();
        for (const [isSet, t, v] of ops) {
          if (isSet) {
            trie.set(t, v);
            model.set(t, v);
          } else {
            assert.equal(trie.delete(t), model.delete(t));
          }
          assert.equal(trie.size, model.size);
        }
        for (const [t, v] of model) assert.equal(trie.get(t), v);
        assert.deepEqual(new Map(trie.entries()), model);
        assert.deepEqual(matched(trie, filter), [...model.keys()].filter((t) => matches(filter, t)).sort(byLevels));
        for (const t of model.keys()) trie.delete(t);
        assert.equal((trie as unknown as { root: { children: unknown } }).root.children, undefined);
      }),
      { numRuns: 500 },
    );
  });

  it('calls back in the same order whatever order the topics were set in', () => {
    fc.assert(
      fc.property(fc.uniqueArray(arbTopic), arbFilter, (topics, filter) => {
        const a = new RetainedTrie<number>();
        for (const t of topics) a.set(t, 0);
        const b = new RetainedTrie<number>();
        for (const t of [...topics].reverse()) b.set(t, 0);
        assert.deepEqual(matched(b, filter), matched(a, filter));
      }),
      { numRuns: 300 },
    );
  });

  it('handles topics and filters of many thousands of levels without overflowing the stack', () => {
    const trie = new RetainedTrie<number>();
    const deep = '/'.repeat(60_000);
    trie.set(deep, 1);
    assert.deepEqual(matched(trie, '#'), [deep]);
    assert.deepEqual(matched(trie, `${'+/'.repeat(30_000)}#`), [deep]);
    assert.deepEqual([...trie.entries()], [[deep, 1]]);
    assert.equal(trie.delete(deep), true);
  });

  it('keeps thousands of sibling levels in sorted order through sets and deletes', () => {
    const trie = new RetainedTrie<number>();
    const model = new Set<string>();
    for (let i = 0; i < 5_000; i++) {
      const topic = `d/${(i * 7_919) % 3_001}`;
      if (i % 4 === 3) {
        assert.equal(trie.delete(topic), model.delete(topic));
      } else {
        trie.set(topic, i);
        model.add(topic);
      }
    }
    assert.deepEqual(matched(trie, 'd/+'), [...model].sort(byLevels));
    assert.deepEqual(matched(trie, '#'), [...model].sort(byLevels));
  });
});
