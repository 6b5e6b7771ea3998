// The bytes of a write-ahead log segment, and the pure reader that judges them after a crash.
//
//   segment: header, then batches; a batch is one or more entry records closed by a commit record
//   header (24 bytes): magic "RMQWAL01" | version u32 | salt u32 | first index u64 ... see HEADER_*
//   record:            crc u32 | length u32 | type u8 | payload (length bytes)
//                      crc: CRC-32C of length, type and payload
//   entry payload:     index u64 | time u64 | command bytes (src/log/command-codec.ts)
//   commit payload:    last index u64 | records u32 | batch start u64 | crc of crcs u32 | salt u32
//                      | offset u64
//                      batch start: offset of the batch's first record; crc of crcs: CRC-32C of
//                      the batch's record crcs, four bytes each, in order; offset: the commit
//                      record's own offset
//
// All integers big-endian. A batch is written with one write and made durable with one fdatasync,
// and the next batch is written only after that fsync returned, so at most one batch is unsynced
// at any time and a crash can tear only the bytes after the last synced commit record; their pages
// may reach the disk in any order, so even a commit record may be there while a record before it
// is not. Hence the reader's rules:
// - it follows the chain of records from the header; a commit record that closes a batch whose
//   records all checked (crc of crcs, count, index) makes the batch valid;
// - the chain stops at the first record that is incomplete or fails its CRC: if no self-consistent
//   commit record of a *later* batch lies beyond (its batch start differs from the end of the last
//   valid batch), the bytes after the last valid batch are a torn tail, to be cut off; if one does,
//   a batch that was once synced has gone bad, and the reader refuses (WalError WAL_CORRUPT);
// - a record whose CRC checks but whose content is wrong (index out of sequence, time going back, a
//   commit record that does not match its batch) was written so: the reader refuses.
// The salt (random per segment) and the offset inside a commit record tie it to its place, so a
// copy of log bytes inside a message payload is never taken for a commit record of this file.
// A flipped byte inside the last batch is indistinguishable from an unsynced batch and is cut off.
import { crc32c } from './crc32c.js';

export const WAL_FORMAT_VERSION = 1;
const MAGIC = Uint8Array.from([0x52, 0x4d, 0x51, 0x57, 0x41, 0x4c, 0x30, 0x31]); // RMQWAL01
/** magic(8) version(4) salt(4) first index(8) header crc(4) */
export const HEADER_BYTES = 28;
const RECORD_HEAD = 9;
const TYPE_ENTRY = 1;
const TYPE_COMMIT = 2;
const ENTRY_HEAD = 16;
const COMMIT_PAYLOAD = 36;
export const COMMIT_BYTES = RECORD_HEAD + COMMIT_PAYLOAD;
/** Largest record payload: a command holds at most one MQTT packet (256 MiB) and a little more. */
export const RECORD_PAYLOAD_MAX = 300 * 1024 * 1024;

export const WAL_ERROR = {
  /** A record before the last valid commit record is bad, or a valid record says something
   * impossible: the log was damaged after it was synced, and the node refuses to start. */
  CORRUPT: 'WAL_CORRUPT',
  /** A segment of another format version. */
  VERSION: 'WAL_VERSION',
} as const;
export type WalErrorCode = (typeof WAL_ERROR)[keyof typeof WAL_ERROR];

export class WalError extends Error {
  readonly code: WalErrorCode;
  /** Byte offset in the segment where the problem was found. */
  readonly offset: number;
  constructor(code: WalErrorCode, offset: number, message: string) {
    super(message);
    this.name = 'WalError';
    this.code = code;
    this.offset = offset;
  }
}

/** One entry of the log as the WAL stores it. */
export interface WalEntry {
  index: number;
  time: number;
  data: Uint8Array;
}

export interface SegmentScan {
  /** From the header; null when the header itself is torn (a new segment whose first batch never
   * reached the disk). */
  firstIndex: number | null;
  salt: number;
  /** The entries of every valid batch, in order; data are views into the scanned bytes. */
  entries: WalEntry[];
  /** Offset just after the last valid commit record (HEADER_BYTES with none, 0 when the header is
   * torn): where the next batch is written. */
  end: number;
  /** Bytes after `end` that do not form a valid batch; null when `end` is the length. */
  tail: { offset: number; reason: string } | null;
}

/** Work done by a scan, in bytes checksummed or examined: a property test bounds it. */
export interface ScanStats {
  work: number;
}

// ---- writing ----

const u32 = (b: Uint8Array, at: number, v: number): void => {
  b[at] = v >>> 24;
  b[at + 1] = (v >>> 16) & 0xff;
  b[at + 2] = (v >>> 8) & 0xff;
  b[at + 3] = v & 0xff;
};
const u64 = (b: Uint8Array, at: number, v: number): void => {
  u32(b, at, Math.floor(v / 0x1_0000_0000));
  u32(b, at + 4, v >>> 0);
};
const r32 = (b: Uint8Array, at: number): number =>
  (((b[at] as number) << 24) | ((b[at + 1] as number) << 16) | ((b[at + 2] as number) << 8) | (b[at + 3] as number)) >>> 0;
/** A u64 as a number; above 2^53 it is not an index or time this log writes, so -1. */
const r64 = (b: Uint8Array, at: number): number => {
  const hi = r32(b, at);
  return hi >= 0x200000 ? -1 : hi * 0x1_0000_0000 + r32(b, at + 4);
};

export function encodeHeader(firstIndex: number, salt: number): Uint8Array {
  const b = new Uint8Array(HEADER_BYTES);
  b.set(MAGIC, 0);
  u32(b, 8, WAL_FORMAT_VERSION);
  u32(b, 12, salt >>> 0);
  u64(b, 16, firstIndex);
  u32(b, 24, crc32c(b, 0, 0, 24));
  return b;
}

/** The records of one batch and its commit record, as one buffer. `start` is the offset in the
 * segment where the batch goes. */
export function encodeBatch(entries: readonly WalEntry[], start: number, salt: number): Uint8Array {
  let size = COMMIT_BYTES;
  for (const e of entries) size += RECORD_HEAD + ENTRY_HEAD + e.data.length;
  const b = new Uint8Array(size);
  const crcs = new Uint8Array(4 * entries.length);
  let at = 0;
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i] as WalEntry;
    const len = ENTRY_HEAD + e.data.length;
    u32(b, at + 4, len);
    b[at + 8] = TYPE_ENTRY;
    u64(b, at + 9, e.index);
    u64(b, at + 17, e.time);
    b.set(e.data, at + 25);
    const crc = crc32c(b, 0, at + 4, at + RECORD_HEAD + len);
    u32(b, at, crc);
    u32(crcs, 4 * i, crc);
    at += RECORD_HEAD + len;
  }
  const last = entries.at(-1);
  u32(b, at + 4, COMMIT_PAYLOAD);
  b[at + 8] = TYPE_COMMIT;
  u64(b, at + 9, last === undefined ? 0 : last.index);
  u32(b, at + 17, entries.length);
  u64(b, at + 21, start);
  u32(b, at + 29, crc32c(crcs));
  u32(b, at + 33, salt >>> 0);
  u64(b, at + 37, start + at);
  u32(b, at, crc32c(b, 0, at + 4, at + COMMIT_BYTES));
  return b;
}

// ---- reading ----

interface Header {
  firstIndex: number;
  salt: number;
}

/** The header, null when torn; WalError for a header of another version. */
function readHeader(b: Uint8Array, stats: ScanStats): Header | null {
  if (b.length < HEADER_BYTES) return null;
  stats.work += HEADER_BYTES;
  for (let i = 0; i < MAGIC.length; i++) if (b[i] !== MAGIC[i]) return null;
  if (crc32c(b, 0, 0, 24) !== r32(b, 24)) return null;
  const version = r32(b, 8);
  if (version !== WAL_FORMAT_VERSION) {
    throw new WalError(WAL_ERROR.VERSION, 8, `WAL format version ${version}, this build reads ${WAL_FORMAT_VERSION}`);
  }
  const firstIndex = r64(b, 16);
  if (firstIndex < 1) throw new WalError(WAL_ERROR.CORRUPT, 16, `first index ${firstIndex} in a valid header`);
  return { firstIndex, salt: r32(b, 12) };
}

/** The record at `at` if it is complete and its CRC checks; its type and payload length. */
function recordAt(b: Uint8Array, at: number, stats: ScanStats): { type: number; len: number; crc: number } | null {
  if (at + RECORD_HEAD > b.length) return null;
  const len = r32(b, at + 4);
  if (len > RECORD_PAYLOAD_MAX || at + RECORD_HEAD + len > b.length) return null;
  stats.work += RECORD_HEAD + len;
  const crc = r32(b, at);
  if (crc32c(b, 0, at + 4, at + RECORD_HEAD + len) !== crc) return null;
  return { type: b[at + 8] as number, len, crc };
}

/** Judges the bytes of one segment (see the top of this file). Throws only WalError. */
export function scanSegment(b: Uint8Array, stats: ScanStats = { work: 0 }): SegmentScan {
  const header = readHeader(b, stats);
  if (header === null) {
    // The header goes to disk with the segment's first batch, so that batch may be torn with it.
    const later = laterCommit(b, 0, HEADER_BYTES, null, stats);
    if (later !== null) throw corruptBefore(0, later, 'the segment header is bad');
    return { firstIndex: null, salt: 0, entries: [], end: 0, tail: { offset: 0, reason: b.length === 0 ? 'empty file' : 'torn header' } };
  }
  const entries: WalEntry[] = [];
  let end = HEADER_BYTES;
  let next = header.firstIndex;
  let lastTime = 0;
  // The open batch: its first entry in `entries`, and the running CRC of its record crcs.
  let batchFirst = 0;
  let crcs = 0;
  let count = 0;
  const word = new Uint8Array(4);
  let at = HEADER_BYTES;
  let stop = 'incomplete record';
  while (at < b.length) {
    const r = recordAt(b, at, stats);
    if (r === null) {
      stop = 'incomplete record or bad CRC';
      break;
    }
    if (r.type === TYPE_ENTRY) {
      if (r.len < ENTRY_HEAD) throw new WalError(WAL_ERROR.CORRUPT, at, `entry record of ${r.len} bytes`);
      const index = r64(b, at + 9);
      const time = r64(b, at + 17);
      if (index !== next) throw new WalError(WAL_ERROR.CORRUPT, at, `entry index ${index} where ${next} was due`);
      if (time < lastTime) throw new WalError(WAL_ERROR.CORRUPT, at, `entry time ${time} before ${lastTime}`);
      entries.push({ index, time, data: b.subarray(at + RECORD_HEAD + ENTRY_HEAD, at + RECORD_HEAD + r.len) });
      next++;
      lastTime = time;
      u32(word, 0, r.crc);
      crcs = crc32c(word, crcs);
      count++;
    } else if (r.type === TYPE_COMMIT) {
      const ok =
        r.len === COMMIT_PAYLOAD &&
        count > 0 &&
        r64(b, at + 9) === next - 1 &&
        r32(b, at + 17) === count &&
        r64(b, at + 21) === end &&
        r32(b, at + 29) === crcs &&
        r32(b, at + 33) === header.salt &&
        r64(b, at + 37) === at;
      if (!ok) throw new WalError(WAL_ERROR.CORRUPT, at, 'commit record does not match its batch');
      end = at + RECORD_HEAD + r.len;
      batchFirst = entries.length;
      crcs = 0;
      count = 0;
    } else {
      throw new WalError(WAL_ERROR.CORRUPT, at, `record of unknown type ${r.type}`);
    }
    at += RECORD_HEAD + r.len;
  }
  entries.length = batchFirst;
  if (end === b.length) return { firstIndex: header.firstIndex, salt: header.salt, entries, end, tail: null };
  const later = laterCommit(b, Math.max(at, end), end, header.salt, stats);
  if (later !== null) throw corruptBefore(at, later, stop);
  const reason = at >= b.length ? 'batch without its commit record' : stop;
  return { firstIndex: header.firstIndex, salt: header.salt, entries, end, tail: { offset: end, reason } };
}

function corruptBefore(at: number, commitAt: number, what: string): WalError {
  return new WalError(WAL_ERROR.CORRUPT, at, `${what} at offset ${at}, before a valid commit record at offset ${commitAt}`);
}

/** The offset of a self-consistent commit record at or after `from` that closes a batch other than
 * the one starting at `openBatch` (the batch a torn tail would be), or null. Each offset costs a
 * few comparisons, and a CRC of COMMIT_BYTES only where length and type fit. */
function laterCommit(b: Uint8Array, from: number, openBatch: number, salt: number | null, stats: ScanStats): number | null {
  for (let p = from; p + COMMIT_BYTES <= b.length; p++) {
    stats.work++;
    if (b[p + 8] !== TYPE_COMMIT || r32(b, p + 4) !== COMMIT_PAYLOAD) continue;
    stats.work += COMMIT_BYTES;
    if (crc32c(b, 0, p + 4, p + COMMIT_BYTES) !== r32(b, p)) continue;
    const start = r64(b, p + 21);
    if (r64(b, p + 37) !== p || (salt !== null && r32(b, p + 33) !== salt)) continue;
    if (start < HEADER_BYTES || start >= p || start === openBatch) continue;
    return p;
  }
  return null;
}
