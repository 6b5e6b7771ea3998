// A cluster node's raft state in its data directory (docs/raft.md "Persistence"): the log, the
// term and vote and the newest snapshot, written through the Storage interface (src/log/wal/
// storage.ts), so the unit tests run it on MemStorage with power cuts. It lives here, not in
// raft/driver, because it is built from the single node's WAL pieces in src/log/wal, which
// raft/ must not import.
//
//   raft-<first record, 20 digits>.seg   segments in the WAL segment format (src/log/wal/
//                                        segment.ts): each WAL entry is one storage record
//                                        (raft/core/storage-records.ts body: an append with its
//                                        truncation, a term and vote, a snapshot's place), its
//                                        WAL index the record's sequence number
//   raft-snap-<index, 20 digits>.snap    the newest snapshot's chunks, then the WAL snapshot
//                                        trailer (src/log/wal/wal.ts)
//   raft-snap-<index>.tmp                a snapshot being written; removed at start
//
// The state is the replay of the records in order, as StoredLog replays them: an append record
// names the index its conflicting suffix was deleted from (§5.3), so a truncation is durable with
// the batch that holds it. A checkpoint is a segment whose first record is a snapshot's place,
// followed by the term and vote and every entry after the snapshot: replay starts at the newest
// checkpoint, so the segments before it can go. A new snapshot is written as temporary file,
// fsync, rename, fsync of the directory, then a checkpoint segment that names it is written and
// synced (with the directory), and only then are the older segments and snapshots removed.
//
// Writes are buffered and written in group commits: every write of one event-loop turn (the
// Readies a turn produced) becomes one batch, one write and one fdatasync; writes that come while
// a batch is on its way wait for the next. When a batch is durable the storage reports what is
// durable (the core's persisted() and persistedHardState()). A write or fsync error stops it for
// good: it reports the error once and is never retried.
import { randomBytes } from 'node:crypto';
import type { LogEntry } from '../../raft/core/messages.js';
import type { DurableState, HardState } from '../../raft/core/raft.js';
import { rechunk, type Snapshot, snapshotChunkBytesMaxDefault } from '../../raft/core/snapshot.js';
import { type Durable, StoredLog } from '../../raft/core/storage.js';
import { decodeRecordBody, encodeRecordBody, type StorageRecord } from '../../raft/core/storage-records.js';
import type { DriverStorage } from '../../raft/driver/driver.js';
import { crc32c } from '../log/wal/crc32c.js';
import { openDataDir, writeMeta } from '../log/wal/data-dir.js';
import { encodeBatch, type WalEntry } from '../log/wal/segment.js';
import type { AppendFile, Storage } from '../log/wal/storage.js';
import {
  createSegment,
  DataDirError,
  io,
  scanSegmentFile,
  snapshotFileProblem,
  snapshotImage,
  snapshotTrailer,
  type WalLogger,
} from '../log/wal/wal.js';

const pad = (n: number): string => String(n).padStart(20, '0');
export const raftSegmentName = (first: number): string => `raft-${pad(first)}.seg`;
export const raftSnapshotName = (index: number): string => `raft-snap-${pad(index)}.snap`;
const tempName = (index: number): string => `raft-snap-${pad(index)}.tmp`;
const SEGMENT_RE = /^raft-(\d{20})\.seg$/;
const SNAPSHOT_RE = /^raft-snap-(\d{20})\.snap$/;
const TEMP_RE = /^raft-snap-\d{20}\.tmp$/;

/** A segment takes no new batch once it holds this many bytes (a batch is never split). */
export const RAFT_SEGMENT_BYTES_DEFAULT = 64 * 1024 * 1024;

export interface RaftStorageOptions {
  storage: Storage;
  logger: WalLogger;
  /** Default RAFT_SEGMENT_BYTES_DEFAULT. */
  segmentBytes?: number;
  /** A snapshot read back is cut into chunks of at most this (the core's snapshotChunkBytesMax). */
  chunkBytesMax?: number;
  /** reset(): durably notes the member the directory holds the state of from now on (the data
   * directory's metadata), after the raft files are gone and before anything of it is written. */
  adopt?: (incarnation: string) => Promise<void>;
}

interface Segment {
  name: string;
  /** Sequence number of its first record. */
  first: number;
  /** Bytes written (after the last commit record). */
  size: number;
  salt: number;
}

/** What open() found and repaired, for the start-up log line and the tests. */
export interface RaftStorageReport {
  /** Segments replayed, from the newest checkpoint on. */
  segments: number;
  records: number;
  snapshotIndex: number;
  lastIndex: number;
  /** A torn tail cut from the newest segment: file and offset; null: none. */
  cut: { file: string; offset: number; bytes: number } | null;
  /** Files older than the newest checkpoint, or never made durable, removed. */
  removed: string[];
}

const nameIndex = (re: RegExp, name: string): number => Number((re.exec(name) as RegExpExecArray)[1]);

const corrupt = (msg: string): DataDirError => new DataDirError('DATA_DIR_CORRUPT', msg);

export class RaftDirStorage {
  private readonly storage: Storage;
  private readonly segmentBytes: number;
  private readonly adopt: (incarnation: string) => Promise<void>;
  /** Everything written, durable or not; what a sync of it all would make durable. */
  private written: StoredLog;
  /** reset() called since the last batch: the member it names, whose state starts empty. */
  private resetPending: string | null = null;
  /** Counts resets: a batch taken before one reports nothing after it. */
  private generation = 0;
  private pending: StorageRecord[] = [];
  /** A snapshot was saved since the last batch: the next batch is a checkpoint. */
  private snapshotPending = false;
  /** Writes made, ever, and how many of them are durable. */
  private writes = 0;
  private durableWrites = 0;
  private scheduled = false;
  private writing: Promise<void> | null = null;
  private failure: Error | null = null;
  private closed = false;
  private active: { seg: Segment; file: AppendFile } | null;
  /** Segments from the newest checkpoint on, oldest first. */
  private segments: Segment[];
  private nextSeq: number;
  /** The snapshot file the newest checkpoint names; null: none. */
  private snapshotFile: string | null;
  private onDurable: (d: Durable) => void = () => {};
  private onFailure: (err: Error) => void = () => {};
  /** fdatasync calls that closed a batch, ever. */
  fsyncs = 0;
  /** Batches written, ever (checkpoints included). */
  batches = 0;
  /** Raft log entries made durable by batches, ever (a checkpoint's copy of entries already
   * durable is not counted again): with `fsyncs`, the group commit's size. */
  entriesWritten = 0;
  /** The newest snapshot file on disk: its index, image bytes (the free-space bound reserves twice
   * this, src/server/disk-space.ts) and when this process wrote it (null: read at start). */
  lastSnapshot: { index: number; bytes: number; writtenAt: number | null };

  private constructor(
    opts: RaftStorageOptions,
    written: StoredLog,
    segments: Segment[],
    active: { seg: Segment; file: AppendFile } | null,
    nextSeq: number,
    snapshotFile: string | null,
    snapshotBytes: number,
  ) {
    this.storage = opts.storage;
    this.segmentBytes = opts.segmentBytes ?? RAFT_SEGMENT_BYTES_DEFAULT;
    this.adopt = opts.adopt ?? (async () => {});
    this.written = written;
    this.segments = segments;
    this.active = active;
    this.nextSeq = nextSeq;
    this.snapshotFile = snapshotFile;
    this.lastSnapshot = { index: snapshotFile === null ? 0 : nameIndex(SNAPSHOT_RE, snapshotFile), bytes: snapshotBytes, writtenAt: null };
  }

  /** Bytes of the segments from the newest checkpoint on. */
  get logBytes(): number {
    let n = 0;
    for (const s of this.segments) n += s.size;
    return n;
  }

  /** Reads and judges the directory's raft files, then repairs it: a torn tail after the newest
   * segment's last commit record is cut (one log line naming the file and offset), and files
   * before the newest checkpoint or never made durable are removed. Everything that refuses the
   * start (DataDirError naming the file: a bad record before the last commit record, a snapshot a
   * checkpoint names that is missing or damaged, a gap) is found before the first change. */
  static async open(opts: RaftStorageOptions): Promise<{ storage: RaftDirStorage; state: DurableState | null; report: RaftStorageReport }> {
    const { storage, logger } = opts;
    const { scanned, last, emptyLast, kept, written, snapshotFile, snapshotBytes, records } = await readRaftDir(
      storage,
      opts.chunkBytesMax ?? snapshotChunkBytesMaxDefault,
    );
    const names = (await storage.list()).sort();
    // ---- repairs: nothing above changed the directory ----
    let cut: RaftStorageReport['cut'] = null;
    const removed: string[] = [];
    const t = last?.tail ?? null;
    if (last !== undefined && t !== null) {
      logger.warn(
        { file: last.name, offset: t.offset, bytesCut: t.bytes },
        'torn tail after the last commit record cut off (a batch that was never acknowledged)',
      );
      cut = { file: last.name, offset: t.offset, bytes: t.bytes };
      if (emptyLast === null) await storage.truncate(last.name, t.offset);
    }
    const gone = [
      ...scanned.filter((s) => !kept.includes(s)).map((s) => s.name),
      ...names.filter((n) => (SNAPSHOT_RE.test(n) && n !== snapshotFile) || TEMP_RE.test(n)),
    ];
    for (const n of gone) {
      await storage.remove(n);
      removed.push(n);
    }
    if (removed.length > 0) {
      logger.info({ files: removed }, 'raft data files before the newest checkpoint, or never made durable, removed');
      await storage.syncDir();
    }
    const segments: Segment[] = kept.map((s) => ({ name: s.name, first: s.first, size: s.size, salt: s.salt }));
    const tip = segments.at(-1);
    const active = tip === undefined ? null : { seg: tip, file: await storage.openAppend(tip.name) };
    const lastKept = kept.at(-1);
    const nextSeq = lastKept === undefined ? 1 : lastKept.first + lastKept.records.length;
    const report: RaftStorageReport = {
      segments: kept.length,
      records,
      snapshotIndex: written.snapshotIndex,
      lastIndex: written.lastIndex(),
      cut,
      removed,
    };
    const state = written.state();
    return { storage: new RaftDirStorage(opts, written, segments, active, nextSeq, snapshotFile, snapshotBytes), state, report };
  }

  /** What the directory's raft files hold, read without changing anything (no cut, no removal):
   * the state a start would load, or the DataDirError that would refuse it. For tools that rank a
   * stopped cluster's directories (cluster-scripts/newest-state). */
  static async inspect(
    storage: Storage,
    chunkBytesMax = snapshotChunkBytesMaxDefault,
  ): Promise<{ state: DurableState | null; lastIndex: number }> {
    const { written } = await readRaftDir(storage, chunkBytesMax);
    return { state: written.state(), lastIndex: written.lastIndex() };
  }

  /** Called with what is durable after each batch, and once with the error that stopped the
   * storage. */
  listen(onDurable: (d: Durable) => void, onFailure: (err: Error) => void): void {
    this.onDurable = onDurable;
    this.onFailure = onFailure;
  }

  get snapshotIndex(): number {
    return this.written.snapshotIndex;
  }

  /** The error that stopped the storage; null while it works. */
  get failed(): Error | null {
    return this.failure;
  }

  /** Deletes the log from `truncatedFrom` (§5.3) when not null, then appends `entries`. */
  append(entries: readonly LogEntry[], truncatedFrom: number | null): void {
    this.written.append(entries, truncatedFrom);
    this.push({ kind: 'append', entries: [...entries], truncatedFrom });
  }

  setHardState(h: HardState): void {
    this.written.setHardState(h);
    this.push({ kind: 'hard-state', hard: { term: h.term, vote: h.vote, voteInc: h.voteInc } });
  }

  /** The newest snapshot (compaction, or one installed from the leader): the next batch is a
   * checkpoint that holds it. */
  saveSnapshot(s: Snapshot): void {
    this.written.saveSnapshot(s);
    this.snapshotPending = true;
    this.writes++;
    this.schedule();
  }

  /** The directory holds the state of a new member from now on: everything held is dropped (a
   * node that starts without its memory, or joins a newer epoch as a new member). The files go in
   * the next batch, before anything written after this call. */
  reset(incarnation: string): void {
    this.written = new StoredLog();
    this.pending = [];
    this.snapshotPending = false;
    this.resetPending = incarnation;
    this.generation++;
    this.writes++;
    this.schedule();
  }

  /** Resolves once every write made so far is durable (or the storage failed: then it rejects). */
  async flush(): Promise<Durable> {
    const target = this.writes;
    const durable = this.written.durable();
    // The batch on its way may have begun before the last writes; the next one holds them all.
    for (let round = 0; round < 2 && this.durableWrites < target; round++) {
      if (this.failure !== null) throw this.failure;
      if (this.closed) throw new Error('the raft storage is closed');
      if (this.writing === null) this.startBatch();
      await this.writing;
    }
    if (this.failure !== null) throw this.failure;
    if (this.durableWrites < target) throw new Error('the raft storage is closed');
    return durable;
  }

  /** No more batches: the one being written, if any, is finished, and the newest segment closed. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.writing?.catch(() => undefined);
    const a = this.active;
    this.active = null;
    if (a !== null) await a.file.close().catch(() => undefined);
  }

  private push(r: StorageRecord): void {
    this.pending.push(r);
    this.writes++;
    this.schedule();
  }

  /** Group commit: the batch starts after the writes of this turn; one already on its way takes
   * the next batch when it is done. */
  private schedule(): void {
    if (this.scheduled || this.writing !== null || this.closed || this.failure !== null) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (this.writing === null) this.startBatch();
    });
  }

  private startBatch(): void {
    if (this.closed || this.failure !== null) return;
    const reset = this.resetPending;
    if (reset !== null) {
      this.resetPending = null;
      const covers = this.writes - this.pending.length - (this.snapshotPending ? 1 : 0);
      this.writing = this.clear(reset).then(
        () => {
          this.writing = null;
          this.durableWrites = covers;
          if (!this.closed) this.startBatch();
        },
        (err: unknown) => this.fail(err),
      );
      return;
    }
    if (this.pending.length === 0 && !this.snapshotPending) return;
    const records = this.pending;
    this.pending = [];
    const checkpoint = this.snapshotPending ? this.written.state() : null;
    this.snapshotPending = false;
    // What the batch makes durable: the state after every write it holds.
    const durable = this.written.durable();
    const covers = this.writes;
    const generation = this.generation;
    let entries = 0;
    for (const r of records) if (r.kind === 'append') entries += r.entries.length;
    this.writing = (checkpoint === null ? this.appendBatch(records) : this.writeCheckpoint(checkpoint)).then(
      () => {
        this.writing = null;
        this.batches++;
        this.entriesWritten += entries;
        this.durableWrites = covers;
        if (this.closed) return;
        if (generation === this.generation) this.onDurable(durable);
        if (this.pending.length > 0 || this.snapshotPending || this.resetPending !== null) this.startBatch();
      },
      (err: unknown) => this.fail(err),
    );
  }

  private fail(err: unknown): void {
    this.writing = null;
    this.failure = err instanceof Error ? err : new Error(String(err));
    this.onFailure(this.failure);
  }

  /** Removes every raft file, then notes the new member. */
  private async clear(incarnation: string): Promise<void> {
    const a = this.active;
    this.active = null;
    if (a !== null) await io(a.seg.name, 'close', a.file.close());
    const names = (await io('the data directory', 'list', this.storage.list())).filter(
      (n) => SEGMENT_RE.test(n) || SNAPSHOT_RE.test(n) || TEMP_RE.test(n),
    );
    for (const n of names) await io(n, 'remove', this.storage.remove(n));
    if (names.length > 0) await io('the data directory', 'fsync after removing the raft files', this.storage.syncDir());
    await io('meta.json', 'write', this.adopt(incarnation));
    this.segments = [];
    this.nextSeq = 1;
    this.snapshotFile = null;
    this.lastSnapshot = { index: 0, bytes: 0, writtenAt: null };
  }

  private walEntries(records: readonly StorageRecord[]): WalEntry[] {
    const out: WalEntry[] = [];
    for (const r of records) out.push({ index: this.nextSeq + out.length, time: 0, data: encodeRecordBody(r) });
    return out;
  }

  private async appendBatch(records: readonly StorageRecord[]): Promise<void> {
    const entries = this.walEntries(records);
    const a = this.active;
    if (a === null || a.seg.size >= this.segmentBytes) {
      await this.roll(entries);
      return;
    }
    const batch = encodeBatch(entries, a.seg.size, a.seg.salt);
    await io(a.seg.name, 'write', a.file.append([batch]));
    await io(a.seg.name, 'fdatasync', a.file.sync());
    this.fsyncs++;
    a.seg.size += batch.length;
    this.nextSeq += entries.length;
  }

  /** A new segment with `entries` as its first batch; the header goes in the same write, then the
   * file and the directory are synced. */
  private async roll(entries: readonly WalEntry[]): Promise<Segment> {
    const old = this.active;
    const first = this.nextSeq;
    const name = raftSegmentName(first);
    const { file, salt, size } = await createSegment(this.storage, name, first, entries);
    this.fsyncs++;
    const seg: Segment = { name, first, size, salt };
    this.segments.push(seg);
    this.active = { seg, file };
    this.nextSeq += entries.length;
    if (old !== null) await io(old.seg.name, 'close', old.file.close());
    return seg;
  }

  /** The snapshot file (if new), then a checkpoint segment holding the whole state, then the
   * removal of what it replaces. */
  private async writeCheckpoint(state: DurableState): Promise<void> {
    const s = state.snapshot ?? null;
    if (s === null) throw new Error('a checkpoint without a snapshot');
    const name = raftSnapshotName(s.index);
    if (name !== this.snapshotFile) await this.writeSnapshotFile(s, name);
    const place: Snapshot = { index: s.index, term: s.term, time: s.time, config: s.config, chunks: [], bytes: 0 };
    const records: StorageRecord[] = [
      { kind: 'snapshot', snapshot: place },
      { kind: 'hard-state', hard: { term: state.term, vote: state.vote, voteInc: state.voteInc ?? '' } },
      { kind: 'append', entries: state.entries, truncatedFrom: null },
    ];
    const seg = await this.roll(this.walEntries(records));
    const older = this.segments.filter((x) => x !== seg);
    const oldSnapshot = this.snapshotFile !== null && this.snapshotFile !== name ? this.snapshotFile : null;
    this.snapshotFile = name;
    for (const x of older) await io(x.name, 'remove', this.storage.remove(x.name));
    this.segments = [seg];
    if (oldSnapshot !== null) await io(oldSnapshot, 'remove', this.storage.remove(oldSnapshot));
    if (older.length > 0 || oldSnapshot !== null)
      await io(seg.name, 'fsync of the directory after removing older files', this.storage.syncDir());
  }

  private async writeSnapshotFile(s: Snapshot, name: string): Promise<void> {
    const temp = tempName(s.index);
    if ((await io(temp, 'read', this.storage.read(temp))) !== null) await io(temp, 'remove', this.storage.remove(temp));
    const file = await io(temp, 'create', this.storage.create(temp));
    let crc = 0;
    for (const c of s.chunks) crc = crc32c(c, crc);
    try {
      await io(temp, 'write', file.append([...s.chunks, snapshotTrailer(s.index, s.bytes, crc)]));
      await io(temp, 'fsync', file.sync());
    } finally {
      await io(temp, 'close', file.close());
    }
    await io(temp, `rename to ${name}`, this.storage.rename(temp, name));
    await io(name, 'fsync of the directory after renaming', this.storage.syncDir());
    this.lastSnapshot = { index: s.index, bytes: s.bytes, writtenAt: Date.now() };
  }
}

type Scanned = Segment & { records: StorageRecord[]; tail: { offset: number; bytes: number; header: boolean } | null };

/** What readRaftDir found: every segment scanned, the newest (and whether it held no complete
 * batch), those from the newest checkpoint on, and the state their records replay to. */
interface RaftDirRead {
  scanned: Scanned[];
  last: Scanned | undefined;
  emptyLast: Scanned | null;
  kept: Scanned[];
  written: StoredLog;
  snapshotFile: string | null;
  snapshotBytes: number;
  records: number;
}

/** Reads and judges the raft files (RaftDirStorage.open): throws DataDirError for what refuses a
 * start; changes nothing. */
async function readRaftDir(storage: Storage, chunkBytes: number): Promise<RaftDirRead> {
  const names = (await storage.list()).sort();
  const segNames = names.filter((n) => SEGMENT_RE.test(n));
  const scanned: Scanned[] = [];
  for (let k = 0; k < segNames.length; k++) {
    const name = segNames[k] as string;
    const isLast = k === segNames.length - 1;
    const bytes = (await storage.read(name)) ?? new Uint8Array(0);
    const scan = scanSegmentFile(name, bytes);
    if (scan.tail !== null && !isLast) {
      throw corrupt(`${name}: bad bytes at offset ${scan.tail.offset} (${scan.tail.reason}), and later segments follow`);
    }
    const first = nameIndex(SEGMENT_RE, name);
    if (scan.firstIndex !== null && scan.firstIndex !== first) throw corrupt(`${name}: its header says first record ${scan.firstIndex}`);
    const records: StorageRecord[] = [];
    for (const e of scan.entries) {
      const r = decodeRecordBody(e.data);
      if (typeof r === 'string') throw corrupt(`${name}: record ${e.index}: ${r}`);
      records.push(r);
    }
    const tail = scan.tail === null ? null : { offset: scan.end, bytes: bytes.length - scan.end, header: scan.firstIndex === null };
    scanned.push({ name, first, size: scan.end, salt: scan.salt, records, tail });
  }
  // A newest segment with no complete batch (its first write was torn) held nothing durable.
  const last = scanned.at(-1);
  const emptyLast = last !== undefined && last.records.length === 0 ? last : null;
  const live = emptyLast === null ? scanned : scanned.slice(0, -1);
  let start = -1;
  for (let k = live.length - 1; k >= 0 && start < 0; k--) if ((live[k] as Scanned).records[0]?.kind === 'snapshot') start = k;
  if (start < 0) {
    const head = live[0];
    if (head !== undefined && head.first !== 1)
      throw corrupt(`${head.name}: the log starts at record ${head.first} and no checkpoint precedes it`);
    start = 0;
  }
  const kept = live.slice(start);
  for (let k = 1; k < kept.length; k++) {
    const prev = kept[k - 1] as Scanned;
    const seg = kept[k] as Scanned;
    if (seg.first !== prev.first + prev.records.length) {
      throw corrupt(`${seg.name}: starts at record ${seg.first}, but ${prev.name} ends at ${prev.first + prev.records.length - 1}`);
    }
  }
  const written = new StoredLog();
  let snapshotFile: string | null = null;
  let snapshotBytes = 0;
  let records = 0;
  for (const seg of kept) {
    for (const r of seg.records) {
      records++;
      try {
        if (r.kind === 'append') written.append(r.entries, r.truncatedFrom);
        else if (r.kind === 'hard-state') written.setHardState(r.hard);
        else {
          const name = raftSnapshotName(r.snapshot.index);
          const bytes = await storage.read(name);
          if (bytes === null) throw corrupt(`${name}: missing, and ${seg.name} names it`);
          const problem = snapshotFileProblem(bytes, r.snapshot.index);
          if (problem !== null) throw corrupt(`${name}: ${problem}`);
          const { chunks, bytes: n } = rechunk([snapshotImage(bytes)], chunkBytes);
          written.saveSnapshot({ ...r.snapshot, chunks, bytes: n });
          snapshotFile = name;
          snapshotBytes = n;
        }
      } catch (err) {
        if (err instanceof DataDirError) throw err;
        throw corrupt(`${seg.name}: a record does not follow the ones before it: ${(err as Error).message}`);
      }
    }
  }
  return { scanned, last, emptyLast, kept, written, snapshotFile, snapshotBytes, records };
}

/** A cluster node's data directory, opened: its lock taken, its metadata checked (of this cluster
 * and node id), its raft state loaded. What the driver holds (raft/driver DriverStorage). */
export interface RaftDataDir {
  readonly dir: string;
  readonly storage: RaftDirStorage;
  readonly loaded: DurableState | null;
  /** The member whose state it holds. */
  readonly incarnation: string;
  readonly report: RaftStorageReport;
  release(): void;
}

/** Opens --data-dir DIR of a cluster node. Throws DataDirError naming the directory or file. */
export async function openRaftDataDir(
  dir: string,
  who: { clusterId: string; nodeId: number },
  logger: WalLogger,
  chunkBytesMax?: number,
): Promise<RaftDataDir> {
  const d = await openDataDir(dir, { mode: 'cluster', ...who, incarnation: randomBytes(8).toString('hex') });
  try {
    let meta = d.meta;
    const opened = await RaftDirStorage.open({
      storage: d.storage,
      logger,
      ...(chunkBytesMax === undefined ? {} : { chunkBytesMax }),
      adopt: async (incarnation) => {
        meta = { ...meta, incarnation };
        await writeMeta(d.storage, meta);
      },
    });
    return {
      dir,
      storage: opened.storage,
      loaded: opened.state,
      incarnation: d.meta.incarnation as string,
      report: opened.report,
      release: d.release,
    };
  } catch (err) {
    d.release();
    throw err;
  }
}

/** The data directory as the raft driver holds it. */
export function driverStorage(d: RaftDataDir): DriverStorage {
  const st = d.storage;
  return {
    dir: d.dir,
    loaded: d.loaded,
    incarnation: d.incarnation,
    get snapshotIndex() {
      return st.snapshotIndex;
    },
    append: (entries, truncatedFrom) => st.append(entries, truncatedFrom),
    setHardState: (h) => st.setHardState(h),
    saveSnapshot: (s) => st.saveSnapshot(s),
    reset: (incarnation) => st.reset(incarnation),
    flush: () => st.flush(),
    listen: (onDurable, onFailure) => st.listen(onDurable, onFailure),
    close: () => st.close(),
  };
}
