#!/usr/bin/env node
// The broker over the raft simulator from the command line: `npm run sim:broker -- --seeds N
// --first-seed S [--faults LIST] [--mutant NAME]` runs seeds; `--mutants` runs every planted bug of
// the broker simulator over disjoint blocks of fresh seeds of the fault mix and reports, for each,
// the seeds until 5 caught it (raft/sim/mutants.ts). Exit 0: every seed passed (every mutant caught
// often enough); 1: a violation (or a mutant not caught); 2: bad usage. Never part of the package.
import { randomInt } from 'node:crypto';
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { formatMutantReport, mutantReport } from '../../../raft/sim/mutants.js';
import { type Fault, faultNames } from '../../../raft/sim/sim.js';
import { type BrokerMutant, brokerMutants, runBrokerMutant, runBrokerSeed } from './broker-sim.testkit.js';

const usage =
  `usage: sim:broker --seeds N --first-seed S [--faults ${faultNames.join(',')}|all|none] [--mutant ${brokerMutants.join('|')}]\n` +
  '       sim:broker --mutants [--mutant A,B] [--seeds N] [--first-seed S] [--blocks B] [--min-caught K] [--faults ...]: every ' +
  'mutant (or those named) over B disjoint blocks of N seeds (default 3 x 500 from a random first seed); exit 1 unless each ' +
  'is caught in at least K seeds (default 5) of every block';

export const exitOk = 0;
export const exitViolation = 1;
export const exitUsage = 2;

export interface CliOutput {
  out(line: string): void;
  err(line: string): void;
}

class UsageError extends Error {}

function fail(message: string): never {
  throw new UsageError(message);
}

function parseCount(name: string, value: string, min: number): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min) fail(`--${name} must be an integer >= ${min}, got ${value}`);
  return n;
}

function parseFaults(list: string): Set<Fault> {
  const out = new Set<Fault>();
  for (const name of list.split(',').map((s) => s.trim())) {
    if (name === '' || name === 'none') continue;
    if (name === 'all') for (const f of faultNames) out.add(f);
    else if ((faultNames as readonly string[]).includes(name)) out.add(name as Fault);
    else fail(`unknown fault "${name}"`);
  }
  return out;
}

function parseMutants(list: string): BrokerMutant[] {
  const out: BrokerMutant[] = [];
  for (const name of list.split(',').map((s) => s.trim())) {
    if (!(brokerMutants as readonly string[]).includes(name)) fail(`unknown mutant "${name}" for --mutant`);
    out.push(name as BrokerMutant);
  }
  return out;
}

function parseFlags(argv: readonly string[]) {
  try {
    return parseArgs({
      args: [...argv],
      options: {
        seeds: { type: 'string' },
        'first-seed': { type: 'string' },
        faults: { type: 'string', default: 'all' },
        mutant: { type: 'string' },
        mutants: { type: 'boolean', default: false },
        blocks: { type: 'string', default: '3' },
        'min-caught': { type: 'string', default: '5' },
        help: { type: 'boolean', default: false },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    return fail(err instanceof Error ? err.message : String(err));
  }
}

/** Runs the broker simulator as the command line asks; returns the exit code. */
export function runCli(argv: readonly string[], io: CliOutput): number {
  try {
    return simulate(argv, io);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    io.err(`sim:broker: ${err.message}\n${usage}`);
    return exitUsage;
  }
}

function simulate(argv: readonly string[], io: CliOutput): number {
  const v = parseFlags(argv);
  if (v.help === true) {
    io.out(usage);
    return exitOk;
  }
  const faults = parseFaults(v.faults ?? 'all');
  if (v.mutants === true) {
    const report = mutantReport<BrokerMutant>({
      name: 'sim:broker',
      rules: v.mutant === undefined ? brokerMutants : parseMutants(v.mutant),
      faults,
      seeds: parseCount('seeds', v.seeds ?? '500', 1),
      // Seeds nobody chose: a random block unless one is asked for (printed, so a run replays).
      first: parseCount('first-seed', v['first-seed'] ?? String(randomInt(1, 2 ** 31)), 0),
      blocks: parseCount('blocks', v.blocks ?? '3', 1),
      minCaught: parseCount('min-caught', v['min-caught'] ?? '5', 1),
      run: runBrokerMutant,
    });
    for (const line of formatMutantReport(report)) io.out(line);
    return report.ok ? exitOk : exitViolation;
  }
  const seeds = parseCount('seeds', v.seeds ?? '100', 1);
  const first = parseCount('first-seed', v['first-seed'] ?? '1', 0);
  const mutants = v.mutant === undefined ? [] : parseMutants(v.mutant);
  if (mutants.length > 1) fail('--mutant takes one name unless with --mutants');
  const mutant = mutants[0];
  const faultList = [...faults].join(',') || 'none';
  const started = performance.now();
  for (let seed = first; seed < first + seeds; seed++) {
    const r = runBrokerSeed(seed, faults, mutant === undefined ? {} : { mutant });
    if (!r.ok) {
      for (const line of r.trace) io.out(line);
      io.err(`sim:broker: VIOLATION at seed ${seed} (faults ${faultList}): ${r.property}: ${r.violation}`);
      const extra = mutant === undefined ? '' : ` --mutant ${mutant}`;
      io.err(`sim:broker: replay with: node build/src/cluster/sim/cli.js --seeds 1 --first-seed ${seed} --faults ${faultList}${extra}`);
      return exitViolation;
    }
  }
  io.out(`sim:broker: ${seeds} seeds from ${first} passed (faults ${faultList}) in ${Math.round(performance.now() - started)} ms`);
  return exitOk;
}

const invokedDirectly = process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  process.exitCode = runCli(process.argv.slice(2), {
    out: (line) => console.log(line),
    err: (line) => console.error(line),
  });
}
