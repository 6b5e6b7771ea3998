// fleet: N devices (persistent sessions) each publish QoS 1 telemetry to devices/<i>/telemetry at
// a fixed rate; 4 backend consumers take all of it through one shared subscription
// $share/backend/devices/+/telemetry (MQTT 5); a command backend sends QoS 1 commands to every
// tenth device on devices/<i>/cmd at a fixed total rate. Latency is publish-to-consumer, from a
// process.hrtime.bigint() stamp in the payload: CLOCK_MONOTONIC, the same clock in every process
// of this host, ns resolution. A message counts when its stamp falls in the measured window (after
// the warm-up); after the window the publishers stop and the run waits for everything in flight.
// --find-max steps the per-device rate up by --step-factor (at most --max-steps steps) and stops
// at the first step that does not hold: p99 over --p99-limit-ms, any loss, or a publish skipped
// (a device already had 32 unacknowledged, or the command backend's queue was full).

import { sleep } from '../../test/support/wait.js';
import { brokerMeter, type Ctx, hr, loadMeter, type Outcome, type Row, round } from './common.js';
import { connectDevices, devicesUp } from './devices.js';
import { Hist } from './histogram.js';
import { HostMeter } from './procstat.js';
import type { FleetCollect, FleetProgress } from './protocol.js';
import type { Target } from './targets.js';

const CONSUMERS = 4;
const SHARED_FILTER = '$share/backend/devices/+/telemetry';
const DRAIN_MAX_MS = 15_000;
const DRAIN_POLL_MS = 300;

export async function runFleet(ctx: Ctx, target: Target): Promise<Outcome> {
  const { o, workers } = ctx;
  const failures: string[] = [];
  const notes: string[] = [];
  const setup = await connectDevices(ctx, target, o.keepaliveS);
  if (setup.connected < o.clients) {
    failures.push(
      `setup: ${o.clients - setup.connected} of ${o.clients} devices did not connect and subscribe (${setup.failures}; first: ${setup.firstFailure})`,
    );
    return { rows: [], failures, notes, details: { setup } };
  }
  const serving = await target.serving(20_000);
  const ep = target.endpoints(false)[serving]!;
  const cons = await workers.all<{ connected: number; error: string }>('consumers', (i) => ({
    endpoint: ep,
    ca: null,
    names: Array.from({ length: CONSUMERS }, (_, k) => `backend-${k}`).filter((_, k) => k % workers.count === i),
    filter: SHARED_FILTER,
    clients: o.clients,
    keepaliveS: 60,
  }));
  for (const c of cons) if (c.error !== '') failures.push(c.error);
  if (failures.length > 0) return { rows: [], failures, notes, details: { setup } };
  const cmdIds = Array.from({ length: o.clients }, (_, i) => i).filter((i) => i % 10 === 0);
  const rates: number[] = [];
  for (let k = 0; k < (o.findMax ? o.maxSteps : 1); k++) rates.push(round(o.ratePerDevice * o.stepFactor ** k, 3));
  const rows: Row[] = [];
  const steps: unknown[] = [];
  let best: number | null = null;
  for (const rate of rates) {
    const cmdRate = o.cmdRate ?? cmdIds.length * rate;
    const lossesBefore = (await devicesUp(ctx)).losses;
    const t0 = hr();
    const winStartNs = t0 + BigInt(Math.round(o.warmupS * 1e9));
    const winEndNs = winStartNs + BigInt(Math.round(o.windowS * 1e9));
    const started = await workers.all<{ error: string }>('fleet-start', (i) => ({
      clients: o.clients,
      ratePerDevice: rate,
      winStartNs,
      winEndNs,
      payloadBytes: o.payloadBytes,
      commands: i === 0 ? { endpoint: ep, ca: null, ids: cmdIds, rate: cmdRate } : null,
    }));
    for (const s of started) if (s.error !== '') failures.push(s.error);
    if (failures.length > 0) break;
    const loadCpu = loadMeter(workers);
    const brokerCpu = brokerMeter(target);
    await sleep(Math.max(0, Number(winStartNs - hr()) / 1e6));
    const host = new HostMeter();
    loadCpu.start();
    brokerCpu.start();
    host.start();
    await sleep(Math.max(0, Number(winEndNs - hr()) / 1e6));
    const load = loadCpu.end();
    const broker = brokerCpu.end();
    const hostCpu = host.end(broker.cpuS + load.cpuS);
    // Drain: publishers stopped, nothing unacknowledged, nothing more arriving.
    const drainUntil = Date.now() + DRAIN_MAX_MS;
    let lastReceived = -1;
    let drained = false;
    while (Date.now() < drainUntil) {
      await sleep(DRAIN_POLL_MS);
      const p = await workers.all<FleetProgress>('fleet-progress');
      const inflight = p.reduce((s, x) => s + x.inflight, 0);
      const got = p.reduce((s, x) => s + x.telemetryReceived, 0);
      if (p.every((x) => x.publishersDone) && inflight === 0 && got === lastReceived) {
        drained = true;
        break;
      }
      lastReceived = got;
    }
    const c = await workers.all<FleetCollect>('fleet-collect');
    let sent = 0;
    let received = 0;
    let lost = 0;
    let dup = 0;
    for (let i = 0; i < o.clients; i++) {
      let s = 0;
      let r = 0;
      for (const w of c) {
        s += w.sent[i] as number;
        r += w.received[i] as number;
      }
      sent += s;
      received += r;
      if (s > r) lost += s - r;
      else dup += r - s;
    }
    const lat = Hist.merge(c.map((w) => w.latency)).summaryMs();
    const cmdLat = Hist.merge(c.map((w) => w.cmdLatency)).summaryMs();
    const sumOf = (f: (w: FleetCollect) => number): number => c.reduce((s, w) => s + f(w), 0);
    const cmdSent = sumOf((w) => w.cmdSent);
    const cmdReceived = sumOf((w) => w.cmdReceived);
    const unacked = sumOf((w) => w.unacked);
    const cmdUnacked = sumOf((w) => w.cmdUnacked);
    const skippedInflight = sumOf((w) => w.skippedInflight);
    const skippedDown = sumOf((w) => w.skippedDown);
    const cmdSkipped = sumOf((w) => w.cmdSkipped);
    const skipped = skippedInflight + skippedDown + cmdSkipped;
    const dead = target.deadNodes();
    const backendLost = sumOf((w) => w.consumerLost);
    const servingNow = await target.serving(10_000).catch(() => -1);
    const moved = servingNow !== serving;
    const deviceLosses = (await devicesUp(ctx)).losses - lossesBefore;
    const leader = broker.procs.find((p) => p.pid === target.nodes[serving]!.pid);
    const holds =
      deviceLosses === 0 && lost === 0 && cmdReceived >= cmdSent && skipped === 0 && (lat.p99Ms ?? Infinity) <= o.p99LimitMs && drained;
    rows.push({
      target: target.kind,
      clients: o.clients,
      ratePerDevice: rate,
      offeredPerS: round(o.clients * rate, 0),
      sentPerS: round(sent / o.windowS, 0),
      deliveredPerS: round(received / o.windowS, 0),
      lost,
      unacked,
      duplicates: dup,
      p50Ms: lat.p50Ms,
      p99Ms: lat.p99Ms,
      maxMs: lat.maxMs,
      cmdPerS: round(cmdSent / o.windowS, 0),
      cmdLost: Math.max(0, cmdSent - cmdReceived),
      cmdUnacked,
      cmdP50Ms: cmdLat.p50Ms,
      cmdP99Ms: cmdLat.p99Ms,
      servingMoved: moved,
      deviceReconnects: deviceLosses,
      skippedInflight,
      skippedDown,
      cmdSkipped,
      genBehindMaxMs: Math.max(...c.map((w) => w.maxBehindMs)),
      loadLoopDelayMaxMs: Math.max(...c.map((w) => w.loopDelayMaxMs)),
      drained,
      holds,
      brokerCpuPct: broker.cpuPct,
      leaderCpuPct: leader?.cpuPct ?? null,
      brokerRssMiB: leader?.rssMiB ?? null,
      loadCpuPct: load.cpuPct,
      otherCpuPct: hostCpu.otherCpuPct,
      windowS: broker.wallS,
    });
    steps.push({ ratePerDevice: rate, brokerProcs: broker.procs, loadProcs: load.procs });
    if (dead.length > 0) failures.push(`broker died: ${dead.map((n) => `${n.role} (PID ${n.pid})`).join(', ')}`);
    if (moved) {
      const to = servingNow === -1 ? 'no node' : target.nodes[servingNow]!.role;
      failures.push(
        `the serving node changed during the step at ${rate} msg/s per device: ${target.nodes[serving]!.role} -> ${to} (${deviceLosses} device reconnects)`,
      );
    }
    if (backendLost > 0) failures.push(`${backendLost} backend connections (consumers, command backend) lost at ${rate} msg/s per device`);
    if (!o.findMax) {
      if (lost > 0) {
        failures.push(
          `${lost} of ${sent} telemetry messages not delivered at ${rate} msg/s per device (${unacked} publishes never acknowledged by the broker at the end)`,
        );
      }
      if (cmdSent > cmdReceived)
        failures.push(
          `${cmdSent - cmdReceived} of ${cmdSent} commands not delivered (${cmdUnacked} not acknowledged or still queued behind them)`,
        );
      if (!drained) failures.push(`not drained within ${DRAIN_MAX_MS} ms after the window`);
    }
    if (failures.length > 0) break;
    if (!holds) break;
    best = rate;
  }
  if (o.findMax) {
    notes.push(
      best === null
        ? `${target.kind} held none of the rates tried (p99 <= ${o.p99LimitMs} ms, no loss, nothing skipped)`
        : `${target.kind} holds ${best} msg/s per device (${round(best * o.clients, 0)} msg/s in) with p99 <= ${o.p99LimitMs} ms and no loss; the next step did not${rows.length === rates.length && rows.at(-1)?.holds === true ? ' exist (raise --max-steps)' : ''}`,
    );
  }
  return { rows, failures, notes, details: { setup, bestRatePerDevice: best, steps } };
}
