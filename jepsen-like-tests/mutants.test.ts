// The harness's planted bugs build from this build: each patch finds its text exactly once, the
// copy differs from the original only where the patch says, the mutant's CLI loads, and nothing of
// build/mutants is in the package's files.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { buildMutant, isJepsenMutant, JEPSEN_MUTANTS, type JepsenMutant } from './mutants.js';

const BUILD = join(process.cwd(), 'build');

describe('jepsen-like mutants', () => {
  for (const name of Object.keys(JEPSEN_MUTANTS) as JepsenMutant[]) {
    it(`${name} builds, changes only its patched text, and its CLI loads`, () => {
      const cli = buildMutant(name, BUILD);
      assert.ok(cli.startsWith(join(BUILD, 'mutants', name)));
      for (const p of JEPSEN_MUTANTS[name].patches) {
        const original = readFileSync(join(BUILD, p.file), 'utf8');
        const mutated = readFileSync(join(BUILD, 'mutants', name, p.file), 'utf8');
        assert.notEqual(mutated, original, `${p.file} was patched`);
        assert.equal(mutated, original.replace(p.find, p.replace));
      }
      const r = spawnSync(process.execPath, [cli, '--version'], { encoding: 'utf8', timeout: 20_000 });
      assert.equal(r.status, 0, r.stderr);
    });
  }

  it('refuses a patch whose text is not in the build, naming the mutant and the file', () => {
    const saved = JEPSEN_MUTANTS['no-lease'].patches[0];
    const broken = { ...saved, find: 'text that is nowhere in the file' };
    (JEPSEN_MUTANTS['no-lease'].patches as unknown as unknown[])[0] = broken;
    try {
      assert.throws(
        () => buildMutant('no-lease', BUILD),
        /mutant no-lease: the text to replace in src\/cluster\/serving-rule.js is not there/,
      );
    } finally {
      (JEPSEN_MUTANTS['no-lease'].patches as unknown as unknown[])[0] = saved;
    }
  });

  it('knows its names, and the package never ships build/mutants', () => {
    assert.ok(isJepsenMutant('ack-before-commit'));
    assert.ok(!isJepsenMutant('toString'));
    const files = (JSON.parse(readFileSync('package.json', 'utf8')) as { files: string[] }).files;
    assert.ok(!files.some((f) => f.includes('mutants') || f === 'build' || f === 'build/**'), files.join(', '));
  });
});
