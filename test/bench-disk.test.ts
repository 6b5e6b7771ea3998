// The benchmark's group-commit figures (bench/targets.ts diskRates, bench/report.ts): fsyncs per
// second and entries per fsync from the /health counters at a window's start and end, for
// raftmq-disk and for raftmq-cluster-disk's leader, and their table in the report.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { describe, it } from 'node:test';
import { LOADGEN_RATIO_MAX_PCT, markdown, type RunResult, rowsOf } from '../bench/report.js';
import { diskRates, Target, type TargetName } from '../bench/targets.js';

function run(broker: TargetName, disk: RunResult['disk']): RunResult {
  return {
    scenario: 'fanin-q1',
    broker,
    run: 1,
    args: [],
    rate: 0,
    idle: false,
    mqttload: { delivered_per_s: 1000 },
    procs: [],
    loadgen: { cpuPct: 10, rssKb: 1000 },
    hostOtherPct: 0,
    cpuProfile: null,
    failures: [],
    warnings: [],
    disk,
  };
}

describe('bench group-commit figures', () => {
  it('divides the fsyncs of the window by its length and the entries by the fsyncs', () => {
    const r = diskRates({ atMs: 1_000, fsyncs: 100, entries: 5_000 }, { atMs: 3_000, fsyncs: 1_100, entries: 255_000 });
    assert.deepEqual(r, { fsyncsPerS: 500, entriesPerFsync: 250 });
    assert.deepEqual(diskRates({ atMs: 0, fsyncs: 7, entries: 9 }, { atMs: 500, fsyncs: 7, entries: 9 }), {
      fsyncsPerS: 0,
      entriesPerFsync: null,
    });
    assert.equal(diskRates(null, { atMs: 1, fsyncs: 1, entries: 1 }), null);
    assert.equal(diskRates({ atMs: 5, fsyncs: 1, entries: 1 }, { atMs: 5, fsyncs: 2, entries: 2 }), null, 'an empty window');
  });

  it("reads the counters from the dataDir block of the health port it is given (a cluster's leader's)", async () => {
    const server = createServer((_req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ serving: true, dataDir: { fsyncs: 42, entriesWritten: 4200 } }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const port = (server.address() as { port: number }).port;
      const t = new Target('raftmq-cluster-disk', 0, [], ['leader', 'follower', 'follower'], [port, 1, 2], null, port);
      const c = await t.diskCounters();
      assert.deepEqual(c === null ? null : [c.fsyncs, c.entries], [42, 4200]);
      const without = new Target('raftmq-cluster', 0, [], ['leader', 'follower', 'follower'], [port, 1, 2], null);
      assert.equal(await without.diskCounters(), null, 'no health port given: no counters');
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it('lists raftmq-cluster-disk in the fsyncs table beside raftmq-disk', () => {
    const rows = rowsOf(
      [
        run('raftmq-disk', { fsyncsPerS: 575, entriesPerFsync: 254.6 }),
        run('raftmq-cluster-disk', { fsyncsPerS: 820, entriesPerFsync: 51.2 }),
      ],
      LOADGEN_RATIO_MAX_PCT,
    );
    const doc = markdown(rows, { date: 'd', commit: 'c', cpus: 2, cpuModel: 'm', node: 'v20', runs: 1 }, LOADGEN_RATIO_MAX_PCT);
    const table = doc.split('\n').filter((l) => /^\| fanin-q1 \| raftmq(-cluster)?-disk \| [\d,]+ \| [\d.]+ \|$/.test(l));
    assert.deepEqual(table, ['| fanin-q1 | raftmq-disk | 575 | 254.6 |', '| fanin-q1 | raftmq-cluster-disk | 820 | 51.2 |']);
  });
});
