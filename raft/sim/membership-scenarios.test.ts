import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Fault, Scenario, SimResult } from './sim.js';
import { runSeed } from './sim.js';

const none: ReadonlySet<Fault> = new Set();
type Stats = Extract<SimResult, { ok: true }>['stats'];

/** Runs a membership scenario (three fresh nodes bootstrap, then one thing happens) for a few seeds;
 * every invariant holds, and at the end every node is a caught-up voter again. */
function scenario(name: Scenario, seeds = 3): Stats[] {
  const out: Stats[] = [];
  for (let seed = 1; seed <= seeds; seed++) {
    const r = runSeed({ seed, faults: none, scenario: name });
    assert.ok(r.ok, r.ok ? '' : `${name} seed ${seed}: ${r.violation}\n${r.trace.slice(-30).join('\n')}`);
    out.push(r.stats);
  }
  return out;
}

const membersOf = (config: string): string[] => config.split(',');

describe('raft simulator: membership scenarios (docs/design.md "Replacing a node that forgot")', { timeout: 60_000 }, () => {
  it('three fresh nodes bootstrap one configuration of all three, proposed once', () => {
    for (const s of scenario('bootstrap-all-fresh')) assert.deepEqual(s.configs, ['1.a1,2.b1,3.c1']);
  });

  it('three amnesiac nodes never bootstrap; nobody serves and each reports needsForceStart', () => {
    for (const s of scenario('bootstrap-all-amnesiac')) {
      assert.equal(s.elections, 0);
      assert.deepEqual(s.configs, []);
    }
  });

  it('a node that forgot is removed, then its new member added once caught up: three changes, never four voters', () => {
    for (const s of scenario('remove-then-add')) {
      assert.equal(s.amnesias, 1);
      assert.equal(s.configs.length, 3, s.configs.join(' | '));
      assert.deepEqual(membersOf(s.configs[1] ?? ''), ['1.a1', '2.b1']);
      assert.ok(s.configs.every((c) => membersOf(c).length <= 3));
      assert.match(s.configs[2] ?? '', /3\.c[2-9]/);
    }
  });

  it('a replacement that crash-loops is never added while it cannot catch up, and is added once it stays up', () => {
    for (const s of scenario('crash-looping-replacement')) {
      assert.ok(s.amnesias >= 2, `amnesias ${s.amnesias}`);
      assert.deepEqual(membersOf(s.configs[1] ?? ''), ['1.a1', '2.b1']);
      assert.ok(
        s.configs.every((c) => membersOf(c).length >= 2),
        'never fewer than two voters',
      );
    }
  });

  it('the leader (and then the other member) stopping at any step of a replacement loses nothing', () => {
    scenario('leader-dies-during-replacement', 8);
  });

  it('quick clean restarts of each node against a live lease, and a crash right after a resume', () => {
    scenario('quick-restart');
    for (const s of scenario('crash-after-resume')) assert.equal(s.amnesias, 1);
  });

  it('a core that swaps a member for its new incarnation in one entry is caught as a configuration overlap', () => {
    let caught = '';
    for (let seed = 1; seed <= 50 && caught === ''; seed++) {
      const r = runSeed({ seed, faults: none, scenario: 'remove-then-add', unsafe: 'swap-member' });
      if (!r.ok) caught = r.property;
    }
    assert.equal(caught, 'configuration overlap');
  });
});

describe('raft simulator: force-start scenarios (docs/design.md "Force-start")', { timeout: 60_000 }, () => {
  it('a force-start while the other two are alive and led is refused; the node comes back amnesiac and is replaced', () => {
    for (const s of scenario('force-start-alive')) {
      assert.equal(s.forceStarts, 1);
      assert.equal(s.forceFailures, 1);
      assert.equal(s.epochs, 1, 'no second epoch committed anything');
      assert.equal(s.finalGeneration, 1);
      assert.match(s.configs.at(-1) ?? '', /3\.c[3-9]/);
    }
  });

  it('a force-start cut off by a partition makes an epoch nobody joins: voters of the led epoch never switch, and it gives up', () => {
    for (const s of scenario('force-start-partitioned')) {
      assert.equal(s.forceStarts, 1);
      assert.equal(s.forceFailures, 1);
      assert.equal(s.forceServed, 0);
      assert.equal(s.switches, 0);
      assert.equal(s.finalGeneration, 1);
    }
  });

  it('after two memory losses the survivor force-starts from its file; the others join as learners and the new epoch serves', () => {
    for (const s of scenario('force-start-after-two-losses')) {
      assert.equal(s.forceServed, 1);
      assert.equal(s.forceFailures, 0);
      assert.equal(s.finalGeneration, 2);
      // The forced configuration, then one server at a time up to three.
      assert.deepEqual(
        s.configs.slice(1).map((c) => membersOf(c).length),
        [1, 2, 3],
      );
    }
  });

  it('two concurrent force-starts: at most one epoch serves, the other gives up and its node joins the one that does', () => {
    for (const s of scenario('force-start-concurrent', 5)) {
      assert.equal(s.forceStarts, 2);
      assert.equal(s.forceServed, 1);
      assert.equal(s.forceFailures, 1);
      assert.equal(s.finalGeneration, 2);
    }
  });
});

describe('raft simulator: more membership scenarios (issue 7)', { timeout: 60_000 }, () => {
  it('a learner that must vote: the add entry reached only the other voter, whose election needs the new member, who answers as itself', () => {
    for (const s of scenario('learner-must-vote')) {
      assert.ok(s.learnerVotes >= 1, `learner votes ${s.learnerVotes}`);
      assert.ok(s.elections >= 2);
      assert.deepEqual(
        s.configs.map((c) => membersOf(c).length),
        [3, 2, 3],
      );
    }
  });

  it("Ongaro's single-server bug: a leader dies with an unreplicated change; the next change waits for an entry of the new term", () => {
    for (const s of scenario('single-server-bug')) {
      assert.ok(s.elections >= 2);
      assert.deepEqual(
        s.configs.map((c) => membersOf(c).length),
        [3, 2, 3],
        s.configs.join(' | '),
      );
    }
  });

  it('a node stopped for two hours resumes its state file, catches up and is a voter again, its member unchanged', () => {
    for (const s of scenario('stopped-for-hours', 1)) {
      assert.deepEqual(s.configs, ['1.a1,2.b1,3.c1'], 'a cleanly stopped member is not replaced');
      assert.equal(s.amnesias, 0);
    }
  });

  it('a consumed state file put back is refused; the node comes back amnesiac and is replaced instead of rolling back', () => {
    for (const s of scenario('restored-state-file')) {
      assert.equal(s.refusedFiles, 1);
      assert.match(s.configs.at(-1) ?? '', /3\.c2/);
    }
  });

  it('two fresh nodes and one member never bootstrap a second cluster; nobody serves until the member is force-started', () => {
    for (const s of scenario('bootstrap-two-fresh-one-member')) {
      assert.equal(s.forceServed, 1);
      assert.equal(s.finalGeneration, 2);
      assert.deepEqual(
        s.configs.slice(1).map((c) => membersOf(c).length),
        [1, 2, 3],
      );
    }
  });
});
