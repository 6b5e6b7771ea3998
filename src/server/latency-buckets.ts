// A latency histogram as plain numbers: observe() bumps one bucket in place, and the metrics
// collector reads it at scrape time (Prometheus cumulative buckets are summed there). Never reset,
// so every scraper sees the same counts.

/** Upper bounds in seconds: 0.25 ms to 10 s, about 2.5 steps per decade. */
export const LATENCY_BOUNDS_S: readonly number[] = [
  0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

export class LatencyBuckets {
  readonly bounds: readonly number[];
  /** Observations per bucket, not cumulative; the last one is above every bound (+Inf). */
  readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(bounds: readonly number[] = LATENCY_BOUNDS_S) {
    this.bounds = bounds;
    this.counts = new Array<number>(bounds.length + 1).fill(0);
  }

  observe(seconds: number): void {
    const s = seconds > 0 && Number.isFinite(seconds) ? seconds : 0;
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && s > (bounds[i] as number)) i++;
    this.counts[i] = (this.counts[i] as number) + 1;
    this.sum += s;
    this.count++;
  }
}
