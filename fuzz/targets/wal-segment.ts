// Write-ahead log segments (src/log/wal/segment.ts) and start-up recovery from a data directory
// (src/log/wal/recover.ts). Rules, for any bytes: scanSegment throws nothing but WalError, and
// what it returns cuts cleanly (the bytes up to its `end` scan to the same entries with no tail);
// recovery of a directory whose newest segment is those bytes throws nothing but DataDirError.
// For a segment this target writes itself (the knob picks batches and entries) and then truncates,
// flips a byte of, or extends with the input's bytes:
// - a truncation is a torn tail, never refused: every entry of every batch whose commit record is
//   wholly before the cut is returned intact, nothing after it, and `end` is that commit's end;
// - a flipped byte inside the last batch is cut off with it (indistinguishable from a torn write),
//   as is a flipped header with only one batch (they reach the disk together); one before the
//   last batch is refused (WalError WAL_CORRUPT), since a valid commit record follows;
// - bytes appended after the last commit record are a torn tail (or, if they hold a commit record
//   of this segment, a refusal), and every written entry is returned intact.
import type { Command } from '../../src/broker/commands.js';
import { encodeCommand } from '../../src/log/command-codec.js';
import { MemStorage } from '../../src/log/wal/mem-storage.js';
import { recover } from '../../src/log/wal/recover.js';
import { encodeBatch, encodeHeader, HEADER_BYTES, scanSegment, WAL_ERROR, type WalEntry, WalError } from '../../src/log/wal/segment.js';
import { DataDirError, segmentName } from '../../src/log/wal/wal.js';
import { check, type FuzzInput, type FuzzTarget, onlyTyped, onlyTypedAsync } from '../harness.js';

const SALT = 0x5a17_0b0e;
const quiet = { info() {}, warn() {}, error() {} };

interface Written {
  bytes: Uint8Array;
  entries: WalEntry[];
  /** Offset just after each batch's commit record, in order. */
  ends: number[];
}

const command = (pid: number, size: number): Command => ({
  t: 'publish',
  conn: '1.1',
  pid: 1 + (pid % 65_535),
  msg: { topic: `t/${pid}`, payload: new Uint8Array(size).fill(pid & 0xff), qos: 1, retain: false },
});

/** A segment from `first` on: `batches[k]` entries in batch k, payload sizes from `sizes`. */
export function writeSegment(first: number, batches: readonly number[], size: (i: number) => number): Written {
  const parts: Uint8Array[] = [encodeHeader(first, SALT)];
  const entries: WalEntry[] = [];
  const ends: number[] = [];
  let at = HEADER_BYTES;
  let index = first;
  for (const n of batches) {
    const batch: WalEntry[] = [];
    for (let i = 0; i < n; i++, index++) batch.push({ index, time: 1_000 + index, data: encodeCommand(command(index, size(index))) });
    const b = encodeBatch(batch, at, SALT);
    parts.push(b);
    at += b.length;
    ends.push(at);
    for (const e of batch) entries.push(e);
  }
  const bytes = new Uint8Array(at);
  let o = 0;
  for (const p of parts) {
    bytes.set(p, o);
    o += p.length;
  }
  return { bytes, entries, ends };
}

const same = (a: Uint8Array, b: Uint8Array): boolean => a.length === b.length && a.every((x, i) => x === b[i]);

function sameEntries(got: readonly WalEntry[], want: readonly WalEntry[], what: string): void {
  check(got.length === want.length, `${what}: ${got.length} entries returned, ${want.length} written before the cut`);
  for (let i = 0; i < want.length; i++) {
    const g = got[i] as WalEntry;
    const w = want[i] as WalEntry;
    check(g.index === w.index && g.time === w.time && same(g.data, w.data), `${what}: entry ${w.index} not returned intact`);
  }
}

const walError = (e: unknown): boolean => e instanceof WalError;
const corrupt = (e: unknown): boolean => e instanceof WalError && e.code === WAL_ERROR.CORRUPT;

/** Any bytes: a typed outcome that cuts cleanly. */
function scanAny(bytes: Uint8Array): void {
  const scan = onlyTyped(() => scanSegment(bytes), walError, 'scanSegment');
  if (scan === undefined) return;
  check(scan.end >= 0 && scan.end <= bytes.length, 'end outside the segment');
  if (scan.firstIndex === null) {
    check(scan.entries.length === 0, 'entries from a segment without a header');
    return;
  }
  scan.entries.forEach((e, i) => {
    check(e.index === (scan.firstIndex as number) + i, 'entry indexes not consecutive from the header');
  });
  const cut = onlyTyped(
    () => scanSegment(bytes.subarray(0, scan.end)),
    () => false,
    'scanSegment of the segment cut at its end',
  );
  if (cut === undefined) return;
  check(cut.tail === null && cut.end === scan.end, 'the segment cut at its end still has a tail');
  sameEntries(cut.entries, scan.entries, 'the segment cut at its end');
}

/** Knob bits 0-1: 0 any bytes; 1 a written segment truncated; 2 with a byte flipped; 3 with the
 * input appended. Bits 2-4: batches - 1; the input's bytes size the entries. */
export async function runWalSegment(input: FuzzInput): Promise<void> {
  const mode = input.knob & 3;
  const d = input.data;
  if (mode === 0) {
    scanAny(d);
    await recoverAny(d);
    return;
  }
  const batchCount = 1 + ((input.knob >> 2) & 7);
  const batches = Array.from({ length: batchCount }, (_, k) => 1 + ((d[k] ?? k) % 4));
  const w = writeSegment(1, batches, (i) => (d[(i * 7) % Math.max(1, d.length)] ?? 0) % 64);
  const pick = input.cuts[0] ?? input.knob >> 5;
  if (mode === 1) {
    const at = pick % (w.bytes.length + 1);
    const bytes = w.bytes.subarray(0, at);
    const scan = onlyTyped(
      () => scanSegment(bytes),
      () => false,
      'scanSegment of a truncated segment',
    );
    if (scan === undefined) return;
    if (at < HEADER_BYTES) {
      check(scan.firstIndex === null && scan.entries.length === 0, 'a cut inside the header is not a torn header');
      return;
    }
    const kept = w.ends.filter((e) => e <= at);
    const end = kept.at(-1) ?? HEADER_BYTES;
    check(scan.end === end, `a cut at ${at} kept up to ${scan.end}, the last whole batch ends at ${end}`);
    const n = batches.slice(0, kept.length).reduce((a, b) => a + b, 0);
    sameEntries(scan.entries, w.entries.slice(0, n), `a cut at ${at}`);
    scanAny(bytes);
    return;
  }
  if (mode === 2) {
    const at = pick % w.bytes.length;
    const bytes = w.bytes.slice();
    bytes[at] = (bytes[at] as number) ^ (1 + ((input.knob >> 8) % 255));
    const lastStart = w.ends.at(-2) ?? HEADER_BYTES;
    if (at < HEADER_BYTES && batches.length === 1) {
      // The header goes to disk with the first batch: a bad one with nothing after is torn.
      const scan = onlyTyped(
        () => scanSegment(bytes),
        () => false,
        'scanSegment of a one-batch segment with a flipped header',
      );
      check(scan === undefined || (scan.firstIndex === null && scan.entries.length === 0), 'a flipped header not taken for a torn one');
      return;
    }
    if (at < lastStart) {
      // A synced batch went bad (or the header did) while a valid commit follows: refused.
      const scan = onlyTyped(() => scanSegment(bytes), corrupt, 'scanSegment of a segment flipped before its last batch');
      check(scan === undefined, `a flip at ${at}, before the last batch at ${lastStart}, was not refused`);
      return;
    }
    const scan = onlyTyped(
      () => scanSegment(bytes),
      () => false,
      'scanSegment of a segment flipped in its last batch',
    );
    if (scan === undefined) return;
    check(scan.end === lastStart, `a flip at ${at} in the last batch: kept up to ${scan.end}, not ${lastStart}`);
    sameEntries(scan.entries, w.entries.slice(0, w.entries.length - (batches.at(-1) as number)), `a flip at ${at}`);
    return;
  }
  const bytes = new Uint8Array(w.bytes.length + d.length);
  bytes.set(w.bytes);
  bytes.set(d, w.bytes.length);
  const scan = onlyTyped(() => scanSegment(bytes), corrupt, 'scanSegment of a segment with bytes appended');
  if (scan === undefined) return;
  sameEntries(scan.entries.slice(0, w.entries.length), w.entries, 'a segment with bytes appended');
  check(scan.end >= w.bytes.length, 'bytes appended cut into the written batches');
  scanAny(bytes);
  await recoverAny(bytes);
}

/** Recovery of a directory whose only segment is `bytes`: only DataDirError. */
async function recoverAny(bytes: Uint8Array): Promise<void> {
  const storage = new MemStorage(new Map([[segmentName(1), bytes]]));
  const host = {
    restore() {
      throw new Error('no snapshot in this directory');
    },
    appliedTime: () => 0,
  };
  const r = await onlyTypedAsync(
    () => recover(host, { storage, logger: quiet, segmentBytes: 4096, snapshotLogBytes: 1 << 30, snapshotSliceMs: 5 }),
    (e) => e instanceof DataDirError,
    'recover',
  );
  await r?.wal.close();
}

/** Seed corpus: written segments of one and of several batches. */
export function walSegmentCorpus(): Uint8Array[] {
  return [writeSegment(1, [1], () => 4).bytes, writeSegment(1, [2, 1, 3], (i) => i % 20).bytes, writeSegment(7, [4, 4], () => 0).bytes];
}

export const walSegment: FuzzTarget = {
  name: 'wal-segment',
  modules: ['src/log/wal/segment.ts', 'src/log/wal/recover.ts', 'src/log/wal/wal.ts'],
  maxBytes: 1024,
  run: runWalSegment,
};
