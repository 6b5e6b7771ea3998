#!/usr/bin/env node
// The deterministic Raft simulator: `npm run sim -- --seeds N --first-seed S [--faults LIST]`.
// Exit 0: every seed passed; 1: a violation (seed, property and event trace printed); 2: bad usage.
import { randomInt } from 'node:crypto';
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { UnsafeRule } from '../core/raft.js';
import { formatMutantReport, mutantReport } from './mutants.js';
import type { Fault, SimRule } from './sim.js';
import { durableFaultNames, faultNames, memoryOnlyFaults, runSeed, type StorageBug, storageBugs } from './sim.js';

const usage =
  `usage: sim --seeds N --first-seed S [--faults ${faultNames.join(',')}|all|none] ` +
  '[--break grant-every-vote|commit-old-terms|answer-every-vote|swap-member|install-any-chunk]\n' +
  '       sim --durable ... [--break skip-fsync|ack-before-fsync]: nodes keep their state in a power-cut storage double ' +
  `and lose power, one or all at once (faults there: ${durableFaultNames.join(',')}; all: these)\n` +
  '       sim --mutants [--durable] [--seeds N] [--first-seed S] [--blocks B] [--min-caught K] [--faults ...]: every --break rule ' +
  '(with --durable: the storage bugs) over B disjoint blocks of N seeds (default 3 x 500 from a random first seed); exit 1 unless each is caught in at ' +
  'least K seeds (default 5) of every block';
export const unsafeRules: readonly UnsafeRule[] = [
  'grant-every-vote',
  'commit-old-terms',
  'answer-every-vote',
  'swap-member',
  'install-any-chunk',
];
/** The rules planted in the durable mode's storage handling. */
export const durableRules: readonly StorageBug[] = storageBugs;

export const exitOk = 0;
export const exitViolation = 1;
export const exitUsage = 2;

/** Where the CLI writes: stdout carries the trace and the summary, stderr the verdict. */
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

function parseFaults(list: string, durable: boolean): Set<Fault> {
  const out = new Set<Fault>();
  const names = list.split(',').map((s) => s.trim());
  for (const name of names.filter((s) => s !== '')) {
    if (name === 'all') for (const f of durable ? durableFaultNames : faultNames) out.add(f);
    else if (name === 'none') continue;
    else if (durable && memoryOnlyFaults.has(name as Fault)) fail(`fault "${name}" is not run with --durable`);
    else if ((faultNames as readonly string[]).includes(name)) out.add(name as Fault);
    else fail(`unknown fault "${name}"`);
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
        break: { type: 'string' },
        mutants: { type: 'boolean', default: false },
        durable: { type: 'boolean', default: false },
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

/** Runs the simulator as the command line asks; returns the exit code. */
export function runCli(argv: readonly string[], io: CliOutput): number {
  try {
    return simulate(argv, io);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    io.err(`sim: ${err.message}\n${usage}`);
    return exitUsage;
  }
}

function simulate(argv: readonly string[], io: CliOutput): number {
  const v = parseFlags(argv);
  if (v.help === true) {
    io.out(usage);
    return exitOk;
  }
  const durable = v.durable === true;
  const faults = parseFaults(v.faults ?? 'all', durable);
  if (v.mutants === true) {
    if (v.break !== undefined) fail('--mutants runs every --break rule; give one or the other');
    const report = mutantReport({
      rules: durable ? durableRules : unsafeRules,
      faults,
      durable,
      seeds: parseCount('seeds', v.seeds ?? '500', 1),
      // Seeds nobody chose: a random block unless one is asked for (printed, so a run replays).
      first: parseCount('first-seed', v['first-seed'] ?? String(randomInt(1, 2 ** 31)), 0),
      blocks: parseCount('blocks', v.blocks ?? '3', 1),
      minCaught: parseCount('min-caught', v['min-caught'] ?? '5', 1),
    });
    for (const line of formatMutantReport(report)) io.out(line);
    return report.ok ? exitOk : exitViolation;
  }
  const seeds = parseCount('seeds', v.seeds ?? '100', 1);
  const first = parseCount('first-seed', v['first-seed'] ?? '1', 0);
  const broken = v.break;
  const rules: readonly string[] = durable ? [...unsafeRules, ...durableRules] : unsafeRules;
  if (broken !== undefined && (durableRules as readonly string[]).includes(broken) && !durable) fail(`--break ${broken} needs --durable`);
  if (broken !== undefined && !rules.includes(broken)) fail(`unknown rule "${broken}" for --break`);
  const faultList = [...faults].join(',') || 'none';
  const started = performance.now();
  let committed = 0;
  let elections = 0;
  let compactions = 0;
  let restores = 0;
  let powerCuts = 0;
  let tornCut = 0;
  for (let seed = first; seed < first + seeds; seed++) {
    const r = runSeed({ seed, faults, ...(durable ? { durable } : {}), ...(broken === undefined ? {} : { unsafe: broken as SimRule }) });
    if (!r.ok) {
      for (const line of r.trace) io.out(line);
      io.err(`sim: VIOLATION at seed ${seed} (faults ${faultList}): ${r.violation}`);
      const extra = (durable ? ' --durable' : '') + (broken === undefined ? '' : ` --break ${broken}`);
      io.err(`sim: replay with: node build/raft/sim/cli.js --seeds 1 --first-seed ${seed} --faults ${faultList}${extra}`);
      return exitViolation;
    }
    committed += r.stats.committed;
    elections += r.stats.elections;
    compactions += r.stats.compactions;
    restores += r.stats.restores;
    powerCuts += r.stats.powerCuts;
    tornCut += r.stats.tornTailsCut;
  }
  const ms = Math.round(performance.now() - started);
  io.out(
    `sim: ${seeds} seeds from ${first} passed (faults ${faultList}) in ${ms} ms; ${elections} elections, ${committed} committed entries` +
      (compactions > 0 ? `, ${compactions} compactions, ${restores} snapshots restored` : '') +
      (durable ? `, ${powerCuts} power cuts, ${tornCut} torn tails cut` : ''),
  );
  return exitOk;
}

const invokedDirectly = process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  process.exitCode = runCli(process.argv.slice(2), {
    out: (line) => console.log(line),
    err: (line) => console.error(line),
  });
}
