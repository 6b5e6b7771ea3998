// The broker benchmark's SVG figure (bench/svg.ts): one bar per row with its value, text escaped as
// XML, failed rows and rows with a busy load generator marked.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LOADGEN_RATIO_MAX_PCT, type RunResult, rowsOf } from '../bench/report.js';
import { compact, esc, svg } from '../bench/svg.js';
import type { TargetName } from '../bench/targets.js';

function run(scenario: string, broker: TargetName, mqttload: Record<string, unknown> | null, extra: Partial<RunResult> = {}): RunResult {
  return {
    scenario,
    broker,
    run: 1,
    args: [],
    rate: 0,
    idle: scenario === 'idle',
    mqttload,
    procs: [],
    loadgen: { cpuPct: 10, rssKb: 1000 },
    hostOtherPct: 0,
    cpuProfile: null,
    failures: [],
    warnings: [],
    ...extra,
  };
}

const meta = { date: '2026-12-01T00:00:00.000Z', commit: 'abc1234', cpus: 2, cpuModel: 'Test <CPU> & Co', node: 'v20.0.0', runs: 1 };

const runs = [
  run('fanin-q0', 'raftmq', { delivered_per_s: 1_520_000 }),
  run('fanin-q0', 'raftmq-cluster', { delivered_per_s: 20_100 }),
  run('fanin-q0', 'mosquitto', { delivered_per_s: 412_345 }, { loadgen: { cpuPct: 75, rssKb: 1000 } }),
  run('fanin-q1', 'raftmq', { delivered_per_s: 953 }, { failures: ['lost 3 messages <&>'] }),
  run('fanin-q1', 'mosquitto', null, { failures: ['start: no port'] }),
  run('idle', 'raftmq', { connects_per_s: 5_050 }),
];

function bars(doc: string): string[] {
  return doc.match(/<rect class="bar"[^>]*>/g) ?? [];
}

/** The value label after the bar of `scenario`/`broker`. */
function labelOf(doc: string, scenario: string, broker: string): string | undefined {
  const at = doc.indexOf(`data-scenario="${scenario}" data-broker="${broker}"`);
  return at < 0 ? undefined : /<text[^>]*class="v[^"]*">([^<]*)<\/text>/.exec(doc.slice(at))?.[1];
}

describe('bench svg', () => {
  const rows = rowsOf(runs, LOADGEN_RATIO_MAX_PCT);
  const doc = svg(rows, meta, LOADGEN_RATIO_MAX_PCT);

  it('draws one bar per row, labelled with its value', () => {
    assert.ok(doc.startsWith('<svg xmlns="http://www.w3.org/2000/svg"'));
    assert.equal(bars(doc).length, rows.length);
    assert.equal(labelOf(doc, 'fanin-q0', 'raftmq'), '1.52M');
    assert.equal(labelOf(doc, 'fanin-q0', 'raftmq-cluster'), '20.1k');
    assert.equal(labelOf(doc, 'idle', 'raftmq'), '5.05k');
    assert.match(doc, /idle<tspan[^>]*>connects\/s</);
  });

  it('marks failed rows and rows whose load generator used more than half a core', () => {
    const failed = bars(doc).filter((b) => b.includes('data-failed="1"'));
    assert.equal(failed.length, 2);
    assert.equal(labelOf(doc, 'fanin-q1', 'raftmq'), '✗ 953');
    assert.equal(labelOf(doc, 'fanin-q1', 'mosquitto'), '✗ failed');
    const busy = bars(doc).filter((b) => b.includes('data-loadgen="1"'));
    assert.equal(busy.length, 1);
    assert.ok(busy[0]?.includes('data-broker="mosquitto"'));
    assert.equal(labelOf(doc, 'fanin-q0', 'mosquitto'), '⚠ 412k');
    assert.match(doc, /<pattern id="h"/);
  });

  it('escapes text as XML and puts date, commit and machine in the caption', () => {
    assert.ok(doc.includes('Test &#60;CPU&#62; &#38; Co'));
    assert.ok(doc.includes('lost 3 messages &#60;&#38;&#62;'));
    assert.ok(!doc.includes('<CPU>') && !doc.includes('<&>'));
    // Every & starts an entity.
    assert.doesNotMatch(doc, /&(?!#\d+;)/);
    assert.ok(doc.includes('2026-12-01T00:00:00.000Z') && doc.includes('abc1234'));
    const weird = svg(rowsOf([run('a"<b>&\'c', 'raftmq', { delivered_per_s: 1 })], LOADGEN_RATIO_MAX_PCT), {}, 50);
    assert.ok(weird.includes('data-scenario="a&#34;&#60;b&#62;&#38;&#39;c"'));
    assert.equal(esc('<&>"\''), '&#60;&#38;&#62;&#34;&#39;');
  });

  it('formats values with three significant digits', () => {
    assert.deepEqual([0, 953, 999.7, 1_000, 20_149, 412_345, 999_700, 1_520_000, 12_300_000].map(compact), [
      '0',
      '953',
      '1k',
      '1k',
      '20.1k',
      '412k',
      '1M',
      '1.52M',
      '12.3M',
    ]);
  });
});
