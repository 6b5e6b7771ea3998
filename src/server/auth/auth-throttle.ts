// Failed authentication backs off exponentially per source address and per username: after n
// failures in a row, the next refusal is answered only after min(BASE·2^(n-1), MAX) ms, and while
// that window lasts further attempts are refused (after the same delay) without checking a password,
// so a guesser gets neither answers nor scrypt work faster than the backoff allows. Both tables are
// bounded (src/server/limits.ts), so a storm of distinct addresses or names costs fixed memory.
import { BoundedTable, RATE_TABLE_ENTRIES_MAX } from '../limits.js';

/** First backoff after one failure. */
export const AUTH_BACKOFF_BASE_MS = 100;
/** Largest backoff; below the CONNECT timeout so the delayed refusal still reaches the client. */
export const AUTH_BACKOFF_MAX_MS = 5_000;
/** Failures older than this are forgotten. */
const FORGET_AFTER_MS = 60_000;

interface Failures {
  count: number;
  /** Monotonic ms until which attempts are refused. */
  untilMs: number;
  lastMs: number;
}

const fresh = (): Failures => ({ count: 0, untilMs: 0, lastMs: 0 });

export class AuthThrottle {
  readonly byAddress: BoundedTable<Failures>;
  readonly byUser: BoundedTable<Failures>;

  constructor(entriesMax = RATE_TABLE_ENTRIES_MAX) {
    this.byAddress = new BoundedTable(entriesMax);
    this.byUser = new BoundedTable(entriesMax);
  }

  /** Milliseconds left of the backoff window for this address or username; 0: may try now. */
  blockedFor(address: string, username: string | null, nowMs: number): number {
    const a = this.byAddress.peek(address);
    const u = username === null ? undefined : this.byUser.peek(username);
    return Math.max(0, (a?.untilMs ?? 0) - nowMs, (u?.untilMs ?? 0) - nowMs);
  }

  /** Records a failure; returns the delay before the refusal goes out. */
  fail(address: string, username: string | null, nowMs: number): number {
    let delay = bump(this.byAddress.touch(address, fresh), nowMs);
    if (username !== null) delay = Math.max(delay, bump(this.byUser.touch(username, fresh), nowMs));
    return delay;
  }

  succeed(address: string, username: string | null): void {
    this.byAddress.delete(address);
    if (username !== null) this.byUser.delete(username);
  }
}

function bump(f: Failures, nowMs: number): number {
  if (nowMs - f.lastMs > FORGET_AFTER_MS) f.count = 0;
  f.count++;
  f.lastMs = nowMs;
  const delay = Math.min(AUTH_BACKOFF_BASE_MS * 2 ** Math.min(f.count - 1, 30), AUTH_BACKOFF_MAX_MS);
  f.untilMs = nowMs + delay;
  return delay;
}
