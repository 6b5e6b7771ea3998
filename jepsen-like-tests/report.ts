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
  /** Fault start → the first CONNACK from another node, when the serving node was hit (from any
   * node after restart-all). */
  failoverMs: number | null;
  /** How much later than `window.atMs` the fault began: earlier waits for `redundant`, and stops
   * and starts that took longer than their window. */
  lateMs: number;
  /** For faults that stop a process: how long the runner waited for `redundant` before it. */
  waitedMs: number | null;
  /** For kill and restarts: spawn of the new process(es) → the leader's /health `redundant`; null
   * when not reached within the bound (or not such a fault). */
  redundantMs: number | null;
  /** Exit codes of the processes a restart stopped with SIGTERM (null: did not exit in time). */
  exitCodes: (number | null)[];
}

export interface RunReport {
  seed: number;
  durationS: number;
  faults: string[];
  /** The fixed fault list of the slow test, or null for a drawn schedule. */
  plan: string[] | null;
  electionTimeoutMs: number;
  dir: string;
  startedAt: string;
  schedule: AppliedFault[];
  result: CheckResult;
  /** Departures from the design that are not history violations (see run.ts). */
  anomalies: string[];
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
  if (r.plan === null) {
    lines.push(
      `Reproduce: \`node build/jepsen-like-tests/run.js --seed ${r.seed} --duration-s ${r.durationS} --faults ${r.faults.join(',')}\``,
      '',
    );
  } else {
    lines.push(`Fixed fault list (runJepsen's plan): ${r.plan.join(', ')}.`, '');
  }
  lines.push(
    'Times: "late", how much later than planned the fault began (earlier waits and restarts shift the schedule); "waited" for `redundant` before a fault that stops a process; "redundant" from the new process(es) spawned to the leader\'s `redundant`; "failover" from the fault to the first CONNACK on another node.',
    '',
    '| at (s) | late (ms) | fault | node | was serving | for (ms) | waited (ms) | exit codes | redundant (ms) | failover (ms) |',
    '|---|---|---|---|---|---|---|---|---|---|',
  );
  const ms = (x: number | null): string => (x === null ? '-' : String(Math.round(x)));
  for (const f of r.schedule) {
    lines.push(
      `| ${(f.window.atMs / 1000).toFixed(1)} | ${Math.round(f.lateMs)} | ${describeFault(f.window.fault)} | ${f.node || '-'} | ${f.wasServing ? 'yes' : 'no'} | ${f.window.forMs} | ${ms(f.waitedMs)} | ${f.exitCodes.join(', ') || '-'} | ${ms(f.redundantMs)} | ${ms(f.failoverMs)} |`,
    );
  }
  lines.push('', '## Counts', '', '| | |', '|---|---|');
  for (const [k, v] of Object.entries(c)) lines.push(`| ${k} | ${v} |`);
  lines.push(
    '',
    '## Audit logs',
    '',
    'One file per process: node.run (run 0 is the first start, +1 per restart).',
    '',
    '| process | records | lease renewals | empty renewals | writes | unparsable |',
    '|---|---|---|---|---|---|',
  );
  for (const [key, a] of Object.entries(r.result.audit)) {
    lines.push(`| ${key} | ${a.records} | ${a.leaseRenewals} | ${a.emptyRenewals} | ${a.writes} | ${a.unparsable} |`);
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
  lines.push('', '## Anomalies', '');
  if (r.anomalies.length === 0) lines.push('None.');
  for (const a of r.anomalies) lines.push(`- ${a}`);
  if (r.clientErrors.length > 0) {
    lines.push('', '## Client errors (first 20)', '', '```', ...r.clientErrors.slice(0, 20), '```');
  }
  return `${lines.join('\n')}\n`;
}
