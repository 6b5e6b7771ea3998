// Setup shared by the fleet scenarios: every device connects to the serving node with a persistent
// session and subscribes to devices/<i>/cmd at QoS 1, at most --connect-window CONNECTs in flight
// across all workers.
import { type Ctx, failureSummary, hr, msSince, round } from './common.js';
import { split } from './pool.js';
import type { ConnectReply } from './protocol.js';
import type { Target } from './targets.js';

export interface Setup {
  connected: number;
  setupS: number;
  connectsPerS: number;
  failures: string;
  firstFailure: string;
}

export async function connectDevices(ctx: Ctx, target: Target, serving: number, keepaliveS: number): Promise<Setup> {
  const { o, workers } = ctx;
  const parts = split(o.clients, workers.count);
  const endpoints = target.endpoints(false);
  const t0 = hr();
  const replies = await workers.all<ConnectReply>('connect', (i) => ({
    ids: parts[i],
    prefix: 'dev-',
    endpoint: endpoints[serving],
    nodeIndex: serving,
    endpoints,
    ca: null,
    version: o.mqtt,
    // 3.1.1: clean session 0 from the start; 5: a fresh session (clean start) that outlives the
    // connection (session expiry).
    clean: o.mqtt === 5,
    sessionExpiryS: o.sessionExpiryS,
    keepaliveS,
    window: Math.max(1, Math.floor(o.connectWindow / workers.count)),
    device: true,
    timeoutMs: 30_000,
  }));
  const setupS = msSince(t0, hr()) / 1000;
  const connected = replies.reduce((s, r) => s + r.connected, 0);
  return {
    connected,
    setupS: round(setupS, 2),
    connectsPerS: round(connected / setupS, 0),
    failures: failureSummary(replies.map((r) => r.failures)),
    firstFailure: replies.map((r) => r.firstFailure).find((f) => f !== '') ?? '',
  };
}
