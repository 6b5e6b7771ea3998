// The fleet scenarios' part of the broker bench's markdown: one table per scenario with the key
// figures of each child's rows; the full rows are in the .json.
import { anchorTimes, type FleetRow, type FleetRun, type FleetScenario, failoverTimes, num, transportRow } from './fleet-child.js';

export interface FleetSection {
  runs: FleetRun[];
  /** One line per (scenario, target) not run. */
  skipped: string[];
}

function f(v: unknown, digits = 0): string {
  const n = num(v);
  return n === null ? '–' : n.toLocaleString('en-US', { maximumFractionDigits: digits });
}

function mark(r: FleetRun): string {
  return r.failures.length > 0 ? ' ✗' : '';
}

/** "a / b" of the tcp and the tls row. */
function both(r: FleetRun, pick: (row: FleetRow) => unknown, digits = 0): string {
  return `${f(pick(transportRow(r, 'tcp') ?? {}), digits)} / ${f(pick(transportRow(r, 'tls') ?? {}), digits)}`;
}

function failoverTable(runs: FleetRun[]): string[] {
  const detect = [...new Set(runs.map((r) => String(r.result?.options.detect ?? 'rst')))].join(', ');
  const out = [
    `**fleet-failover** (detect ${detect}): from the kill of the serving process to each device's CONNACK with its session; lost: devices back without their session.`,
    '',
    '| target | back | with session | lost | p50 ms | p99 ms | max ms | refused | broker CPU % | load CPU % | other CPU % |',
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  let anchor = false;
  for (const r of runs) {
    const row = r.result?.rows[0];
    if (row === undefined) {
      out.push(`| ${r.target}${mark(r)} | – | – | – | – | – | – | – | – | – | – |`);
      continue;
    }
    const q = failoverTimes(row);
    const sup = q.anyConnack ? ' ¹' : '';
    anchor ||= anchorTimes(row);
    const name = r.target === 'raftmq-cluster' ? r.target : `${r.target} (restarted in place)`;
    out.push(
      `| ${name}${mark(r)} | ${f(row.back)} of ${f(row.clients)} | ${f(row.backWithSession)} | ${f(row.lostSessions)} | ${f(q.p50)}${sup} | ${f(q.p99)}${sup} | ${f(q.max)}${sup} | ${f(row.refused)} | ${f(row.brokerCpuPct, 1)} | ${f(row.loadCpuPct, 1)} | ${f(row.otherCpuPct)} |`,
    );
  }
  if (anchor) {
    out.push(
      '',
      '¹ to a CONNACK without the session: restarted in place, sessions in memory only, so every session is lost; that does not fail the anchor row.',
    );
  }
  return out;
}

function fleetTable(runs: FleetRun[]): string[] {
  const findMax = runs.some((r) => r.result?.options.findMax === true);
  const out = [
    `**fleet**: device telemetry (QoS 1) to backend consumers through a shared subscription, commands (QoS 1) to every tenth device${findMax ? '; --find-max: one line per step, held = p99 within the limit, no loss, nothing skipped' : ''}. Leader CPU: the serving process (all three nodes in parentheses).`,
    '',
    `| target | msg/s per device | delivered/s | p50 ms | p99 ms | cmd p99 ms | lost | leader CPU % | load CPU % | other CPU % |${findMax ? ' held |' : ''}`,
    `|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|${findMax ? '---|' : ''}`,
  ];
  for (const r of runs) {
    const rows = r.result?.rows ?? [];
    if (rows.length === 0) out.push(`| ${r.target}${mark(r)} | – | – | – | – | – | – | – | – | – |${findMax ? ' – |' : ''}`);
    for (const row of rows) {
      const leader = f(row.leaderCpuPct, 1);
      const cpu = r.target === 'raftmq-cluster' ? `${leader} (${f(row.brokerCpuPct, 1)})` : leader;
      out.push(
        `| ${r.target}${mark(r)} | ${f(row.ratePerDevice, 3)} | ${f(row.deliveredPerS)} | ${f(row.p50Ms, 2)} | ${f(row.p99Ms, 2)} | ${f(row.cmdP99Ms, 2)} | ${f(row.lost)} | ${cpu} | ${f(row.loadCpuPct, 1)} | ${f(row.otherCpuPct)} |${findMax ? ` ${row.holds === true ? 'yes' : 'no'} |` : ''}`,
      );
    }
  }
  return out;
}

function connectTable(runs: FleetRun[]): string[] {
  const out = [
    '**connect-tls**: MQTT 3.1.1 connections, TCP then TLS 1.3 (full handshakes), a fresh broker each, at most 100 in setup. Columns with two values: tcp / tls.',
    '',
    '| target | connects/s tcp | connects/s tls | bytes/conn | broker ms/conn | load CPU % | other CPU % |',
    '|---|--:|--:|--:|--:|--:|--:|',
  ];
  for (const r of runs) {
    const tcp = transportRow(r, 'tcp') ?? {};
    const tls = transportRow(r, 'tls') ?? {};
    out.push(
      `| ${r.target}${mark(r)} | ${f(tcp.connectsPerS)} | ${f(tls.connectsPerS)} | ${both(r, (x) => x.bytesPerConn)} | ${both(r, (x) => x.brokerCpuMsPerConn, 3)} | ${both(r, (x) => x.loadCpuPct, 1)} | ${both(r, (x) => x.otherCpuPct)} |`,
    );
  }
  return out;
}

const TABLES: Record<FleetScenario, (runs: FleetRun[]) => string[]> = {
  'fleet-failover': failoverTable,
  fleet: fleetTable,
  'connect-tls': connectTable,
};

/** The fleet part of the .md, empty when no fleet scenario ran. */
export function fleetMarkdown(section: FleetSection | null): string[] {
  if (section === null || (section.runs.length === 0 && section.skipped.length === 0)) return [];
  const runs = section.runs;
  const clients = [...new Set(runs.map((r) => r.result?.options.clients ?? r.args[r.args.indexOf('--clients') + 1]))];
  const out = [
    `Fleet scenarios: \`node build/bench/fleet.js\` per scenario and target (${clients.map((c) => f(Number(c))).join(', ')} devices or connections; the command lines and each child's result file are in the .json under \`fleet\`). CPU % is of one core over the measured phase; load: the fleet load generator (parent and workers); other: the host's busy CPU less broker and load (200 = both cores).`,
    '',
  ];
  for (const s of new Set(runs.map((r) => r.scenario))) out.push(...TABLES[s](runs.filter((r) => r.scenario === s)), '');
  if (section.skipped.length > 0) out.push('Skipped:', '', ...section.skipped.map((l) => `- ${l}`), '');
  const notes = runs.flatMap((r) =>
    (r.result?.notes ?? [])
      .filter((n) => !n.includes('restarted in place') && !n.startsWith('certificates:'))
      .map((n) => `- ${r.scenario}/${r.target}: ${n}`),
  );
  if (notes.length > 0) out.push('Notes:', '', ...notes, '');
  const failed = runs.filter((r) => r.failures.length > 0);
  if (failed.length > 0) {
    out.push('Failed (✗):', '', ...failed.map((r) => `- ${r.scenario}/${r.target}: ${r.failures.join('; ')}`), '');
  }
  return out;
}
