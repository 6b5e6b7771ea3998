// The run report: report.json (everything) and report.md (for people), in the run's directory.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CheckResult } from './checker.js';
import { describeFault, type Window } from './schedule.js';

export interface AppliedFault {
  window: Window;
  /** The node the fault hit, resolved when it started; 0: none could be chosen. */
  node: number;
  /** Whether that node was serving when the fault started. */
  wasServing: boolean;
  startMono: number;
  healMono: number | null;
  /** Fault start → the first CONNACK from another node, when the serving node was hit. */
  failoverMs: number | null;
}

export interface RunReport {
  seed: number;
  durationS: number;
  faults: string[];
  electionTimeoutMs: number;
  dir: string;
  startedAt: string;
  schedule: AppliedFault[];
  result: CheckResult;
  clientErrors: string[];
  ok: boolean;
}

export function writeReport(r: RunReport): { json: string; md: string } {
  const json = join(r.dir, 'report.json');
  const md = join(r.dir, 'report.md');
  writeFileSync(json, `${JSON.stringify(r, null, 2)}\n`);
  writeFileSync(md, markdown(r));
  return { json, md };
}

function markdown(r: RunReport): string {
  const c = r.result.counts;
  const lines: string[] = [];
  lines.push(`# jepsen-like run, seed ${r.seed}: ${r.ok ? 'no violation' : 'VIOLATIONS'}`, '');
  lines.push(`Started ${r.startedAt}; ${r.durationS} s of workload; faults ${r.faults.join(', ')}; E = ${r.electionTimeoutMs} ms.`);
  lines.push(`Reproduce: \`node build/jepsen-like-tests/run.js --seed ${r.seed} --duration-s ${r.durationS} --faults ${r.faults.join(',')}\``, '');
  lines.push('## Schedule', '', '| at (s) | fault | node | was serving | for (ms) | failover (ms) |', '|---|---|---|---|---|---|');
  for (const f of r.schedule) {
    lines.push(
      `| ${(f.window.atMs / 1000).toFixed(1)} | ${describeFault(f.window.fault)} | ${f.node || '-'} | ${f.wasServing ? 'yes' : 'no'} | ${f.window.forMs || '-'} | ${f.failoverMs === null ? '-' : Math.round(f.failoverMs)} |`,
    );
  }
  lines.push('', '## Counts', '', '| | |', '|---|---|');
  for (const [k, v] of Object.entries(c)) lines.push(`| ${k} | ${v} |`);
  lines.push('', '## Audit logs', '', '| node | records | lease renewals | empty renewals | writes | unparsable |', '|---|---|---|---|---|---|');
  for (const [node, a] of Object.entries(r.result.audit)) {
    lines.push(`| ${node} | ${a.records} | ${a.leaseRenewals} | ${a.emptyRenewals} | ${a.writes} | ${a.unparsable} |`);
  }
  lines.push('', '## Violations', '');
  const totals = Object.entries(r.result.violationTotals);
  if (totals.length === 0) lines.push('None.');
  for (const [k, n] of totals) lines.push(`- ${k}: ${n}`);
  if (r.result.violations.length > 0) {
    lines.push('', '```');
    for (const v of r.result.violations.slice(0, 50)) lines.push(JSON.stringify(v));
    lines.push('```');
  }
  if (r.clientErrors.length > 0) {
    lines.push('', '## Client errors (first 20)', '', '```', ...r.clientErrors.slice(0, 20), '```');
  }
  return `${lines.join('\n')}\n`;
}
