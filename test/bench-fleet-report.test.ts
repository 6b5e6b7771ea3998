// The fleet scenarios in the broker bench's .md and .svg (bench/fleet-report.ts, bench/svg.ts): a table
// per scenario from each child's rows, the anchor row's times to any CONNACK, failed children marked.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type FleetRow, type FleetRun, type FleetScenario, fleetArgs, fleetSkip } from '../bench/fleet-child.js';
import { LOADGEN_RATIO_MAX_PCT, markdown } from '../bench/report.js';
import { svg } from '../bench/svg.js';
import type { TargetName } from '../bench/targets.js';

function run(scenario: FleetScenario, target: TargetName, rows: FleetRow[] | null, failures: string[] = []): FleetRun {
  return {
    scenario,
    target,
    args: ['--scenario', scenario, '--target', target, '--clients', '1000'],
    pid: 1,
    exitCode: failures.length > 0 ? 1 : 0,
    signal: null,
    timedOut: false,
    timeoutS: 100,
    elapsedS: 10,
    resultFile: null,
    result:
      rows === null
        ? null
        : { scenario, target, options: { clients: 1000, detect: 'rst', findMax: false }, host: {}, rows, failures, notes: [] },
    failures,
    stderrTail: '',
  };
}

const runs = [
  run('fleet-failover', 'raftmq-cluster', [
    { target: 'raftmq-cluster', clients: 1000, back: 1000, backWithSession: 1000, lostSessions: 0, p50Ms: 2500, p99Ms: 4100, maxMs: 4200 },
  ]),
  run('fleet-failover', 'mosquitto', [
    {
      target: 'mosquitto',
      clients: 1000,
      back: 1000,
      backWithSession: 0,
      lostSessions: 1000,
      p50Ms: null,
      allBackP50Ms: 900,
      allBackP99Ms: 1500,
    },
  ]),
  run('connect-tls', 'raftmq', [
    { transport: 'tcp', connectsPerS: 7467, bytesPerConn: 6262 },
    { transport: 'tls', connectsPerS: 698, bytesPerConn: 30951 },
  ]),
  run('connect-tls', 'mosquitto', null, ['tls: 12 of 1000 connections refused or failed']),
  run('fleet', 'raftmq', [
    { ratePerDevice: 1, deliveredPerS: 1000, p50Ms: 1.07, p99Ms: 17.4, cmdP99Ms: 17.5, lost: 0, leaderCpuPct: 28.7 },
  ]),
];
const meta = { date: '2026-12-01T00:00:00.000Z', commit: 'abc1234', cpus: 2, cpuModel: 'CPU', node: 'v20.0.0', runs: 1, durationS: 5 };
const section = { runs, skipped: ['fleet-failover/raftmq: one node in memory has nothing to fail over to'] };

describe('bench fleet report', () => {
  const md = markdown([], meta, LOADGEN_RATIO_MAX_PCT, section);

  it('puts a table per fleet scenario and no mqttload table', () => {
    assert.ok(!md.includes('| scenario | broker | delivered/s'));
    assert.ok(!md.includes('window 5 s'));
    assert.match(md, /\| raftmq-cluster \| 1,000 of 1,000 \| 1,000 \| 0 \| 2,500 \| 4,100 \| 4,200 \|/);
    assert.match(md, /\| mosquitto \(restarted in place\) \| 1,000 of 1,000 \| 0 \| 1,000 \| 900 ¹ \| 1,500 ¹ \|/);
    assert.match(md, /\| raftmq \| 7,467 \| 698 \| 6,262 \/ 30,951 \|/);
    assert.match(md, /\| raftmq \| 1 \| 1,000 \| 1.07 \| 17.4 \| 17.5 \| 0 \| 28.7 \|/);
    assert.ok(md.includes('- fleet-failover/raftmq: one node in memory'));
  });

  it('marks a failed child and lists its FAIL lines', () => {
    assert.match(md, /\| mosquitto ✗ \| – \| – \|/);
    assert.ok(md.includes('- connect-tls/mosquitto: tls: 12 of 1000 connections refused or failed'));
  });

  it('draws connect-tls connects/s and fleet-failover p50/p99 in seconds', () => {
    const doc = svg([], meta, LOADGEN_RATIO_MAX_PCT, section);
    const label = (scenario: string, broker: string) => {
      const at = doc.indexOf(`data-scenario="${scenario}" data-broker="${broker}"`);
      return at < 0 ? undefined : /<text[^>]*class="v[^"]*">([^<]*)<\/text>/.exec(doc.slice(at))?.[1];
    };
    assert.equal(label('fleet-failover p50', 'raftmq-cluster'), '2.5');
    assert.equal(label('fleet-failover p99', 'mosquitto'), '1.5');
    assert.equal(label('connect-tls tcp', 'raftmq'), '7.47k');
    assert.equal(label('connect-tls tls', 'mosquitto'), '✗ failed');
    assert.equal(label('fleet p99', 'raftmq'), '17.4');
    assert.doesNotMatch(doc, /&(?!#\d+;)/);
  });

  it('passes the options a scenario takes and skips what it does not support', () => {
    const o = { clients: 1000, ratePerDevice: 0.5, findMax: true, detect: 'keepalive' as const, timeoutS: null, outDir: null };
    assert.deepEqual(fleetArgs('fleet', 'raftmq', o), [
      '--scenario',
      'fleet',
      '--target',
      'raftmq',
      '--clients',
      '1000',
      '--rate-per-device',
      '0.5',
      '--find-max',
    ]);
    assert.deepEqual(fleetArgs('fleet-failover', 'mosquitto', o).slice(-2), ['--detect', 'keepalive']);
    assert.notEqual(fleetSkip('fleet-failover', 'raftmq'), null);
    assert.equal(fleetSkip('fleet-failover', 'mosquitto'), null);
    assert.equal(fleetSkip('connect-tls', 'raftmq'), null);
  });
});
