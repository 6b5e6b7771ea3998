/** A simulated machine's clocks. True time is the simulator's clock (ms). The monotonic clock runs
 * at `rate` (within 1 ± ρ) and stops while the machine is paused; the wall clock is true time plus
 * an offset (a correct clock's offset is small; a wrong one's is anything) and, like NTP after a
 * suspend, reads true time again on resume. */
export const wallEpochMs = 1_700_000_000_000;

export class SimClock {
  /** Monotonic reading at true time `trueBase` (running) or the frozen reading (paused). */
  private monoBase: number;
  private trueBase: number;
  private paused = false;

  constructor(
    trueNow: number,
    private readonly rate: number,
    /** Wall error, ms; changed by clock faults. */
    public wallOffset: number,
  ) {
    this.monoBase = trueNow;
    this.trueBase = trueNow;
  }

  get isPaused(): boolean {
    return this.paused;
  }

  mono(trueNow: number): number {
    return this.paused ? this.monoBase : this.monoBase + (trueNow - this.trueBase) * this.rate;
  }

  wall(trueNow: number): number {
    return wallEpochMs + trueNow + this.wallOffset;
  }

  /** True time at which the monotonic clock reads `mono`, if it runs from now on without a pause. */
  trueAt(mono: number): number {
    return this.trueBase + (mono - this.monoBase) / this.rate;
  }

  pause(trueNow: number): void {
    this.monoBase = this.mono(trueNow);
    this.trueBase = trueNow;
    this.paused = true;
  }

  resume(trueNow: number): void {
    this.trueBase = trueNow;
    this.paused = false;
  }
}
