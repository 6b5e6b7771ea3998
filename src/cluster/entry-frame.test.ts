import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { ENTRY_HEADER_BYTES, EntryFrameError, frameEntry, unframeEntry } from './entry-frame.js';

describe('entry frame', { timeout: 10_000 }, () => {
  it('carries the time and the command bytes unchanged', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }), fc.uint8Array({ maxLength: 300 }), (time, command) => {
        const got = unframeEntry(frameEntry(time, command));
        assert.equal(got.time, time);
        assert.deepEqual([...got.command], [...command]);
      }),
    );
  });

  it('refuses a short entry, another version and a time that is not a whole non-negative number', () => {
    assert.throws(() => unframeEntry(new Uint8Array(ENTRY_HEADER_BYTES - 1)), EntryFrameError);
    const other = frameEntry(5, new Uint8Array([1]));
    other[0] = 2;
    assert.throws(() => unframeEntry(other), EntryFrameError);
    for (const time of [-1, 1.5, Number.NaN, 2 ** 60]) {
      assert.throws(() => unframeEntry(frameEntry(time, new Uint8Array([1]))), EntryFrameError, String(time));
    }
  });

  it('never throws anything but EntryFrameError on random bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 40 }), (bytes) => {
        try {
          unframeEntry(bytes);
        } catch (err) {
          assert.ok(err instanceof EntryFrameError);
        }
      }),
    );
  });
});
