import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Prng } from '../core/prng.js';
import { RaftCore } from '../core/raft.js';
import { CoreAdapter } from './core-adapter.js';

function core(): RaftCore {
  return new RaftCore({ id: 1, voters: [1, 2, 3], electionTimeoutMs: 100, random: new Prng(1), now: 0 });
}

describe('CoreAdapter', { timeout: 10_000 }, () => {
  test('without a lease implementation in the core it reports no lease and no cluster time', () => {
    const c = core();
    const a = new CoreAdapter(c);
    if (a.leasesSupported) return; // the core has leases: covered by the next test
    assert.equal(a.hasLease(1_000), false);
    assert.equal(a.leaseUntil(), null);
    assert.equal(a.clusterTime(1_000), null);
    assert.equal((a.transferLeadership(2) as { code?: string } | null)?.code, 'RAFT_DRIVER_UNSUPPORTED');
  });

  test('with a lease implementation it asks the core, passing the monotonic time through', () => {
    const asked: number[] = [];
    const c = Object.assign(core(), {
      hasLease: (m: number) => {
        asked.push(m);
        return m < 500;
      },
      leaseUntil: () => 500,
      clusterTime: (m: number) => 1_700_000_000_000 + m,
      transferLeadership: () => null,
    });
    const a = new CoreAdapter(c);
    assert.equal(a.leasesSupported, true);
    assert.equal(a.hasLease(499), true);
    assert.equal(a.hasLease(500), false);
    assert.deepEqual(asked, [499, 500]);
    assert.equal(a.leaseUntil(), 500);
    assert.equal(a.clusterTime(7), 1_700_000_000_007);
    assert.equal(a.transferLeadership(2), null);
  });
});
