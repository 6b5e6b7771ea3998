// Waiting in tests, benches and the fault-injection harness: a pause, and one bounded poll. Every
// poll is bounded in count and in time; a wait that runs out throws an Error naming what it waited
// for (and the last error the probe threw, if any).

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

/** How long `until` waits when not told (ms). */
export const UNTIL_TIMEOUT_MS = 10_000;
/** Pause between two probes when not told (ms). */
export const UNTIL_INTERVAL_MS = 20;

export interface UntilOptions {
  /** Pause between two probes (ms); 0 polls once per event-loop turn. */
  intervalMs?: number;
}

/** Not there yet: a probe returns one of these while it waits. */
type NotYet = false | null | undefined;

/**
 * Polls `probe` until it returns a value other than false, null or undefined, and resolves with that
 * value (so `() => cond` waits for a condition, `() => find(...)` for a thing). A probe that throws
 * counts as not there yet; its last message is named when the wait runs out. Bounded by `timeoutMs`
 * and by timeoutMs / intervalMs + 1 probes.
 */
export async function until<T>(
  what: string,
  probe: () => T | Promise<T>,
  timeoutMs = UNTIL_TIMEOUT_MS,
  o: UntilOptions = {},
): Promise<Exclude<T, NotYet>> {
  const intervalMs = o.intervalMs ?? UNTIL_INTERVAL_MS;
  const maxProbes = Math.ceil(timeoutMs / Math.max(1, intervalMs)) + 1;
  const deadline = Date.now() + timeoutMs;
  let lastError = '';
  for (let i = 0; i < maxProbes; i++) {
    try {
      const v = await probe();
      if (v !== false && v !== null && v !== undefined) return v as Exclude<T, NotYet>;
    } catch (err) {
      lastError = err instanceof Error ? err.message : String(err);
    }
    if (Date.now() > deadline) break;
    if (intervalMs === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    else await sleep(intervalMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError === '' ? '' : ` (${lastError})`}`);
}
