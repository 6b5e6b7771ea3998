// A binary min-heap by a strict order `less`, for the state's derived queues (deadlines.ts, the
// bridge outboxes' expiry in bridge-outbox.ts). Owners delete lazily: a cancelled item stays in the
// heap, and the owner checks, when it pops, that the state still holds it.
export class MinHeap<T> {
  private heap: T[] = [];

  constructor(private readonly less: (a: T, b: T) => boolean) {}

  get length(): number {
    return this.heap.length;
  }

  push(item: T): void {
    const h = this.heap;
    h.push(item);
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.less(h[i] as T, h[parent] as T)) break;
      [h[i], h[parent]] = [h[parent] as T, h[i] as T];
      i = parent;
    }
  }

  peek(): T | undefined {
    return this.heap[0];
  }

  pop(): T | undefined {
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
      if (l < h.length && this.less(h[l] as T, h[min] as T)) min = l;
      if (r < h.length && this.less(h[r] as T, h[min] as T)) min = r;
      if (min === i) break;
      [h[i], h[min]] = [h[min] as T, h[i] as T];
      i = min;
    }
    return top;
  }

  clear(): void {
    this.heap = [];
  }
}
