// Setup shared by the fleet scenarios: every device connects to the serving node with a persistent
// session and subscribes to devices/<i>/cmd at QoS 1, at most --connect-window CONNECTs in flight
// across all workers. Devices behave as devices from the start: one that loses its connection
// (e.g. the leadership moves while the machine is loaded) reconnects by itself; one whose first
// connect fails is tried again, up to SETUP_PASSES passes, against whichever node serves then.

import { sleep } from '../../test/support/wait.js';
import { type Ctx, failureSummary, hr, msSince, round } from './common.js';
import { split } from './pool.js';
import type { ArmArgs, ConnectReply, FailoverStatus } from './protocol.js';
import type { Target } from './targets.js';

const SETUP_PASSES = 3;
const ALL_UP_WAIT_MS = 60_000;

export const BACKOFF_MIN_MS = 500;
export const BACKOFF_MAX_MS = 1500;
export const ATTEMPT_TIMEOUT_MS = 5_000;

export interface Setup {
  connected: number;
  setupS: number;
  connectsPerS: number;
  /** Connects that failed in the first pass and were tried again. */
  retried: number;
  /** Connection losses during setup (each followed by the device's own reconnect). */
  losses: number;
  failures: string;
  firstFailure: string;
}

/** The devices' reconnect loop as in production: losses noticed by the socket, bounded by `deadlineS`. */
export function reconnectLoop(deadlineS: number, mode: ArmArgs['mode'] = 'rst'): ArmArgs {
  return {
    mode,
    backoffMinMs: BACKOFF_MIN_MS,
    backoffMaxMs: BACKOFF_MAX_MS,
    deadlineMs: deadlineS * 1000,
    attemptTimeoutMs: ATTEMPT_TIMEOUT_MS,
    resubscribe: true,
  };
}

export async function devicesUp(ctx: Ctx): Promise<{ up: number; losses: number }> {
  const st = await ctx.workers.all<FailoverStatus>('failover-status');
  return { up: st.reduce((s, x) => s + x.up, 0), losses: st.reduce((s, x) => s + x.losses, 0) };
}

export async function connectDevices(ctx: Ctx, target: Target, keepaliveS: number): Promise<Setup> {
  const { o, workers } = ctx;
  await workers.all('arm', () => reconnectLoop(3600));
  let remaining = split(o.clients, workers.count);
  const endpoints = target.endpoints(false);
  const t0 = hr();
  let connected = 0;
  let retried = 0;
  const allFailures: Record<string, number>[] = [];
  let firstFailure = '';
  for (let pass = 0; pass < SETUP_PASSES && remaining.some((r) => r.length > 0); pass++) {
    if (pass > 0) retried += remaining.reduce((s, r) => s + r.length, 0);
    const serving = await target.serving(20_000);
    const ids = remaining;
    const replies = await workers.all<ConnectReply>('connect', (i) => ({
      ids: ids[i],
      prefix: 'dev-',
      endpoint: endpoints[serving],
      nodeIndex: serving,
      endpoints,
      ca: null,
      version: o.mqtt,
      // 3.1.1: clean session 0 from the start; 5: a fresh session (clean start) that outlives the
      // connection (session expiry). A retry keeps what the first pass may have made.
      clean: o.mqtt === 5 && pass === 0,
      sessionExpiryS: o.sessionExpiryS,
      keepaliveS,
      window: Math.max(1, Math.floor(o.connectWindow / workers.count)),
      device: true,
      timeoutMs: 30_000,
    }));
    connected += replies.reduce((s, r) => s + r.connected, 0);
    allFailures.push(...replies.map((r) => r.failures));
    firstFailure ||= replies.map((r) => r.firstFailure).find((f) => f !== '') ?? '';
    remaining = replies.map((r) => r.failedIds);
  }
  // Devices dropped during setup reconnect on their own; wait (bounded) until all are up.
  const until = Date.now() + ALL_UP_WAIT_MS;
  let state = await devicesUp(ctx);
  while (state.up < connected && Date.now() < until) {
    await sleep(250);
    state = await devicesUp(ctx);
  }
  const setupS = msSince(t0, hr()) / 1000;
  return {
    connected: Math.min(connected, state.up),
    setupS: round(setupS, 2),
    connectsPerS: round(connected / setupS, 0),
    retried,
    losses: state.losses,
    failures: failureSummary(allFailures),
    firstFailure,
  };
}
