// The state digests that replicas compare at `check` entries (docs/design.md "Snapshots", docs/
// operations.md "State checks"). Apply no longer hashes: right after a node applies a check entry it
// opens a run over a snapshot cursor at that index and hashes the cursor's chunks into one sha256 a
// slice per event-loop turn (at least one chunk, then at most sliceMs), so no turn stalls for the
// whole state. The cursor's bytes are encodeImage() of the state at that index, which is what
// Broker.digest() hashes in one go, so both give the same digest.
//
// A check entry carries the digest the leader computed at an earlier check; expect() compares it
// with this node's digest for that index, at once if the run has finished, when it finishes if it
// is still open, or not at all if this node never computed it (restarted since, or the run was
// skipped or cancelled): a verdict of 'unknown'.
import { createHash, type Hash } from 'node:crypto';
import { SNAPSHOT_CURSOR_DEFAULTS, type SnapshotCursorOptions } from '../broker/snapshot-cursor.js';

/** Digests kept for later checks to compare against: the leader carries its newest completed one,
 * which a follower has too unless it is far behind. */
export const DIGESTS_KEPT = 8;

/** Most ms one turn spends hashing (a node's setting): well under E/20 for any election timeout
 * the configuration allows, so a run never costs the leader its lease. */
export const DIGEST_SLICE_MS = 5;

/** The cursor a run reads: chunks of the raft snapshot size, hashed as soon as pulled, so one
 * buffer serves them all. */
export const DIGEST_CURSOR: SnapshotCursorOptions = { ...SNAPSHOT_CURSOR_DEFAULTS, reuseChunk: true };

export type Verdict = 'match' | 'mismatch' | 'unknown';

export interface RunStats {
  index: number;
  bytes: number;
  turns: number;
  /** From open to the last chunk, ms. */
  ms: number;
  /** Longest single turn spent pulling and hashing, ms. */
  longestSliceMs: number;
}

export interface DigestRunnerOptions {
  /** Most ms spent pulling and hashing chunks in one turn (at least one chunk is taken). */
  readonly sliceMs: number;
  /** Monotonic ms. */
  readonly clock: () => number;
  /** Runs the next slice in a later turn; setImmediate unless a test steps by hand. */
  readonly schedule?: (step: () => void) => void;
  /** A run finished and its digest is recorded. */
  readonly onRun?: (stats: RunStats, digest: string) => void;
  /** The outcome of an expect(), now or once the run it waits for ends. */
  readonly onVerdict: (atIndex: number, verdict: Verdict, expected: string, mine: string | null) => void;
}

interface Run {
  readonly index: number;
  readonly chunks: Iterator<Uint8Array>;
  readonly hash: Hash;
  readonly startedAt: number;
  bytes: number;
  turns: number;
  longestSliceMs: number;
}

const defaultSchedule = (step: () => void): void => {
  setImmediate(step);
};

export class DigestRunner {
  private readonly opts: DigestRunnerOptions;
  private readonly schedule: (step: () => void) => void;
  private run: Run | null = null;
  /** Completed digests by index, ascending, at most DIGESTS_KEPT. */
  private readonly done = new Map<number, string>();
  /** Expected digests for the open run's index, compared when it ends. */
  private waiting: string[] = [];
  /** Bumped by cancel(), so a slice scheduled for a cancelled run does nothing. */
  private generation = 0;

  constructor(opts: DigestRunnerOptions) {
    if (!(opts.sliceMs > 0)) throw new RangeError('digest slice must be positive');
    this.opts = opts;
    this.schedule = opts.schedule ?? defaultSchedule;
  }

  /** The index of the open run, or null. */
  get running(): number | null {
    return this.run?.index ?? null;
  }

  /** The newest completed digest: the leader's next check carries it. */
  latest(): { index: number; digest: string } | null {
    let last: { index: number; digest: string } | null = null;
    for (const [index, digest] of this.done) last = { index, digest };
    return last;
  }

  digestAt(index: number): string | undefined {
    return this.done.get(index);
  }

  /** Starts hashing `chunks`, consistent at `index`. One run at a time: the caller skips a check
   * while one is open (see BrokerNode). */
  open(index: number, chunks: Iterable<Uint8Array>): void {
    if (this.run !== null) throw new Error(`digest run at ${this.run.index} is still open`);
    this.run = {
      index,
      chunks: chunks[Symbol.iterator](),
      hash: createHash('sha256'),
      startedAt: this.opts.clock(),
      bytes: 0,
      turns: 0,
      longestSliceMs: 0,
    };
    const gen = this.generation;
    this.schedule(() => this.step(gen));
  }

  /** Compares the digest another replica computed at `atIndex` with this node's. */
  expect(atIndex: number, digest: string): void {
    const mine = this.done.get(atIndex);
    if (mine !== undefined) this.opts.onVerdict(atIndex, mine === digest ? 'match' : 'mismatch', digest, mine);
    else if (this.run?.index === atIndex) this.waiting.push(digest);
    else this.opts.onVerdict(atIndex, 'unknown', digest, null);
  }

  /** Abandons the open run (its cursor is returned) and forgets every digest: the state they
   * describe is gone (an epoch switch starts the log over). */
  reset(): void {
    this.cancel();
    this.done.clear();
  }

  /** Abandons the open run; comparisons waiting for it end 'unknown'. */
  cancel(): void {
    const run = this.run;
    if (run === null) return;
    this.generation++;
    this.run = null;
    run.chunks.return?.();
    this.settle(run.index, null);
  }

  /** One slice: chunks until the cursor ends or sliceMs passed, at least one. */
  private step(gen: number): void {
    const run = this.run;
    if (run === null || gen !== this.generation) return;
    const start = this.opts.clock();
    let ended = false;
    try {
      do {
        const r = run.chunks.next();
        if (r.done === true) ended = true;
        else {
          run.hash.update(r.value);
          run.bytes += r.value.length;
        }
      } while (!ended && this.opts.clock() - start < this.opts.sliceMs);
    } catch {
      // The cursor was cancelled under the run (a newer cursor opened): no digest at this index.
      this.run = null;
      this.settle(run.index, null);
      return;
    }
    run.turns++;
    run.longestSliceMs = Math.max(run.longestSliceMs, this.opts.clock() - start);
    if (!ended) {
      this.schedule(() => this.step(gen));
      return;
    }
    this.run = null;
    const digest = run.hash.digest('hex');
    this.record(run.index, digest);
    const stats: RunStats = {
      index: run.index,
      bytes: run.bytes,
      turns: run.turns,
      ms: this.opts.clock() - run.startedAt,
      longestSliceMs: run.longestSliceMs,
    };
    this.opts.onRun?.(stats, digest);
    this.settle(run.index, digest);
  }

  private record(index: number, digest: string): void {
    this.done.set(index, digest);
    for (const old of this.done.keys()) {
      if (this.done.size <= DIGESTS_KEPT) break;
      this.done.delete(old);
    }
  }

  /** Gives the comparisons that waited for the run at `index` their verdict. */
  private settle(index: number, mine: string | null): void {
    const waiting = this.waiting;
    this.waiting = [];
    for (const expected of waiting) {
      const verdict: Verdict = mine === null ? 'unknown' : mine === expected ? 'match' : 'mismatch';
      this.opts.onVerdict(index, verdict, expected, mine);
    }
  }
}
