// The mutant report: every planted bug (the core's `--break` rules, or an application's mutants)
// run over disjoint blocks of seeds with the fault mix, counting the seeds in which a checker caught
// it. A planted bug that the default mix seldom catches is a situation the fault schedules seldom
// build, or one no checker looks at: the report says which, seed by seed, so the schedule is fixed
// and not the seed.
import type { Fault, SimResult, SimRule } from './sim.js';
import { runSeed } from './sim.js';

/** One seed of a planted bug: the result, and whether the bug changed what the run did (null: not
 * known). A bug that never changed anything cannot be caught by any checker. */
export interface MutantRun {
  readonly result: SimResult;
  readonly exposed: boolean | null;
}

export interface MutantReportOptions<R extends string = SimRule> {
  readonly rules: readonly R[];
  readonly faults: ReadonlySet<Fault>;
  /** Run the seeds in the durable mode (the storage bugs need it). */
  readonly durable?: boolean;
  /** Seeds per block. */
  readonly seeds: number;
  readonly first: number;
  readonly blocks: number;
  /** A block passes once this many of its seeds caught the rule; the rest of it is not run. */
  readonly minCaught: number;
  /** Runs one seed with the rule planted; the raft core's `--break` rules by default. */
  readonly run?: (rule: R, seed: number, faults: ReadonlySet<Fault>) => MutantRun;
  /** Names what is reported in the first line ("sim" by default). */
  readonly name?: string;
}

export interface BlockResult {
  readonly first: number;
  /** Seeds run: up to the one that made `caught` reach minCaught, or the whole block. */
  readonly run: number;
  readonly caught: number;
  /** Seeds run in which the bug changed what the run did (null: not known). */
  readonly exposed: number | null;
  /** The first seed that caught the rule, and the property that caught it. */
  readonly firstCaught: { readonly seed: number; readonly property: string } | null;
  readonly ms: number;
}

export interface RuleResult<R extends string = SimRule> {
  readonly rule: R;
  readonly blocks: readonly BlockResult[];
  readonly ok: boolean;
}

export interface MutantReport<R extends string = SimRule> {
  readonly options: MutantReportOptions<R>;
  readonly rules: readonly RuleResult<R>[];
  readonly ok: boolean;
}

function runCore(rule: string, seed: number, faults: ReadonlySet<Fault>, durable: boolean): MutantRun {
  return { result: runSeed({ seed, faults, unsafe: rule as SimRule, ...(durable ? { durable: true } : {}) }), exposed: null };
}

export function mutantReport<R extends string = SimRule>(o: MutantReportOptions<R>): MutantReport<R> {
  const rules = o.rules.map((rule): RuleResult<R> => {
    const blocks: BlockResult[] = [];
    for (let b = 0; b < o.blocks; b++) blocks.push(runBlock(o, rule, o.first + b * o.seeds));
    return { rule, blocks, ok: blocks.every((r) => r.caught >= o.minCaught) };
  });
  return { options: o, rules, ok: rules.every((r) => r.ok) };
}

function runBlock<R extends string>(o: MutantReportOptions<R>, rule: R, first: number): BlockResult {
  const started = performance.now();
  const run = o.run ?? ((r: R, seed: number, faults: ReadonlySet<Fault>) => runCore(r, seed, faults, o.durable === true));
  let caught = 0;
  let seeds = 0;
  let exposed: number | null = null;
  let firstCaught: BlockResult['firstCaught'] = null;
  for (let seed = first; seed < first + o.seeds && caught < o.minCaught; seed++) {
    seeds++;
    const r = run(rule, seed, o.faults);
    if (r.exposed !== null) exposed = (exposed ?? 0) + (r.exposed ? 1 : 0);
    if (r.result.ok) continue;
    caught++;
    firstCaught ??= { seed, property: r.result.property };
  }
  return { first, run: seeds, caught, exposed, firstCaught, ms: performance.now() - started };
}

export function formatMutantReport<R extends string>(r: MutantReport<R>): string[] {
  const o = r.options;
  const name = o.name ?? 'sim';
  const faults = [...o.faults].join(',') || 'none';
  const withExposed = r.rules.some((x) => x.blocks.some((b) => b.exposed !== null));
  const lines = [
    `${name}: mutant report${o.durable === true ? ' (durable mode)' : ''}, ${o.blocks} block(s) of ${o.seeds} seeds from ${o.first} (faults ${faults}); a block stops once ${o.minCaught} seeds caught the rule`,
    withExposed
      ? '| rule | block | seeds run | caught | exposed | first caught (seed, property) | ms |'
      : '| rule | block | seeds run | caught | first caught (seed, property) | ms |',
    withExposed ? '|---|--:|--:|--:|--:|---|--:|' : '|---|--:|--:|--:|---|--:|',
  ];
  for (const rule of r.rules) {
    for (const b of rule.blocks) {
      const first = b.firstCaught === null ? 'none' : `${b.firstCaught.seed}, ${b.firstCaught.property}`;
      const verdict = b.caught >= o.minCaught ? '' : ' ✗';
      const exposed = withExposed ? ` ${b.exposed ?? '-'} |` : '';
      lines.push(`| ${rule.rule} | ${b.first} | ${b.run} | ${b.caught}${verdict} |${exposed} ${first} | ${Math.round(b.ms)} |`);
    }
  }
  const missed = r.rules.filter((x) => !x.ok).map((x) => x.rule);
  lines.push(
    missed.length === 0 ? `${name}: every rule was caught in every block` : `${name}: NOT CAUGHT often enough: ${missed.join(', ')}`,
  );
  return lines;
}
