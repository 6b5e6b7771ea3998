import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TestCluster } from './test-cluster.js';

const E = 100;

function leaderCluster(): TestCluster {
  const c = new TestCluster({ electionTimeoutMs: E });
  c.node(1).campaign();
  c.stabilize();
  c.run(E / 2);
  return c;
}

describe('raft core: leases, transfer and cluster time', { timeout: 10_000 }, () => {
  it('a leader holds a lease of E(1-2ρ) minus 5 % of E from the newest round a majority answered', () => {
    const c = leaderCluster();
    const n = c.node(1);
    assert.ok(n.hasLease(c.now));
    const until = n.leaseUntil();
    assert.ok(until > c.now && until <= c.now + E * 0.948, `lease until ${until} at ${c.now}`);
    c.partition([[1], [2, 3]]);
    c.tick(Math.ceil(until - c.now));
    assert.equal(n.hasLease(c.now), false, 'no renewal without a majority');
  });

  it('followers ignore vote requests while the leader is heard, so a campaign cannot end a lease', () => {
    const c = leaderCluster();
    c.node(3).campaign();
    c.stabilize();
    assert.equal(c.node(1).role, 'leader');
    assert.ok(c.node(1).hasLease(c.now));
  });

  it('a frozen leader (wall clock jumps ahead of its monotonic clock) gives up its lease at once', () => {
    const c = leaderCluster();
    const n = c.node(1);
    n.tick(c.now, c.now + E);
    assert.equal(n.hasLease(c.now), false);
    assert.equal(n.leaseUntil(), 0);
  });

  it('transfer: the leader gives up its lease before TimeoutNow and the target wins at once', () => {
    const c = leaderCluster();
    const n = c.node(1);
    assert.equal(n.transferLeadership(2), null);
    assert.equal(n.propose([new Uint8Array([1])]).ok, false, 'proposals stop during a transfer');
    const batch = n.takeReady();
    assert.ok(batch.messages.some((m) => m.type === 'timeout-now' && m.to === 2));
    assert.equal(n.leaseUntil(), 0, 'lease given up before TimeoutNow leaves');
    c.queue.push(...batch.messages);
    c.stabilize();
    assert.equal(c.node(2).role, 'leader');
    assert.equal(n.role, 'follower');
    assert.equal(n.transferLeadership(3)?.code, 'RAFT_NOT_LEADER');
  });

  it('entries carry cluster time from the median clock, never decreasing, and a far clock is excluded', () => {
    const c = leaderCluster();
    const n = c.node(1);
    c.run(E);
    const times = n.entries().map((e) => e.time);
    assert.deepEqual(
      times,
      [...times].sort((a, b) => a - b),
    );
    assert.deepEqual(n.excludedClocks(), []);
    assert.ok(Math.abs(n.clusterTime(c.now) - c.now) <= E / 2);
  });

  it('a bootstrapping leader is not clusterTimeReady until two clocks agree, and then its time follows them', () => {
    // docs/design.md "Cluster time": the bootstrap entry has time 0 and no clock samples exist yet; the
    // broker waits for this predicate before it proposes serve-start, so the one jump forward
    // happens before any serving period.
    const c = new TestCluster({ electionTimeoutMs: E, fresh: true });
    c.now = 1_000_000;
    let sawUnready = false;
    for (let i = 0; i < 100 && c.leader()?.clusterTimeReady() !== true; i++) {
      const l = c.leader();
      if (l !== undefined && !l.clusterTimeReady()) {
        sawUnready = true;
        assert.ok(l.clusterTime(c.now) < c.now - E, 'before it, time runs from the log (0), far behind the clocks');
      }
      c.run(10, 10);
    }
    const leader = c.leader();
    assert.ok(sawUnready, 'the bootstrapped leader started without a target');
    assert.ok(leader !== undefined, 'a leader');
    assert.ok(leader.clusterTimeReady(), 'ready once heartbeats brought clock samples');
    assert.ok(Math.abs(leader.clusterTime(c.now) - c.now) <= E / 2, 'and its time jumped to the clocks');
    for (const n of c.running()) if (n !== leader) assert.equal(n.clusterTimeReady(), false, 'a follower is never ready');
  });
});
