// The record layout of a raft storage that appends to one file (the simulator's power-cut double
// writes it; docs/raft.md "Persistence"). Every write is one record: a length and a CRC-32C of the
// body, then the body. Reading stops at the first record that ends early or fails its checksum: a
// torn tail, the part of an unsynced write that reached the disk. The bodies alone are also what a
// cluster node's data directory stores inside its write-ahead log records, which carry their own
// length and CRC-32C (src/cluster/raft-storage.ts).
import type { Configuration } from './membership.js';
import type { LogEntry } from './messages.js';
import type { HardState } from './raft.js';
import type { Snapshot } from './snapshot.js';

export type StorageRecord =
  | { readonly kind: 'append'; readonly entries: readonly LogEntry[]; readonly truncatedFrom: number | null }
  | { readonly kind: 'hard-state'; readonly hard: HardState }
  | { readonly kind: 'snapshot'; readonly snapshot: Snapshot };

/** Record header: body length (u32) and CRC-32C of the body (u32), little-endian. */
export const recordHeadBytes = 8;
const absent = 0xffffffff;
const tags = { append: 1, 'hard-state': 2, snapshot: 3 } as const;

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let b = 0; b < 256; b++) {
    let c = b;
    for (let i = 0; i < 8; i++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[b] = c >>> 0;
  }
  return t;
})();

/** CRC-32C (Castagnoli), one byte per step: the records are small and only the simulator writes
 * them for now. */
export function crc32c(bytes: Uint8Array): number {
  let c = ~0;
  for (const b of bytes) c = (CRC_TABLE[(c ^ b) & 0xff] as number) ^ (c >>> 8);
  return ~c >>> 0;
}

class Writer {
  private buf = new Uint8Array(256);
  private view = new DataView(this.buf.buffer);
  length = 0;

  private room(n: number): void {
    if (this.length + n <= this.buf.length) return;
    const next = new Uint8Array(Math.max(this.buf.length * 2, this.length + n));
    next.set(this.buf.subarray(0, this.length));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }

  u8(v: number): void {
    this.room(1);
    this.view.setUint8(this.length, v);
    this.length += 1;
  }

  u32(v: number): void {
    this.room(4);
    this.view.setUint32(this.length, v, true);
    this.length += 4;
  }

  f64(v: number): void {
    this.room(8);
    this.view.setFloat64(this.length, v, true);
    this.length += 8;
  }

  bytes(b: Uint8Array | null): void {
    if (b === null) {
      this.u32(absent);
      return;
    }
    this.u32(b.length);
    this.room(b.length);
    this.buf.set(b, this.length);
    this.length += b.length;
  }

  json(v: unknown): void {
    this.bytes(v === null || v === undefined ? null : new TextEncoder().encode(JSON.stringify(v)));
  }

  done(): Uint8Array {
    return this.buf.slice(0, this.length);
  }
}

/** Thrown inside decoding only; decodeRecords turns it into the end of the valid records. */
class Short extends Error {}

class Reader {
  private at = 0;
  private readonly view: DataView;

  constructor(private readonly buf: Uint8Array) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }

  private need(n: number): void {
    if (this.at + n > this.buf.length) throw new Short('record body ends early');
  }

  u8(): number {
    this.need(1);
    return this.view.getUint8(this.at++);
  }

  u32(): number {
    this.need(4);
    const v = this.view.getUint32(this.at, true);
    this.at += 4;
    return v;
  }

  f64(): number {
    this.need(8);
    const v = this.view.getFloat64(this.at, true);
    this.at += 8;
    return v;
  }

  bytes(): Uint8Array | null {
    const n = this.u32();
    if (n === absent) return null;
    this.need(n);
    const b = Uint8Array.prototype.slice.call(this.buf, this.at, this.at + n);
    this.at += n;
    return b;
  }

  json(): unknown {
    const b = this.bytes();
    return b === null ? null : JSON.parse(new TextDecoder().decode(b));
  }

  get done(): boolean {
    return this.at === this.buf.length;
  }
}

function writeEntry(w: Writer, e: LogEntry): void {
  w.f64(e.index);
  w.f64(e.term);
  w.f64(e.time);
  w.json(e.config ?? null);
  w.bytes(e.data);
}

function readEntry(r: Reader): LogEntry {
  const index = r.f64();
  const term = r.f64();
  const time = r.f64();
  const config = r.json() as Configuration | null;
  const data = r.bytes();
  return config === null ? { index, term, time, data } : { index, term, time, data, config };
}

/** One record's body, without the header. */
export function encodeRecordBody(rec: StorageRecord): Uint8Array {
  const w = new Writer();
  w.u8(tags[rec.kind]);
  if (rec.kind === 'append') {
    w.f64(rec.truncatedFrom ?? 0);
    w.u32(rec.entries.length);
    for (const e of rec.entries) writeEntry(w, e);
  } else if (rec.kind === 'hard-state') {
    w.f64(rec.hard.term);
    w.f64(rec.hard.vote);
    w.json(rec.hard.voteInc);
  } else {
    const s = rec.snapshot;
    w.f64(s.index);
    w.f64(s.term);
    w.f64(s.time);
    w.json(s.config);
    w.u32(s.chunks.length);
    for (const c of s.chunks) w.bytes(c);
  }
  return w.done();
}

/** One record: header and body. */
export function encodeRecord(rec: StorageRecord): Uint8Array {
  const body = encodeRecordBody(rec);
  const out = new Uint8Array(recordHeadBytes + body.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, body.length, true);
  view.setUint32(4, crc32c(body), true);
  out.set(body, recordHeadBytes);
  return out;
}

function decodeBody(body: Uint8Array): StorageRecord {
  const r = new Reader(body);
  const tag = r.u8();
  let rec: StorageRecord;
  if (tag === tags.append) {
    const t = r.f64();
    const n = r.u32();
    // Each entry takes at least 32 bytes: a count beyond what the body holds is corrupt.
    if (n * 32 > body.length) throw new Short(`entry count ${n} in a body of ${body.length} bytes`);
    const entries: LogEntry[] = [];
    for (let k = 0; k < n; k++) entries.push(readEntry(r));
    rec = { kind: 'append', entries, truncatedFrom: t === 0 ? null : t };
  } else if (tag === tags['hard-state']) {
    const term = r.f64();
    const vote = r.f64();
    rec = { kind: 'hard-state', hard: { term, vote, voteInc: String(r.json() ?? '') } };
  } else if (tag === tags.snapshot) {
    const index = r.f64();
    const term = r.f64();
    const time = r.f64();
    const config = r.json() as Configuration | null;
    const n = r.u32();
    if (n * 4 > body.length) throw new Short(`chunk count ${n} in a body of ${body.length} bytes`);
    const chunks: Uint8Array[] = [];
    let bytes = 0;
    for (let k = 0; k < n; k++) {
      const c = r.bytes() ?? new Uint8Array(0);
      chunks.push(c);
      bytes += c.length;
    }
    rec = { kind: 'snapshot', snapshot: { index, term, time, config, chunks, bytes } };
  } else {
    throw new Short(`record tag ${tag}`);
  }
  if (!r.done) throw new Short('bytes after the record');
  return rec;
}

/** A body as encodeRecordBody wrote it; a string says why it is not one. */
export function decodeRecordBody(body: Uint8Array): StorageRecord | string {
  try {
    return decodeBody(body);
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

export interface DecodedRecords {
  readonly records: StorageRecord[];
  /** Bytes of the valid records, from the start: where a torn tail begins. */
  readonly validBytes: number;
  /** Why reading stopped before the end; null: every byte was a valid record. */
  readonly stop: string | null;
}

/** The records from the start up to the first one that ends early or fails its checksum. */
export function decodeRecords(bytes: Uint8Array): DecodedRecords {
  const records: StorageRecord[] = [];
  let at = 0;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  while (at < bytes.length) {
    if (at + recordHeadBytes > bytes.length) return { records, validBytes: at, stop: `header at ${at} ends early` };
    const length = view.getUint32(at, true);
    const crc = view.getUint32(at + 4, true);
    const end = at + recordHeadBytes + length;
    if (end > bytes.length) return { records, validBytes: at, stop: `record at ${at} of ${length} bytes ends early` };
    const body = bytes.subarray(at + recordHeadBytes, end);
    if (crc32c(body) !== crc) return { records, validBytes: at, stop: `record at ${at} fails its checksum` };
    try {
      records.push(decodeBody(body));
    } catch (err) {
      const why = err instanceof Short || err instanceof SyntaxError ? err.message : String(err);
      return { records, validBytes: at, stop: `record at ${at}: ${why}` };
    }
    at = end;
  }
  return { records, validBytes: at, stop: null };
}
