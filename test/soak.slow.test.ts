// A short soak (bench/soak.ts, docs/operations.md "The soak"): two minutes against one node,
// asserting the exit status and the figures of the soak's report. The ten-minute soaks, on one node
// and on three (`npm run soak -- --minutes 10 [--cluster]`), run on demand, beyond CI's budget.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { SoakReport } from '../bench/soak.js';

const SOAK = join(process.cwd(), 'build', 'bench', 'soak.js');
const MINUTES = 2;
/** Start, the run, the settle phase and the stop, with room for a loaded machine (ms). */
const RUN_MAX_MS = MINUTES * 60_000 + 120_000;

const dir = mkdtempSync(join(tmpdir(), 'raftmq-soak-'));
const running = new Set<ChildProcess>();
after(() => {
  // The soak kills the brokers it started when it exits, a SIGTERM included.
  for (const p of running) p.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
});

async function soak(cluster: boolean): Promise<{ code: number | null; out: string; report: SoakReport }> {
  const json = join(dir, cluster ? 'cluster.json' : 'single.json');
  const args = [SOAK, '--minutes', String(MINUTES), '--json', json, ...(cluster ? ['--cluster'] : [])];
  const p = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(p);
  let out = '';
  p.stdout.setEncoding('utf8').on('data', (c: string) => {
    out += c;
  });
  p.stderr.setEncoding('utf8').on('data', (c: string) => {
    out += c;
  });
  const timer = setTimeout(() => p.kill('SIGTERM'), RUN_MAX_MS);
  const code = await new Promise<number | null>((resolve) => p.once('close', (c) => resolve(c)));
  clearTimeout(timer);
  running.delete(p);
  assert.ok(code === 0 || code === 1, `soak exited ${code}:\n${out}`);
  return { code, out, report: JSON.parse(readFileSync(json, 'utf8')) as SoakReport };
}

/** Every figure but the heap slope, which the callers judge. */
function assertFigures(r: SoakReport, nodes: number[]): void {
  for (const node of nodes) {
    const s = r.samples.filter((x) => x.node === node);
    assert.deepEqual(
      s.map((x) => x.minute),
      [0, 1, 2],
      `node ${node}: one sample before the load and one per minute`,
    );
    assert.ok(
      s.every((x) => x.afterForcedGc && x.heapUsedBytes > 0 && x.rssBytes > x.heapUsedBytes),
      `node ${node}: heap read after a forced GC, below RSS`,
    );
  }
  assert.deepEqual(
    r.ends,
    nodes.map((node) => ({ node, exit: null })),
  );
  const w = r.workload;
  // 20 checked messages a second, two thirds of them QoS 1 or 2, for two minutes.
  assert.ok(w.acked > 1_000, `acknowledged ${w.acked}`);
  assert.equal(w.lost, 0);
  assert.equal(w.qos2Duplicates, 0);
  assert.ok(w.checkerReconnects >= 5, `the persistent subscriber reconnected ${w.checkerReconnects} times`);
  assert.ok(w.abruptCloses > 50 && w.willsOfAbrupt === w.abruptCloses, `wills ${w.willsOfAbrupt} of ${w.abruptCloses}`);
  assert.equal(w.willsOfNormal, 0);
  assert.ok(w.persistentConnections > 50 && w.connections > w.persistentConnections);
  assert.ok(w.unsubscribes > 50 && w.sharedPublished > 100 && w.sharedReceived >= w.sharedPublished);
  assert.ok(w.slowBursts >= 3, `slow subscriber bursts ${w.slowBursts}`);
  // The bursts fill the slow subscriber's queue (else the bound would not be tested) and it holds.
  assert.ok(w.slowHeldMax > w.slowBound / 2 && w.slowHeldMax <= w.slowBound, `held ${w.slowHeldMax} of ${w.slowBound}`);
}

/** The soak's failures other than a heap slope; each of these runs must have none. */
const HEAP_FAILURE = /^heap growth of node (\d): -?[\d.]+ %\/min/;

describe('soak', { timeout: 2 * RUN_MAX_MS + 30_000 }, () => {
  // Two minutes on one node are still the warm-up of its heap: two-minute runs measured 2.4 and
  // 3.5 %/min over minutes 1-2 (old space and JIT code alike), a ten-minute run about 0.5 %/min
  // from minute 4 on. So this run judges every figure but the heap slope, which it only requires to
  // be measured; the ten-minute run on demand judges it (docs/operations.md "The soak").
  it('two minutes on one node: nothing acknowledged lost, wills fired, slow queue bounded, heap measured', async () => {
    const { code, report } = await soak(false);
    assert.equal(report.cluster, false);
    assert.equal(code, report.failures.length === 0 ? 0 : 1);
    assert.deepEqual(
      report.failures.filter((f) => !HEAP_FAILURE.test(f)),
      [],
    );
    assert.equal(typeof report.growth[0]?.pctPerMin, 'number');
    assertFigures(report, [1]);
  });
});
