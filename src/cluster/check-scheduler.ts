// When the serving leader proposes a `check` (docs/design.md "The seam": replicas compare state). After
// each check every replica hashes its state at that index, a slice per turn (src/server/
// digest-runner.ts), and the check carries the leader's newest finished digest, which every replica
// compares with its own. A digest hashes the whole state, so checks are rare: one per CHECK_ENTRIES_DEFAULT committed entries or CHECK_INTERVAL_MS_DEFAULT of
// cluster time, whichever comes first, and none while nothing is committed. Pure: time is passed in.

/** A check after this many committed entries since the last one. Every node hashes its whole
 * state for a check (a few hundred ms of CPU at 10,000 sessions), so under load the interval, not
 * the count, should set the pace: at 50,000 a fleet committing 20,000 entries/s hashed every 2.5 s. */
export const CHECK_ENTRIES_DEFAULT = 1_000_000;
/** A check after this much cluster time since the last one (ms), if anything was committed. */
export const CHECK_INTERVAL_MS_DEFAULT = 30_000;

export interface CheckPolicy {
  entriesMax: number;
  intervalMs: number;
}

export const defaultCheckPolicy: CheckPolicy = { entriesMax: CHECK_ENTRIES_DEFAULT, intervalMs: CHECK_INTERVAL_MS_DEFAULT };

export class CheckScheduler {
  private readonly policy: CheckPolicy;
  /** Entries committed since the last check was proposed (the check itself not counted). */
  private since = 0;
  /** Cluster ms when the last check was proposed, or the serving period began. */
  private lastAt = 0;
  /** A proposed check has not been applied yet: never two in flight. */
  private inFlight = false;

  constructor(policy: CheckPolicy) {
    if (!(policy.entriesMax >= 1) || !(policy.intervalMs >= 1)) throw new RangeError('check policy bounds must be at least 1');
    this.policy = policy;
  }

  /** A serving period begins at cluster time `now`. */
  reset(now: number): void {
    this.since = 0;
    this.lastAt = now;
    this.inFlight = false;
  }

  /** `count` entries were applied, `checks` of them check commands. */
  noteApplied(count: number, checks: number): void {
    this.since += count - checks;
    if (checks > 0) this.inFlight = false;
  }

  due(now: number): boolean {
    if (this.inFlight || this.since === 0) return false;
    return this.since >= this.policy.entriesMax || now - this.lastAt >= this.policy.intervalMs;
  }

  proposed(now: number): void {
    this.since = 0;
    this.lastAt = now;
    this.inFlight = true;
  }
}
