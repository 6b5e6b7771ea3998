// Coverage guidance for npm run fuzz: V8's block coverage of the reader's modules, read through the
// inspector of the thread the targets run in, tells which inputs reach code no input reached
// before; those join the inputs the target mutates (harness.ts inputs(), `extra`). Reading the
// coverage of the whole isolate costs tens of milliseconds (every script's counters, as JSON), so
// it is read once per window of inputs sized to keep that a fifth of the time, and a window that
// reached new code is bisected (halves run again, read again) down to the inputs that did.
import { Session } from 'node:inspector';
import type { FuzzInput, FuzzTarget } from './harness.js';

/** Bounds of the window of inputs between two coverage reads. */
const WINDOW_MIN = 16;
const WINDOW_MAX = 4096;
/** Inputs' time per coverage read's time. */
const WORK_PER_READ = 4;
/** Interesting inputs kept per target; a new one replaces a random old one past this. */
const KEPT_MAX = 512;

interface Range {
  startOffset: number;
  endOffset: number;
  count: number;
}
interface ScriptCoverage {
  url: string;
  functions: { ranges: Range[] }[];
}

/** One inspector session for the thread: the counters are the isolate's, so every guide reads
 * them through it, and each target's turn starts with reset(). */
let shared: Session | null = null;

function session(): Session {
  if (shared === null) {
    shared = new Session();
    shared.connect();
    post(shared, 'Profiler.enable');
    post(shared, 'Profiler.startPreciseCoverage', { callCount: false, detailed: true });
  }
  return shared;
}

function post(s: Session, method: string, params?: object): unknown {
  let out: unknown;
  let failure: Error | null = null;
  // A session on its own thread answers synchronously.
  s.post(method, params ?? {}, (err, res) => {
    failure = err;
    out = res;
  });
  if (failure !== null) throw failure;
  return out;
}

export class CoverageGuide {
  /** Covered features: a function entered, a block run. */
  private readonly seen = new Set<string>();
  /** Blocks V8 has reported uncovered once, per function: absent from a later report of the
   * function while it ran, they were covered (V8 merges a block into its function when the
   * counts agree). */
  private readonly blocks = new Map<string, Set<string>>();
  private readonly window: FuzzInput[] = [];
  private windowSize = WINDOW_MIN;
  private windowStarted = 0;
  private readMs = 0;
  readonly kept: FuzzInput['data'][] = [];

  constructor(
    private readonly target: FuzzTarget,
    private readonly random: () => number = Math.random,
  ) {
    this.reset();
  }

  /** Forgets the counters run up by other targets and any window begun. */
  reset(): void {
    this.window.length = 0;
    this.take(true);
    this.windowStarted = performance.now();
  }

  get features(): number {
    return this.seen.size;
  }

  /** Called after each input ran; at the end of a window, reads the coverage. */
  async after(input: FuzzInput): Promise<void> {
    this.window.push(input);
    if (this.window.length < this.windowSize) return;
    const inputs = this.window.splice(0);
    const workMs = performance.now() - this.windowStarted;
    if (this.take(false) > 0) await this.locate(inputs);
    const perInput = Math.max(workMs / inputs.length, 1e-3);
    this.windowSize = Math.round(Math.min(WINDOW_MAX, Math.max(WINDOW_MIN, (WORK_PER_READ * this.readMs) / perInput)));
    this.windowStarted = performance.now();
  }

  /** Runs the inputs again, half by half, and keeps each one that alone reaches new code. The
   * counters were just read, so they hold only what the reruns add. */
  private async locate(inputs: readonly FuzzInput[]): Promise<void> {
    if (inputs.length === 1) {
      await this.rerun(inputs[0] as FuzzInput);
      if (this.take(true) > 0) this.keep((inputs[0] as FuzzInput).data);
      return;
    }
    const half = inputs.length >> 1;
    for (const part of [inputs.slice(0, half), inputs.slice(half)]) {
      for (const i of part) await this.rerun(i);
      if (this.take(false) > 0) await this.locate(part);
    }
  }

  private async rerun(input: FuzzInput): Promise<void> {
    try {
      await this.target.run(input);
    } catch {
      // It passed a moment ago; a target with state of its own may differ on a rerun.
    }
  }

  private keep(data: Uint8Array): void {
    if (this.kept.length < KEPT_MAX) this.kept.push(data);
    else this.kept[Math.floor(this.random() * KEPT_MAX)] = data;
  }

  private watched(url: string): boolean {
    return this.target.modules.some((m) => url.endsWith(`/${m.replace(/\.ts$/, '.js')}`));
  }

  /** Reads (and resets) the counters; the number of features not seen before. With `commit`
   * they count as seen from now on. */
  private take(commit: boolean): number {
    const started = performance.now();
    const scripts = (post(session(), 'Profiler.takePreciseCoverage') as { result: ScriptCoverage[] }).result;
    let fresh = 0;
    const note = (f: string): void => {
      if (this.seen.has(f)) return;
      fresh++;
      if (commit) this.seen.add(f);
    };
    for (const s of scripts) {
      if (!this.watched(s.url)) continue;
      for (const fn of s.functions) {
        const [top, ...nested] = fn.ranges;
        if (top === undefined || top.count === 0) continue;
        const key = `${s.url}:${top.startOffset}`;
        note(key);
        let known = this.blocks.get(key);
        if (known === undefined) {
          known = new Set();
          this.blocks.set(key, known);
        }
        const uncovered = new Set<string>();
        for (const r of nested) {
          const b = `${r.startOffset}-${r.endOffset}`;
          if (r.count === 0) {
            uncovered.add(b);
            known.add(b);
          } else note(`${key}:${b}`);
        }
        for (const b of known) if (!uncovered.has(b)) note(`${key}:${b}`);
      }
    }
    this.readMs = performance.now() - started;
    return fresh;
  }
}
