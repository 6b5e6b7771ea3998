// Redial delays for a peer link: exponential from RECONNECT_DELAY_MIN_MS, capped at
// RECONNECT_DELAY_MAX_MS, each shortened by up to RECONNECT_JITTER_FRACTION of itself so that
// nodes restarted together do not dial in lockstep. The cap is never exceeded.

export const RECONNECT_DELAY_MIN_MS = 50;
export const RECONNECT_DELAY_MAX_MS = 2_000;
export const RECONNECT_JITTER_FRACTION = 0.25;

/** Delay in ms before dial number `attempt` (0 for the first redial); random() is in [0, 1). */
export function reconnectDelayMs(attempt: number, random: () => number): number {
  const exponent = Math.min(attempt, 16); // 50 · 2^16 is far past the cap; avoids overflow to Infinity
  const base = Math.min(RECONNECT_DELAY_MAX_MS, RECONNECT_DELAY_MIN_MS * 2 ** exponent);
  const r = random();
  const unit = r >= 0 && r < 1 ? r : 0;
  return Math.round(base * (1 - RECONNECT_JITTER_FRACTION * unit));
}
