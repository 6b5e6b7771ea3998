// The start-up bench's arithmetic (bench/startup-report.ts): /proc fields, the node's log lines and
// the split of a start into phases.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  formatBytes,
  formatMs,
  logMarks,
  median,
  openMark,
  procField,
  splitPhases,
  startLines,
  statTicks,
  summaryLine,
} from '../bench/startup-report.js';

describe('bench startup report', () => {
  it('reads utime + stime after a command name holding spaces and parentheses', () => {
    const rest = 'S 1 2 3 4 5 6 7 8 9 10 250 50 0 0';
    assert.equal(statTicks(`4242 (node (x) y) ${rest}`), 300);
    assert.equal(statTicks('no parenthesis here'), null);
  });

  it('reads named fields of /proc/PID/status and /proc/PID/io', () => {
    const status = 'Name:\tnode\nVmHWM:\t  123456 kB\nVmRSS:\t  100 kB\n';
    assert.equal(procField(status, 'VmHWM'), 123_456);
    assert.equal(procField('rchar: 1073741824\nread_bytes: 0\n', 'rchar'), 1_073_741_824);
    assert.equal(procField('rchar: 1\nread_bytes: 0\n', 'read_bytes'), 0);
    assert.equal(procField(status, 'VmPeak'), null);
  });

  it('keeps the JSON log lines with a message and a time, skipping others and torn ones', () => {
    const marks = logMarks(['{"level":30,"time":1000,"msg":"serve-start"}', 'plain text', '{"time":5,"msg":', '{"time":7}', '']);
    assert.deepEqual(marks, [{ msg: 'serve-start', timeMs: 1000 }]);
  });

  it('derives the opening of the directory from the listening line less the recovered ms', () => {
    const marks = [
      { msg: 'data directory recovered', timeMs: 1500 },
      { msg: 'listening', timeMs: 2000 },
    ];
    assert.deepEqual(openMark(marks, 800, 'open'), { msg: 'open', timeMs: 1200 });
    assert.equal(openMark([{ msg: 'other', timeMs: 1 }], 800, 'open'), null);
  });

  it('splits spawn to first CONNACK at the first line of each phase, the rest going to the last', () => {
    const marks = [
      { msg: 'open', timeMs: 1300 },
      { msg: 'recovered', timeMs: 2000 },
      { msg: 'recovered', timeMs: 2500 },
      { msg: 'serve-start', timeMs: 4000 },
    ];
    const specs = [
      { name: 'boot', until: 'open' },
      { name: 'read', until: 'recovered' },
      { name: 'apply', until: 'serve-start' },
    ];
    const phases = splitPhases(1000, 4100, marks, specs, 'listen');
    assert.deepEqual(phases, [
      { name: 'boot', ms: 300 },
      { name: 'read', ms: 700 },
      { name: 'apply', ms: 2000 },
      { name: 'listen', ms: 100 },
    ]);
    assert.equal(
      phases.reduce((n, p) => n + p.ms, 0),
      3100,
      'the phases add up to the wall time',
    );
  });

  it('merges a phase whose line is missing, or out of order, into the next', () => {
    const specs = [
      { name: 'boot', until: 'open' },
      { name: 'read', until: 'recovered' },
    ];
    assert.deepEqual(splitPhases(1000, 3000, [{ msg: 'recovered', timeMs: 2000 }], specs, 'rest'), [
      { name: 'boot + read', ms: 1000 },
      { name: 'rest', ms: 1000 },
    ]);
    // A line before the spawn (two processes' clocks) or after the CONNACK is not a boundary.
    assert.deepEqual(
      splitPhases(
        1000,
        3000,
        [
          { msg: 'open', timeMs: 999 },
          { msg: 'recovered', timeMs: 3001 },
        ],
        specs,
        'rest',
      ),
      [{ name: 'boot + read + rest', ms: 2000 }],
    );
  });

  it('formats bytes and durations in the units of the report', () => {
    assert.equal(formatBytes(512), '512 B');
    assert.equal(formatBytes(1536), '1.5 KiB');
    assert.equal(formatBytes(31 * 1024 * 1024), '31.0 MiB');
    assert.equal(formatBytes(1024 ** 3), '1.00 GiB');
    assert.equal(formatMs(999.6), '1000 ms');
    assert.equal(formatMs(12_345), '12.35 s');
  });

  it('reports CPU as seconds and as a share of one core over the wall time', () => {
    const lines = startLines(
      'log',
      2000,
      { ticks: 150, peakRssKb: 2048, readChars: 1024 ** 3, readDeviceBytes: 0 },
      100,
      [{ name: 'boot', ms: 2000 }],
      ['note'],
    );
    assert.equal(
      lines[0],
      'log: serving after 2.00 s; CPU 1.50 s (75 % of one core), peak RSS 2.0 MiB, read 1.00 GiB (from the device: 0 B)',
    );
    assert.deepEqual(lines.slice(1), ['  phases: boot 2.00 s', '  note']);
  });

  it('names the moment reached, for a follower that catches up rather than serves', () => {
    const lines = startLines('f', 500, { ticks: 10, peakRssKb: 1024, readChars: null, readDeviceBytes: null }, 100, [], [], 'caught up');
    assert.match(lines[0] as string, /^f: caught up after 500 ms; CPU 0\.10 s \(20 % of one core\).*bytes read unknown/);
  });

  it('takes the median of odd and even counts, and of none', () => {
    assert.equal(median([3, 1, 2]), 2);
    assert.equal(median([4, 1, 3, 2]), 2.5);
    assert.ok(Number.isNaN(median([])));
  });

  it('summarises rounds by their medians and the range of wall times', () => {
    const line = summaryLine('log', [
      { wallMs: 9000, cpuS: 8, peakRssKb: 2048 },
      { wallMs: 13_000, cpuS: 9, peakRssKb: 1024 },
      { wallMs: 8000, cpuS: 10, peakRssKb: 3072 },
    ]);
    assert.equal(line, 'log: median of 3 starts: serving after 9.00 s (8.00 s–13.00 s), CPU 9.00 s, peak RSS 2.0 MiB');
  });
});
