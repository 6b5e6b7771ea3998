import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runCli } from './cli.js';
import type { Fault, SimApp, SimResult } from './sim.js';
import { faultNames, runSeed } from './sim.js';

const all: ReadonlySet<Fault> = new Set(faultNames);

function firstFailure(seeds: number, run: (seed: number) => SimResult): SimResult | undefined {
  for (let seed = 1; seed <= seeds; seed++) {
    const r = run(seed);
    if (!r.ok) return r;
  }
  return undefined;
}

describe('raft simulator', { timeout: 60_000 }, () => {
  it('200 seeds with every fault keep every safety property and elect and commit once quiet', () => {
    const failure = firstFailure(200, (seed) => runSeed({ seed, faults: all }));
    assert.equal(failure, undefined, failure === undefined || failure.ok ? '' : failure.trace.slice(-40).join('\n'));
  });

  it('each fault class alone passes 20 seeds', () => {
    for (const f of faultNames) {
      const failure = firstFailure(20, (seed) => runSeed({ seed, faults: new Set([f]) }));
      assert.equal(failure?.ok ?? true, true, `fault ${f}`);
    }
  });

  it('a core that grants a second vote in a term is caught as an election safety violation', () => {
    const failure = firstFailure(200, (seed) => runSeed({ seed, faults: all, unsafe: 'grant-every-vote' }));
    assert.ok(failure !== undefined && !failure.ok, 'the checker must catch two leaders in one term');
    assert.equal(failure.property, 'election safety');
    assert.ok(failure.trace.length > 0, 'the failing seed comes with its event trace');
  });

  it('fault figure8 builds Figure 8 of §5.4.2 and catches a core that commits old-term entries by counting', () => {
    let episodes = 0;
    for (let seed = 1; seed <= 20; seed++) {
      const r = runSeed({ seed, faults: new Set<Fault>(['figure8']) });
      assert.ok(r.ok, r.ok ? '' : `seed ${seed}: ${r.violation}`);
      episodes += r.stats.figure8Episodes;
    }
    assert.ok(episodes >= 20, `${episodes} episodes reached the rival's return`);
    const caught = firstFailure(20, (seed) => runSeed({ seed, faults: new Set<Fault>(['figure8']), unsafe: 'commit-old-terms' }));
    assert.ok(caught !== undefined && !caught.ok, 'the unsafe commit rule must be caught');
    assert.ok(['leader completeness', 'state machine safety', 'applied state'].includes(caught.property), caught.property);
  });

  it('fault leader-pause pauses a leader until another node leads and commits in its term, and keeps every property', () => {
    let episodes = 0;
    for (let seed = 1; seed <= 20; seed++) {
      const r = runSeed({ seed, faults: new Set<Fault>(['leader-pause']) });
      assert.ok(r.ok, r.ok ? '' : `seed ${seed}: ${r.violation}`);
      episodes += r.stats.leaderPauseEpisodes;
    }
    assert.ok(episodes >= 40, `${episodes} episodes in which a rival committed before the resume`);
  });

  it('fault deaf-follower catches a core that answers votes while a leader holds its lease', () => {
    let episodes = 0;
    for (let seed = 1; seed <= 20; seed++) {
      const r = runSeed({ seed, faults: new Set<Fault>(['deaf-follower']) });
      assert.ok(r.ok, r.ok ? '' : `seed ${seed}: ${r.violation}`);
      episodes += r.stats.deafEpisodes;
    }
    assert.ok(episodes >= 20, `${episodes} links cut`);
    const caught = firstFailure(40, (seed) => runSeed({ seed, faults: new Set<Fault>(['deaf-follower']), unsafe: 'answer-every-vote' }));
    assert.ok(caught !== undefined && !caught.ok, 'the lease checker must catch it');
    assert.equal(caught.property, 'lease overlap');
  });

  it('--mutants reports every rule per block and refuses --break beside it', () => {
    const out: string[] = [];
    const io = { out: (l: string) => out.push(l), err: (l: string) => out.push(l) };
    const code = runCli(
      ['--mutants', '--seeds', '4', '--blocks', '2', '--min-caught', '1', '--first-seed', '100', '--faults', 'figure8'],
      io,
    );
    const rows = out.filter((l) => /^\| [a-z-]+ \| \d+ \|/.test(l));
    assert.equal(rows.length, 5 * 2, out.join('\n'));
    assert.ok(rows.some((l) => l.startsWith('| commit-old-terms | 100 |')));
    assert.equal(code, out.some((l) => l.includes('NOT CAUGHT')) ? 1 : 0);
    assert.equal(runCli(['--mutants', '--break', 'commit-old-terms'], io), 2);
  });

  it('fault snapshot: nodes compact while one lags, the lagging one installs a snapshot, some installs crash midway, and every state matches', () => {
    let compactions = 0;
    let restores = 0;
    let installCrashes = 0;
    for (let seed = 1; seed <= 10; seed++) {
      const r = runSeed({ seed, faults: new Set(['snapshot']) });
      assert.ok(r.ok, r.ok ? '' : `seed ${seed}: ${r.violation}`);
      compactions += r.stats.compactions;
      restores += r.stats.restores;
      installCrashes += r.stats.installCrashes;
    }
    assert.ok(
      compactions > 0 && restores > 0 && installCrashes > 0,
      `${compactions} compactions, ${restores} restores, ${installCrashes} crashes`,
    );
  });

  it("fault snapshot with an application: its own snapshot travels with the simulator's and restores the state it had at that index", () => {
    let restores = 0;
    const app = (): SimApp => {
      const at = new Map<number, { index: number; count: number }>();
      const countAt: number[] = [];
      return {
        proposals: () => [new Uint8Array([1])],
        applied: (node, entries) => {
          const st = at.get(node) ?? { index: 0, count: 0 };
          for (const e of entries) {
            st.index = e.index;
            if (e.data !== null) st.count++;
            countAt[e.index] ??= st.count;
            assert.equal(countAt[e.index], st.count, `node ${node} at ${e.index}`);
          }
          at.set(node, st);
        },
        started: (node) => at.delete(node),
        end: () => {},
        snapshot: (node) => {
          const st = at.get(node) ?? { index: 0, count: 0 };
          return [new Uint8Array(new Uint32Array([st.index, st.count]).buffer)];
        },
        restore: (node, chunks) => {
          const bytes = Buffer.concat(chunks.map((c) => Buffer.from(c)));
          const index = bytes.readUInt32LE(0);
          const count = bytes.readUInt32LE(4);
          assert.equal(count, countAt[index], `node ${node} restored ${count} entries at ${index}`);
          at.set(node, { index, count });
          restores++;
        },
      };
    };
    for (let seed = 1; seed <= 5; seed++) {
      const r = runSeed({ seed, faults: new Set(['snapshot', 'crash']), app });
      assert.ok(r.ok, r.ok ? '' : `seed ${seed}: ${r.violation}`);
    }
    assert.ok(restores > 0);
  });

  it('a core that assembles snapshot chunks out of order is caught as an applied-state violation', () => {
    const failure = firstFailure(50, (seed) => runSeed({ seed, faults: new Set(['snapshot', 'reorder']), unsafe: 'install-any-chunk' }));
    assert.ok(failure !== undefined && !failure.ok, 'the checker must catch a snapshot assembled wrongly');
    assert.equal(failure.property, 'applied state');
  });

  it('a failing seed replays to the same violation and the same trace', () => {
    const a = firstFailure(200, (seed) => runSeed({ seed, faults: all, unsafe: 'grant-every-vote' }));
    assert.ok(a !== undefined && !a.ok);
    const b = runSeed({ seed: a.seed, faults: all, unsafe: 'grant-every-vote', trace: true });
    assert.deepEqual(a, b);
  });

  it('the same seed gives the same run; another seed a different one', () => {
    const a = runSeed({ seed: 7, faults: all });
    const b = runSeed({ seed: 7, faults: all });
    const c = runSeed({ seed: 8, faults: all });
    assert.deepEqual(a, b);
    assert.notDeepEqual(a, c);
  });

  it('the CLI exits 2 naming an unknown flag or fault, 1 with a replayable seed on a violation, 0 on success', () => {
    const run = (...args: string[]) => {
      const out: string[] = [];
      const err: string[] = [];
      const status = runCli(args, { out: (l) => out.push(l), err: (l) => err.push(l) });
      return { status, stdout: out.join('\n'), stderr: err.join('\n') };
    };
    const flag = run('--sedes', '3');
    assert.equal(flag.status, 2);
    assert.match(flag.stderr, /sedes/);
    const fault = run('--seeds', '1', '--faults', 'drop,meteor');
    assert.equal(fault.status, 2);
    assert.match(fault.stderr, /meteor/);
    assert.equal(run('--seeds', 'x').status, 2);
    const broken = run('--seeds', '200', '--first-seed', '1', '--break', 'grant-every-vote');
    assert.equal(broken.status, 1);
    const seed = /VIOLATION at seed (\d+) .*election safety/.exec(broken.stderr)?.[1];
    assert.ok(seed !== undefined, broken.stderr);
    assert.match(broken.stdout, /t=\d+ deliver /);
    const replay = run('--seeds', '1', '--first-seed', seed, '--faults', 'all', '--break', 'grant-every-vote');
    assert.equal(replay.status, 1);
    assert.equal(replay.stdout, broken.stdout, 'the replay prints the same trace');
    const ok = run('--seeds', '3', '--first-seed', '10', '--faults', 'drop,crash');
    assert.equal(ok.status, 0, ok.stderr);
    assert.match(ok.stdout, /3 seeds from 10 passed \(faults drop,crash\)/);
  });
});
