// The mutant report: every planted bug of the core (`--break` rules) run over disjoint blocks of
// seeds with the fault mix, counting the seeds in which a checker caught it. A planted bug that the
// default mix seldom catches is a situation the fault schedules seldom build, or one no checker
// looks at: the report says which, seed by seed, so the schedule is fixed and not the seed.
import type { Fault, SimRule } from './sim.js';
import { runSeed } from './sim.js';

export interface MutantReportOptions {
  readonly rules: readonly SimRule[];
  readonly faults: ReadonlySet<Fault>;
  /** Run the seeds in the durable mode (the storage bugs need it). */
  readonly durable?: boolean;
  /** Seeds per block. */
  readonly seeds: number;
  readonly first: number;
  readonly blocks: number;
  /** A block passes once this many of its seeds caught the rule; the rest of it is not run. */
  readonly minCaught: number;
}

export interface BlockResult {
  readonly first: number;
  /** Seeds run: up to the one that made `caught` reach minCaught, or the whole block. */
  readonly run: number;
  readonly caught: number;
  /** The first seed that caught the rule, and the property that caught it. */
  readonly firstCaught: { readonly seed: number; readonly property: string } | null;
  readonly ms: number;
}

export interface RuleResult {
  readonly rule: SimRule;
  readonly blocks: readonly BlockResult[];
  readonly ok: boolean;
}

export interface MutantReport {
  readonly options: MutantReportOptions;
  readonly rules: readonly RuleResult[];
  readonly ok: boolean;
}

export function mutantReport(o: MutantReportOptions): MutantReport {
  const rules = o.rules.map((rule): RuleResult => {
    const blocks: BlockResult[] = [];
    for (let b = 0; b < o.blocks; b++) blocks.push(runBlock(o, rule, o.first + b * o.seeds));
    return { rule, blocks, ok: blocks.every((r) => r.caught >= o.minCaught) };
  });
  return { options: o, rules, ok: rules.every((r) => r.ok) };
}

function runBlock(o: MutantReportOptions, rule: SimRule, first: number): BlockResult {
  const started = performance.now();
  let caught = 0;
  let run = 0;
  let firstCaught: BlockResult['firstCaught'] = null;
  for (let seed = first; seed < first + o.seeds && caught < o.minCaught; seed++) {
    run++;
    const r = runSeed({ seed, faults: o.faults, unsafe: rule, ...(o.durable === true ? { durable: true } : {}) });
    if (r.ok) continue;
    caught++;
    firstCaught ??= { seed, property: r.property };
  }
  return { first, run, caught, firstCaught, ms: performance.now() - started };
}

export function formatMutantReport(r: MutantReport): string[] {
  const o = r.options;
  const faults = [...o.faults].join(',') || 'none';
  const lines = [
    `sim: mutant report${o.durable === true ? ' (durable mode)' : ''}, ${o.blocks} block(s) of ${o.seeds} seeds from ${o.first} (faults ${faults}); a block stops once ${o.minCaught} seeds caught the rule`,
    '| rule | block | seeds run | caught | first caught (seed, property) | ms |',
    '|---|--:|--:|--:|---|--:|',
  ];
  for (const rule of r.rules) {
    for (const b of rule.blocks) {
      const first = b.firstCaught === null ? 'none' : `${b.firstCaught.seed}, ${b.firstCaught.property}`;
      const verdict = b.caught >= o.minCaught ? '' : ' ✗';
      lines.push(`| ${rule.rule} | ${b.first} | ${b.run} | ${b.caught}${verdict} | ${first} | ${Math.round(b.ms)} |`);
    }
  }
  const missed = r.rules.filter((x) => !x.ok).map((x) => x.rule);
  lines.push(missed.length === 0 ? 'sim: every rule was caught in every block' : `sim: NOT CAUGHT often enough: ${missed.join(', ')}`);
  return lines;
}
