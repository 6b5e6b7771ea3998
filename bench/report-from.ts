// Remakes the broker benchmark's .md and .svg from a results file it wrote, without running anything:
// the rows are taken again from the file's runs, so a figure follows the current report code.
// Usage: node build/bench/report-from.js [--out DIR] bench/results/<stamp>.json...
// Writes <stamp>.md and <stamp>.svg beside each file, or in DIR.
import { readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import type { FleetRun } from './fleet-child.js';
import type { FleetSection } from './fleet-report.js';
import { LOADGEN_RATIO_MAX_PCT, markdown, type Row, type RunResult, rowsOf } from './report.js';
import { svg } from './svg.js';

const USAGE = 'usage: node build/bench/report-from.js [--out DIR] RESULTS.json...';

function fail(message: string): never {
  process.stderr.write(`report-from: ${message}\n`);
  process.exit(1);
}

function options(): { out: string | undefined; files: string[] } {
  try {
    const { values, positionals } = parseArgs({ options: { out: { type: 'string' }, help: { type: 'boolean' } }, allowPositionals: true });
    if (values.help === true) {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    }
    if (positionals.length === 0) fail(USAGE);
    return { out: values.out, files: positionals };
  } catch (err) {
    fail(`${(err as Error).message}\n${USAGE}`);
  }
}

const { out, files } = options();
for (const file of files) {
  let data: { meta?: Record<string, unknown>; rows?: Row[]; runs?: RunResult[]; fleet?: FleetRun[]; fleetSkipped?: string[] };
  try {
    data = JSON.parse(readFileSync(file, 'utf8')) as typeof data;
  } catch (err) {
    fail(`${file}: ${(err as Error).message}`);
  }
  if (typeof data.meta !== 'object' || data.meta === null || (!Array.isArray(data.runs) && !Array.isArray(data.rows))) {
    fail(`${file}: not a bench results file (meta and runs expected)`);
  }
  const rows = Array.isArray(data.runs) ? rowsOf(data.runs, LOADGEN_RATIO_MAX_PCT) : (data.rows as Row[]);
  const fleet: FleetSection | null = Array.isArray(data.fleet) ? { runs: data.fleet, skipped: data.fleetSkipped ?? [] } : null;
  const base = join(out ?? dirname(file), basename(file).replace(/\.json$/, ''));
  writeFileSync(`${base}.md`, `${markdown(rows, data.meta, LOADGEN_RATIO_MAX_PCT, fleet)}\n`);
  writeFileSync(`${base}.svg`, svg(rows, data.meta, LOADGEN_RATIO_MAX_PCT, fleet));
  process.stdout.write(`report-from: wrote ${base}.md and ${base}.svg\n`);
}
