import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { Message } from '../core/messages.js';
import { TestCluster } from '../core/test-cluster.js';
import { SafetyChecker } from './checker.js';

// Property tests complement the simulator: fast-check drives the same cores through arbitrary
// operation sequences (including ones the simulator's schedule makes unlikely) and shrinks a
// failure to a minimal sequence. The simulator's checker judges every Ready.
type Op =
  | { op: 'campaign' | 'propose' | 'crash' | 'restart'; node: number }
  | { op: 'partition'; alone: number }
  | { op: 'heal' }
  | { op: 'tick'; ms: number }
  | { op: 'deliver'; dropMask: number };

const node = fc.integer({ min: 1, max: 3 });
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 2, arbitrary: fc.record({ op: fc.constantFrom('campaign', 'propose' as const), node }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constantFrom('crash', 'restart' as const), node }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('partition' as const), alone: node }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('heal' as const) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('tick' as const), ms: fc.integer({ min: 1, max: 150 }) }) },
  // Mostly lossless rounds, so elections and commits happen often enough to matter.
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('deliver' as const),
      dropMask: fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 255 }) }),
    }),
  },
);

function apply(c: TestCluster, o: Op, seq: { n: number }): void {
  const up = (id: number) => c.running().some((n) => n.id === id);
  switch (o.op) {
    case 'campaign':
      if (up(o.node)) c.node(o.node).campaign();
      return;
    case 'propose':
      if (up(o.node)) c.node(o.node).propose([new TextEncoder().encode(`v${seq.n++}`)]);
      return;
    case 'crash':
      if (up(o.node) && c.running().length > 1) c.crash(o.node);
      return;
    case 'restart':
      if (!up(o.node)) c.restart(o.node);
      return;
    case 'partition':
      c.partition([[o.alone], [1, 2, 3].filter((x) => x !== o.alone)]);
      return;
    case 'heal':
      c.heal();
      return;
    case 'tick':
      c.tick(o.ms);
      return;
    case 'deliver': {
      // Drops the k-th queued message when bit k % 8 of the mask is set.
      let k = 0;
      c.stabilize((_m: Message) => ((o.dropMask >> (k++ % 8)) & 1) === 0);
      return;
    }
    default: {
      const _: never = o;
      throw new Error(`unknown op ${String(_)}`);
    }
  }
}

describe('raft core under arbitrary operation sequences (fast-check)', { timeout: 60_000 }, () => {
  it('no sequence of elections, proposals, partitions, crashes and losses breaks a safety property', () => {
    let elections = 0;
    let committed = 0;
    fc.assert(
      fc.property(fc.array(op, { minLength: 20, maxLength: 120 }), fc.integer({ min: 1, max: 1000 }), (ops, seed) => {
        const checker = new SafetyChecker();
        const c = new TestCluster({ electionTimeoutMs: 100, seed, observer: checker });
        const seq = { n: 0 };
        for (const o of ops) apply(c, o, seq);
        elections += checker.elections;
        committed += checker.committed.length;
      }),
      { numRuns: 300, seed: 20_261_129 },
    );
    assert.ok(elections > 300 && committed > 300, `the runs did something: ${elections} elections, ${committed} commits`);
  });

  it('the same property fails for a core that grants every vote (the property can fail)', () => {
    const outcome = fc.check(
      fc.property(fc.array(op, { minLength: 20, maxLength: 120 }), fc.integer({ min: 1, max: 1000 }), (ops, seed) => {
        const c = new TestCluster({
          electionTimeoutMs: 100,
          seed,
          node: { unsafe: 'grant-every-vote', preVote: false },
          observer: new SafetyChecker(),
        });
        const seq = { n: 0 };
        for (const o of ops) apply(c, o, seq);
      }),
      { numRuns: 2000, seed: 20_261_129 },
    );
    assert.equal(outcome.failed, true);
    assert.match(String(outcome.errorInstance), /election safety|RAFT_INVARIANT|invariant/);
  });
});
