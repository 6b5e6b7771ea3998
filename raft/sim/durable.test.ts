import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runCli } from './cli.js';
import type { Fault, SimResult, StorageBug } from './sim.js';
import { durableFaultNames, runSeed, storageBugs } from './sim.js';

// docs/raft.md "Persistence": the durable mode runs the cores over the power-cut storage double
// with awaitStorage, and cuts power to one node or to all three.

const faults: ReadonlySet<Fault> = new Set(durableFaultNames);
const seeds = 30;
/** Each storage bug must be caught within this many seeds from seed 1. */
const caughtWithin = 40;
/** What a lost write breaks first: an entry a majority no longer holds, a leader without it, two
 * leaders or two votes in a term, or diverging logs or states. */
const lossProperties = new Set([
  'committed entry lost',
  'leader completeness',
  'election safety',
  'double vote',
  'log matching',
  'state machine safety',
  'applied state',
]);

function firstCaught(bug: StorageBug): SimResult | undefined {
  for (let seed = 1; seed <= caughtWithin; seed++) {
    const r = runSeed({ seed, faults, durable: true, unsafe: bug });
    if (!r.ok) return r;
  }
  return undefined;
}

describe('raft simulator: the durable mode', { timeout: 120_000 }, () => {
  it(`${seeds} seeds with power cuts and every durable fault keep every safety property and commit once quiet`, () => {
    let cuts = 0;
    let allCuts = 0;
    let tornCut = 0;
    let committed = 0;
    for (let seed = 1; seed <= seeds; seed++) {
      const r = runSeed({ seed, faults, durable: true });
      assert.ok(r.ok, r.ok ? '' : `seed ${seed}: ${r.violation}\n${r.trace.slice(-40).join('\n')}`);
      cuts += r.stats.powerCuts;
      allCuts += r.stats.allPowerCuts;
      tornCut += r.stats.tornTailsCut;
      committed += r.stats.committed;
    }
    // The run is not vacuous: power went, all at once too, torn writes reached the disks and were
    // cut at restart, and the cluster went on committing.
    assert.ok(allCuts >= seeds, `${allCuts} cuts of all three nodes`);
    assert.ok(cuts > 3 * allCuts, `${cuts} nodes lost power`);
    assert.ok(tornCut > 0, 'no restart cut a torn tail');
    assert.ok(committed > 100 * seeds, `${committed} entries committed`);
  });

  for (const bug of storageBugs) {
    it(`the storage bug ${bug} is caught within ${caughtWithin} seeds as lost data`, () => {
      const r = firstCaught(bug);
      assert.ok(r !== undefined && !r.ok, `${bug} not caught in ${caughtWithin} seeds`);
      assert.ok(lossProperties.has(r.property), `${bug} caught as ${r.property}: ${r.violation}`);
    });
  }

  it('the command line runs the durable mode, refuses its bugs without it and memory-only faults with it', () => {
    const out: string[] = [];
    const err: string[] = [];
    const io = { out: (l: string) => out.push(l), err: (l: string) => err.push(l) };
    assert.equal(runCli(['--seeds', '2', '--first-seed', '1', '--durable'], io), 0);
    assert.match(out.at(-1) ?? '', /2 seeds from 1 passed .* power cuts/);
    assert.equal(runCli(['--seeds', '1', '--first-seed', '1', '--break', 'skip-fsync'], io), 2);
    assert.match(err.at(-1) ?? '', /--break skip-fsync needs --durable/);
    assert.equal(runCli(['--seeds', '1', '--first-seed', '1', '--durable', '--faults', 'amnesia'], io), 2);
    assert.match(err.at(-1) ?? '', /fault "amnesia" is not run with --durable/);
    assert.equal(runCli(['--seeds', '3', '--first-seed', '1', '--durable', '--break', 'skip-fsync'], io), 1);
    assert.match(err.at(-1) ?? '', /replay with: .* --durable --break skip-fsync/);
  });

  it('a storage bug outside the durable mode is refused, not silently ignored', () => {
    assert.throws(() => runSeed({ seed: 1, faults, unsafe: 'skip-fsync' }), /skip-fsync needs the durable mode/);
    assert.throws(() => runSeed({ seed: 1, faults: new Set<Fault>(['amnesia']), durable: true }), /fault amnesia/);
  });
});
