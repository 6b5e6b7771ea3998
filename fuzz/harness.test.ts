// The harness itself: an untyped throw fails a run and is reported with its input, a typed one
// does not, and the mutators and the split keep every byte of a valid input reachable.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FuzzFailure, type FuzzTarget, mutate, onlyTyped, runTarget, split } from './harness.js';

class Refusal extends Error {}

describe('fuzz harness', () => {
  it('turns an untyped throw into a FuzzFailure and passes a typed one', () => {
    const typed = (e: unknown) => e instanceof Refusal;
    assert.equal(
      onlyTyped(
        () => {
          throw new Refusal('no');
        },
        typed,
        'read',
      ),
      undefined,
    );
    assert.throws(
      () =>
        onlyTyped(
          () => {
            throw new TypeError('x is undefined');
          },
          typed,
          'read',
        ),
      (e: unknown) => e instanceof FuzzFailure && /read threw TypeError: x is undefined/.test(e.message),
    );
  });

  it('fails a run on a reader that crashes on some bytes, and reports the input', async () => {
    const target: FuzzTarget = {
      name: 'crashes-on-ff',
      modules: [],
      run: ({ data }) => {
        if (data.includes(0xff))
          onlyTyped(
            () => (null as unknown as { x: number }).x,
            () => false,
            'read',
          );
      },
    };
    const r = await runTarget(target, { runs: 500, seed: 1, corpus: [Uint8Array.of(1, 2, 3)] });
    assert.equal(r.failed, true);
    assert.ok(r.counterexample?.[0].data.includes(0xff));
    assert.ok(r.errorInstance instanceof FuzzFailure);
  });

  it('splits at every cut and mutates within the input', () => {
    const data = Uint8Array.of(1, 2, 3, 4, 5);
    assert.deepEqual(
      split(data, [3, 1, 9]).map((c) => [...c]),
      [[1], [2, 3], [4, 5]],
    );
    assert.deepEqual([...mutate(data, [{ k: 'flip', pos: 7, bit: 0 }])], [1, 2, 2, 4, 5]);
    assert.deepEqual([...mutate(data, [{ k: 'delete', pos: 1, len: 2 }])], [1, 4, 5]);
    assert.deepEqual([...mutate(data, [{ k: 'insert', pos: 5, bytes: Uint8Array.of(9) }])], [1, 2, 3, 4, 5, 9]);
    assert.deepEqual(
      [...mutate(data, [{ k: 'token', pos: 1, index: 3, over: true }], [Uint8Array.of(7), Uint8Array.of(8, 8)])],
      [1, 8, 8, 4, 5],
    );
    assert.deepEqual([...mutate(data, [{ k: 'word', pos: 0, value: 0xffff, width: 2, little: false }])], [0xff, 0xff, 3, 4, 5]);
  });
});
