import type { Logger } from 'pino';

/** At most one log line per key per window, so a flood of bad clients cannot flood the log. The
 * next line of a key reports how many were suppressed since the last one. */
export class RateLimitedLog {
  private readonly last = new Map<string, { atMs: number; suppressed: number }>();

  constructor(
    private readonly logger: Logger,
    private readonly windowMs: number,
    private readonly monotonicMs: () => number,
  ) {}

  warn(key: string, fields: Record<string, unknown>, msg: string): void {
    this.log('warn', key, fields, msg);
  }

  log(level: 'debug' | 'info' | 'warn' | 'error', key: string, fields: Record<string, unknown>, msg: string): void {
    const now = this.monotonicMs();
    const seen = this.last.get(key);
    if (seen !== undefined && now - seen.atMs < this.windowMs) {
      seen.suppressed++;
      return;
    }
    const suppressed = seen?.suppressed ?? 0;
    this.last.set(key, { atMs: now, suppressed: 0 });
    this.logger[level]({ ...fields, key, suppressed }, msg);
  }
}
