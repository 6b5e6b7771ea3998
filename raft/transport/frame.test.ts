import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { allocFrame, encodeFrame, FRAME_HEADER_BYTES, FRAME_VERSION, type FrameRead, FrameReader } from './frame.js';

/** Feeds the chunks in order and gathers every frame body, stopping at the first error. */
function readAll(reader: FrameReader, chunks: Uint8Array[]): { bodies: Uint8Array[]; error?: FrameRead } {
  const bodies: Uint8Array[] = [];
  for (const chunk of chunks) {
    reader.push(chunk);
    for (let r = reader.next(); r.t !== 'more'; r = reader.next()) {
      if (r.t === 'error') return { bodies, error: r };
      bodies.push(Uint8Array.from(r.body));
    }
  }
  return { bodies };
}

function splitAt(bytes: Uint8Array, cuts: number[]): Uint8Array[] {
  const points = [...new Set(cuts)].sort((a, b) => a - b);
  const out: Uint8Array[] = [];
  let from = 0;
  for (const p of points) {
    out.push(bytes.subarray(from, p));
    from = p;
  }
  out.push(bytes.subarray(from));
  return out;
}

const bodies = [new Uint8Array([0x81, 0xa1, 0x74, 0x01]), new Uint8Array(0), Uint8Array.from({ length: 300 }, (_, i) => i & 0xff)];
const stream = Buffer.concat(bodies.map((b) => encodeFrame(b)));

describe('peer link framing', { timeout: 30_000 }, () => {
  it('writes a big-endian length that counts the version byte and the body', () => {
    const frame = encodeFrame(new Uint8Array([7, 8, 9]));
    assert.deepEqual([...frame], [0, 0, 0, 4, FRAME_VERSION, 7, 8, 9]);
  });

  it('reads the same frames whichever single byte boundary splits the stream', () => {
    for (let cut = 0; cut <= stream.length; cut++) {
      const { bodies: got, error } = readAll(new FrameReader(), splitAt(stream, [cut]));
      assert.equal(error, undefined, `cut at ${cut}`);
      assert.deepEqual(got, bodies, `cut at ${cut}`);
    }
  });

  it('reads the same frames when every byte arrives alone', () => {
    const chunks = Array.from(stream, (b) => new Uint8Array([b]));
    assert.deepEqual(readAll(new FrameReader(), chunks).bodies, bodies);
  });

  it('reads any sequence of frames under any split of the stream', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ maxLength: 64 }), { maxLength: 8 }),
        fc.array(fc.nat(), { maxLength: 20 }),
        (frames, rawCuts) => {
          const bytes = Buffer.concat(frames.map((b) => encodeFrame(b)));
          const cuts = rawCuts.map((c) => c % (bytes.length + 1));
          const { bodies: got, error } = readAll(new FrameReader(), splitAt(bytes, cuts));
          assert.equal(error, undefined);
          assert.deepEqual(got, frames);
        },
      ),
    );
  });

  it('refuses an oversize length as soon as the prefix is complete, holding none of the body', () => {
    const reader = new FrameReader(1024);
    reader.push(new Uint8Array([0, 0, 4, 1])); // 1025
    const r = reader.next();
    assert.equal(r.t, 'error');
    assert.equal(r.t === 'error' && r.code, 'frame-oversize');
    reader.push(new Uint8Array(2048));
    assert.equal(reader.bufferedBytes, 0);
  });

  it('accepts a frame exactly at the bound', () => {
    const reader = new FrameReader(101);
    assert.equal(readAll(reader, [encodeFrame(new Uint8Array(100))]).bodies.length, 1);
  });

  it('refuses a zero length and a wrong version byte, and stays failed', () => {
    const empty = new FrameReader();
    assert.equal(readAll(empty, [new Uint8Array([0, 0, 0, 0])]).error?.t, 'error');
    const bad = encodeFrame(new Uint8Array([1, 2]));
    bad[4] = 2;
    const reader = new FrameReader();
    const { error } = readAll(reader, [bad]);
    assert.equal(error?.t === 'error' && error.code, 'frame-version');
    reader.push(encodeFrame(new Uint8Array([1])));
    const again = reader.next();
    assert.equal(again.t === 'error' && again.code, 'frame-version');
  });

  it('cuts frames that never overlap, small ones from a shared slab and large ones on their own', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 100_000 }), { minLength: 1, maxLength: 40 }), (sizes) => {
        const frames = sizes.map((n, k) => {
          const f = allocFrame(n, 2);
          f.fill(k & 0xff, FRAME_HEADER_BYTES);
          return f;
        });
        frames.forEach((f, k) => {
          assert.equal(f.length, FRAME_HEADER_BYTES + sizes[k]!);
          assert.equal(f.readUInt32BE(0), sizes[k]! + 1);
          assert.equal(f[4], 2);
          assert.ok(f.subarray(FRAME_HEADER_BYTES).every((b) => b === (k & 0xff)));
        });
      }),
      { numRuns: 30 },
    );
  });

  it('carries the version byte it is given, and accepts the versions it is told to', () => {
    const reader = new FrameReader();
    reader.push(encodeFrame(new Uint8Array([5]), FRAME_VERSION));
    assert.deepEqual(reader.next(), { t: 'frame', version: FRAME_VERSION, body: Buffer.from([5]) });
    reader.setVersions([1, 2]);
    reader.push(
      Buffer.concat([encodeFrame(new Uint8Array([6]), 2), encodeFrame(new Uint8Array([7]), 1), encodeFrame(new Uint8Array([8]), 3)]),
    );
    const got = [reader.next(), reader.next(), reader.next()];
    assert.deepEqual(got.slice(0, 2), [
      { t: 'frame', version: 2, body: Buffer.from([6]) },
      { t: 'frame', version: 1, body: Buffer.from([7]) },
    ]);
    assert.equal(got[2].t === 'error' && got[2].code, 'frame-version');
    assert.throws(() => reader.setVersions([256]), RangeError);
  });

  it('refuses garbage bytes without throwing, whatever they are', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 1, maxLength: 200 }), (junk) => {
        const reader = new FrameReader(64);
        const { error } = readAll(reader, [junk]);
        // Garbage either parses as frames of version 1, waits for more, or fails with a named code.
        if (error?.t === 'error') assert.ok(['frame-oversize', 'frame-empty', 'frame-version'].includes(error.code));
        assert.ok(reader.bufferedBytes <= junk.length);
      }),
    );
  });
});
