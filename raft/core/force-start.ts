// Force-start (docs/design.md "Force-start"): a member makes the next epoch from its own file when
// no configuration it knows can elect a leader again. It first listens for a peer that shows a
// leader, a newer log or a newer epoch (any refuses it), then makes the epoch with itself the only
// voter, and serves only once a second node id is a voter; it gives up after a timeout. The core
// owns one ForceStart and asks it at each tick and for each message of the old epoch.

import { unreachable } from './assert.js';
import type { Epoch } from './membership.js';
import type { Message } from './messages.js';
import type { Role } from './raft.js';

/** A force-start first listens this many E for a peer showing a leader or a newer log in the old
 * epoch (announcements go out every E/5, and a leader answers one within a round trip), and for
 * any old lease to run out (docs/design.md "Force-start"). */
export const forceStartProbeE = 3;

/** Default of `forceStartTimeoutMs`, in E. */
export const forceStartTimeoutE = 60;

/** Where a force-start stands (docs/design.md "Force-start"). */
export type ForceStartPhase =
  /** Listening to peers before making the new epoch. */
  | 'probing'
  /** The new epoch exists with this node its only voter; it does not serve. */
  | 'waiting'
  /** Two node ids are voters in the new epoch's committed configuration. */
  | 'serving'
  /** Refused or timed out: the node must exit (`forceStartFailure()` says why). */
  | 'failed';

/** What a force-start reads and does of the core. */
export interface ForceStartHost {
  readonly clusterId: string;
  /** Monotonic ms of the latest tick. */
  readonly now: number;
  readonly role: Role;
  readonly epoch: Epoch;
  readonly lastIndex: number;
  readonly lastTerm: number;
  /** Node ids that are voters in the newest committed configuration. */
  committedVoterIds(): number;
  /** Tells the peers who this node is, when due. */
  announce(): void;
  /** Becomes a follower of the current term, unless it is one. */
  stepDown(): void;
  /** Makes epoch `generation` from the whole log, with this member its only voter, and leads it. */
  makeEpoch(generation: number): void;
}

export class ForceStart {
  /** Null: this process did not force-start (nor resumed a forced epoch that did not serve yet). */
  private phaseNow: ForceStartPhase | null = null;
  /** Probing: monotonic ms of the force; waiting: monotonic ms of the give-up. */
  private deadline = 0;
  private failed: string | null = null;
  private readonly host: ForceStartHost;
  private readonly timeoutMs: number;
  /** The new epoch's generation is above this and above the file's. */
  private readonly above: number;

  constructor(host: ForceStartHost, timeoutMs: number, above: number) {
    this.host = host;
    this.timeoutMs = timeoutMs;
    this.above = above;
  }

  get phase(): ForceStartPhase | null {
    return this.phaseNow;
  }

  /** Why the force-start failed (refused by a peer, or timed out); null otherwise. */
  get failure(): string | null {
    return this.failed;
  }

  /** Asked to force-start: listen for `probeMs` first. */
  probe(now: number, probeMs: number): void {
    this.phaseNow = 'probing';
    this.deadline = now + probeMs;
  }

  /** A forced epoch that did not serve yet when this member stopped: it still must not serve
   * alone, and still gives up in time. */
  resumeWaiting(now: number): void {
    this.phaseNow = 'waiting';
    this.deadline = now + this.timeoutMs;
  }

  /** True when the tick is used up by the force-start: probing, failed, or just timed out. */
  tick(): boolean {
    const h = this.host;
    switch (this.phaseNow) {
      case 'probing':
        if (h.now < this.deadline) {
          h.announce();
          return true;
        }
        this.force();
        return false;
      case 'waiting':
        // Only as leader: a member that resumed its file has committed nothing of its epoch yet,
        // and the configuration before its log (a snapshot's) is the old epoch's.
        if (h.role === 'leader' && h.committedVoterIds() >= 2) {
          this.phaseNow = 'serving';
          return false;
        }
        if (h.now < this.deadline) return false;
        this.fail(`epoch ${h.epoch.generation} found no second voter within ${this.timeoutMs} ms`);
        return true;
      case 'serving':
      case null:
        return false;
      case 'failed':
        return true;
      default:
        return unreachable(this.phaseNow, 'force-start phase');
    }
  }

  /** While probing or failed, a message of the epoch the file is of is taken here, not by raft. */
  takes(m: Message): boolean {
    return (this.phaseNow === 'probing' || this.phaseNow === 'failed') && this.ofOldEpoch(m);
  }

  /** While probing, a peer that shows a leader, a newer log, or a newer epoch refuses the
   * force-start; nothing else is answered (this member is not part of the old epoch). */
  hear(m: Message): void {
    if (this.phaseNow !== 'probing') return;
    switch (m.type) {
      case 'append':
      case 'heartbeat':
      case 'snapshot':
        this.fail(`node ${m.from} leads epoch ${m.epoch} in term ${m.term}`);
        return;
      case 'announce':
        if (m.leader !== 0) this.fail(`node ${m.from} follows leader ${m.leader} in epoch ${m.epoch}`);
        else this.refuseNewerLog(m.from, m.lastIndex, m.lastTerm);
        return;
      case 'pre-vote-request':
      case 'vote-request':
        this.refuseNewerLog(m.from, m.lastIndex, m.lastTerm);
        return;
      default:
        return;
    }
  }

  /** Refused or timed out: the node must exit. */
  fail(reason: string): void {
    this.phaseNow = 'failed';
    this.failed = reason;
    this.host.stepDown();
  }

  private refuseNewerLog(from: number, lastIndex: number, lastTerm: number): void {
    const h = this.host;
    const mine = h.lastTerm;
    if (lastTerm > mine || (lastTerm === mine && lastIndex > h.lastIndex)) {
      this.fail(`node ${from} holds a newer log (${lastIndex}/${lastTerm} against ${h.lastIndex}/${mine})`);
    }
  }

  /** A message of this cluster and of the epoch the file is of, for this member or for the one
   * the file was (a peer campaigning still addresses it): while probing, what it shows counts. */
  private ofOldEpoch(m: Message): boolean {
    const h = this.host;
    return m.cluster === h.clusterId && m.epoch === h.epoch.generation && m.epochId === h.epoch.id;
  }

  /** The next epoch, in a term above any in the file; it serves only once a second node id is a
   * voter. */
  private force(): void {
    const generation = Math.max(this.host.epoch.generation, this.above) + 1;
    this.phaseNow = 'waiting';
    this.deadline = this.host.now + this.timeoutMs;
    this.host.makeEpoch(generation);
  }
}
