import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SendQueue } from './send-queue.js';

const frame = (tag: number, bytes: number): Uint8Array => new Uint8Array(bytes).fill(tag);

describe('peer send queue', { timeout: 10_000 }, () => {
  it('drops the oldest frames once the bytes exceed the bound, keeping order of the rest', () => {
    const q = new SendQueue(30);
    const dropped = [1, 2, 3, 4, 5].map((tag) => q.push(frame(tag, 10)));
    assert.deepEqual(dropped, [0, 0, 0, 1, 1]);
    assert.equal(q.queuedBytes, 30);
    assert.deepEqual([q.shift()![0], q.shift()![0], q.shift()![0]], [3, 4, 5]);
    assert.equal(q.shift(), undefined);
    assert.equal(q.queuedBytes, 0);
  });

  it('drops a frame that alone exceeds the bound, and everything before it', () => {
    const q = new SendQueue(30);
    q.push(frame(1, 10));
    assert.equal(q.push(frame(2, 31)), 2);
    assert.equal(q.length, 0);
  });

  it('keeps order through many pushes and shifts past its compaction point', () => {
    const q = new SendQueue(1_000_000);
    const out: number[] = [];
    for (let i = 0; i < 5000; i++) {
      q.push(new Uint8Array([i & 0xff]));
      if (i % 3 !== 0) out.push(q.shift()![0]);
    }
    while (q.length > 0) out.push(q.shift()![0]);
    assert.deepEqual(
      out,
      Array.from({ length: 5000 }, (_, i) => i & 0xff),
    );
  });
});
