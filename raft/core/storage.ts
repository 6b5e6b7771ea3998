// Where a node's raft state lives: the log, the term and vote, the newest snapshot (docs/raft.md
// "Persistence"). Writes are buffered until sync(), which says what is durable; the node feeds that
// back to a core made with `awaitStorage` (RaftCore.persisted, persistedHardState). MemoryStorage
// keeps everything in RAM, so everything written is durable at once; the simulator's power-cut
// double (raft/sim/power-cut.ts) keeps only what was synced.
import { assert } from './assert.js';
import type { LogEntry } from './messages.js';
import type { DurableState, HardState } from './raft.js';
import type { Snapshot } from './snapshot.js';

/** What a sync made durable: the log through `index` (whose entry, or snapshot, has `term`) and
 * the term and vote. */
export interface Durable {
  readonly index: number;
  readonly term: number;
  readonly hard: HardState;
}

export interface RaftStorage {
  /** What the storage holds; after a restart, what survived. Null: it never held anything. */
  load(): DurableState | null;
  /** Deletes the log from `truncatedFrom` (§5.3) when not null, then appends `entries` after the
   * last entry held (Ready.appended). */
  append(entries: readonly LogEntry[], truncatedFrom: number | null): void;
  /** Term and vote (Ready.hardState). */
  setHardState(h: HardState): void;
  /** The newest snapshot, installed from a leader or taken by compaction (§7): the entries after
   * it are kept if the log holds its last entry (index and term), else the whole log goes. */
  saveSnapshot(s: Snapshot): void;
  /** Makes every earlier write durable; returns what is durable now. */
  sync(): Durable;
}

const noHard: HardState = { term: 0, vote: 0, voteInc: '' };

/** The state a sequence of storage writes describes, replayed in order. MemoryStorage is one; the
 * power-cut double replays the records that survived into one. */
export class StoredLog {
  private entries: LogEntry[] = [];
  private snapshot: Snapshot | null = null;
  private hard: HardState = noHard;
  /** Nothing was ever written. */
  private empty = true;

  get snapshotIndex(): number {
    return this.snapshot?.index ?? 0;
  }

  lastIndex(): number {
    return this.snapshotIndex + this.entries.length;
  }

  /** Term of the entry at `index`, the snapshot's at its index; undefined elsewhere. */
  termAt(index: number): number | undefined {
    const base = this.snapshotIndex;
    if (index === base) return this.snapshot?.term ?? 0;
    if (index < base) return undefined;
    return this.entries[index - base - 1]?.term;
  }

  append(entries: readonly LogEntry[], truncatedFrom: number | null): void {
    this.empty = false;
    const base = this.snapshotIndex;
    if (truncatedFrom !== null && truncatedFrom <= this.lastIndex()) {
      this.entries.length = Math.max(0, truncatedFrom - base - 1);
    }
    for (const e of entries) {
      if (e.index <= base) continue;
      assert(e.index === this.lastIndex() + 1, `stored entry ${e.index} after ${this.lastIndex()}`);
      this.entries.push(e);
    }
  }

  setHardState(h: HardState): void {
    this.empty = false;
    this.hard = { term: h.term, vote: h.vote, voteInc: h.voteInc };
  }

  saveSnapshot(s: Snapshot): void {
    this.empty = false;
    const keep = this.termAt(s.index) === s.term;
    const after = keep ? this.entries.slice(s.index - this.snapshotIndex) : [];
    this.entries = after;
    this.snapshot = s;
  }

  /** What a sync of everything written would make durable. */
  durable(): Durable {
    const index = this.lastIndex();
    return { index, term: this.termAt(index) ?? 0, hard: this.hard };
  }

  state(): DurableState | null {
    if (this.empty) return null;
    const s = this.snapshot;
    return { ...this.hard, entries: [...this.entries], baseConfig: s?.config ?? null, snapshot: s };
  }
}

/** Everything in RAM: a write is durable the moment it is made, so sync() reports all of it. A
 * core over it needs no `awaitStorage`; with it, reporting sync() after each Ready gives the same
 * messages one Ready later. */
export class MemoryStorage implements RaftStorage {
  private readonly log = new StoredLog();

  load(): DurableState | null {
    return this.log.state();
  }

  append(entries: readonly LogEntry[], truncatedFrom: number | null): void {
    this.log.append(entries, truncatedFrom);
  }

  setHardState(h: HardState): void {
    this.log.setHardState(h);
  }

  saveSnapshot(s: Snapshot): void {
    this.log.saveSnapshot(s);
  }

  sync(): Durable {
    return this.log.durable();
  }
}
