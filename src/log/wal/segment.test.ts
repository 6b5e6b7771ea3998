import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { crc32c as crcOf } from './crc32c.js';
import {
  COMMIT_BYTES,
  encodeBatch,
  encodeHeader,
  HEADER_BYTES,
  type ScanStats,
  type SegmentScan,
  scanSegment,
  WAL_ERROR,
  type WalEntry,
  WalError,
} from './segment.js';

const SALT = 0x5eed1234;

/** A segment of the given batch sizes, entries numbered from `first`; also each batch's end. */
function segment(
  sizes: readonly number[],
  first = 1,
  salt = SALT,
  payload: (i: number) => Uint8Array = (i) => Uint8Array.of(i & 0xff, 0xc1, i >> 8),
) {
  const parts: Uint8Array[] = [encodeHeader(first, salt)];
  const ends: number[] = [];
  const batches: WalEntry[][] = [];
  let at = HEADER_BYTES;
  let index = first;
  for (const n of sizes) {
    const batch = Array.from({ length: n }, () => ({ index, time: 1000 + index, data: payload(index++) }));
    const bytes = encodeBatch(batch, at, salt);
    parts.push(bytes);
    at += bytes.length;
    ends.push(at);
    batches.push(batch);
  }
  return { bytes: concat(parts), ends, batches };
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

const plain = (entries: readonly WalEntry[]) => entries.map((e) => ({ index: e.index, time: e.time, data: [...e.data] }));

/** The batches wholly below `cut`. */
function expectedAt(seg: ReturnType<typeof segment>, cut: number) {
  const whole = seg.ends.filter((e) => e <= cut).length;
  return { entries: plain(seg.batches.slice(0, whole).flat()), end: whole === 0 ? HEADER_BYTES : (seg.ends[whole - 1] as number) };
}

const workBound = (n: number) => (COMMIT_BYTES + 2) * n + HEADER_BYTES + 64;

describe('WAL segment reader', () => {
  it('reads back every batch of a whole segment, with no tail', () => {
    const seg = segment([1, 3, 2]);
    const scan = scanSegment(seg.bytes);
    assert.equal(scan.firstIndex, 1);
    assert.equal(scan.tail, null);
    assert.equal(scan.end, seg.bytes.length);
    assert.deepEqual(plain(scan.entries), plain(seg.batches.flat()));
  });

  it('cuts a segment truncated at any byte back to the last whole batch, naming the offset', () => {
    const seg = segment([2, 1, 4]);
    for (let cut = 0; cut <= seg.bytes.length; cut++) {
      const scan = scanSegment(seg.bytes.subarray(0, cut));
      if (cut < HEADER_BYTES) {
        assert.equal(scan.firstIndex, null);
        assert.equal(scan.end, 0);
        continue;
      }
      const want = expectedAt(seg, cut);
      assert.deepEqual(plain(scan.entries), want.entries, `cut at ${cut}`);
      assert.equal(scan.end, want.end);
      assert.equal(scan.tail === null, cut === want.end, `cut at ${cut}`);
      if (scan.tail !== null) assert.equal(scan.tail.offset, want.end);
    }
  });

  it('takes a last batch whose pages landed out of order (its commit record there, a record not) for a torn tail', () => {
    const seg = segment([2, 3]);
    const torn = seg.bytes.slice();
    const lastStart = seg.ends[0] as number;
    torn.fill(0, lastStart + 5, lastStart + 30);
    const scan = scanSegment(torn);
    assert.deepEqual(plain(scan.entries), plain(seg.batches[0] as WalEntry[]));
    assert.deepEqual(scan.tail?.offset, lastStart);
  });

  it('takes a segment whose header never landed, but whose first batch did, for a torn tail', () => {
    const seg = segment([2]);
    const torn = seg.bytes.slice();
    torn.fill(0, 0, HEADER_BYTES);
    const scan = scanSegment(torn);
    assert.equal(scan.firstIndex, null);
    assert.deepEqual(scan.tail?.offset, 0);
  });

  it('refuses a flipped byte anywhere before the last batch', () => {
    const seg = segment([2, 1, 3]);
    const lastStart = seg.ends[1] as number;
    for (let at = 0; at < lastStart; at++) {
      const bad = seg.bytes.slice();
      bad[at] = (bad[at] as number) ^ 0x20;
      assert.throws(
        () => scanSegment(bad),
        (err: unknown) => err instanceof WalError && err.code === WAL_ERROR.CORRUPT,
        `flip at ${at}`,
      );
    }
  });

  it('refuses a segment of another format version', () => {
    const seg = segment([1]);
    const other = seg.bytes.slice();
    // The header checksum covers the version: recomputed as a newer build would have written it.
    const header = encodeHeader(1, SALT);
    header[11] = 2;
    other.set(reheader(header), 0);
    assert.throws(
      () => scanSegment(other),
      (err: unknown) => err instanceof WalError && err.code === WAL_ERROR.VERSION,
    );
  });

  it('does not take a WAL carried inside a payload of the torn batch for a later commit record', () => {
    const inner = segment([1, 1, 1]).bytes;
    const same = segment([1, 1]).bytes;
    const seg = segment([1, 2], 1, SALT, (i) => (i === 1 ? Uint8Array.of(7) : i === 2 ? inner : same));
    const cut = (seg.ends[1] as number) - 10;
    const scan = scanSegment(seg.bytes.subarray(0, cut));
    assert.deepEqual(plain(scan.entries), plain(seg.batches[0] as WalEntry[]));
    assert.equal(scan.tail?.offset, seg.ends[0]);
  });

  it('refuses a record that checks but is out of sequence', () => {
    const a = encodeHeader(1, SALT);
    const b = encodeBatch([{ index: 2, time: 1, data: Uint8Array.of(1) }], HEADER_BYTES, SALT);
    assert.throws(
      () => scanSegment(concat([a, b])),
      (err: unknown) => err instanceof WalError && err.code === WAL_ERROR.CORRUPT && err.offset === HEADER_BYTES,
    );
  });
});

describe('WAL segment reader under random bytes (fuzz)', () => {
  /** The only outcomes: a scan whose parts are in range, or a WalError; work linear in the size. */
  function judge(bytes: Uint8Array): SegmentScan | WalError {
    const stats: ScanStats = { work: 0 };
    let out: SegmentScan | WalError;
    try {
      out = scanSegment(bytes, stats);
    } catch (err) {
      if (!(err instanceof WalError)) throw err;
      assert.ok(err.offset >= 0 && err.offset <= bytes.length);
      out = err;
    }
    assert.ok(stats.work <= workBound(bytes.length), `work ${stats.work} for ${bytes.length} bytes`);
    if (!(out instanceof WalError)) {
      assert.ok(out.end >= 0 && out.end <= bytes.length);
      for (const e of out.entries) assert.ok(e.data.byteOffset >= bytes.byteOffset && e.data.length <= bytes.length);
    }
    return out;
  }

  it('random bytes: only a scan or a WalError, in bounded work', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 2048 }), (bytes) => {
        judge(bytes);
      }),
      { numRuns: 2000 },
    );
  });

  it('a valid header then random bytes: only a scan or a WalError, in bounded work', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 2048 }), (tail) => {
        judge(concat([encodeHeader(1, SALT), tail]));
      }),
      { numRuns: 2000 },
    );
  });

  it('valid segments, truncated and with flipped bytes: typed outcomes, and a clean cut keeps exactly the whole batches', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 1, maxLength: 8 }),
        fc.nat(),
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 1, max: 255 })), { maxLength: 4 }),
        (sizes, cutSeed, flips) => {
          const seg = segment(sizes);
          const cut = cutSeed % (seg.bytes.length + 1);
          const bytes = seg.bytes.slice(0, cut);
          if (flips.length === 0) {
            const scan = judge(bytes);
            assert.ok(!(scan instanceof WalError), 'a truncation alone is never refused');
            if (cut >= HEADER_BYTES) assert.deepEqual(plain(scan.entries), expectedAt(seg, cut).entries);
            return;
          }
          for (const [at, x] of flips) if (bytes.length > 0) bytes[at % bytes.length] ^= x;
          const out = judge(bytes);
          // Whatever a damaged segment yields is a prefix of what was written.
          if (!(out instanceof WalError)) {
            const all = plain(seg.batches.flat());
            assert.deepEqual(plain(out.entries), all.slice(0, out.entries.length));
          }
        },
      ),
      { numRuns: 1500 },
    );
  });
});

/** A header with its checksum recomputed over the (changed) first 24 bytes. */
function reheader(h: Uint8Array): Uint8Array {
  const out = h.slice();
  const crc = crcOf(out.subarray(0, 24));
  out[24] = crc >>> 24;
  out[25] = (crc >>> 16) & 0xff;
  out[26] = (crc >>> 8) & 0xff;
  out[27] = crc & 0xff;
  return out;
}
