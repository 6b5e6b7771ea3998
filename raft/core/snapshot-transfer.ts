// Snapshot transfer (§7 InstallSnapshot): the leader streams its newest snapshot to a follower
// that needs entries the log no longer holds, a window of chunks at a time; the follower
// assembles it in order and hands the whole snapshot to the core, which installs it. The snapshot
// itself, its chunking and its assembly are in snapshot.ts; the core keeps compaction.

import { assert } from './assert.js';
import type { InstallSnapshot, Outgoing } from './messages.js';
import type { Progress } from './progress.js';
import type { Snapshot } from './snapshot.js';
import { SnapshotAssembly } from './snapshot.js';

/** What a transfer needs of the core. */
export interface SnapshotTransferHost {
  readonly id: number;
  readonly term: number;
  /** Monotonic ms of the latest tick. */
  readonly now: number;
  readonly commit: number;
  /** Queues a message with the core's identity (docs/design.md "Identity"). */
  send(m: Outgoing, toInc: string): void;
  /** A message of the current leader arrived. */
  heardFromLeader(from: number): void;
  /** The whole snapshot arrived: it replaces the log and becomes the application's state. */
  install(s: Snapshot): void;
}

export class SnapshotTransfer {
  /** A snapshot being received from the leader, chunk by chunk. */
  private incoming: SnapshotAssembly | null = null;
  private readonly host: SnapshotTransferHost;
  private readonly chunksInflightMax: number;
  /** The simulator's broken rule that installs chunks in any order. */
  private readonly anyOrder: boolean;

  constructor(host: SnapshotTransferHost, chunksInflightMax: number, anyOrder: boolean) {
    this.host = host;
    this.chunksInflightMax = chunksInflightMax;
    this.anyOrder = anyOrder;
  }

  // ---- leader ----

  /** Sends chunks while the follower's window of snapshotChunksInflightMax has room: one per answer
   * once the window is full, so a transfer is sliced across event-loop turns. */
  sendChunks(pr: Progress): void {
    while (pr.snapshotChunkDue(this.chunksInflightMax)) this.sendChunk(pr);
  }

  private sendChunk(pr: Progress): void {
    const s = pr.snapshot;
    assert(s !== null, `progress of ${pr.node} in snapshot state without a snapshot`);
    const seq = pr.snapshotNext;
    const data = s.chunks[seq];
    assert(data !== undefined, `snapshot chunk ${seq} of ${s.chunks.length}`);
    const h = this.host;
    const m: Outgoing = {
      type: 'snapshot',
      from: h.id,
      to: pr.node,
      term: h.term,
      index: s.index,
      lastTerm: s.term,
      time: s.time,
      config: s.config,
      seq,
      chunks: s.chunks.length,
      data,
      sentAt: h.now,
    };
    h.send(m, pr.inc);
    pr.snapshotNext++;
  }

  // ---- follower ----

  /** §7 InstallSnapshot, one chunk at a time and in order. A snapshot at or below the commit index
   * is already held (Log Matching), so it is acknowledged at once. */
  receive(m: InstallSnapshot): void {
    const h = this.host;
    h.heardFromLeader(m.from);
    if (m.index <= h.commit) {
      this.incoming = null;
      this.reply(m, m.chunks, h.commit);
      return;
    }
    if (m.seq === 0 && (this.incoming === null || !this.incoming.isFor(m))) this.incoming = new SnapshotAssembly(m);
    const a = this.incoming;
    if (a === null || !a.isFor(m)) {
      // A chunk of a snapshot we are not assembling (we restarted, or the leader began another).
      this.reply(m, 0, 0);
      return;
    }
    a.add(m, this.anyOrder);
    if (!a.complete) {
      this.reply(m, a.received, 0);
      return;
    }
    this.incoming = null;
    h.install(a.finish());
    this.reply(m, m.chunks, h.commit);
  }

  private reply(m: InstallSnapshot, received: number, match: number): void {
    const h = this.host;
    const r: Outgoing = {
      type: 'snapshot-response',
      from: h.id,
      to: m.from,
      term: h.term,
      index: m.index,
      received,
      match,
      sentAt: m.sentAt,
    };
    h.send(r, m.fromInc);
  }
}
