// The serving rule (docs/design.md "One server at a time"), one copy for RaftLog and the broker
// simulator, so the simulator checks the rule the broker ships. Pure: the driver's facts and the
// node's own bookkeeping are parameters; no timers, clocks or I/O.
//
// A node serves in a period (the index of its own committed serve-start) while it is leader of
// the term the period began in, an entry of that term is the last it applied, it holds a lease,
// its state machine is sound and it has not stopped. The first of these to fail ends the period
// for good: a later one needs a serve-start of its own.

import type { Role } from '../../raft/core/raft.js';

/** What the rule is judged on, at one moment. */
export interface ServingFacts {
  /** The node stopped taking part (stop(), or raft failed). */
  readonly stopped: boolean;
  readonly role: Role;
  /** The driver's current term. */
  readonly term: number;
  /** The term the period began in (or, before it begins, the term of its serve-start). */
  readonly servingTerm: number;
  /** The term of the last entry the node applied. */
  readonly lastAppliedTerm: number;
  /** The leader holds a lease: a quorum heard from it within the lease time. */
  readonly hasLease: boolean;
  /** The state machine failed (an invariant broke while applying). */
  readonly failed: boolean;
}

/** Why the rule does not hold; the reasons RaftLog logs when a period ends. */
export type ServingEnd = 'stopped' | 'not leader' | 'higher term' | 'state machine failed' | 'lease lapsed' | 'older term applied';

/** The first condition of the rule that fails, or null when it holds. The order is the one the
 * node reports: losing leadership or the term explains a lapsed lease, not the other way round. */
export function servingEnd(f: ServingFacts): ServingEnd | null {
  if (f.stopped) return 'stopped';
  if (f.role !== 'leader') return 'not leader';
  if (f.term !== f.servingTerm) return 'higher term';
  if (f.failed) return 'state machine failed';
  if (!f.hasLease) return 'lease lapsed';
  if (f.lastAppliedTerm !== f.servingTerm) return 'older term applied';
  return null;
}

/** The rule holds: a node in a period may accept and write. */
export function servingHolds(f: ServingFacts): boolean {
  return servingEnd(f) === null;
}

/** A period may begin: its serve-start committed in the current term (`servingTerm` is that
 * term), the broker above has every delivered entry (`brokerReady`), and the rule holds. */
export function servingBegins(f: ServingFacts, brokerReady: boolean): boolean {
  return brokerReady && servingHolds(f);
}
