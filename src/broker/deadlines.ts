// Will and session-expiry deadlines, popped in (time, client id, kind) order so that every replica
// fires them in the same order (docs/design.md "Deadlines live in the state"). A binary min-heap with
// lazy deletion: a cancelled deadline stays in the heap and the owner checks, when it pops, that
// the state still holds that deadline. The heap is derived state, rebuilt on restore.
import { MinHeap } from './min-heap.js';

/** A will fires before the session expiry of the same client at the same time, so that a will is
 * published before its session ends. */
export type DeadlineKind = 0 | 1;
export const WILL_DEADLINE: DeadlineKind = 0;
export const SESSION_DEADLINE: DeadlineKind = 1;

export interface Deadline {
  /** Cluster ms. */
  at: number;
  clientId: string;
  kind: DeadlineKind;
}

function less(a: Deadline, b: Deadline): boolean {
  if (a.at !== b.at) return a.at < b.at;
  if (a.clientId !== b.clientId) return a.clientId < b.clientId;
  return a.kind < b.kind;
}

export class DeadlineHeap extends MinHeap<Deadline> {
  constructor() {
    super(less);
  }
}
