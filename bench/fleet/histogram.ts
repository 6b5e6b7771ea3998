// A log-bucketed latency histogram in microseconds (buckets 1 % wide), cheap to fill in a load
// worker and to merge in the parent: only the bucket counts cross the process boundary.
const GROWTH = Math.log(1.01);
/** 1.01^2200 µs is far beyond any window this bench runs. */
const BUCKETS = 2200;

export interface HistData {
  counts: Uint32Array;
  n: number;
  maxUs: number;
  sumUs: number;
}

export class Hist {
  counts = new Uint32Array(BUCKETS);
  n = 0;
  maxUs = 0;
  sumUs = 0;

  add(us: number): void {
    const i = us < 1 ? 0 : Math.min(BUCKETS - 1, 1 + Math.floor(Math.log(us) / GROWTH));
    this.counts[i] = (this.counts[i] as number) + 1;
    this.n++;
    this.sumUs += us;
    if (us > this.maxUs) this.maxUs = us;
  }

  data(): HistData {
    return { counts: this.counts, n: this.n, maxUs: this.maxUs, sumUs: this.sumUs };
  }

  reset(): void {
    this.counts.fill(0);
    this.n = 0;
    this.maxUs = 0;
    this.sumUs = 0;
  }

  static merge(parts: HistData[]): Hist {
    const h = new Hist();
    for (const p of parts) {
      for (let i = 0; i < BUCKETS; i++) h.counts[i] = (h.counts[i] as number) + (p.counts[i] as number);
      h.n += p.n;
      h.sumUs += p.sumUs;
      if (p.maxUs > h.maxUs) h.maxUs = p.maxUs;
    }
    return h;
  }

  /** The upper bound of the bucket holding quantile q (at most the largest value seen), in µs;
   * null when empty. */
  quantileUs(q: number): number | null {
    if (this.n === 0) return null;
    const target = Math.max(1, Math.ceil(q * this.n));
    let seen = 0;
    for (let i = 0; i < BUCKETS; i++) {
      seen += this.counts[i] as number;
      if (seen >= target) return Math.min(this.maxUs, i === 0 ? 1 : Math.exp(i * GROWTH));
    }
    return this.maxUs;
  }

  /** p50, p99 and max in ms, 2 decimals; nulls when empty. */
  summaryMs(): { n: number; p50Ms: number | null; p99Ms: number | null; maxMs: number | null } {
    const ms = (us: number | null): number | null => (us === null ? null : Math.round(us / 10) / 100);
    return { n: this.n, p50Ms: ms(this.quantileUs(0.5)), p99Ms: ms(this.quantileUs(0.99)), maxMs: ms(this.n === 0 ? null : this.maxUs) };
  }
}

/** p50/p99/max of plain values (ms), for small sets such as one time per client. */
export function quantiles(values: number[]): { n: number; p50: number | null; p99: number | null; max: number | null } {
  if (values.length === 0) return { n: 0, p50: null, p99: null, max: null };
  const s = [...values].sort((a, b) => a - b);
  const at = (q: number): number => s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] as number;
  const r = (v: number): number => Math.round(v * 10) / 10;
  return { n: s.length, p50: r(at(0.5)), p99: r(at(0.99)), max: r(s[s.length - 1] as number) };
}
