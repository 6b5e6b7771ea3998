import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Configuration, Member } from './membership.js';
import { formatConfig, majoritiesOverlap } from './membership.js';
import type { Message } from './messages.js';
import type { RaftCore } from './raft.js';
import { TestCluster } from './test-cluster.js';

const E = 100;
const m = (node: number, inc: string): Member => ({ node, inc });
const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);

/** Three fresh nodes, run until node 1 has bootstrapped and everyone holds the first entries. */
function bootstrapped(): TestCluster {
  const c = new TestCluster({ electionTimeoutMs: E, fresh: true });
  c.run(3 * E);
  const leader = c.leader();
  assert.equal(leader?.id, 1, 'the lowest node id bootstraps');
  return c;
}

/** Every configuration entry any node has appended, in order, as seen by `node`. */
function configsOf(node: RaftCore): string[] {
  return node.entries().flatMap((e) => (e.config === undefined ? [] : [formatConfig(e.config)]));
}

describe('raft identity and membership (docs/design.md "Identity", docs/design.md "Configuration")', { timeout: 30_000 }, () => {
  it('majorities overlap across a one-server change and not across a swap in one entry', () => {
    const abc: Configuration = [m(1, 'a'), m(2, 'b'), m(3, 'c')];
    assert.equal(majoritiesOverlap(abc, [m(1, 'a'), m(2, 'b')]), true, 'remove one');
    assert.equal(majoritiesOverlap([m(1, 'a'), m(2, 'b')], abc), true, 'add one');
    assert.equal(majoritiesOverlap(abc, [m(1, 'a'), m(2, 'b'), m(3, 'd')]), false, 'swap 3c for 3d');
    assert.equal(majoritiesOverlap(abc, [m(1, 'a'), m(2, 'd'), m(3, 'e')]), false, 'swap two at once');
  });

  it('three fresh nodes bootstrap: the lowest node id proposes all three members, and all commit it', () => {
    const c = bootstrapped();
    c.run(2 * E);
    for (const n of c.running()) {
      assert.deepEqual(configsOf(n), ['1.a1,2.b1,3.c1']);
      assert.equal(n.voter, true);
      assert.equal(n.epoch.generation, 1);
      assert.ok(n.commitIndex >= 2, `node ${n.id} committed the first configuration`);
    }
    assert.equal(c.node(1).isRedundant(), true);
  });

  it('three amnesiac nodes never bootstrap an empty cluster and all say they need a force-start', () => {
    const amnesiac = new Map([1, 2, 3].map((id) => [id, 'amnesiac' as const]));
    const c = new TestCluster({ electionTimeoutMs: E, fresh: true, membership: amnesiac });
    c.run(10 * E);
    assert.equal(c.leader(), undefined);
    for (const n of c.running()) {
      assert.equal(n.lastIndex, 0);
      assert.equal(n.needsForceStart(), true, `node ${n.id}`);
    }
  });

  it('two fresh nodes and one amnesiac do not bootstrap (all three must report no record)', () => {
    const c = new TestCluster({ electionTimeoutMs: E, fresh: true, membership: new Map([[3, 'amnesiac' as const]]) });
    c.run(10 * E);
    assert.equal(c.leader(), undefined);
    assert.ok(c.running().every((n) => n.lastIndex === 0));
  });

  it('a node that forgot is replaced by remove-then-add, never a swap and never four voters', () => {
    const c = bootstrapped();
    c.run(2 * E);
    c.crash(3);
    c.run(E);
    c.restartAmnesiac(3);
    assert.equal(c.node(3).voter, false, 'an amnesiac start is a learner');
    c.run(10 * E);
    const history = configsOf(c.node(1));
    assert.deepEqual(history, ['1.a1,2.b1,3.c1', '1.a1,2.b1', '1.a1,2.b1,3.c2']);
    for (let k = 1; k < history.length; k++) {
      const before =
        c
          .node(1)
          .entries()
          .filter((e) => e.config !== undefined)[k - 1]?.config ?? [];
      const after =
        c
          .node(1)
          .entries()
          .filter((e) => e.config !== undefined)[k]?.config ?? [];
      assert.ok(majoritiesOverlap(before, after), `change ${k} keeps overlapping majorities`);
    }
    assert.equal(c.node(3).voter, true, 'the new member is a voter again');
    assert.equal(c.node(1).isRedundant(), true);
  });

  it('a vote from another incarnation of a listed node id counts for nothing', () => {
    const c = bootstrapped();
    c.run(2 * E);
    c.crash(3);
    c.restartAmnesiac(3);
    // Cut node 3's new member off from the leader so it stays a learner, then make node 2 campaign
    // with node 1 silenced: only 3.c2 could answer, and it is not a voter of 2's configuration.
    c.partition([[1], [2, 3]]);
    c.run(3 * E);
    const n2 = c.node(2);
    assert.notEqual(n2.role, 'leader', 'a learner vote elected a leader');
    assert.equal(c.node(3).voter, false);
  });

  it('a learner never campaigns, however long it hears nothing', () => {
    const c = bootstrapped();
    c.run(2 * E);
    c.crash(3);
    c.restartAmnesiac(3);
    c.partition([[1, 2], [3]]);
    c.run(20 * E);
    assert.equal(c.node(3).currentTerm, 0, 'no campaign moved its term');
    assert.equal(c.node(3).role, 'follower');
  });

  it('a message from another cluster or epoch changes nothing', () => {
    const c = bootstrapped();
    c.run(2 * E);
    const n2 = c.node(2);
    const term = n2.currentTerm;
    const base = { from: 1, to: 2, term: term + 3, fromInc: 'a1', toInc: 'b1', commit: 0, sentAt: 0, type: 'heartbeat' as const };
    const otherCluster: Message = { ...base, cluster: 'elsewhere', epoch: n2.epoch.generation, epochId: n2.epoch.id };
    const otherEpoch: Message = { ...base, cluster: 'raftmq', epoch: n2.epoch.generation + 1, epochId: 'zzz' };
    assert.equal(n2.step(otherCluster)?.code, 'RAFT_FOREIGN_MESSAGE');
    assert.equal(n2.step(otherEpoch)?.code, 'RAFT_FOREIGN_MESSAGE');
    const otherMember: Message = { ...base, cluster: 'raftmq', epoch: n2.epoch.generation, epochId: n2.epoch.id, toInc: 'b0' };
    assert.equal(n2.step(otherMember)?.code, 'RAFT_OTHER_MEMBER');
    assert.equal(n2.currentTerm, term);
  });

  it('a leader proposes no change before an entry of its own term has committed', () => {
    const c = bootstrapped();
    c.run(2 * E);
    // Node 3 forgets; nodes 1 and 2 stop hearing each other's commits so no new-term entry commits.
    c.crash(3);
    c.restartAmnesiac(3);
    c.crash(1);
    c.run(5 * E);
    // Node 2 alone with a learner: it cannot win (3.c2 is not a voter), so it never changes anything.
    assert.deepEqual(configsOf(c.node(2)), ['1.a1,2.b1,3.c1']);
    assert.equal(c.node(2).needsForceStart(), false, 'node 1 only crashed; it may come back');
    c.restart(1);
    c.run(10 * E);
    const leader = c.leader();
    assert.ok(leader !== undefined);
    assert.deepEqual(configsOf(leader), ['1.a1,2.b1,3.c1', '1.a1,2.b1', '1.a1,2.b1,3.c2']);
    assert.ok(leader.propose([bytes('after')]).ok);
  });
});
