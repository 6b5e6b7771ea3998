// The jepsen-like harness end to end (docs/architecture.md "Testing layers"): three real processes
// behind relays, MQTT.js publishers and persistent subscribers, a short seeded schedule with every
// fault class: pause, a pause of the leader with its links cut until after it resumes, symmetric and
// one-way partition, delay, drop, a clean restart of one node and
// of all three (each resumes its state file), and two kill -9s, each started again with the same
// flags (it comes back amnesiac and is made a voter again; the second kill waits until the leader's
// /health says redundant). Every checker runs over the history and the audit logs of every process.
// Failover and recovery times are printed, not asserted.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { runJepsen } from '../jepsen-like-tests/run.js';
import { FAULT_CLASSES, type FaultClass } from '../jepsen-like-tests/schedule.js';

const PLAN: FaultClass[] = [...FAULT_CLASSES, 'kill'];

describe('jepsen-like schedule', { timeout: 240_000 }, () => {
  it('loses no acknowledged publish, duplicates no QoS 2 message and never serves from two nodes at once, across kills and restarts', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-jepsen-test-'));
    const report = await runJepsen({
      seed: 20,
      durationS: 50,
      faults: [...FAULT_CLASSES],
      electionTimeoutMs: 500,
      dir,
      plan: PLAN,
      log: (l) => console.log(`jepsen: ${l}`),
    });
    assert.deepEqual(report.schedule.map((f) => f.window.fault.kind).sort(), [...PLAN].sort(), 'every planned fault ran, kill twice');
    assert.ok(report.result.counts.acknowledged > 0, 'publishers were acknowledged');
    assert.ok(
      Object.values(report.result.audit).some((a) => a.leaseRenewals > 0 && a.writes > 0),
      'audit logs hold renewals and writes',
    );
    assert.ok(Object.keys(report.result.audit).length >= 3 + 2 + 1 + 3, 'every restarted process wrote its own audit file');
    assert.deepEqual(report.anomalies, [], 'every SIGTERM exited 0, every node started again, the cluster became redundant after each');
    assert.deepEqual(
      report.result.violationTotals,
      {},
      `violations (report in ${dir}): ${JSON.stringify(report.result.violations.slice(0, 5))}`,
    );
  });
});
