import { Violation } from './checker.js';

/** docs/design.md "One server at a time": lease intervals of different nodes never overlap in true
 * time. After every input to a node the simulator reports until when, in true time, the node
 * believes it holds a lease (its clock running on from now). A node can only learn that its lease
 * ended at a later input, so an interval recorded now lasts at least until the node's next input;
 * hence it suffices to check, whenever a node newly covers [from, end), that no other node's
 * current interval ends after `from`. */
export class LeaseChecker {
  private readonly current = new Map<number, { start: number; end: number }>();
  /** Lease intervals begun so far. */
  intervals = 0;

  /** `holdsUntil`: true ms at which the node's lease ends, or `now` (or less) if it holds none. */
  update(id: number, now: number, holdsUntil: number): void {
    const cur = this.current.get(id);
    if (holdsUntil <= now) {
      if (cur !== undefined && cur.end > now) cur.end = now;
      return;
    }
    const extends_ = cur !== undefined && cur.end > now;
    const from = extends_ ? cur.end : now;
    if (holdsUntil > from) {
      for (const [other, iv] of this.current) {
        if (other !== id && iv.end > from) {
          throw new Violation(
            'lease overlap',
            `node ${id} holds a lease over [${from.toFixed(2)}, ${holdsUntil.toFixed(2)}) while node ${other} holds one until ${iv.end.toFixed(2)}`,
          );
        }
      }
    }
    if (extends_) cur.end = holdsUntil;
    else {
      this.current.set(id, { start: now, end: holdsUntil });
      this.intervals++;
    }
  }
}
