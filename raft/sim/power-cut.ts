// The power-cut test double of raft storage (docs/raft.md "Persistence"): a RaftStorage that
// appends one record per write (storage-records.ts) to a simulated file. Writes are buffered until
// sync(); at a power cut only synced bytes survive, and the write the disk was doing when the power
// went (the oldest unsynced one) may leave a prefix of itself, its length drawn from the
// simulator's PRNG. The next load() cuts that torn tail, as recovery from a real file would.
import type { LogEntry } from '../core/messages.js';
import type { RandomSource } from '../core/prng.js';
import type { DurableState, HardState } from '../core/raft.js';
import type { Snapshot } from '../core/snapshot.js';
import { type Durable, type RaftStorage, StoredLog } from '../core/storage.js';
import { decodeRecords, encodeRecord, type StorageRecord } from '../core/storage-records.js';

function concat(parts: readonly Uint8Array[]): Uint8Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** An append-only file whose writes reach the disk only at a sync. */
export class PowerCutFile {
  private synced: Uint8Array = new Uint8Array(0);
  private pending: Uint8Array[] = [];

  write(bytes: Uint8Array): void {
    this.pending.push(bytes);
  }

  /** fdatasync: every write so far is on disk. */
  sync(): void {
    if (this.pending.length === 0) return;
    this.synced = concat([this.synced, ...this.pending]);
    this.pending = [];
  }

  /** The power goes: unsynced writes are lost, but a prefix of the oldest (0 to all but one of its
   * bytes) reaches the disk. Returns how many torn bytes survived. */
  powerCut(random: RandomSource): number {
    const first = this.pending[0];
    this.pending = [];
    if (first === undefined || first.length === 0) return 0;
    const torn = random.int(first.length);
    if (torn > 0) this.synced = concat([this.synced, first.subarray(0, torn)]);
    return torn;
  }

  /** The bytes on disk. */
  get durable(): Uint8Array {
    return this.synced;
  }

  get unsyncedWrites(): number {
    return this.pending.length;
  }

  /** Recovery cuts the file to `length` and syncs that at once. */
  truncate(length: number): void {
    this.pending = [];
    this.synced = this.synced.slice(0, length);
  }
}

export interface Recovery {
  /** Torn bytes cut from the end of the file; 0: none. */
  readonly cutBytes: number;
  /** Why the tail was cut (the first bad record), or null. */
  readonly reason: string | null;
}

export class PowerCutStorage implements RaftStorage {
  readonly file = new PowerCutFile();
  /** What this process wrote, synced or not. */
  private written = new StoredLog();
  /** The last recovery: what load() cut after a power cut. */
  lastRecovery: Recovery = { cutBytes: 0, reason: null };

  load(): DurableState | null {
    return this.written.state();
  }

  /** Index of the newest snapshot written (0: none). */
  get snapshotIndex(): number {
    return this.written.snapshotIndex;
  }

  append(entries: readonly LogEntry[], truncatedFrom: number | null): void {
    this.written.append(entries, truncatedFrom);
    this.record({ kind: 'append', entries, truncatedFrom });
  }

  setHardState(h: HardState): void {
    this.written.setHardState(h);
    this.record({ kind: 'hard-state', hard: h });
  }

  saveSnapshot(s: Snapshot): void {
    this.written.saveSnapshot(s);
    this.record({ kind: 'snapshot', snapshot: s });
  }

  sync(): Durable {
    this.file.sync();
    return this.written.durable();
  }

  /** What sync() would report, without syncing: what a storage that skips its fsync claims. */
  writtenState(): Durable {
    return this.written.durable();
  }

  /** The power goes; the storage then reads back what survived, as a restarted process does, cutting
   * a torn tail. Returns the torn bytes that reached the disk before the cut. */
  powerCut(random: RandomSource): number {
    const torn = this.file.powerCut(random);
    this.recover();
    return torn;
  }

  /** Replays the valid records on disk; whatever follows the last one is cut. */
  private recover(): void {
    const bytes = this.file.durable;
    const decoded = decodeRecords(bytes);
    const log = new StoredLog();
    for (const r of decoded.records) {
      if (r.kind === 'append') log.append(r.entries, r.truncatedFrom);
      else if (r.kind === 'hard-state') log.setHardState(r.hard);
      else log.saveSnapshot(r.snapshot);
    }
    const cutBytes = bytes.length - decoded.validBytes;
    if (cutBytes > 0) this.file.truncate(decoded.validBytes);
    this.lastRecovery = { cutBytes, reason: decoded.stop };
    this.written = log;
  }

  private record(r: StorageRecord): void {
    this.file.write(encodeRecord(r));
  }
}
