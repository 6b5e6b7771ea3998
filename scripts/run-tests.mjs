#!/usr/bin/env node
// Runs the compiled tests in layers (docs/architecture.md "Testing layers").
//   quick: unit and property tests beside the code, then single-node integration tests in test/.
//   full:  quick, then every *.slow.test.js (long simulator runs, the soak, cluster tests).
// Node 20 finds no tests without explicit files, so the lists are built here. Unit tests and the
// single-node integration tests run two files at a time (an integration test binds port 0 or a
// port drawn at random, test/support/net.ts, and keeps its files in its own temporary directory;
// most of its time is spent waiting on the processes it drives). The long simulator runs (pure,
// beside the code) share their layer with the soak, which holds a light load for a fixed time and
// judges counts, not timings: all of them run at once, the simulators on the cores the soak leaves
// idle. The cluster tests run one file at a time: they time elections and kill leaders.
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const mode = process.argv[2] ?? 'quick';
if (mode !== 'quick' && mode !== 'full') {
  console.error(`run-tests: unknown mode ${mode} (quick or full)`);
  process.exit(2);
}

function find(dir, accept) {
  let names;
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const out = [];
  for (const name of names.sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...find(path, accept));
    else if (accept(name)) out.push(path);
  }
  return out;
}

const isFast = (n) => n.endsWith('.test.js') && !n.endsWith('.slow.test.js');
const isSlow = (n) => n.endsWith('.slow.test.js');
const layers = [
  {
    name: 'unit',
    files: [
      ...find('build/src', isFast),
      ...find('build/raft', isFast),
      ...find('build/jepsen-like-tests', isFast),
      ...find('build/fuzz', isFast),
    ],
    concurrency: 2,
  },
  { name: 'integration', files: find('build/test', isFast), concurrency: 2 },
];
const SOAK = join('build', 'test', 'soak.slow.test.js');
if (mode === 'full') {
  // The soak first: it is the longest file of its layer.
  const beside = [SOAK, ...find('build/src', isSlow), ...find('build/raft', isSlow)];
  layers.push({ name: 'slow, simulators beside the soak', files: beside, concurrency: beside.length });
  layers.push({ name: 'slow', files: find('build/test', (n) => isSlow(n) && n !== 'soak.slow.test.js'), concurrency: 1 });
}

let total = 0;
for (const layer of layers) {
  if (layer.files.length === 0) continue;
  total += layer.files.length;
  console.log(`\n== ${layer.name}: ${layer.files.length} files ==`);
  const r = spawnSync(process.execPath, ['--test', `--test-concurrency=${layer.concurrency}`, '--test-timeout=600000', ...layer.files], {
    stdio: 'inherit',
  });
  if (r.status !== 0) {
    console.error(`run-tests: layer ${layer.name} failed (exit ${r.status ?? r.signal})`);
    process.exit(1);
  }
}
if (total === 0) {
  console.error('run-tests: no test files found under build/ (run npm run build first)');
  process.exit(1);
}
