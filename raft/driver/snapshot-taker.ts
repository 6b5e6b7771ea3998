// Reads the application's snapshot cursor a slice at a time (docs/design.md "Performance principles": no
// event-loop turn longer than about E/10). Each turn takes chunks for at most sliceMs (at least one
// chunk), then yields with setImmediate, so timers, heartbeats and socket reads run in between; once
// the cursor is done the log is compacted to the index the cursor was opened at.
import type { DriverLogger } from './message-gate.js';

export interface SnapshotTakerOptions {
  /** Most ms spent reading chunks in one turn. */
  readonly sliceMs: number;
  /** Monotonic ms. */
  readonly clock: () => number;
  /** Compacts the log to `index` with the chunks read; returns the index, or null if not used. */
  readonly compact: (index: number, chunks: readonly Uint8Array[]) => number | null;
  readonly logger: DriverLogger;
}

interface Job {
  readonly index: number;
  readonly iterator: Iterator<Uint8Array>;
  readonly chunks: Uint8Array[];
  readonly startedAt: number;
  readonly resolve: (index: number | null) => void;
  bytes: number;
  turns: number;
  /** Longest single slice, ms. */
  longestMs: number;
}

export class SnapshotTaker {
  private readonly opts: SnapshotTakerOptions;
  private job: Job | null = null;
  private immediate: NodeJS.Immediate | undefined;

  constructor(opts: SnapshotTakerOptions) {
    this.opts = opts;
  }

  /** A snapshot is being read. */
  get busy(): boolean {
    return this.job !== null;
  }

  /** Reads `chunks` (consistent at `index`) over as many turns as it takes, then compacts. One at a
   * time: while another is being read this resolves null at once. */
  take(index: number, chunks: Iterable<Uint8Array>): Promise<number | null> {
    if (this.job !== null) return Promise.resolve(null);
    return new Promise((resolve) => {
      this.job = {
        index,
        iterator: chunks[Symbol.iterator](),
        chunks: [],
        startedAt: this.opts.clock(),
        resolve,
        bytes: 0,
        turns: 0,
        longestMs: 0,
      };
      this.immediate = setImmediate(this.step);
    });
  }

  /** Abandons the snapshot being read (the driver stops, or a snapshot from the leader replaced the
   * state the cursor reads). */
  cancel(): void {
    const job = this.job;
    if (job === null) return;
    clearImmediate(this.immediate);
    this.immediate = undefined;
    this.job = null;
    job.iterator.return?.();
    job.resolve(null);
  }

  private readonly step = (): void => {
    this.immediate = undefined;
    const job = this.job;
    if (job === null) return;
    const start = this.opts.clock();
    let done = false;
    try {
      do {
        const r = job.iterator.next();
        if (r.done === true) done = true;
        else {
          job.chunks.push(r.value);
          job.bytes += r.value.length;
        }
      } while (!done && this.opts.clock() - start < this.opts.sliceMs);
    } catch (err) {
      this.job = null;
      this.opts.logger.error({ index: job.index, err: (err as Error).message }, 'application snapshot failed');
      job.resolve(null);
      return;
    }
    job.turns++;
    job.longestMs = Math.max(job.longestMs, this.opts.clock() - start);
    if (!done) {
      this.immediate = setImmediate(this.step);
      return;
    }
    this.job = null;
    const ms = Math.round(this.opts.clock() - job.startedAt);
    const fields = {
      index: job.index,
      bytes: job.bytes,
      chunks: job.chunks.length,
      turns: job.turns,
      ms,
      longestSliceMs: Math.round(job.longestMs),
    };
    this.opts.logger.info(fields, 'raft snapshot taken');
    job.resolve(this.opts.compact(job.index, job.chunks));
  };
}
