// The bridge link's planted bugs (test/support/bridge-mutants.ts) still plant: each patch finds its
// text exactly once in this build, and the copy differs from it only there. The failover tests that
// run them are in the slow layer; this keeps a change to the link from leaving one unplanted until
// then.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildPatched } from '../jepsen-like-tests/mutants.js';
import { BRIDGE_MUTANTS } from './support/bridge-mutants.js';

const BUILD = fileURLToPath(new URL('..', import.meta.url));

describe('bridge mutants', () => {
  for (const [name, patches] of Object.entries(BRIDGE_MUTANTS)) {
    it(`${name} builds and changes only its patched text`, () => {
      const cli = buildPatched(name, patches, BUILD);
      assert.ok(cli.startsWith(join(BUILD, 'mutants', name)));
      for (const p of patches) {
        const original = readFileSync(join(BUILD, p.file), 'utf8');
        const mutated = readFileSync(join(BUILD, 'mutants', name, p.file), 'utf8');
        assert.notEqual(mutated, original, `${p.file} was patched`);
      }
      const file = patches[0]?.file as string;
      let expected = readFileSync(join(BUILD, file), 'utf8');
      for (const p of patches) if (p.file === file) expected = expected.replace(p.find, p.replace);
      assert.equal(readFileSync(join(BUILD, 'mutants', name, file), 'utf8'), expected);
    });
  }
});
