// The write-ahead log of a data directory: segments of committed entries (segment.ts) and the
// snapshots that let older segments go.
//
//   wal-<first index, 20 digits>.seg    entries from that index on; the newest one is appended to
//   snap-<index, 20 digits>.snap        the state at that index: the snapshot image, then a trailer
//   snap-<index>.tmp                    a snapshot being written; removed at start
//
// Snapshot trailer (36 bytes, after the image): magic "RMQSNP01" | version u32 | index u64 |
// image bytes u64 | CRC-32C of the image u32 | CRC-32C of the trailer's first 32 bytes u32.
//
// Writing: one batch at a time (the caller's group commit), one write and one fdatasync each; a
// batch that starts a segment also syncs the directory. Recovery (readWal) reads every segment and
// snapshot and changes nothing; the caller restores a snapshot, and only then Wal.open() cuts a torn
// tail and removes leftovers, so a start that is refused leaves the directory as it found it.
import { randomBytes } from 'node:crypto';
import { crc32c } from './crc32c.js';
import { encodeBatch, encodeHeader, HEADER_BYTES, scanSegment, type WalEntry, WalError } from './segment.js';
import type { AppendFile, Storage } from './storage.js';

export interface WalLogger {
  info(fields: Record<string, unknown>, msg: string): void;
  warn(fields: Record<string, unknown>, msg: string): void;
  error(fields: Record<string, unknown>, msg: string): void;
}

/** A write, fsync, rename or remove of a data directory file failed: the node stops and the call is
 * never retried (an fsync retried after EIO can report success for pages the kernel dropped). The
 * message names the file, the operation and the error. */
export class WalIoError extends Error {
  readonly code = 'DATA_DIR_IO';
  readonly file: string;
  readonly op: string;
  constructor(file: string, op: string, cause: unknown) {
    super(`${op} of ${file} failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'WalIoError';
    this.file = file;
    this.op = op;
  }
}

/** The data directory cannot be used as it is: the message names the file. Nothing was changed. */
export const DATA_DIR_ERRORS = ['DATA_DIR_CORRUPT', 'DATA_DIR_FOREIGN', 'DATA_DIR_LOCKED'] as const;

export class DataDirError extends Error {
  readonly code: (typeof DATA_DIR_ERRORS)[number];
  constructor(code: DataDirError['code'], message: string) {
    super(message);
    this.name = 'DataDirError';
    this.code = code;
  }
}

const pad = (n: number): string => String(n).padStart(20, '0');
export const segmentName = (first: number): string => `wal-${pad(first)}.seg`;
export const snapshotName = (index: number): string => `snap-${pad(index)}.snap`;
const tempName = (index: number): string => `snap-${pad(index)}.tmp`;
const SEGMENT_RE = /^wal-(\d{20})\.seg$/;
const SNAPSHOT_RE = /^snap-(\d{20})\.snap$/;
const TEMP_RE = /^snap-\d{20}\.tmp$/;

const SNAP_MAGIC = Uint8Array.from([0x52, 0x4d, 0x51, 0x53, 0x4e, 0x50, 0x30, 0x31]); // RMQSNP01
const SNAP_VERSION = 1;
export const SNAP_TRAILER_BYTES = 36;
/** Bytes checksummed per turn when a written snapshot is read back: about 4 ms. */
const VERIFY_SLICE_BYTES = 4 * 1024 * 1024;

const nameIndex = (re: RegExp, name: string): number | null => {
  const m = re.exec(name);
  if (m === null) return null;
  const n = Number(m[1]);
  return Number.isSafeInteger(n) ? n : null;
};

function u32(b: Uint8Array, at: number, v: number): void {
  b[at] = v >>> 24;
  b[at + 1] = (v >>> 16) & 0xff;
  b[at + 2] = (v >>> 8) & 0xff;
  b[at + 3] = v & 0xff;
}
const r32 = (b: Uint8Array, at: number): number =>
  (((b[at] as number) << 24) | ((b[at + 1] as number) << 16) | ((b[at + 2] as number) << 8) | (b[at + 3] as number)) >>> 0;
const r64 = (b: Uint8Array, at: number): number => r32(b, at) * 0x1_0000_0000 + r32(b, at + 4);

/** The trailer that closes a snapshot file of `bytes` image bytes whose CRC-32C is `crc` (a cluster
 * node's data directory writes its snapshots in this format too, src/cluster/raft-storage.ts). */
export function snapshotTrailer(index: number, bytes: number, crc: number): Uint8Array {
  const t = new Uint8Array(SNAP_TRAILER_BYTES);
  t.set(SNAP_MAGIC, 0);
  u32(t, 8, SNAP_VERSION);
  u32(t, 12, Math.floor(index / 0x1_0000_0000));
  u32(t, 16, index >>> 0);
  u32(t, 20, Math.floor(bytes / 0x1_0000_0000));
  u32(t, 24, bytes >>> 0);
  u32(t, 28, crc);
  u32(t, 32, crc32c(t, 0, 0, 32));
  return t;
}

/** Why a snapshot file's trailer does not vouch for it, or null when it does (the image's CRC is
 * checked separately, in one go or in slices). */
function trailerProblem(b: Uint8Array, index: number): string | null {
  if (b.length < SNAP_TRAILER_BYTES) return 'shorter than its trailer';
  const t = b.subarray(b.length - SNAP_TRAILER_BYTES);
  for (let i = 0; i < SNAP_MAGIC.length; i++) if (t[i] !== SNAP_MAGIC[i]) return 'no snapshot trailer';
  if (crc32c(t, 0, 0, 32) !== r32(t, 32)) return 'trailer checksum mismatch';
  if (r32(t, 8) !== SNAP_VERSION) return `snapshot format version ${r32(t, 8)}, this build reads ${SNAP_VERSION}`;
  if (r64(t, 12) !== index) return `trailer says index ${r64(t, 12)}`;
  if (r64(t, 20) !== b.length - SNAP_TRAILER_BYTES) return 'length does not match its trailer';
  return null;
}

/** Why the bytes of a snapshot file at `index` cannot be used (trailer or image checksum), or null;
 * with null, `snapshotImage` gives the image. */
export function snapshotFileProblem(b: Uint8Array, index: number): string | null {
  return trailerProblem(b, index) ?? (crc32c(imageOf(b)) !== imageCrc(b) ? 'image checksum mismatch' : null);
}

export const snapshotImage = (b: Uint8Array): Uint8Array => imageOf(b);

/** `p`, its rejection named after the file and the operation (WalIoError). */
export async function io<T>(file: string, op: string, p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (err) {
    throw err instanceof WalIoError ? err : new WalIoError(file, op, err);
  }
}

/** A segment file made durable: its open file, salt and size. */
export interface CreatedSegment {
  readonly file: AppendFile;
  readonly salt: number;
  readonly size: number;
}

/** Creates the segment `name` whose first entry is `first`, with `entries` as its first batch: the
 * header goes in the same write, then the file and the directory are synced (two syncs, counted by
 * the caller as one fdatasync). Shared by the single node's WAL and a cluster node's raft storage. */
export async function createSegment(storage: Storage, name: string, first: number, entries: readonly WalEntry[]): Promise<CreatedSegment> {
  const salt = randomBytes(4).readUInt32BE(0);
  const file = await io(name, 'create', storage.create(name));
  const header = encodeHeader(first, salt);
  const batch = encodeBatch(entries, HEADER_BYTES, salt);
  await io(name, 'write', file.append([header, batch]));
  await io(name, 'fdatasync', file.sync());
  await io(name, 'fsync of the directory after creating', storage.syncDir());
  return { file, salt, size: header.length + batch.length };
}

const imageOf = (b: Uint8Array): Uint8Array => b.subarray(0, b.length - SNAP_TRAILER_BYTES);
const imageCrc = (b: Uint8Array): number => r32(b, b.length - SNAP_TRAILER_BYTES + 28);

// ---- recovery ----

interface SegmentInfo {
  name: string;
  first: number;
  /** Index of its last entry; first - 1 when it has none. */
  last: number;
  /** Where the next batch goes (after the last valid commit record). */
  end: number;
  salt: number;
  /** Bytes on disk. */
  size: number;
}

export interface SnapshotFile {
  name: string;
  index: number;
  /** The image (the trailer stripped). */
  image: Uint8Array;
}

/** What a data directory holds, read and checked, nothing changed yet. */
export interface WalContents {
  /** Valid snapshots the log continues from, newest first. */
  snapshots: SnapshotFile[];
  /** Whether the log goes back to index 1, so a start with no snapshot replays it all. */
  fromStart: boolean;
  /** Every entry of every segment, in order. */
  entries: WalEntry[];
  /** The segment an entry index is in, for messages. */
  segmentOf(index: number): string;
  /** What Wal.open() appends to and repairs. */
  readonly segments: readonly SegmentInfo[];
  readonly tornTail: { name: string; offset: number; size: number; reason: string; header: boolean } | null;
  readonly temps: readonly string[];
}

/** scanSegment of the file `name`: a segment of another format version refuses the directory as
 * foreign, any other bad header or record as corrupt, naming the file. */
export function scanSegmentFile(name: string, bytes: Uint8Array): ReturnType<typeof scanSegment> {
  try {
    return scanSegment(bytes);
  } catch (err) {
    if (!(err instanceof WalError)) throw err;
    throw new DataDirError(err.code === 'WAL_VERSION' ? 'DATA_DIR_FOREIGN' : 'DATA_DIR_CORRUPT', `${name}: ${err.message}`);
  }
}

/** Reads and judges the log and snapshots (see the top of the file). Throws DataDirError, naming
 * the file, for a bad record before the last valid commit record, a gap in the log, or corrupt
 * snapshots with no valid older one the log continues from. */
export async function readWal(storage: Storage, logger: WalLogger): Promise<WalContents> {
  const names = (await storage.list()).sort();
  const segNames = names.filter((n) => SEGMENT_RE.test(n));
  const snapNames = names.filter((n) => SNAPSHOT_RE.test(n)).reverse();
  const temps = names.filter((n) => TEMP_RE.test(n));
  const segments: SegmentInfo[] = [];
  const entries: WalEntry[] = [];
  let tornTail: WalContents['tornTail'] = null;
  for (let k = 0; k < segNames.length; k++) {
    const name = segNames[k] as string;
    const isLast = k === segNames.length - 1;
    const first = nameIndex(SEGMENT_RE, name) as number;
    const bytes = (await storage.read(name)) ?? new Uint8Array(0);
    const scan = scanSegmentFile(name, bytes);
    if (scan.tail !== null) {
      if (!isLast) {
        throw new DataDirError(
          'DATA_DIR_CORRUPT',
          `${name}: bad bytes at offset ${scan.tail.offset} (${scan.tail.reason}), and later segments follow`,
        );
      }
      tornTail = { name, offset: scan.end, size: bytes.length, reason: scan.tail.reason, header: scan.firstIndex === null };
    }
    if (scan.firstIndex === null) continue; // a torn new segment: it held nothing that was synced
    if (scan.firstIndex !== first) throw new DataDirError('DATA_DIR_CORRUPT', `${name}: its header says first index ${scan.firstIndex}`);
    const prev = segments.at(-1);
    if (prev !== undefined && first !== prev.last + 1) {
      throw new DataDirError('DATA_DIR_CORRUPT', `${name}: starts at index ${first}, but ${prev.name} ends at ${prev.last}`);
    }
    if (!isLast && scan.entries.length === 0) throw new DataDirError('DATA_DIR_CORRUPT', `${name}: empty, and later segments follow`);
    for (const e of scan.entries) entries.push(e);
    segments.push({ name, first, last: first + scan.entries.length - 1, end: scan.end, salt: scan.salt, size: bytes.length });
  }
  const logFirst = segments[0]?.first ?? null;
  const logLast = segments.at(-1)?.last ?? null;
  const snapshots: SnapshotFile[] = [];
  const bad: string[] = [];
  for (const name of snapNames) {
    const index = nameIndex(SNAPSHOT_RE, name) as number;
    const bytes = (await storage.read(name)) ?? new Uint8Array(0);
    const problem = trailerProblem(bytes, index) ?? (crc32c(imageOf(bytes)) !== imageCrc(bytes) ? 'image checksum mismatch' : null);
    if (problem !== null) {
      logger.warn({ file: name, problem }, 'snapshot not usable; an older one or the log is tried');
      bad.push(`${name} (${problem})`);
      continue;
    }
    if (logLast !== null && index > logLast) {
      throw new DataDirError('DATA_DIR_CORRUPT', `${name}: the log ends at index ${logLast}, before this snapshot`);
    }
    // The log must continue from the snapshot without a gap.
    if (logFirst !== null && index < logFirst - 1) {
      bad.push(`${name} (the log after it is gone)`);
      continue;
    }
    snapshots.push({ name, index, image: imageOf(bytes) });
  }
  const fromStart = logFirst === null ? snapNames.length === 0 : logFirst === 1;
  if (snapshots.length === 0 && !fromStart) {
    const why = bad.length > 0 ? `no usable snapshot: ${bad.join(', ')}` : 'no snapshot';
    const log = logFirst === null ? 'there is no log' : `the log starts at index ${logFirst} in ${segments[0]?.name}`;
    throw new DataDirError('DATA_DIR_CORRUPT', `${why}, and ${log}`);
  }
  return {
    snapshots,
    fromStart,
    entries,
    segmentOf: (index) => segments.find((s) => index >= s.first && index <= s.last)?.name ?? '(no segment)',
    segments,
    tornTail,
    temps,
  };
}

// ---- writing ----

export interface WalOptions {
  storage: Storage;
  logger: WalLogger;
  /** A segment takes no new batch once it holds this many bytes (a batch is never split). */
  segmentBytes: number;
  /** A snapshot is due when the log grew by max(this, the last snapshot's size) since the last. */
  snapshotLogBytes: number;
  /** Most ms of pulling snapshot chunks in one turn. */
  snapshotSliceMs: number;
  clock?: () => number;
}

interface Active {
  info: SegmentInfo;
  file: AppendFile;
}

export interface SnapshotStats {
  index: number;
  bytes: number;
  ms: number;
  removedSegments: number;
}

export class Wal {
  private readonly opts: WalOptions;
  private readonly storage: Storage;
  private segments: SegmentInfo[];
  private active: Active | null = null;
  /** The batch being written, if any. */
  private appending: Promise<void> | null = null;
  private closed = false;
  /** Log bytes written since the last snapshot began. */
  private sinceSnapshot = 0;
  private lastSnapshotBytes = 0;
  private snapshotting: Promise<SnapshotStats | null> | null = null;
  private snapshotCancel: (() => void) | null = null;
  /** fdatasync calls that closed a group commit, ever (one per batch). */
  fsyncs = 0;
  /** Entries written in group commits, ever. */
  entriesWritten = 0;
  /** The newest snapshot on disk: its index, image bytes, and when this process wrote it (ms since
   * the epoch; null for one read at start). index 0: none. */
  lastSnapshot: { index: number; bytes: number; writtenAt: number | null } = { index: 0, bytes: 0, writtenAt: null };

  private constructor(opts: WalOptions, segments: SegmentInfo[]) {
    this.opts = opts;
    this.storage = opts.storage;
    this.segments = segments;
  }

  /** Makes the writes a read directory needs before it is appended to: cuts the torn tail (one
   * log line naming the file and offset), drops a segment whose header never landed and leftover
   * snapshot temporaries, then opens the newest segment for appending. Call only once the caller
   * restored its state from `contents`. */
  static async open(contents: WalContents, opts: WalOptions): Promise<Wal> {
    const { storage, logger } = opts;
    const t = contents.tornTail;
    if (t !== null) {
      logger.warn(
        { file: t.name, offset: t.offset, bytesCut: t.size - t.offset, reason: t.reason },
        'torn tail after the last commit record cut off (a batch that was never acknowledged)',
      );
      if (t.header) await storage.remove(t.name);
      else await storage.truncate(t.name, t.offset);
    }
    for (const name of contents.temps) await storage.remove(name);
    if (t !== null || contents.temps.length > 0) await storage.syncDir();
    const segments = contents.segments.map((s) => ({ ...s, size: s.end }));
    const wal = new Wal(opts, segments);
    const last = segments.at(-1);
    if (last !== undefined) wal.active = { info: last, file: await storage.openAppend(last.name) };
    const snap = contents.snapshots[0];
    wal.lastSnapshotBytes = snap?.image.length ?? 0;
    wal.lastSnapshot = { index: snap?.index ?? 0, bytes: wal.lastSnapshotBytes, writtenAt: null };
    wal.sinceSnapshot = segments.filter((s) => s.last > (snap?.index ?? 0)).reduce((n, s) => n + s.size, 0);
    return wal;
  }

  /** Index the next entry must have; 0 when the log is empty (any index may start it). */
  get nextIndex(): number {
    const a = this.active?.info;
    return a === undefined ? 0 : a.last + 1;
  }

  /** The log grew enough since the last snapshot, and none is being written. */
  get snapshotDue(): boolean {
    return this.snapshotting === null && !this.closed && this.sinceSnapshot >= Math.max(this.opts.snapshotLogBytes, this.lastSnapshotBytes);
  }

  get snapshotRunning(): boolean {
    return this.snapshotting !== null;
  }

  /** Resolves once the snapshot being written, if any, is over, whichever way. */
  async snapshotSettled(): Promise<void> {
    await this.snapshotting?.catch(() => null);
  }

  /** Bytes of the log's segments on disk. */
  get logBytes(): number {
    let n = 0;
    for (const s of this.segments) n += s.size;
    return n;
  }

  /** Appends one batch and syncs it; resolves once it is on disk. One batch at a time: the caller
   * gathers what arrives meanwhile into the next. */
  append(entries: readonly WalEntry[]): Promise<void> {
    if (this.appending !== null) return Promise.reject(new Error('a WAL batch is already being written'));
    if (this.closed) return Promise.reject(new Error('the WAL is closed'));
    const p = this.write(entries).finally(() => {
      this.appending = null;
    });
    this.appending = p;
    return p;
  }

  private async write(entries: readonly WalEntry[]): Promise<void> {
    const first = entries[0];
    if (first === undefined) return;
    const due = this.nextIndex;
    if (due !== 0 && first.index !== due) throw new Error(`WAL batch starts at ${first.index}, ${due} was due`);
    let a = this.active;
    if (a === null || a.info.size >= this.opts.segmentBytes) {
      a = await this.roll(entries);
    } else {
      const batch = encodeBatch(entries, a.info.size, a.info.salt);
      try {
        await a.file.append([batch]);
      } catch (err) {
        throw new WalIoError(a.info.name, 'write', err);
      }
      try {
        await a.file.sync();
      } catch (err) {
        throw new WalIoError(a.info.name, 'fdatasync', err);
      }
      this.fsyncs++;
      a.info.size += batch.length;
      this.sinceSnapshot += batch.length;
    }
    a.info.last = (entries.at(-1) as WalEntry).index;
    a.info.end = a.info.size;
    this.entriesWritten += entries.length;
  }

  /** A new segment holding `entries` as its first batch: the header goes with it, then the file
   * and the directory are synced. */
  private async roll(entries: readonly WalEntry[]): Promise<Active> {
    const old = this.active;
    const first = (entries[0] as WalEntry).index;
    const name = segmentName(first);
    const { file, salt, size } = await createSegment(this.storage, name, first, entries);
    this.fsyncs++;
    const info: SegmentInfo = { name, first, last: first - 1, end: 0, salt, size };
    this.sinceSnapshot += info.size;
    this.segments.push(info);
    this.active = { info, file };
    if (old !== null) await io(old.info.name, 'close', old.file.close());
    return this.active;
  }

  /** Writes the state at `index` from its chunks in the background: a slice of pulls per turn,
   * then temporary file, fsync, rename, fsync of the directory; reads it back and checks it; only
   * then removes the older snapshots and the segments wholly before it. Resolves null when the
   * chunks failed (a cursor cancelled by a newer one): nothing changed but a temporary file
   * removed. Rejects on an I/O error. */
  writeSnapshot(index: number, chunks: Iterator<Uint8Array>): Promise<SnapshotStats | null> {
    if (this.snapshotting !== null) return Promise.resolve(null);
    let cancelled = false;
    this.snapshotCancel = () => {
      cancelled = true;
    };
    const done = this.runSnapshot(index, chunks, () => cancelled).finally(() => {
      this.snapshotting = null;
      this.snapshotCancel = null;
    });
    this.snapshotting = done;
    return done;
  }

  private async runSnapshot(index: number, chunks: Iterator<Uint8Array>, cancelled: () => boolean): Promise<SnapshotStats | null> {
    const clock = this.opts.clock ?? (() => performance.now());
    const started = clock();
    const sinceAtStart = this.sinceSnapshot;
    const temp = tempName(index);
    const existing = await io(temp, 'read', this.storage.read(temp));
    if (existing !== null) await io(temp, 'remove', this.storage.remove(temp));
    const file = await io(temp, 'create', this.storage.create(temp));
    let crc = 0;
    let bytes = 0;
    let ok = true;
    try {
      for (let done = false; !done; ) {
        const slice: Uint8Array[] = [];
        const sliceStart = clock();
        try {
          do {
            const r = chunks.next();
            if (r.done === true) done = true;
            else if (r.value.length > 0) {
              slice.push(r.value);
              crc = crc32c(r.value, crc);
              bytes += r.value.length;
            }
          } while (!done && clock() - sliceStart < this.opts.snapshotSliceMs);
        } catch (err) {
          this.opts.logger.warn({ index, err: (err as Error).message }, 'snapshot abandoned');
          ok = false;
          break;
        }
        if (cancelled() || this.closed) {
          ok = false;
          break;
        }
        // The await yields the event loop between slices.
        await io(temp, 'write', file.append(slice));
      }
      if (ok) {
        await io(temp, 'write', file.append([snapshotTrailer(index, bytes, crc)]));
        await io(temp, 'fsync', file.sync());
      }
    } finally {
      await io(temp, 'close', file.close());
    }
    if (!ok) {
      chunks.return?.();
      await io(temp, 'remove', this.storage.remove(temp));
      return null;
    }
    const name = snapshotName(index);
    await io(temp, `rename to ${name}`, this.storage.rename(temp, name));
    await io(name, 'fsync of the directory after renaming', this.storage.syncDir());
    await io(name, 'read back', this.verify(name, index));
    this.lastSnapshotBytes = bytes;
    this.lastSnapshot = { index, bytes, writtenAt: Date.now() };
    this.sinceSnapshot = Math.max(0, this.sinceSnapshot - sinceAtStart);
    const removed = await this.removeBefore(index, name);
    const stats = { index, bytes, ms: Math.round(clock() - started), removedSegments: removed };
    this.opts.logger.info(stats, 'snapshot written');
    return stats;
  }

  /** Reads a written snapshot back and checks its checksum a slice per turn. */
  private async verify(name: string, index: number): Promise<void> {
    const back = await this.storage.read(name);
    const problem = back === null ? 'missing' : trailerProblem(back, index);
    if (back === null || problem !== null) throw new Error(`${name} read back: ${problem}`);
    const image = imageOf(back);
    let crc = 0;
    for (let at = 0; at < image.length; at += VERIFY_SLICE_BYTES) {
      crc = crc32c(image, crc, at, Math.min(image.length, at + VERIFY_SLICE_BYTES));
      await new Promise((resolve) => setImmediate(resolve));
    }
    if (crc !== imageCrc(back)) throw new Error(`${name} read back: image checksum mismatch`);
  }

  /** Removes older snapshots and the closed segments whose entries are all at or before `index`. */
  private async removeBefore(index: number, keep: string): Promise<number> {
    const names = await this.storage.list();
    let changed = false;
    for (const n of names) {
      const i = nameIndex(SNAPSHOT_RE, n);
      if (i !== null && n !== keep && i < index) {
        await io(n, 'remove', this.storage.remove(n));
        changed = true;
      }
    }
    const active = this.active?.info;
    const gone = this.segments.filter((s) => s !== active && s.last <= index);
    for (const s of gone) await io(s.name, 'remove', this.storage.remove(s.name));
    this.segments = this.segments.filter((s) => !gone.includes(s));
    if (changed || gone.length > 0) await io(keep, 'fsync of the directory after removing older files', this.storage.syncDir());
    return gone.length;
  }

  /** Stops: a snapshot being written is abandoned; the newest segment is closed once the batch
   * being written (if any) is on disk. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.snapshotCancel?.();
    await this.snapshotting?.catch(() => null);
    await this.appending?.catch(() => undefined);
    await this.active?.file.close();
    this.active = null;
  }
}
