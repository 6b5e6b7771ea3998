// Token buckets, the bounded table and the topic limits, with time as a parameter.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BoundedTable, ConnectRateLimiter, TokenBucket, topicLimitProblem } from './limits.js';

describe('limits', { timeout: 10_000 }, () => {
  it('a token bucket allows its burst, then its rate', () => {
    const b = new TokenBucket(10, 3, 0);
    assert.deepEqual([b.take(0), b.take(0), b.take(0), b.take(0)], [true, true, true, false]);
    assert.equal(b.take(99), false);
    assert.equal(b.take(100), true);
    assert.equal(b.take(100), false);
  });

  it('the connect rate is per address, and 0 means no bound', () => {
    const r = new ConnectRateLimiter(2);
    assert.deepEqual([r.admit('a', 0), r.admit('a', 0), r.admit('a', 0), r.admit('b', 0)], [true, true, false, true]);
    const off = new ConnectRateLimiter(0);
    for (let i = 0; i < 100; i++) assert.equal(off.admit('a', 0), true);
    assert.equal(off.table.size, 0);
  });

  it('the bounded table evicts the least recently touched entry', () => {
    const t = new BoundedTable<number>(2);
    t.touch('a', () => 1);
    t.touch('b', () => 2);
    t.touch('a', () => 9);
    t.touch('c', () => 3);
    assert.equal(t.peek('a'), 1);
    assert.equal(t.peek('b'), undefined);
    assert.equal(t.size, 2);
  });

  it('counts topic levels and UTF-8 bytes', () => {
    const limits = { maxTopicLevels: 3, maxTopicLength: 8 };
    assert.equal(topicLimitProblem('a/b/c', limits), null);
    assert.match(topicLimitProblem('a/b/c/d', limits) ?? '', /levels/);
    assert.match(topicLimitProblem('ééééé', limits) ?? '', /bytes/);
    assert.equal(topicLimitProblem('a/b/c/d', { maxTopicLevels: 0, maxTopicLength: 100 }), null);
  });
});
