/** A binary min-heap of timed events; ties break by insertion order so a seed replays exactly. */
export class EventQueue<T> {
  private readonly heap: { at: number; seq: number; item: T }[] = [];
  private seq = 0;

  get size(): number {
    return this.heap.length;
  }

  push(at: number, item: T): void {
    const h = this.heap;
    h.push({ at, seq: this.seq++, item });
    let k = h.length - 1;
    while (k > 0) {
      const parent = (k - 1) >> 1;
      if (!this.less(k, parent)) break;
      this.swap(k, parent);
      k = parent;
    }
  }

  /** Removes and returns the earliest event, or undefined when empty. */
  pop(): { at: number; item: T } | undefined {
    const h = this.heap;
    const top = h[0];
    if (top === undefined) return undefined;
    const last = h.pop();
    if (h.length > 0 && last !== undefined) {
      h[0] = last;
      this.siftDown(0);
    }
    return top;
  }

  private siftDown(start: number): void {
    const n = this.heap.length;
    let k = start;
    for (;;) {
      const l = 2 * k + 1;
      const r = l + 1;
      let m = k;
      if (l < n && this.less(l, m)) m = l;
      if (r < n && this.less(r, m)) m = r;
      if (m === k) return;
      this.swap(k, m);
      k = m;
    }
  }

  private less(a: number, b: number): boolean {
    const x = this.heap[a];
    const y = this.heap[b];
    if (x === undefined || y === undefined) return false;
    return x.at < y.at || (x.at === y.at && x.seq < y.seq);
  }

  private swap(a: number, b: number): void {
    const h = this.heap;
    const x = h[a];
    const y = h[b];
    if (x === undefined || y === undefined) return;
    h[a] = y;
    h[b] = x;
  }
}
