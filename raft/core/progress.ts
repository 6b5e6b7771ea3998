import { assert } from './assert.js';
import type { Snapshot } from './snapshot.js';

/** How the leader replicates to one follower (etcd-io/raft's Progress). In `probe` it sends one
 * append at a time and waits for the answer, backing `next` off until the logs match (§5.3). In
 * `replicate` it streams appends optimistically, at most `inflightAppendsMax` unacknowledged. In
 * `snapshot` the entries it needs are compacted away (§7): it sends the snapshot one chunk at a time,
 * the next only when the previous is acknowledged, then probes from the snapshot's index. */
export type ProgressState = 'probe' | 'replicate' | 'snapshot';

export class Progress {
  /** The member replicated to (docs/design.md "Identity"). */
  readonly node: number;
  readonly inc: string;
  /** Listed as a voter by the leader's newest configuration; otherwise a learner, whose acks count
   * for nothing (no commit, lease, check-quorum or clock sample). */
  voter: boolean;
  /** Highest index known to be replicated on the follower (§5.3 matchIndex). */
  match = 0;
  /** Index of the next entry to send (§5.3 nextIndex). Invariant: match < next. */
  next: number;
  state: ProgressState = 'probe';
  /** Probe: an append is out and unanswered; no other until a response or a heartbeat response. */
  probeSent = false;
  /** Snapshot: the snapshot being sent (kept even if the leader compacts again meanwhile), the
   * next chunk to send, and the chunks the follower reported holding. Invariant: acked <= next. */
  snapshot: Snapshot | null = null;
  snapshotNext = 0;
  snapshotAcked = 0;
  /** snapshotAcked at the previous heartbeat answer (-1: none yet): unchanged since, with chunks
   * out, means a chunk or its answer was lost. */
  private snapshotAckedAtBeat = -1;
  /** Replicate: last index of each unacknowledged append, ascending. */
  private readonly inflight: number[] = [];
  /** The highest commit index sent to this follower in an append or heartbeat. */
  commitSent = 0;
  /** Monotonic ms of the latest message from this follower in the current term (check-quorum). */
  lastHeardAt: number;
  /** Leader monotonic send time of the newest round this follower answered in this term; the lease
   * runs from the newest round a majority answered (docs/design.md "Leases and votes"). */
  ackedSentAt = Number.NEGATIVE_INFINITY;

  constructor(node: number, inc: string, voter: boolean, next: number, now: number) {
    this.node = node;
    this.inc = inc;
    this.voter = voter;
    this.next = next;
    this.lastHeardAt = now;
  }

  get inflightCount(): number {
    return this.inflight.length;
  }

  /** No append may go out now; in snapshot state none ever does. */
  isPaused(inflightAppendsMax: number): boolean {
    if (this.state === 'snapshot') return true;
    return this.state === 'probe' ? this.probeSent : this.inflight.length >= inflightAppendsMax;
  }

  /** An append whose last entry is `last` went out. */
  sent(last: number): void {
    if (this.state === 'probe') {
      this.probeSent = true;
      return;
    }
    this.inflight.push(last);
    this.next = Math.max(this.next, last + 1);
  }

  /** The follower holds everything up to `index`. False if the ack tells nothing new. */
  acked(index: number): boolean {
    while (this.inflight.length > 0 && (this.inflight[0] ?? 0) <= index) this.inflight.shift();
    if (index <= this.match) return false;
    this.match = index;
    this.next = Math.max(this.next, index + 1);
    if (this.state === 'probe') this.becomeReplicate();
    else if (this.state === 'snapshot' && index >= (this.snapshot?.index ?? 0)) this.becomeProbe();
    this.checkInvariant();
    return true;
  }

  /** The follower refused an append at `rejected` (its prevIndex); its log may match up to `hint`.
   * False for a stale refusal, which must not move `next` backwards twice. */
  rejected(rejected: number, hint: number): boolean {
    if (this.state === 'snapshot') return false;
    if (this.state === 'replicate') {
      if (rejected <= this.match) return false;
      this.becomeProbe();
      return true;
    }
    if (rejected !== this.next - 1) return false;
    this.next = Math.max(Math.min(rejected, hint + 1), this.match + 1);
    this.probeSent = false;
    this.checkInvariant();
    return true;
  }

  /** A heartbeat answer proves the link works: unpause a probe, and in replicate free one slot so
   * that lost appends cannot wedge a full window (the next append exposes any gap). */
  heartbeatAnswered(inflightAppendsMax: number): void {
    if (this.state === 'probe') this.probeSent = false;
    else if (this.state === 'snapshot') this.snapshotHeartbeat();
    else if (this.inflight.length >= inflightAppendsMax) this.inflight.shift();
  }

  becomeProbe(): void {
    this.state = 'probe';
    this.next = this.match + 1;
    this.probeSent = false;
    this.inflight.length = 0;
    this.snapshot = null;
  }

  /** The follower needs entries at or below the snapshot's index, which the leader no longer holds. */
  becomeSnapshot(snapshot: Snapshot): void {
    this.state = 'snapshot';
    this.snapshot = snapshot;
    this.snapshotNext = 0;
    this.snapshotAcked = 0;
    this.snapshotAckedAtBeat = -1;
    this.inflight.length = 0;
  }

  /** Like a lost append, a lost chunk is repaired within a heartbeat round: no progress since the
   * previous answer means resending from what the follower holds. */
  private snapshotHeartbeat(): void {
    if (this.snapshotAcked === this.snapshotAckedAtBeat) this.snapshotNext = this.snapshotAcked;
    this.snapshotAckedAtBeat = this.snapshotAcked;
  }

  /** Another chunk may go out: some are left and fewer than `chunksInflightMax` are unanswered. */
  snapshotChunkDue(chunksInflightMax: number): boolean {
    const s = this.snapshot;
    return (
      this.state === 'snapshot' &&
      s !== null &&
      this.snapshotNext < s.chunks.length &&
      this.snapshotNext - this.snapshotAcked < chunksInflightMax
    );
  }

  /** The follower holds `received` chunks of the snapshot at `index`, and, once it has installed it
   * (received = all), everything up to `match`. False for an answer about another snapshot. */
  snapshotAnswered(index: number, received: number, match: number): boolean {
    const s = this.snapshot;
    if (this.state !== 'snapshot' || s === null || index !== s.index) return false;
    if (received < s.chunks.length) {
      // Fewer than before: the follower restarted (or this answer was overtaken); go on from what
      // it holds. A gap (a chunk lost) shows as no progress and is repaired at the next heartbeat.
      if (received < this.snapshotAcked) this.snapshotNext = received;
      this.snapshotAcked = received;
      this.snapshotNext = Math.max(this.snapshotNext, received);
      return true;
    }
    this.match = Math.max(this.match, match);
    this.becomeProbe();
    this.checkInvariant();
    return true;
  }

  private becomeReplicate(): void {
    this.state = 'replicate';
    this.next = this.match + 1;
    this.inflight.length = 0;
    this.snapshot = null;
  }

  private checkInvariant(): void {
    assert(this.match < this.next, `progress match ${this.match} not below next ${this.next}`);
  }
}
