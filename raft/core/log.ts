import { assert } from './assert.js';
import type { LogEntry } from './messages.js';

export type AppendOutcome =
  | {
      readonly ok: true;
      readonly lastNew: number;
      readonly truncatedFrom: number | null;
      /** Entries actually written (not already held). */
      readonly written: LogEntry[];
    }
  | { readonly ok: false; readonly hint: number };

/** The log, in memory by design (DESIGN.md "Raft"). Index 0 is the empty prefix with term 0.
 * Invariants: indexes are contiguous from 1; terms and times never decrease along the log; commit <= last,
 * and the committed prefix never changes. */
export class MemoryLog {
  private readonly entries: LogEntry[] = [];
  private commitIndex = 0;

  constructor(restored: readonly LogEntry[] = []) {
    for (const e of restored) this.push(e);
  }

  get commit(): number {
    return this.commitIndex;
  }

  lastIndex(): number {
    return this.entries.length;
  }

  lastTerm(): number {
    return this.termAt(this.entries.length) ?? 0;
  }

  /** Term at `index`; 0 for index 0; undefined past the end. */
  termAt(index: number): number | undefined {
    if (index === 0) return 0;
    return this.entries[index - 1]?.term;
  }

  /** Cluster time of the entry at `index`; 0 for index 0 and past the end. */
  timeAt(index: number): number {
    return this.entries[index - 1]?.time ?? 0;
  }

  lastTime(): number {
    return this.timeAt(this.entries.length);
  }

  entry(index: number): LogEntry {
    const e = this.entries[index - 1];
    assert(e !== undefined, `log has no entry ${index} (last ${this.lastIndex()})`);
    return e;
  }

  /** Entries lo .. hi-1. */
  slice(lo: number, hi: number): LogEntry[] {
    assert(lo >= 1 && hi <= this.lastIndex() + 1, `slice [${lo}, ${hi}) outside the log`);
    return this.entries.slice(lo - 1, hi - 1);
  }

  all(): readonly LogEntry[] {
    return this.entries;
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
        this.entries.length = e.index - 1;
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

  /** The highest index <= prevIndex - 1 whose term is <= prevTerm: every entry above it either is
   * missing or belongs to a term the leader's probe cannot match, so the leader may skip them. */
  private rejectHint(prevIndex: number, prevTerm: number): number {
    let hint = Math.min(prevIndex - 1, this.lastIndex());
    while (hint > this.commitIndex && (this.termAt(hint) ?? 0) > prevTerm) hint--;
    return hint;
  }

  private push(e: LogEntry): void {
    // Checked before the message is built: push runs once per entry per node.
    if (e.index !== this.entries.length + 1) assert(false, `entry ${e.index} appended after ${this.entries.length}`);
    if (e.term < this.lastTerm()) assert(false, `entry ${e.index} term ${e.term} below previous ${this.lastTerm()}`);
    if (e.time < this.lastTime()) assert(false, `entry ${e.index} time ${e.time} below previous ${this.lastTime()}`);
    this.entries.push(e);
  }
}
