// The log lines an operator alerts on, from a real three-node cluster: a frozen follower (SIGSTOP)
// makes the leader warn that redundancy is lost and say when it is back; both followers frozen
// make it warn that its lease and the quorum are lost, and say when the quorum is back. Each line
// once per change, with the fields node, term and reason. Waits are bounded, never asserted.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { LogLine } from './broker-process.js';
import { Cluster, type ClusterNode } from './support/cluster.js';

const E = 500;
const WAIT_MS = 20_000;

const WARN = 40;
const INFO = 30;

async function redundant(leader: ClusterNode): Promise<void> {
  const deadline = Date.now() + WAIT_MS;
  while (!(await leader.health()).body.redundant) {
    if (Date.now() > deadline) throw new Error('the cluster never became redundant');
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** The first line `msg` logged after `from` lines. */
function after(n: ClusterNode, from: number, msg: string): Promise<LogLine> {
  return n.waitForLog((l) => l.msg === msg && n.logs.indexOf(l) >= from, WAIT_MS);
}

function count(n: ClusterNode, msg: string): number {
  return n.logs.filter((l) => l.msg === msg).length;
}

describe('cluster alert lines', { timeout: 120_000 }, () => {
  it('warns when redundancy, the lease and the quorum are lost, and says when they are back', async () => {
    const cluster = await Cluster.start({ electionTimeoutMs: E });
    try {
      const leader = await cluster.serving(WAIT_MS);
      await redundant(leader);
      const [a, b] = cluster.nodes.filter((n) => n !== leader) as [ClusterNode, ClusterNode];

      let mark = leader.logs.length;
      a.signal('SIGSTOP');
      const lost = await after(leader, mark, 'redundancy lost');
      assert.equal(lost.level, WARN);
      assert.equal(lost.node, leader.id);
      assert.equal(typeof lost.term, 'number');
      assert.equal(lost.reason, `node ${a.id}: not heard from within E`);
      mark = leader.logs.length;
      a.signal('SIGCONT');
      const back = await after(leader, mark, 'redundancy restored');
      assert.equal(back.level, INFO);
      assert.equal(back.node, leader.id);
      assert.equal(count(leader, 'redundancy lost'), 1, 'once per change, not per tick');
      assert.equal(count(leader, 'quorum lost'), 0, 'a majority stayed');

      mark = leader.logs.length;
      a.signal('SIGSTOP');
      b.signal('SIGSTOP');
      const lease = await after(leader, mark, 'lease lost');
      assert.equal(lease.level, WARN);
      assert.equal(lease.node, leader.id);
      assert.equal(typeof lease.reason, 'string');
      const quorum = await after(leader, mark, 'quorum lost');
      assert.equal(quorum.level, WARN);
      assert.equal(quorum.node, leader.id);
      assert.equal(typeof quorum.term, 'number');
      assert.equal(typeof quorum.reason, 'string');
      mark = leader.logs.length;
      a.signal('SIGCONT');
      b.signal('SIGCONT');
      const restored = await after(leader, mark, 'quorum restored');
      assert.equal(restored.level, INFO);
      assert.equal(count(leader, 'quorum lost'), 1, 'once per change');
      await cluster.serving(WAIT_MS);
    } finally {
      await cluster.dispose();
    }
  });
});
