// fleet-failover: N devices with persistent sessions and a QoS 1 subscription each are connected
// to the serving node; the serving process is killed with SIGKILL; every device reconnects as a
// device does (jittered backoff 0.5-1.5 s, the nodes' addresses in turn, bounded overall). From
// the kill: how long until each device has a CONNACK with session present = 1, how many came back
// without their session, how many attempts it took; then one QoS 1 command to every device from a
// separate publisher, each of which must arrive.
//
// raftmq-cluster: the leader is killed and one of the two others takes over. mosquitto and raftmq
// (one node, in memory): the process is killed and started again on the same port ("restarted in
// place"), an anchor row: every session is expected to be lost there (no persistence), devices
// subscribe again as they do on session present = 0, and only devices not coming back or missing
// commands count as failures.
//
// --detect keepalive: devices ignore the socket's close and error (a real device behind NAT or a
// dead link would see nothing) and notice the loss only by their keep-alive: a PINGREQ every
// keepalive seconds, the link dead after 1.5 x keepalive without any packet. Times then include
// that detection (between 0.5 and 1.5 x keepalive after the kill).

import { sleep } from '../../test/support/wait.js';
import { brokerMeter, type Ctx, hr, loadMeter, msSince, type Outcome, type Row, round } from './common.js';
import { ATTEMPT_TIMEOUT_MS, connectDevices, devicesUp, reconnectLoop } from './devices.js';
import { Hist, quantiles } from './histogram.js';
import { HostMeter } from './procstat.js';
import type { CmdCheck, FailoverStatus } from './protocol.js';
import { portOpen, type Target } from './targets.js';

const POLL_MS = 500;
const SETTLE_MS = 1_000;
const DELIVERY_WAIT_MS = 15_000;

export async function runFailover(ctx: Ctx, target: Target): Promise<Outcome> {
  const { o, workers } = ctx;
  const failures: string[] = [];
  const notes: string[] = [];
  const inPlace = target.kind !== 'raftmq-cluster';
  const keepaliveS = o.detect === 'keepalive' ? o.keepaliveS : Math.max(o.keepaliveS, 60);
  const setup = await connectDevices(ctx, target, keepaliveS);
  if (setup.connected < o.clients) {
    failures.push(
      `setup: ${o.clients - setup.connected} of ${o.clients} devices did not connect and subscribe (${setup.failures}; first: ${setup.firstFailure})`,
    );
    return { rows: [], failures, notes, details: { setup } };
  }
  // With --detect keepalive every device first completes a ping round, at its own phase.
  await sleep(SETTLE_MS + (o.detect === 'keepalive' ? keepaliveS * 1000 : 0));
  const before = await devicesUp(ctx);
  if (before.up < o.clients) {
    failures.push(`before the kill: only ${before.up} of ${o.clients} devices connected`);
    return { rows: [], failures, notes, details: { setup } };
  }
  const serving = await target.serving(20_000);
  // Counters and times from here on are the failover's.
  await workers.all('arm', () => reconnectLoop(o.reconnectDeadlineS, o.detect));
  const victim = target.nodes[serving]!;
  const others = target.nodes.filter((n) => n !== victim);
  const loadCpu = loadMeter(workers);
  loadCpu.start();
  const killNs = hr();
  await victim.kill9();
  const killedMs = msSince(killNs, hr());
  if (inPlace) victim.spawn();
  const brokerCpu = brokerMeter(target);
  const host = new HostMeter();
  brokerCpu.start();
  host.start();
  // When an MQTT port accepts again (probed from here, 20 ms apart, bounded).
  let listenMs: number | null = null;
  const probeUntil = Date.now() + o.reconnectDeadlineS * 1000;
  const probe = (async () => {
    const ports = inPlace ? [victim.mqttPort] : others.map((n) => n.mqttPort);
    while (listenMs === null && Date.now() < probeUntil) {
      for (const p of ports) if (await portOpen(p)) listenMs = round(msSince(killNs, hr()), 0);
      if (listenMs === null) await sleep(20);
    }
  })();
  const deadline = Date.now() + o.reconnectDeadlineS * 1000 + 2 * ATTEMPT_TIMEOUT_MS;
  let statuses: FailoverStatus[] = [];
  for (;;) {
    await sleep(POLL_MS);
    statuses = await workers.all<FailoverStatus>('failover-status');
    const back = statuses.reduce((s, st) => s + st.sessionPresent.filter((v) => v !== -1).length, 0);
    const gaveUp = statuses.reduce((s, st) => s + st.gaveUp, 0);
    const pendingSub = statuses.reduce((s, st) => s + st.pendingResubscribe, 0);
    if ((back + gaveUp >= o.clients && pendingSub === 0) || Date.now() > deadline) break;
  }
  await probe;
  const broker = brokerCpu.end();
  const load = loadCpu.end();
  const hostCpu = host.end(broker.cpuS + load.cpuS);
  const sum = (f: (s: FailoverStatus) => number): number => statuses.reduce((s, st) => s + f(st), 0);
  const withSession: number[] = [];
  const all: number[] = [];
  const detected: number[] = [];
  let lostSessions = 0;
  let notBack = 0;
  for (const st of statuses) {
    for (let i = 0; i < st.ids.length; i++) {
      const sp = st.sessionPresent[i] as number;
      if (sp === -1) {
        notBack++;
        continue;
      }
      const ms = msSince(killNs, st.backAtNs[i] as bigint);
      all.push(ms);
      if (sp === 1) withSession.push(ms);
      else lostSessions++;
      const lostAt = st.lostAtNs[i] as bigint;
      if (lostAt !== 0n) detected.push(msSince(killNs, lostAt));
    }
  }
  const qSession = quantiles(withSession);
  const qAll = quantiles(all);
  const qDetect = quantiles(detected);

  // One command to each device from a publisher of its own, on whatever node serves now.
  let acked = 0;
  let check: CmdCheck[] = [];
  let publishError = '';
  try {
    const now = await target.serving(10_000);
    const pub = await workers.call<{ acked: number; error: string }>(0, 'publish-commands', {
      endpoint: target.endpoints(false)[now],
      ca: null,
      ids: Array.from({ length: o.clients }, (_, i) => i),
      window: 100,
      payloadBytes: o.payloadBytes,
      timeoutMs: 10_000,
    });
    acked = pub.acked;
    publishError = pub.error;
    const until = Date.now() + DELIVERY_WAIT_MS;
    for (;;) {
      check = await workers.all<CmdCheck>('cmd-check');
      if (check.reduce((s, c) => s + c.received, 0) >= o.clients || Date.now() > until) break;
      await sleep(POLL_MS);
    }
  } catch (err) {
    publishError = (err as Error).message;
  }
  const received = check.reduce((s, c) => s + c.received, 0);
  const missing = o.clients - received;
  const cmdLat = Hist.merge(check.map((c) => c.latency)).summaryMs();
  const row: Row = {
    target: target.kind,
    detect: o.detect,
    mqtt: o.mqtt === 5 ? '5.0' : '3.1.1',
    clients: o.clients,
    setupS: setup.setupS,
    setupConnectsPerS: setup.connectsPerS,
    setupRetried: setup.retried,
    setupLosses: setup.losses,
    killMs: round(killedMs, 1),
    listenMs,
    back: all.length,
    notBack,
    backWithSession: withSession.length,
    lostSessions,
    p50Ms: qSession.p50,
    p99Ms: qSession.p99,
    maxMs: qSession.max,
    allBackP50Ms: qAll.p50,
    allBackP99Ms: qAll.p99,
    allBackMaxMs: qAll.max,
    detectP50Ms: o.detect === 'keepalive' ? qDetect.p50 : null,
    detectMaxMs: o.detect === 'keepalive' ? qDetect.max : null,
    attempts: sum((s) => s.attempts),
    refused: sum((s) => s.refused),
    closedBeforeConnack: sum((s) => s.closedBeforeConnack),
    timedOut: sum((s) => s.timedOut),
    connackRefused: sum((s) => s.rcRefused),
    referred: sum((s) => s.referred),
    lostAgain: sum((s) => s.lostAgain),
    resubscribed: sum((s) => s.resubscribed),
    cmdAcked: acked,
    cmdReceived: received,
    cmdMissing: missing,
    cmdDuplicates: check.reduce((s, c) => s + c.duplicates, 0),
    cmdP50Ms: cmdLat.p50Ms,
    cmdP99Ms: cmdLat.p99Ms,
    phaseS: broker.wallS,
    brokerCpuS: broker.cpuS,
    brokerCpuPct: broker.cpuPct,
    brokerRssMiB: Math.max(0, ...broker.procs.map((p) => p.rssMiB)),
    loadCpuS: load.cpuS,
    loadCpuPct: load.cpuPct,
    otherCpuPct: hostCpu.otherCpuPct,
  };
  const missingSample = check.flatMap((c) => c.missingSample).slice(0, 20);
  const dead = target.deadNodes().filter((n) => n !== victim);
  if (dead.length > 0) failures.push(`broker died: ${dead.map((n) => `${n.role} (PID ${n.pid})`).join(', ')}`);
  if (inPlace && !victim.alive) failures.push(`${victim.role} did not start again in place`);
  if (notBack > 0) failures.push(`${notBack} of ${o.clients} devices did not come back within ${o.reconnectDeadlineS} s`);
  if (missing > 0) failures.push(`${missing} of ${o.clients} commands missing (acked ${acked}; e.g. devices ${missingSample.join(', ')})`);
  if (publishError !== '') failures.push(`command publisher: ${publishError}`);
  if (inPlace) {
    notes.push(
      `${target.kind} restarted in place: ${lostSessions} of ${all.length} devices came back without their session (expected: no persistence); they subscribed again, so commands still reach them. Lost sessions do not fail this anchor row.`,
    );
  } else if (lostSessions > 0) {
    failures.push(`${lostSessions} of ${all.length} devices came back WITHOUT their session (session present 0)`);
  }
  return {
    rows: [row],
    failures,
    notes,
    details: { setup, brokerProcs: broker.procs, loadProcs: load.procs, missingSample },
  };
}
