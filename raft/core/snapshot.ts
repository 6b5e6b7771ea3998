/** Snapshots and log compaction (§7). The application's state at an applied index is an opaque
 * sequence of chunks; raft keeps the newest snapshot beside the compacted log, sends it in chunks
 * to a follower whose next entry was compacted away, and hands an installed one to the application
 * through Ready.snapshot. Raft never looks inside a chunk. */
import { assert } from './assert.js';
import type { LogBase } from './log.js';
import type { Configuration } from './membership.js';
import type { InstallSnapshot } from './messages.js';

/** A snapshot's place in the log: its last entry, and the configuration in force there. */
export interface SnapshotMeta extends LogBase {
  /** The newest configuration at or below `index`; null: none (a static configuration applies). */
  readonly config: Configuration | null;
}

export interface Snapshot extends SnapshotMeta {
  /** The application's state after applying `index`, each chunk at most the chunk bound. Never
   * empty: an empty state is one empty chunk, so a transfer always has a message to send. */
  readonly chunks: readonly Uint8Array[];
  /** Sum of the chunks' lengths. */
  readonly bytes: number;
}

/** Default bound on one chunk of an InstallSnapshot: small enough that encoding, sending and
 * decoding one takes a few ms, far below E/10, on the machines we measured. */
export const snapshotChunkBytesMaxDefault = 256 * 1024;
/** A snapshot of more chunks than this is refused from a peer (256 KiB chunks: 1 TiB). */
export const snapshotChunksMax = 4 * 1024 * 1024;
/** Default bounds on the log: once the applied entries held pass either, the core asks for a
 * snapshot (RaftCore.snapshotWanted). */
export const logEntriesMaxDefault = 10_000;
export const logBytesMaxDefault = 64 * 1024 * 1024;

/** Cuts the application's chunks into pieces of at most `chunkBytesMax` bytes, without copying. */
export function rechunk(chunks: Iterable<Uint8Array>, chunkBytesMax: number): { chunks: Uint8Array[]; bytes: number } {
  assert(chunkBytesMax >= 1, `chunk bound ${chunkBytesMax}`);
  const out: Uint8Array[] = [];
  let bytes = 0;
  for (const c of chunks) {
    bytes += c.length;
    for (let at = 0; at < c.length; at += chunkBytesMax) out.push(c.subarray(at, Math.min(c.length, at + chunkBytesMax)));
  }
  if (out.length === 0) out.push(new Uint8Array(0));
  return { chunks: out, bytes };
}

/** A follower's snapshot being received, chunk by chunk and in order. Only one is held at a time;
 * a crash loses it (it lives in RAM only), and the leader then starts over from chunk 0. */
export class SnapshotAssembly {
  readonly meta: SnapshotMeta;
  readonly chunkCount: number;
  private readonly parts: Uint8Array[] = [];
  private bytes = 0;

  constructor(first: InstallSnapshot) {
    this.meta = { index: first.index, term: first.lastTerm, time: first.time, config: first.config };
    this.chunkCount = first.chunks;
  }

  /** The chunk belongs to the snapshot being assembled. */
  isFor(m: InstallSnapshot): boolean {
    return m.index === this.meta.index && m.lastTerm === this.meta.term && m.chunks === this.chunkCount;
  }

  get received(): number {
    return this.parts.length;
  }

  /** Takes the next chunk in order; any other (a duplicate, or one after a lost chunk) is ignored,
   * and the answer's `received` tells the leader where to resume. `anyOrder` breaks the rule on
   * purpose (UnsafeRule 'install-any-chunk'), so tests can prove the simulator catches it. */
  add(m: InstallSnapshot, anyOrder = false): void {
    if (!this.isFor(m) || this.parts.length >= this.chunkCount) return;
    if (m.seq !== this.parts.length && !anyOrder) return;
    this.parts.push(m.data);
    this.bytes += m.data.length;
  }

  get complete(): boolean {
    return this.parts.length === this.chunkCount;
  }

  finish(): Snapshot {
    assert(this.complete, `snapshot at ${this.meta.index} has ${this.parts.length} of ${this.chunkCount} chunks`);
    return { ...this.meta, chunks: this.parts, bytes: this.bytes };
  }
}
