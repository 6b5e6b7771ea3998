import type { OutboxImage } from './bridge-outbox.js';
import type { Settings } from './commands.js';
import { IncrementalSort } from './incremental-sort.js';
import { type PendingWill, type RetainedMessage, type Session, sessionPreimage } from './session.js';
import type { ShardOutboxItem } from './shard-outbox.js';
import {
  arrayHeader,
  encodeOutbox,
  encodeRetained,
  encodeSession,
  encodeSettings,
  encodeShardOutbox,
  encodeWill,
  IMAGE_FIELDS,
  packValue,
  SNAPSHOT_CHUNK_BYTES,
  SNAPSHOT_ERROR,
  SNAPSHOT_VERSION,
  SnapshotError,
} from './snapshot.js';

// A lazy snapshot (docs/design.md "Snapshots"): the state is captured at the index where the cursor
// opens, and encoded a chunk per pull while apply goes on mutating the live state. The bytes are
// those of encodeImage() at the opening index, streamed part by part under the same msgpack array
// headers.
//
// What is captured at open, and why that is enough:
// - scalars, settings and shared-subscription cursors: copied (small);
// - pending wills and retained messages: arrays of their records, which apply never mutates in
//   place (it replaces or deletes them), so holding the old records holds the old state;
// - sessions: an array of the live objects, each marked with the cursor's epoch. Apply mutates a
//   session in place, so before the first mutation of a marked session the broker calls touch(),
//   which takes its pre-image (sessionPreimage: containers copied, messages shared, nothing
//   encoded). Copy-on-write is per session.
// The canonical order (sorted keys) is reached by an incremental merge sort in the first pulls,
// which return empty chunks until it finishes.

export interface CursorCapture {
  appliedIndex: number;
  appliedTime: number;
  servePeriod: number;
  generation: number;
  settings: Settings;
  failed: string | null;
  sessions: Iterable<Session>;
  sessionCount: number;
  wills: PendingWill[];
  retained: [string, RetainedMessage][];
  cursors: [string, string][];
  /** Copies of the outboxes, sorted by name (few bridges, so no incremental sort). */
  bridges: OutboxImage[];
  /** Copies of the shard outboxes, sorted by dest. */
  shards: [string, string, number, number, ShardOutboxItem[]][];
  /** Sorted copies of the high-water marks. */
  highWater: [string, string, number][];
}

export interface SnapshotCursorOptions {
  /** Bytes per chunk; the last may be shorter. */
  readonly chunkBytes: number;
  /** Element moves of the canonical-order sort per pull: about 20 ns each. */
  readonly sortMovesPerPull: number;
  /** Each chunk is a view of one buffer that the next pull overwrites: for a reader that consumes
   * a chunk before it pulls again (a digest), so no 64 KiB buffer is allocated per pull. */
  readonly reuseChunk?: boolean;
}

export const SNAPSHOT_CURSOR_DEFAULTS: SnapshotCursorOptions = { chunkBytes: SNAPSHOT_CHUNK_BYTES, sortMovesPerPull: 50_000 };

/** One array of the image: its msgpack header, then each item packed. */
interface Section {
  readonly count: number;
  readonly items: readonly unknown[];
  readonly encode: (item: unknown) => unknown;
}

const EMPTY = new Uint8Array(0);
const same = (x: unknown): unknown => x;
const byKey = (a: [string, unknown], b: [string, unknown]): number => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
const byClientId = (a: { clientId: string }, b: { clientId: string }): number =>
  a.clientId < b.clientId ? -1 : a.clientId > b.clientId ? 1 : 0;

export class SnapshotCursor implements IterableIterator<Uint8Array> {
  /** The log index the chunks are consistent at. */
  readonly index: number;
  private readonly epoch: number;
  private readonly opts: SnapshotCursorOptions;
  private readonly release: (c: SnapshotCursor) => void;
  private readonly head: unknown[];
  private sessionSort: IncrementalSort<Session> | null;
  private willSort: IncrementalSort<PendingWill> | null;
  private retainedSort: IncrementalSort<[string, RetainedMessage]> | null;
  private cursorSort: IncrementalSort<[string, string]> | null;
  private readonly bridges: OutboxImage[];
  private readonly shards: [string, string, number, number, ShardOutboxItem[]][];
  private readonly highWater: [string, string, number][];
  /** Pre-images of marked sessions that apply touched before they were encoded. */
  private preimages = new Map<Session, Session>();
  /** Built once the sorts finish. */
  private sections: Section[] = [];
  private section = 0;
  /** Next item of the section; -1: its header. */
  private item = -1;
  /** Bytes of the part being copied into chunks, and how far. */
  private part: Uint8Array = EMPTY;
  /** The buffer of every chunk when opts.reuseChunk. */
  private reused: Uint8Array | null = null;
  private partOffset = 0;
  private state: 'open' | 'done' | 'cancelled' = 'open';

  constructor(cap: CursorCapture, epoch: number, opts: SnapshotCursorOptions, release: (c: SnapshotCursor) => void) {
    this.index = cap.appliedIndex;
    this.epoch = epoch;
    this.opts = opts;
    this.release = release;
    this.head = [
      SNAPSHOT_VERSION,
      cap.appliedIndex,
      cap.appliedTime,
      cap.servePeriod,
      encodeSettings(cap.settings),
      cap.failed,
      cap.generation,
    ];
    const sessions = new Array<Session>(cap.sessionCount);
    let n = 0;
    for (const s of cap.sessions) {
      s.snapshotMark = epoch;
      sessions[n++] = s;
    }
    this.sessionSort = new IncrementalSort(sessions, byClientId);
    this.willSort = new IncrementalSort(cap.wills, byClientId);
    this.retainedSort = new IncrementalSort(cap.retained, byKey);
    this.cursorSort = new IncrementalSort(cap.cursors, byKey);
    this.bridges = cap.bridges;
    this.shards = cap.shards;
    this.highWater = cap.highWater;
  }

  [Symbol.iterator](): SnapshotCursor {
    return this;
  }

  /** Apply is about to mutate `s`: if this cursor has yet to encode it, keep its pre-image. */
  touch(s: Session): void {
    if (s.snapshotMark !== this.epoch) return;
    s.snapshotMark = 0;
    this.preimages.set(s, sessionPreimage(s));
  }

  /** A newer cursor replaced this one: its next pull throws, so a reader never takes a truncated
   * snapshot for a whole one. */
  cancel(): void {
    if (this.state !== 'open') return;
    this.state = 'cancelled';
    this.drop();
  }

  /** The reader abandons the cursor. */
  return(): IteratorResult<Uint8Array> {
    this.cancel();
    return { done: true, value: undefined };
  }

  next(): IteratorResult<Uint8Array> {
    if (this.state === 'cancelled')
      throw new SnapshotError(`snapshot cursor at ${this.index} was replaced by a newer one`, SNAPSHOT_ERROR.CANCELLED);
    if (this.state === 'done') return { done: true, value: undefined };
    if (!this.sortStep()) return { done: false, value: EMPTY };
    const size = this.opts.chunkBytes;
    const chunk = this.chunkBuffer(size);
    let n = 0;
    while (n < size) {
      if (this.partOffset === this.part.length && !this.nextPart()) break;
      const take = Math.min(size - n, this.part.length - this.partOffset);
      chunk.set(this.part.subarray(this.partOffset, this.partOffset + take), n);
      this.partOffset += take;
      n += take;
    }
    if (n === 0) {
      this.state = 'done';
      this.drop();
      return { done: true, value: undefined };
    }
    return { done: false, value: n === size ? chunk : chunk.subarray(0, n) };
  }

  private chunkBuffer(size: number): Uint8Array {
    if (this.opts.reuseChunk !== true) return new Uint8Array(size);
    if (this.reused === null) this.reused = new Uint8Array(size);
    return this.reused;
  }

  /** Sorts for at most sortMovesPerPull moves; true once every section is in canonical order. */
  private sortStep(): boolean {
    if (this.cursorSort === null) return true;
    let moves = this.opts.sortMovesPerPull;
    for (const sort of [this.sessionSort, this.willSort, this.retainedSort, this.cursorSort]) {
      if (sort === null || sort.done) continue;
      sort.step(moves);
      if (!sort.done) return false;
      moves = Math.max(1, moves >> 1);
    }
    this.buildSections();
    return true;
  }

  private buildSections(): void {
    const sessions = (this.sessionSort as IncrementalSort<Session>).sorted;
    const wills = (this.willSort as IncrementalSort<PendingWill>).sorted;
    const retained = (this.retainedSort as IncrementalSort<[string, RetainedMessage]>).sorted;
    const cursors = (this.cursorSort as IncrementalSort<[string, string]>).sorted;
    this.sessionSort = this.willSort = this.retainedSort = this.cursorSort = null;
    // The root array's elements are the head's seven values, then one array per other section.
    // The first section's header counts all IMAGE_FIELDS.
    this.sections = [
      { count: IMAGE_FIELDS, items: this.head, encode: same },
      { count: sessions.length, items: sessions, encode: this.encodeSession as (x: unknown) => unknown },
      { count: wills.length, items: wills, encode: encodeWill as (x: unknown) => unknown },
      { count: retained.length, items: retained, encode: encodeRetained as (x: unknown) => unknown },
      { count: cursors.length, items: cursors, encode: same },
      { count: this.bridges.length, items: this.bridges, encode: encodeOutbox as (x: unknown) => unknown },
      { count: this.shards.length, items: this.shards, encode: encodeShardOutbox as (x: unknown) => unknown },
      { count: this.highWater.length, items: this.highWater, encode: same },
    ];
  }

  /** The live session if apply has not touched it since the open, else its pre-image. */
  private readonly encodeSession = (s: Session): unknown[] => {
    if (s.snapshotMark === this.epoch) {
      s.snapshotMark = 0;
      return encodeSession(s);
    }
    const pre = this.preimages.get(s);
    if (pre === undefined) throw new Error(`snapshot cursor at ${this.index}: session ${s.clientId} lost its pre-image`);
    this.preimages.delete(s);
    return encodeSession(pre);
  };

  /** Moves to the next part of the image; false after the last. */
  private nextPart(): boolean {
    for (;;) {
      const sec = this.sections[this.section];
      if (sec === undefined) return false;
      if (this.item < 0) {
        this.item = 0;
        this.setPart(arrayHeader(sec.count));
        return true;
      }
      if (this.item < sec.items.length) {
        this.setPart(packValue(sec.encode(sec.items[this.item++])));
        return true;
      }
      this.section++;
      this.item = -1;
    }
  }

  private setPart(bytes: Uint8Array): void {
    this.part = bytes;
    this.partOffset = 0;
  }

  /** Lets go of the captured state and stops copy-on-write. */
  private drop(): void {
    this.preimages = new Map();
    this.sections = [];
    this.sessionSort = this.willSort = this.retainedSort = this.cursorSort = null;
    this.part = EMPTY;
    this.partOffset = 0;
    this.reused = null;
    this.release(this);
  }
}
