import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { RaftError, RaftErrorCodes } from './errors.js';

// The registry, docs/raft.md and the error class stay in sync: callers compare codes, so a code
// that exists in one place only is a broken contract. The doc is read from the source tree.
describe('raft error registry', { timeout: 10_000 }, () => {
  const doc = readFileSync(join(process.cwd(), 'docs/raft.md'), 'utf8');

  it('documents every code in docs/raft.md', () => {
    for (const code of Object.keys(RaftErrorCodes)) assert.ok(doc.includes(`\`${code}\``), `${code} missing from docs`);
  });

  it('registers every code the doc lists', () => {
    const listed = [...doc.matchAll(/^\| `(RAFT_[A-Z_]+)` \|/gm)].map((m) => m[1]);
    assert.deepEqual(listed.sort(), Object.keys(RaftErrorCodes).sort());
  });

  it('carries its code and the registry text', () => {
    const e = new RaftError('RAFT_NOT_LEADER', 'node 2 is follower');
    assert.equal(e.code, 'RAFT_NOT_LEADER');
    assert.match(e.message, /^not the raft leader: node 2/);
  });
});
