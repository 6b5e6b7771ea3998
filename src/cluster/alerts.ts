// The log lines an operator alerts on: a cluster node's health, judged from what raft reports at
// each poll, logged once per change and never once per tick. Pure: an observation in, the lines
// to log out, so the rules are tested without a cluster.
//
//   warn  'lease lost'             the serving leader stopped serving without being asked to
//   warn  'quorum lost'            no leader with a lease for 3E (an election takes up to 2E)
//   info  'quorum restored'        a leader again, after 'quorum lost'
//   warn  'redundancy lost'        the leader: for 2E a node was not a caught-up voter with its link up
//   info  'redundancy restored'    the leader: every node is again
//   error 'force-start needed'     no configuration this node knows can elect a leader again
//   info  'force-start no longer needed'
//
// Every line has `node` (this node), `term` and, for a problem, `reason`.
import type { Role } from '../../raft/core/raft.js';

export interface HealthObservation {
  /** Monotonic ms. */
  now: number;
  role: Role;
  term: number;
  /** The leader this node knows; 0: none. */
  leader: number;
  /** This node leads and holds a lease. */
  lease: boolean;
  /** For a leader: null when every node is a caught-up voter with its link up, else what is not.
   * Undefined on a node that does not lead (it cannot judge). */
  redundancyGap?: string | null;
  needsForceStart: boolean;
}

export interface AlertLine {
  level: 'info' | 'warn' | 'error';
  msg: string;
  fields: Record<string, unknown>;
}

/** No leader for this many election timeouts before the quorum counts as lost. */
const QUORUM_GRACE_E = 3;
/** A leader reports lost redundancy once it lasted this many election timeouts. */
const REDUNDANCY_GRACE_E = 2;

export class HealthAlerts {
  private quorumLost = false;
  private leaderlessSince: number | null = null;
  /** As last reported; a node starts out taking the cluster as redundant. */
  private redundant = true;
  private gapSince: number | null = null;
  private forceStart = false;

  constructor(
    private readonly node: number,
    private readonly electionTimeoutMs: number,
  ) {}

  observe(o: HealthObservation): AlertLine[] {
    const out: AlertLine[] = [];
    this.quorum(o, out);
    this.redundancy(o, out);
    this.forceStartNeed(o, out);
    return out;
  }

  /** The serving period ended for a reason other than this node's stop. */
  leaseLost(term: number, period: number, reason: string): AlertLine {
    return { level: 'warn', msg: 'lease lost', fields: { node: this.node, term, period, reason } };
  }

  private quorum(o: HealthObservation, out: AlertLine[]): void {
    const ok = o.role === 'leader' ? o.lease : o.leader !== 0;
    if (ok) {
      this.leaderlessSince = null;
      if (this.quorumLost) {
        this.quorumLost = false;
        out.push({ level: 'info', msg: 'quorum restored', fields: { node: this.node, term: o.term, leader: o.leader } });
      }
      return;
    }
    this.leaderlessSince ??= o.now;
    if (this.quorumLost || o.now - this.leaderlessSince < QUORUM_GRACE_E * this.electionTimeoutMs) return;
    this.quorumLost = true;
    const reason = o.role === 'leader' ? 'leader without a lease' : `no leader for ${QUORUM_GRACE_E}E`;
    out.push({ level: 'warn', msg: 'quorum lost', fields: { node: this.node, term: o.term, reason } });
  }

  private redundancy(o: HealthObservation, out: AlertLine[]): void {
    if (o.role !== 'leader' || o.redundancyGap === undefined) {
      // Only a leader can judge. What this node reported stands until it leads again: a loss it
      // reported is then followed by its restoration.
      this.gapSince = null;
      return;
    }
    const gap = o.redundancyGap;
    if (gap === null) {
      this.gapSince = null;
      if (this.redundant === false) out.push({ level: 'info', msg: 'redundancy restored', fields: { node: this.node, term: o.term } });
      this.redundant = true;
      return;
    }
    // A follower a few entries behind under load, or a new leader's followers catching up, is not
    // news: the gap must last 2E.
    this.gapSince ??= o.now;
    if (this.redundant === false || o.now - this.gapSince < REDUNDANCY_GRACE_E * this.electionTimeoutMs) return;
    this.redundant = false;
    out.push({ level: 'warn', msg: 'redundancy lost', fields: { node: this.node, term: o.term, reason: gap } });
  }

  private forceStartNeed(o: HealthObservation, out: AlertLine[]): void {
    if (o.needsForceStart === this.forceStart) return;
    this.forceStart = o.needsForceStart;
    if (o.needsForceStart)
      out.push({
        level: 'error',
        msg: 'force-start needed',
        fields: {
          node: this.node,
          term: o.term,
          reason:
            'too many voters lost their state for any configuration to elect a leader; see the force-start procedure in docs/operations.md',
        },
      });
    else out.push({ level: 'info', msg: 'force-start no longer needed', fields: { node: this.node, term: o.term } });
  }
}
