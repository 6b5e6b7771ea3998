// The broker over the raft simulator, long run: 1,000 more seeds with every raft fault class, then
// 100 seeds of each class alone, so a class's own schedule is not diluted by the others, then 50
// seeds of each force-start scenario in which a forced epoch serves, without faults and with the
// message faults (the scenarios' fixed steps are not built for crashes, partitions or snapshots).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type Fault, faultNames } from '../../../raft/sim/sim.js';
import { runBrokerSeed, servingForceStarts } from './broker-sim.testkit.js';

describe('broker over the raft simulator, long run', { timeout: 300_000 }, () => {
  it('1,000 seeds of every fault class keep the MQTT invariants', () => {
    const all: ReadonlySet<Fault> = new Set(faultNames);
    for (let seed = 1000; seed < 2000; seed++) {
      const r = runBrokerSeed(seed, all);
      assert.ok(r.ok, r.ok ? '' : `seed ${seed}: ${r.property}: ${r.violation}\n${r.trace.slice(-40).join('\n')}`);
    }
  });

  for (const fault of faultNames) {
    it(`100 seeds of ${fault} alone keep the MQTT invariants`, () => {
      for (let seed = 5000; seed < 5100; seed++) {
        const r = runBrokerSeed(seed, new Set([fault]));
        assert.ok(r.ok, r.ok ? '' : `${fault} seed ${seed}: ${r.property}: ${r.violation}`);
      }
    });
  }

  const messageFaults: ReadonlySet<Fault> = new Set(['drop', 'dup', 'reorder']);
  for (const scenario of servingForceStarts) {
    it(`50 seeds of ${scenario}, without faults and with drop, dup and reorder, keep the invariants per epoch and across it`, () => {
      for (const faults of [new Set<Fault>(), messageFaults]) {
        for (let seed = 7000; seed < 7050; seed++) {
          const r = runBrokerSeed(seed, faults, { scenario });
          assert.ok(r.ok, r.ok ? '' : `${scenario} [${[...faults].join(',')}] seed ${seed}: ${r.property}: ${r.violation}`);
          assert.ok(r.stats.forceServed >= 1, `${scenario} seed ${seed}: no forced epoch served`);
        }
      }
    });
  }
});
