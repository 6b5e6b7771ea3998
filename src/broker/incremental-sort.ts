// A merge sort that runs in bounded steps, so a snapshot cursor can put a large state in its
// canonical order across many event-loop turns (docs/design.md "Performance principles"): sorting
// 100k client ids at once took about 60 ms, 1M about 800 ms, against a turn budget of a few ms.

/** Bottom-up merge sort over two buffers: each pass merges runs of `width` into runs of 2 width.
 * Not stable; the callers sort unique keys. */
export class IncrementalSort<T> {
  private src: T[];
  private dst: T[];
  private readonly cmp: (a: T, b: T) => number;
  private readonly n: number;
  /** Length of the sorted runs being merged in this pass. */
  private width = 1;
  /** The pair of runs being merged: [start, mid) and [mid, hi); i and j read them, k writes dst. */
  private mid = 0;
  private hi = 0;
  private i = 0;
  private j = 0;
  private k = 0;

  /** Takes ownership of `items`. */
  constructor(items: T[], cmp: (a: T, b: T) => number) {
    this.src = items;
    this.dst = new Array<T>(items.length);
    this.cmp = cmp;
    this.n = items.length;
    this.startPair(0);
  }

  get done(): boolean {
    return this.width >= this.n;
  }

  /** The sorted items; only once done. */
  get sorted(): T[] {
    if (!this.done) throw new Error('IncrementalSort read before it finished');
    return this.src;
  }

  /** Moves at most `moves` elements; true once sorted. */
  step(moves: number): boolean {
    let left = moves;
    while (!this.done && left > 0) {
      if (this.k === this.hi) this.nextPair();
      else left -= this.merge(left);
    }
    return this.done;
  }

  /** Merges up to `moves` elements of the current pair; returns how many it moved. */
  private merge(moves: number): number {
    const { src, dst, cmp, mid, hi } = this;
    let { i, j, k } = this;
    const end = Math.min(hi, k + moves);
    while (k < end) {
      const takeLeft = j >= hi || (i < mid && cmp(src[i] as T, src[j] as T) <= 0);
      dst[k++] = takeLeft ? (src[i++] as T) : (src[j++] as T);
    }
    const moved = k - this.k;
    this.i = i;
    this.j = j;
    this.k = k;
    return moved;
  }

  private nextPair(): void {
    if (this.hi < this.n) {
      this.startPair(this.hi);
      return;
    }
    // A pass is complete: its output is the next pass's input.
    const t = this.src;
    this.src = this.dst;
    this.dst = t;
    this.width *= 2;
    this.startPair(0);
  }

  private startPair(lo: number): void {
    this.mid = Math.min(lo + this.width, this.n);
    this.hi = Math.min(lo + 2 * this.width, this.n);
    this.i = lo;
    this.j = this.mid;
    this.k = lo;
  }
}
