// Prints the main figures of fleet bench result files (bench/results/fleet-*.json) as one
// markdown table per scenario, one line per row, in file order.
// Usage: node build/bench/fleet-summary.js FILE...
import { readFileSync } from 'node:fs';

const COLUMNS: Record<string, string[]> = {
  'fleet-failover': [
    'target',
    'detect',
    'clients',
    'listenMs',
    'back',
    'backWithSession',
    'lostSessions',
    'p50Ms',
    'p99Ms',
    'maxMs',
    'allBackP50Ms',
    'allBackP99Ms',
    'attempts',
    'refused',
    'closedBeforeConnack',
    'referred',
    'cmdMissing',
    'brokerCpuPct',
    'brokerRssMiB',
    'loadCpuPct',
    'otherCpuPct',
  ],
  fleet: [
    'target',
    'clients',
    'ratePerDevice',
    'deliveredPerS',
    'lost',
    'unacked',
    'p50Ms',
    'p99Ms',
    'maxMs',
    'cmdPerS',
    'cmdLost',
    'cmdP99Ms',
    'deviceReconnects',
    'skippedDown',
    'holds',
    'brokerCpuPct',
    'brokerRssMiB',
    'loadCpuPct',
    'otherCpuPct',
  ],
  'connect-tls': [
    'target',
    'transport',
    'connected',
    'refused',
    'connectsPerS',
    'brokerCpuPct',
    'brokerCpuMsPerConn',
    'rssAfterMiB',
    'bytesPerConn',
    'loadCpuPct',
    'loadCpuMsPerConn',
    'otherCpuPct',
  ],
};

interface Result {
  scenario: string;
  startedAt: string;
  rows: Record<string, unknown>[];
  failures: string[];
}

const byScenario = new Map<string, { file: string; r: Result }[]>();
for (const file of process.argv.slice(2)) {
  const r = JSON.parse(readFileSync(file, 'utf8')) as Result;
  byScenario.set(r.scenario, [...(byScenario.get(r.scenario) ?? []), { file, r }]);
}
for (const [scenario, results] of byScenario) {
  const cols = COLUMNS[scenario] ?? Object.keys(results[0]?.r.rows[0] ?? {});
  process.stdout.write(`\n${scenario}\n\n| ${cols.join(' | ')} | exit |\n|${cols.map(() => '--:').join('|')}|---|\n`);
  for (const { r } of results) {
    const status = r.failures.length === 0 ? 'ok' : 'FAIL';
    if (r.rows.length === 0) process.stdout.write(`| ${cols.map(() => '-').join(' | ')} | FAIL: ${r.failures.join('; ')} |\n`);
    for (const row of r.rows)
      process.stdout.write(
        `| ${cols.map((c) => (row[c] === null || row[c] === undefined ? '-' : String(row[c]))).join(' | ')} | ${status} |\n`,
      );
  }
}
