// Runs the broker's CLI with an observer of the garbage collector: every 0.5 s it writes, for this
// process, the count, total and longest pause of minor and major collections and the growth of the
// old space (about what the young generation promoted) to $GC_OUT/gc-PID.json. The bench reports
// only the longest pause and the count; this gives the totals, per node of a cluster.
// Usage: GC_OUT=DIR RAFTMQ_BENCH_CLI=build/bench/gc-wrap.js node build/bench/run.js …
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { getHeapSpaceStatistics } from 'node:v8';

const WRITE_EVERY_MS = 500;
const out = process.env.GC_OUT;
if (out === undefined || out === '') {
  process.stderr.write('gc-wrap: set GC_OUT to the directory for gc-PID.json\n');
  process.exit(2);
}

const st = { minorN: 0, minorMs: 0, minorMaxMs: 0, majorN: 0, majorMs: 0, majorMaxMs: 0, oldGrowthBytes: 0, seconds: 0 };
const oldSpace = (): number => getHeapSpaceStatistics().find((s) => s.space_name === 'old_space')?.space_used_size ?? 0;
let lastOld = oldSpace();
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    const kind = (e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind;
    if (kind === constants.NODE_PERFORMANCE_GC_MINOR) {
      st.minorN++;
      st.minorMs += e.duration;
      st.minorMaxMs = Math.max(st.minorMaxMs, e.duration);
    } else if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) {
      st.majorN++;
      st.majorMs += e.duration;
      st.majorMaxMs = Math.max(st.majorMaxMs, e.duration);
    }
  }
  const now = oldSpace();
  if (now > lastOld) st.oldGrowthBytes += now - lastOld;
  lastOld = now;
}).observe({ entryTypes: ['gc'] });

const started = performance.now();
const file = join(out, `gc-${process.pid}.json`);
setInterval(() => {
  st.seconds = (performance.now() - started) / 1000;
  writeFileSync(file, `${JSON.stringify(st)}\n`);
}, WRITE_EVERY_MS).unref();

await import('../src/cli.js');
