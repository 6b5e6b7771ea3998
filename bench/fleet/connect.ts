// connect-tls: N connections (MQTT 3.1.1, clean session), at most --connect-window CONNECTs in
// flight, first over TCP and then over TLS (a CA and an ECDSA P-256 server certificate made with
// openssl at run time), each against a freshly started broker with the same configuration (both
// listeners), so memory per connection is measured from the same baseline. connects/s is
// connected / (first connect to last CONNACK); bytes per connection is the serving process's RSS
// growth over the phase divided by the connections.
import { readFileSync } from 'node:fs';
import { sleep } from '../../test/support/wait.js';
import { brokerMeter, type Ctx, failureSummary, loadMeter, type Outcome, type Row, round } from './common.js';
import type { Pki } from './pki.js';
import { split } from './pool.js';
import { HostMeter, sampleProc } from './procstat.js';
import type { ConnectReply } from './protocol.js';
import { Target } from './targets.js';

const SETTLE_MS = 1_000;

export async function runConnect(ctx: Ctx, pki: Pki): Promise<Outcome> {
  const { o, workers } = ctx;
  const failures: string[] = [];
  const rows: Row[] = [];
  const parts = split(o.clients, workers.count);
  const ca = pki.ca;
  const caPem = readFileSync(ca, 'utf8');
  for (const transport of ['tcp', 'tls'] as const) {
    const target = await Target.start({
      kind: o.target,
      tls: { cert: pki.cert, key: pki.key, ca },
      dir: ctx.dir,
      raftmqArgs: o.raftmqArgs,
    });
    try {
      const serving = await target.serving(20_000);
      await sleep(SETTLE_MS);
      const node = target.nodes[serving]!;
      const before = sampleProc(node.pid);
      const loadCpu = loadMeter(workers);
      const brokerCpu = brokerMeter(target);
      const host = new HostMeter();
      loadCpu.start();
      brokerCpu.start();
      host.start();
      const replies = await workers.all<ConnectReply>('connect', (i) => ({
        ids: parts[i],
        prefix: `${transport}-`,
        endpoint: node.endpoint(transport === 'tls'),
        nodeIndex: serving,
        endpoints: target.endpoints(transport === 'tls'),
        ca: transport === 'tls' ? caPem : null,
        version: 4,
        clean: true,
        sessionExpiryS: 0,
        keepaliveS: 120,
        window: Math.max(1, Math.floor(o.connectWindow / workers.count)),
        device: false,
        timeoutMs: 30_000,
      }));
      const load = loadCpu.end();
      const broker = brokerCpu.end();
      const hostCpu = host.end(broker.cpuS + load.cpuS);
      const after = sampleProc(node.pid);
      const connected = replies.reduce((s, r) => s + r.connected, 0);
      let first = 0n;
      let last = 0n;
      for (const r of replies) {
        if (r.firstStartNs !== 0n && (first === 0n || r.firstStartNs < first)) first = r.firstStartNs;
        if (r.lastConnackNs > last) last = r.lastConnackNs;
      }
      const spanS = Number(last - first) / 1e9;
      const rssGrowth = before !== null && after !== null ? after.rssBytes - before.rssBytes : null;
      rows.push({
        target: o.target,
        transport,
        clients: o.clients,
        connected,
        refused: o.clients - connected,
        connectsPerS: spanS > 0 ? round(connected / spanS, 0) : null,
        spanS: round(spanS, 2),
        brokerCpuS: broker.cpuS,
        brokerCpuPct: broker.cpuPct,
        rssBeforeMiB: before === null ? null : round(before.rssBytes / 1048576, 1),
        rssAfterMiB: after === null ? null : round(after.rssBytes / 1048576, 1),
        bytesPerConn: rssGrowth === null || connected === 0 ? null : round(rssGrowth / connected, 0),
        brokerCpuMsPerConn: connected === 0 ? null : round((1000 * broker.cpuS) / connected, 3),
        loadCpuS: load.cpuS,
        loadCpuPct: load.cpuPct,
        loadCpuMsPerConn: connected === 0 ? null : round((1000 * load.cpuS) / connected, 3),
        otherCpuPct: hostCpu.otherCpuPct,
      });
      if (connected < o.clients) {
        const first = replies.map((r) => r.firstFailure).find((f) => f !== '') ?? '';
        failures.push(
          `${transport}: ${o.clients - connected} of ${o.clients} connections refused or failed (${failureSummary(replies.map((r) => r.failures))}; first: ${first})`,
        );
      }
      const dead = target.deadNodes();
      if (dead.length > 0) failures.push(`${transport}: broker died: ${dead.map((n) => `${n.role} (PID ${n.pid})`).join(', ')}`);
      await workers.all('close-all');
    } finally {
      await target.stop();
    }
  }
  return {
    rows,
    failures,
    notes: [
      'certificates: CA and server key ECDSA P-256 (openssl, made for this run); TLS as negotiated by Node (TLS 1.3), full handshakes, no session resumption',
    ],
    details: {},
  };
}
