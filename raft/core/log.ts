import { assert } from './assert.js';
import type { Configuration } from './membership.js';
import type { LogEntry } from './messages.js';

/** Bytes of a slab of entry data (an entry larger than this gets a slab of its own size). */
export const SLAB_BYTES = 64 * 1024;

export type AppendOutcome =
  | {
      readonly ok: true;
      readonly lastNew: number;
      readonly truncatedFrom: number | null;
      /** Entries actually written (not already held). */
      readonly written: LogEntry[];
    }
  | { readonly ok: false; readonly hint: number };

/** Where the log starts after compaction: the last entry a snapshot covers (§7). Index 0 with term 0
 * and time 0 is the empty prefix of a log that was never compacted. */
export interface LogBase {
  readonly index: number;
  readonly term: number;
  readonly time: number;
}

/** The log, in memory by design (docs/design.md "Raft"), possibly compacted up to `base` (§7).
 * Invariants: the held indexes are contiguous from base.index + 1; terms and times never decrease
 * along the log, the base included; base.index <= commit <= last, and the committed prefix never
 * changes.
 *
 * Held in columns, not as the LogEntry objects handed in: an entry lives until compaction (100,000
 * entries and more), so every object it keeps is copied by the young-generation collector and
 * then marked by every full one. The columns hold numbers only, and an entry's data is copied into
 * slabs of SLAB_BYTES, so the log keeps no object per entry at all; the LogEntry objects and data
 * views entry() and slice() return are made on the way out and die young. A slab's bytes are written
 * once and never again (a truncated tail's room is abandoned, not reused), so a view handed out
 * earlier always reads what it read then. */
export class MemoryLog {
  /** Column k holds index base.index + 1 + k. */
  private readonly terms: number[] = [];
  private readonly times: number[] = [];
  /** Where entry k's data is: slab number (slabs[slab - firstSlab]), offset, length (-1: null). */
  private readonly slabOf: number[] = [];
  private readonly offsets: number[] = [];
  private readonly lengths: number[] = [];
  private readonly slabs: Uint8Array[] = [];
  /** The number of slabs[0]; slabs are numbered in the order they were made. */
  private firstSlab = 0;
  /** Bytes used of the last slab (Infinity: it takes nothing more); an entry that does not fit
   * starts a new slab. */
  private slabUsed = Number.POSITIVE_INFINITY;
  /** The configuration of each configuration entry held, by index. */
  private readonly configs = new Map<number, Configuration>();
  private commitIndex = 0;
  private baseIndex = 0;
  private baseTerm = 0;
  private baseTime = 0;
  /** Sum of data bytes of the held entries. */
  private heldBytes = 0;

  private readonly newSlab: (bytes: number) => Uint8Array;

  constructor(
    restored: readonly LogEntry[] = [],
    base: LogBase | null = null,
    newSlab: (bytes: number) => Uint8Array = (n) => new Uint8Array(n),
  ) {
    this.newSlab = newSlab;
    if (base !== null) {
      this.baseIndex = base.index;
      this.baseTerm = base.term;
      this.baseTime = base.time;
      this.commitIndex = base.index;
    }
    for (const e of restored) this.push(e);
  }

  get commit(): number {
    return this.commitIndex;
  }

  /** The last index a snapshot covers (0: never compacted). */
  get snapshotIndex(): number {
    return this.baseIndex;
  }

  /** Data bytes of the entries held. */
  get bytes(): number {
    return this.heldBytes;
  }

  lastIndex(): number {
    return this.baseIndex + this.terms.length;
  }

  lastTerm(): number {
    return this.termAt(this.lastIndex()) ?? 0;
  }

  /** Term at `index`; the base's at the base index; undefined below it (compacted) and past the end. */
  termAt(index: number): number | undefined {
    if (index === this.baseIndex) return this.baseTerm;
    if (index < this.baseIndex) return undefined;
    return this.terms[index - this.baseIndex - 1];
  }

  /** Cluster time of the entry at `index`; the base's at the base index; 0 elsewhere outside the log. */
  timeAt(index: number): number {
    if (index === this.baseIndex) return this.baseTime;
    return this.times[index - this.baseIndex - 1] ?? 0;
  }

  lastTime(): number {
    return this.timeAt(this.lastIndex());
  }

  entry(index: number): LogEntry {
    const held = index > this.baseIndex && index <= this.lastIndex();
    assert(held, `log has no entry ${index} (held ${this.baseIndex + 1}..${this.lastIndex()})`);
    return this.make(index - this.baseIndex - 1);
  }

  /** Data bytes of the entry at `index` (0 for one without data, or outside the log). */
  dataLength(index: number): number {
    return index > this.baseIndex ? Math.max(0, this.lengths[index - this.baseIndex - 1] ?? 0) : 0;
  }

  /** Entries lo .. hi-1. */
  slice(lo: number, hi: number): LogEntry[] {
    assert(lo > this.baseIndex && hi <= this.lastIndex() + 1, `slice [${lo}, ${hi}) outside the log`);
    const out: LogEntry[] = new Array(Math.max(0, hi - lo));
    for (let i = lo; i < hi; i++) out[i - lo] = this.make(i - this.baseIndex - 1);
    return out;
  }

  /** The entries held, from base.index + 1. */
  all(): LogEntry[] {
    return this.slice(this.baseIndex + 1, this.lastIndex() + 1);
  }

  private make(k: number): LogEntry {
    const index = this.baseIndex + 1 + k;
    const term = this.terms[k] as number;
    const time = this.times[k] as number;
    const length = this.lengths[k] as number;
    let data: Uint8Array | null = null;
    if (length >= 0) {
      const at = this.offsets[k] as number;
      data = (this.slabs[(this.slabOf[k] as number) - this.firstSlab] as Uint8Array).subarray(at, at + length);
    }
    const config = this.configs.size === 0 ? undefined : this.configs.get(index);
    return config === undefined ? { index, term, time, data } : { index, term, time, data, config };
  }

  matches(index: number, term: number): boolean {
    return this.termAt(index) === term;
  }

  /** §5.4.1: a candidate's log is at least as up-to-date as ours. */
  isUpToDate(lastIndex: number, lastTerm: number): boolean {
    const myTerm = this.lastTerm();
    return lastTerm > myTerm || (lastTerm === myTerm && lastIndex >= this.lastIndex());
  }

  /** Leader append at the end (§5.3: a leader never overwrites or deletes its own entries). */
  appendOwn(entries: readonly LogEntry[]): void {
    for (const e of entries) this.push(e);
  }

  /** Follower append (§5.3): refuse unless (prevIndex, prevTerm) is in the log; skip entries already
   * held; on the first conflict delete that entry and all after it, then append the rest. */
  tryAppend(prevIndex: number, prevTerm: number, entries: readonly LogEntry[]): AppendOutcome {
    if (!this.matches(prevIndex, prevTerm)) return { ok: false, hint: this.rejectHint(prevIndex, prevTerm) };
    let truncatedFrom: number | null = null;
    const written: LogEntry[] = [];
    for (const e of entries) {
      const held = this.termAt(e.index);
      if (held === e.term) continue;
      if (held !== undefined) {
        assert(e.index > this.commitIndex, `conflict at committed index ${e.index}`);
        this.dropFrom(e.index);
        truncatedFrom = e.index;
      }
      this.push(e);
      written.push(e);
    }
    return { ok: true, lastNew: prevIndex + entries.length, truncatedFrom, written };
  }

  commitTo(index: number): boolean {
    if (index <= this.commitIndex) return false;
    assert(index <= this.lastIndex(), `commit ${index} past last index ${this.lastIndex()}`);
    this.commitIndex = index;
    return true;
  }

  /** §7: a snapshot now covers every entry up to `index`, which must be committed; they are dropped. */
  compact(index: number): void {
    assert(index > this.baseIndex && index <= this.commitIndex, `compact to ${index} outside (${this.baseIndex}, ${this.commitIndex}]`);
    this.dropUpTo(index);
  }

  /** §7 InstallSnapshot on a follower: the snapshot (base) replaces the log. If the log holds the
   * snapshot's last entry, the entries after it are kept; otherwise the whole log goes. Returns the
   * lowest index above the base that was deleted, or null. */
  install(base: LogBase): number | null {
    assert(base.index > this.commitIndex, `snapshot at ${base.index} not above commit ${this.commitIndex}`);
    let truncatedFrom: number | null = null;
    if (this.matches(base.index, base.term)) {
      this.dropUpTo(base.index);
    } else {
      if (this.lastIndex() > base.index) truncatedFrom = base.index + 1;
      this.dropFrom(this.baseIndex + 1);
      this.baseIndex = base.index;
      this.baseTerm = base.term;
    }
    this.baseTime = base.time;
    this.commitIndex = base.index;
    return truncatedFrom;
  }

  /** The highest index <= prevIndex - 1 whose term is <= prevTerm: every entry above it either is
   * missing or belongs to a term the leader's probe cannot match, so the leader may skip them. */
  private rejectHint(prevIndex: number, prevTerm: number): number {
    let hint = Math.min(prevIndex - 1, this.lastIndex());
    while (hint > this.commitIndex && (this.termAt(hint) ?? 0) > prevTerm) hint--;
    return hint;
  }

  private dropUpTo(index: number): void {
    const n = index - this.baseIndex;
    for (let k = 0; k < n && k < this.lengths.length; k++) this.heldBytes -= Math.max(0, this.lengths[k] as number);
    this.baseTerm = this.termAt(index) ?? this.baseTerm;
    this.baseTime = this.timeAt(index);
    this.terms.splice(0, n);
    this.times.splice(0, n);
    this.slabOf.splice(0, n);
    this.offsets.splice(0, n);
    this.lengths.splice(0, n);
    // The slabs before the first held entry's hold nothing the log still needs (views handed out
    // keep their own slab alive). With no entry left only the slab being filled stays.
    const keepFrom = this.slabOf.length > 0 ? (this.slabOf[0] as number) : this.firstSlab + this.slabs.length - 1;
    if (keepFrom > this.firstSlab) {
      this.slabs.splice(0, keepFrom - this.firstSlab);
      this.firstSlab = keepFrom;
    }
    for (const i of this.configs.keys()) if (i <= index) this.configs.delete(i);
    this.baseIndex = index;
  }

  /** Deletes `index` and every entry after it. */
  private dropFrom(index: number): void {
    const keep = index - this.baseIndex - 1;
    for (let k = keep; k < this.lengths.length; k++) this.heldBytes -= Math.max(0, this.lengths[k] as number);
    this.terms.length = keep;
    this.times.length = keep;
    this.slabOf.length = keep;
    this.offsets.length = keep;
    this.lengths.length = keep;
    // The room the deleted entries took is not written again: the next entry starts a new slab.
    this.slabUsed = Number.POSITIVE_INFINITY;
    for (const i of this.configs.keys()) if (i >= index) this.configs.delete(i);
  }

  /** Copies `data` into the slabs, records where in column k's place. */
  private store(data: Uint8Array | null): void {
    if (data === null) {
      this.slabOf.push(this.firstSlab + Math.max(0, this.slabs.length - 1)); // keeps the column ascending
      this.offsets.push(0);
      this.lengths.push(-1);
      return;
    }
    const n = data.length;
    let last = this.slabs.length - 1;
    if (last < 0 || this.slabUsed + n > (this.slabs[last] as Uint8Array).length) {
      this.slabs.push(this.newSlab(Math.max(SLAB_BYTES, n)));
      last++;
      this.slabUsed = 0;
    }
    const at = this.slabUsed;
    (this.slabs[last] as Uint8Array).set(data, at);
    this.slabUsed = at + n;
    this.slabOf.push(this.firstSlab + last);
    this.offsets.push(at);
    this.lengths.push(n);
  }

  private push(e: LogEntry): void {
    // Checked before the message is built: push runs once per entry per node.
    if (e.index !== this.lastIndex() + 1) assert(false, `entry ${e.index} appended after ${this.lastIndex()}`);
    if (e.term < this.lastTerm()) assert(false, `entry ${e.index} term ${e.term} below previous ${this.lastTerm()}`);
    if (e.time < this.lastTime()) assert(false, `entry ${e.index} time ${e.time} below previous ${this.lastTime()}`);
    this.terms.push(e.term);
    this.times.push(e.time);
    this.store(e.data);
    if (e.config !== undefined) this.configs.set(e.index, e.config);
    this.heldBytes += e.data?.length ?? 0;
  }
}
