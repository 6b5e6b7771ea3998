// The configuration hash that /health compares (configMatchesServing): equal for the same settings
// and files whatever the key order, different for any change a client could notice after failover.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { testSettings } from '../broker/broker-harness.testkit.js';
import { configHash } from './config-hash.js';

describe('configHash', { timeout: 10_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'raftmq-config-hash-'));
  const pw = join(dir, 'passwd');
  writeFileSync(pw, 'alice:hash1\n');

  it('ignores key order and changes with any setting, ACL rule or file byte', () => {
    const base = configHash(testSettings, [pw]);
    const reordered = Object.fromEntries(Object.entries(testSettings).reverse()) as typeof testSettings;
    assert.equal(configHash(reordered, [pw]), base);
    assert.notEqual(configHash({ ...testSettings, willGraceS: 31 }, [pw]), base);
    assert.notEqual(configHash({ ...testSettings, acl: [{ kind: 'topic', user: null, access: 'read', filter: '#' }] }, [pw]), base);
    writeFileSync(pw, 'alice:hash2\n');
    assert.notEqual(configHash(testSettings, [pw]), base);
    assert.notEqual(configHash(testSettings, []), base);
  });

  it('hashes an unreadable file as such, never as an empty one', () => {
    const empty = join(dir, 'empty');
    writeFileSync(empty, '');
    assert.notEqual(configHash(testSettings, [join(dir, 'missing')]), configHash(testSettings, [empty]));
    rmSync(dir, { recursive: true, force: true });
  });
});
