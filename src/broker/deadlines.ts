// Will and session-expiry deadlines, popped in (time, client id, kind) order so that every replica
// fires them in the same order (docs/design.md "Deadlines live in the state"). A binary min-heap with
// lazy deletion: a cancelled deadline stays in the heap and the owner checks, when it pops, that
// the state still holds that deadline. The heap is derived state, rebuilt on restore.

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

export class DeadlineHeap {
  private heap: Deadline[] = [];

  get length(): number {
    return this.heap.length;
  }

  push(d: Deadline): void {
    const h = this.heap;
    h.push(d);
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!less(h[i], h[parent])) break;
      [h[i], h[parent]] = [h[parent], h[i]];
      i = parent;
    }
  }

  peek(): Deadline | undefined {
    return this.heap[0];
  }

  pop(): Deadline | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (top === undefined || last === undefined || h.length === 0) return top;
    h[0] = last;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let min = i;
      if (l < h.length && less(h[l], h[min])) min = l;
      if (r < h.length && less(h[r], h[min])) min = r;
      if (min === i) break;
      [h[i], h[min]] = [h[min], h[i]];
      i = min;
    }
    return top;
  }

  clear(): void {
    this.heap = [];
  }
}
