import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { MinHeap } from './min-heap.js';

describe('MinHeap', () => {
  it('pops what was pushed in order, pushes and pops interleaved', () => {
    const op = fc.oneof(fc.integer({ min: -50, max: 50 }), fc.constant(null));
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const h = new MinHeap<number>((a, b) => a < b);
        const model: number[] = [];
        for (const o of ops) {
          if (o === null) {
            model.sort((a, b) => a - b);
            assert.equal(h.pop(), model.shift());
          } else {
            h.push(o);
            model.push(o);
          }
          assert.equal(h.length, model.length);
          assert.equal(h.peek(), model.length === 0 ? undefined : Math.min(...model));
        }
        h.clear();
        assert.equal(h.length, 0);
        assert.equal(h.pop(), undefined);
      }),
    );
  });
});
