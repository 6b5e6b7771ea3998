/** At most one log line per key per window; the lines held back are counted and reported with the
 * next line of that key, so a peer that floods bad messages cannot flood the log. Time is passed in
 * (monotonic ms), so the limiter is testable without a clock. */
export class LogLimiter {
  private readonly windowMs: number;
  private readonly keysMax: number;
  private readonly last = new Map<string, { at: number; suppressed: number }>();

  constructor(windowMs: number, keysMax = 1_024) {
    this.windowMs = windowMs;
    this.keysMax = keysMax;
  }

  /** Null: stay quiet. Otherwise the number of lines held back since the last one for this key. */
  admit(key: string, now: number): number | null {
    const seen = this.last.get(key);
    if (seen !== undefined && now - seen.at < this.windowMs) {
      seen.suppressed++;
      return null;
    }
    const suppressed = seen?.suppressed ?? 0;
    // Keys come from peer input; bound them so a stream of new keys cannot grow the map.
    if (seen === undefined && this.last.size >= this.keysMax) this.last.clear();
    this.last.set(key, { at: now, suppressed: 0 });
    return suppressed;
  }
}
