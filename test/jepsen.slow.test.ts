// The jepsen-like harness end to end (DESIGN.md "Testing layers" item 5): three real processes
// behind relays, MQTT.js publishers and persistent subscribers, a short seeded schedule with each
// fault class once (pause, symmetric and one-way partition, delay, drop, then kill -9), and every
// checker over the history and the audit logs. The report's failover times are printed, not asserted.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { runJepsen } from '../jepsen-like-tests/run.js';
import { FAULT_CLASSES } from '../jepsen-like-tests/schedule.js';

describe('jepsen-like schedule', { timeout: 240_000 }, () => {
  it('loses no acknowledged publish, duplicates no QoS 2 message and never serves from two nodes at once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-jepsen-test-'));
    const report = await runJepsen({
      seed: 20,
      durationS: 60,
      faults: [...FAULT_CLASSES],
      electionTimeoutMs: 500,
      dir,
      plan: [...FAULT_CLASSES],
      log: (l) => console.log(`jepsen: ${l}`),
    });
    assert.deepEqual(
      report.schedule.map((f) => f.window.fault.kind).sort(),
      [...FAULT_CLASSES].sort(),
      'each fault class ran once',
    );
    assert.ok(report.result.counts.acknowledged > 0, 'publishers were acknowledged');
    assert.ok(Object.values(report.result.audit).some((a) => a.leaseRenewals > 0 && a.writes > 0), 'audit logs hold renewals and writes');
    assert.deepEqual(report.result.violationTotals, {}, `violations (report in ${dir}): ${JSON.stringify(report.result.violations.slice(0, 5))}`);
  });
});
