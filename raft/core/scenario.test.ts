import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { formatScenario, parseScenario, runScenario } from './scenario.js';

// tsc does not copy .txt files into the build folder, so the scripts are read from the source
// tree. RAFT_SCENARIO_REWRITE=1 writes the actual output back (review the diff before committing).
const dir = join(process.cwd(), 'raft/core/testdata');
const rewrite = process.env.RAFT_SCENARIO_REWRITE === '1';

describe('raft scenario scripts (raft/core/testdata)', { timeout: 30_000 }, () => {
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.txt'))
    .sort();

  it('finds the scripts', () => {
    assert.ok(files.length >= 4, `found ${files.join(', ')}`);
  });

  for (const file of files) {
    it(`${file} prints what the script expects`, () => {
      const path = join(dir, file);
      const blocks = parseScenario(readFileSync(path, 'utf8'));
      const outputs = runScenario(blocks);
      if (rewrite) writeFileSync(path, formatScenario(blocks, outputs));
      for (const [k, b] of blocks.entries()) assert.equal(outputs[k], b.expected, `${file}: ${b.command}`);
    });
  }

  it('a bad command is refused with RAFT_SCENARIO_BAD_COMMAND', () => {
    assert.throws(() => runScenario(parseScenario('campaign 9\n----\nok\n')), { code: 'RAFT_SCENARIO_BAD_COMMAND' });
    assert.throws(() => parseScenario('status\nnot a separator\n'), { code: 'RAFT_SCENARIO_BAD_COMMAND' });
  });
});
