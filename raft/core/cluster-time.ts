import { assert } from './assert.js';

/** Cluster time as docs/design.md "Cluster time" defines it, kept by the leader. Voters' wall clocks are
 * sampled as offsets from the leader's monotonic clock; the target is the lower median of the
 * clocks that agree with the median; cluster time follows the leader's monotonic clock steered
 * toward the target, never backwards. Pure: every reading of a clock is a parameter. */

/** Steering changes the rate of cluster time by at most this fraction (docs/design.md "Cluster time": ±5 %). */
export const steerRateMax = 0.05;
/** A clock sample older than this many E is stale (docs/design.md "Timing bounds"). */
export const sampleStaleE = 4;

/** One voter's wall clock, as `wall - leader monotonic` at the midpoint of a round trip. */
interface ClockSample {
  offset: number;
  /** Leader monotonic ms when the sample arrived. */
  at: number;
}

export interface ClusterClockOptions {
  /** E, in ms. */
  readonly electionTimeoutMs: number;
  /** A clock farther than this from the median is excluded. */
  readonly maxClockOffsetMs: number;
}

export class ClusterClock {
  private readonly staleMs: number;
  private readonly maxOffsetMs: number;
  /** Steering closes a gap over about this many ms, at most ±steerRateMax. */
  private readonly steerHorizonMs: number;
  private readonly roundTripMaxMs: number;
  private readonly samples = new Map<number, ClockSample>();
  private excluded: number[] = [];
  /** Scratch arrays of target(), reused: it runs at every leader tick. */
  private readonly fresh: { voter: number; wall: number }[] = [];
  private readonly agreeing: number[] = [];
  /** Cluster ms at leader monotonic `monoBase`, advancing at `rate` per monotonic ms. */
  private base = 0;
  private monoBase = 0;
  private rate = 1;
  /** True until this term has had a target (see start()). */
  private awaitingTarget = false;

  constructor(opts: ClusterClockOptions) {
    this.staleMs = sampleStaleE * opts.electionTimeoutMs;
    this.maxOffsetMs = opts.maxClockOffsetMs;
    this.steerHorizonMs = opts.electionTimeoutMs;
    this.roundTripMaxMs = opts.electionTimeoutMs;
  }

  /** Forgets every sample: a new campaign or term measures afresh. */
  reset(): void {
    this.samples.clear();
    this.excluded = [];
  }

  /** A voter's wall clock read between the leader's `sentAt` and `receivedAt` (its monotonic ms):
   * placed at the midpoint, the error is at most half the round trip, so a round trip over E (a
   * delayed or duplicated answer, a paused peer) is not used. */
  sample(voter: number, wall: number, sentAt: number, receivedAt: number): void {
    if (sentAt > receivedAt || receivedAt - sentAt > this.roundTripMaxMs) return;
    this.samples.set(voter, { offset: wall - (sentAt + receivedAt) / 2, at: receivedAt });
  }

  /** The leader's own wall clock, read together with its monotonic clock. */
  sampleSelf(self: number, wall: number, monotonic: number): void {
    this.samples.set(self, { offset: wall - monotonic, at: monotonic });
  }

  /** The lower median of the fresh clocks within maxClockOffsetMs of the median of them all, or
   * null unless at least two clocks agree. Records the excluded voters. */
  target(monotonic: number): number | null {
    const fresh = this.fresh;
    fresh.length = 0;
    for (const [voter, s] of this.samples) {
      if (monotonic - s.at <= this.staleMs) fresh.push({ voter, wall: monotonic + s.offset });
    }
    if (this.excluded.length > 0) this.excluded = [];
    if (fresh.length === 0) return null;
    fresh.sort(byWall);
    const median = fresh[Math.floor((fresh.length - 1) / 2)]?.wall ?? 0;
    const agreeing = this.agreeing;
    agreeing.length = 0;
    for (const f of fresh) {
      if (Math.abs(f.wall - median) > this.maxOffsetMs) this.excluded.push(f.voter);
      else agreeing.push(f.wall);
    }
    this.excluded.sort((a, b) => a - b);
    // `agreeing` is ascending, as `fresh` is.
    return agreeing.length >= 2 ? (agreeing[Math.floor((agreeing.length - 1) / 2)] ?? null) : null;
  }

  excludedClocks(): number[] {
    return [...this.excluded];
  }

  /** Each fresh clock's distance from the median of the fresh clocks, in ms (positive: ahead), the
   * distance that target() compares with maxClockOffsetMs. For metrics; allocates. */
  offsets(monotonic: number): Map<number, number> {
    const fresh: { voter: number; wall: number }[] = [];
    for (const [voter, s] of this.samples) {
      if (monotonic - s.at <= this.staleMs) fresh.push({ voter, wall: monotonic + s.offset });
    }
    const out = new Map<number, number>();
    if (fresh.length === 0) return out;
    fresh.sort(byWall);
    const median = fresh[Math.floor((fresh.length - 1) / 2)]?.wall ?? 0;
    for (const f of fresh.sort((a, b) => a.voter - b.voter)) out.set(f.voter, f.wall - median);
    return out;
  }

  /** Starts a leader's term at `monotonic`: cluster time jumps forward to the target, never below
   * `floor` (the log's last time). Without a target, it starts at `floor` and may jump once more,
   * when the term first has one (a deviation; see docs/raft.md). */
  start(monotonic: number, floor: number): void {
    const target = this.target(monotonic);
    this.base = Math.max(floor, target ?? floor);
    this.monoBase = monotonic;
    this.rate = 1;
    this.awaitingTarget = target === null;
  }

  /** This term's cluster time follows the voters' clocks: it had a target at start(), or has
   * since jumped to one. Until then it runs from the log's last time (docs/design.md "Cluster time"). */
  get followsClocks(): boolean {
    return !this.awaitingTarget;
  }

  /** Cluster ms at leader monotonic `monotonic` (never before the last steer). */
  read(monotonic: number): number {
    return this.base + Math.max(0, monotonic - this.monoBase) * this.rate;
  }

  /** Re-aims the rate at the current target: at most ±steerRateMax away from the monotonic rate,
   * proportional to the gap over steerHorizonMs, so it closes without overshooting much. */
  steer(monotonic: number): void {
    const now = this.read(monotonic);
    const target = this.target(monotonic);
    this.base = now;
    this.monoBase = Math.max(this.monoBase, monotonic);
    if (target === null) {
      this.rate = 1;
      return;
    }
    if (this.awaitingTarget) {
      this.awaitingTarget = false;
      this.base = Math.max(now, target);
      this.rate = 1;
      return;
    }
    const wanted = (target - now) / this.steerHorizonMs;
    this.rate = 1 + Math.min(steerRateMax, Math.max(-steerRateMax, wanted));
    assert(this.rate > 0, 'cluster time would go back');
  }
}

const byWall = (a: { wall: number }, b: { wall: number }): number => a.wall - b.wall;
