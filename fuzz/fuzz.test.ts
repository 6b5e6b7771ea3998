// A short run of every fuzz target: a few hundred inputs each from a fixed seed, so a reader that
// starts to throw an untyped error or to buffer past its bound on the corpus or near it fails
// here. Long runs on fresh seeds are npm run fuzz (docs/fuzzing.md).
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { QUICK_RUNS, readCorpus, runTarget } from './harness.js';
import { allTargets } from './targets.js';

const SEED = 20_261_201;

describe('fuzz targets, quick run', () => {
  const targets = allTargets();
  after(async () => {
    for (const t of targets) await t.close?.();
  });
  for (const target of targets) {
    it(`${target.name}: only typed errors and bounded buffers over ${target.quickRuns ?? QUICK_RUNS} inputs`, async () => {
      const corpus = readCorpus(target.name);
      assert.ok(corpus.length > 0, `fuzz/corpus/${target.name} holds no seed inputs`);
      const r = await runTarget(target, { runs: target.quickRuns ?? QUICK_RUNS, seed: SEED, corpus });
      assert.equal(r.numRuns, target.quickRuns ?? QUICK_RUNS);
      if (r.failed) {
        const [input] = r.counterexample ?? [];
        assert.fail(
          `seed ${r.seed}, path ${r.counterexamplePath}: ${String(r.errorInstance)}\ninput ${JSON.stringify({ data: Buffer.from(input?.data ?? []).toString('hex'), cuts: input?.cuts, knob: input?.knob })}`,
        );
      }
    });
  }
});
