// The broker over the raft simulator, quick layer: a few hundred seeds with every raft fault class
// (DESIGN.md "Testing layers" 2). Each seed checks equal digests at equal applied index, no
// acknowledged publish lost and no QoS 2 duplicate (see broker-sim.ts); more seeds run in
// broker-sim.slow.test.ts.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type Fault, faultNames } from '../../../raft/sim/sim.js';
import { type BrokerSimStats, runBrokerSeed } from './broker-sim.js';

const all: ReadonlySet<Fault> = new Set(faultNames);

describe('broker over the raft simulator', { timeout: 120_000 }, () => {
  it('200 seeds of every fault class keep the MQTT invariants, and the workload acknowledges and delivers', () => {
    const stats: BrokerSimStats = { last: null };
    let acked = 0;
    let received = 0;
    for (let seed = 1; seed <= 200; seed++) {
      const r = runBrokerSeed(seed, all, { stats });
      assert.ok(r.ok, r.ok ? '' : `seed ${seed}: ${r.property}: ${r.violation}\n${r.trace.slice(-40).join('\n')}`);
      acked += stats.last?.acked.size ?? 0;
      received += stats.last?.received.size ?? 0;
    }
    assert.ok(acked >= 200, `publishes acknowledged across the seeds: ${acked}`);
    assert.ok(received >= acked, `messages received: ${received} of ${acked} acknowledged`);
  });

  it('a broker that acknowledges a publish when proposing it, not once committed, is caught', () => {
    let caught = '';
    for (let seed = 1; seed <= 200 && caught === ''; seed++) {
      const r = runBrokerSeed(seed, all, { mutant: 'ack-on-propose' });
      if (!r.ok) caught = r.property;
    }
    assert.equal(caught, 'acknowledged publish lost');
  });
});
