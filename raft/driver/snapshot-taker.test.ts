import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { DriverLogger } from './message-gate.js';
import { SnapshotTaker } from './snapshot-taker.js';

const lines: string[] = [];
const logger: DriverLogger = { info: (_, m) => lines.push(m), warn: (_, m) => lines.push(m), error: (_, m) => lines.push(m) };

/** A clock that moves 1 ms at each reading, so a slice of sliceMs ms holds about sliceMs chunks. */
function steppingClock(): () => number {
  let t = 0;
  return () => t++;
}

function* cursor(n: number, onEnd: () => void = () => {}): Generator<Uint8Array> {
  try {
    for (let k = 0; k < n; k++) yield new Uint8Array([k]);
  } finally {
    onEnd();
  }
}

describe('SnapshotTaker', { timeout: 10_000 }, () => {
  it('reads the cursor over several event-loop turns, letting other callbacks run between, then compacts with every chunk', async () => {
    const compacted: Array<[number, number[]]> = [];
    const taker = new SnapshotTaker({
      sliceMs: 3,
      clock: steppingClock(),
      compact: (index, chunks) => {
        compacted.push([index, chunks.map((c) => c[0] ?? -1)]);
        return index;
      },
      logger,
    });
    let between = 0;
    const other = setInterval(() => between++, 0);
    const result = await taker.take(42, cursor(20));
    clearInterval(other);
    assert.equal(result, 42);
    assert.deepEqual(compacted, [[42, Array.from({ length: 20 }, (_, k) => k)]]);
    assert.ok(between >= 1, 'a timer ran while the cursor was being read');
    assert.equal(taker.busy, false);
  });

  it('takes one snapshot at a time: a second request while one is read resolves null', async () => {
    const taker = new SnapshotTaker({ sliceMs: 1, clock: steppingClock(), compact: (i) => i, logger });
    const first = taker.take(1, cursor(10));
    assert.equal(await taker.take(2, cursor(1)), null);
    assert.equal(await first, 1);
  });

  it('cancel() closes the cursor and resolves null without compacting', async () => {
    let closed = false;
    let compacted = false;
    const taker = new SnapshotTaker({
      sliceMs: 1,
      clock: steppingClock(),
      compact: (i) => {
        compacted = true;
        return i;
      },
      logger,
    });
    const p = taker.take(
      5,
      cursor(1000, () => (closed = true)),
    );
    await new Promise((r) => setImmediate(r));
    taker.cancel();
    assert.equal(await p, null);
    assert.equal(compacted, false);
    assert.equal(closed, true);
  });

  it('a cursor that throws is logged and resolves null', async () => {
    lines.length = 0;
    const taker = new SnapshotTaker({ sliceMs: 1, clock: steppingClock(), compact: (i) => i, logger });
    function* broken(): Generator<Uint8Array> {
      yield new Uint8Array(1);
      throw new Error('disk on fire');
    }
    assert.equal(await taker.take(3, broken()), null);
    assert.ok(lines.includes('application snapshot failed'));
  });
});
