import type { Effect, Entry } from './commands.js';

/** The replicated state machine (docs/design.md "The seam"). Pure: no clock, timers, randomness or I/O.
 * Every replica that applies the same entries holds the same state and the same digest. */
export interface BrokerState {
  /** Applies one committed entry, appending the effects it decides to `out`. Never throws on any
   * command: an impossible command is a no-op plus an `event` effect; a broken invariant sets
   * `failed` so the node stops serving, instead of throwing on every replica. */
  apply(e: Entry, out: Effect[]): void;
  /** Index of the last applied entry; 0 before any. */
  readonly appliedIndex: number;
  /** Time of the last applied entry (cluster ms); 0 before any. */
  readonly appliedTime: number;
  /** Earliest will, session or message-expiry deadline (cluster ms), if any. The serving node
   * proposes a `tick` when it passes. */
  nextDeadline(): number | undefined;
  /** Chunks of the whole state, consistent at `appliedIndex` when called: a lazy cursor, read a
   * chunk at a time while apply goes on. At most one is open; opening another cancels it. */
  snapshot(): Iterable<Uint8Array>;
  /** Replaces the whole state with a snapshot's chunks. Throws on a corrupt snapshot (the
   * caller refuses the snapshot; this is input validation, not apply). */
  restore(chunks: Iterable<Uint8Array>): void;
  /** A digest of the replicated state, kept up to date by apply; equal on equal replicas. */
  digest(): string;
  /** Set with a reason when apply found a broken invariant; the node must stop serving. */
  readonly failed: string | null;
}
