#!/usr/bin/env node
// Runs the compiled tests in layers (docs/architecture.md "Testing layers").
//   quick: unit and property tests beside the code, then single-node integration tests in test/.
//   full:  quick, then every *.slow.test.js (long simulator runs, cluster tests).
// Node 20 finds no tests without explicit files, so the lists are built here. Pure tests run two at
// a time; tests that spawn processes or bind ports run one file at a time.
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
  { name: 'integration', files: find('build/test', isFast), concurrency: 1 },
];
if (mode === 'full') {
  const slow = [...find('build/src', isSlow), ...find('build/raft', isSlow), ...find('build/test', isSlow)];
  layers.push({ name: 'slow', files: slow, concurrency: 1 });
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
