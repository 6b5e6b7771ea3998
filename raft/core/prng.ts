/** A small deterministic PRNG (splitmix32), injected into the core and the simulator so that a
 * seed reproduces a run exactly. Not for cryptography. */
export interface RandomSource {
  /** A uniform integer in [0, n); n is a positive integer. */
  int(n: number): number;
}

const TWO_POW_32 = 4_294_967_296;

export class Prng implements RandomSource {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  nextU32(): number {
    this.state = (this.state + 0x9e3779b9) >>> 0;
    let z = this.state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  }

  /** Uniform in [0, 1). */
  float(): number {
    return this.nextU32() / TWO_POW_32;
  }

  int(n: number): number {
    return Math.floor(this.float() * n);
  }

  /** Uniform integer in [lo, hi). */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo);
  }

  chance(p: number): boolean {
    return this.float() < p;
  }

  /** An independent stream, so that one consumer's draws do not shift another's. */
  fork(): Prng {
    return new Prng(this.nextU32());
  }
}
