// npm run fuzz -- [--time S] [--target NAME]... [--seed N] [--hang-ms MS] [--unguided] [--coverage]
//                 [--replay FILE] [--write-corpus]
// Runs the fuzz targets round robin on fresh random seeds until the time is up, and prints the
// inputs run per target. Inputs that reach new blocks of a target's modules are kept and mutated
// further (guide.ts); --unguided mutates the seed corpus and generated inputs only. A failure prints its seed and writes its input to fuzz/failures/, which
// --replay runs again; the run then exits 1. The targets run in a worker thread, and an input
// that keeps the worker busy past --hang-ms is a failure too (the only timed rule: npm test has
// none). --coverage runs the same under c8 and reports the line coverage of each reader's modules.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { CoverageGuide } from './guide.js';
import { describe, type FuzzInput, type FuzzTarget, loadSaved, readCorpus, runTarget, type SavedInput, saveable } from './harness.js';
import { writeCorpus } from './make-corpus.js';
import { allTargets } from './targets.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const FAILURES = join(ROOT, 'fuzz', 'failures');
/** Inputs per fast-check run by default: a run is the unit between seeds and between time checks. */
const RUNS_PER_BATCH = 200;
/** The longest a target runs before the next one's turn. */
const SLICE_MS_MAX = 10_000;
/** The bytes of the input being run, for the parent to save when the worker hangs on it. */
const INPUT_SLOT_BYTES = 1 << 20;

interface Options {
  timeS: number;
  targets: string[];
  seed: number | null;
  hangMs: number;
  coverage: boolean;
  guided: boolean;
  replay: string | null;
  writeCorpus: boolean;
}

function usage(why: string): never {
  console.error(`fuzz: ${why}`);
  console.error(
    'usage: npm run fuzz -- [--time S] [--target NAME]... [--seed N] [--hang-ms MS] [--unguided] [--coverage] [--replay FILE] [--write-corpus]',
  );
  console.error(
    `targets: ${allTargets()
      .map((t) => t.name)
      .join(', ')}`,
  );
  process.exit(2);
}

function parseArgs(argv: readonly string[]): Options {
  const o: Options = {
    timeS: 60,
    targets: [],
    seed: null,
    hangMs: 10_000,
    coverage: false,
    guided: true,
    replay: null,
    writeCorpus: false,
  };
  const names = new Set(allTargets().map((t) => t.name));
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined) usage(`${a} needs a value`);
      return v;
    };
    const count = (min: number): number => {
      const v = value();
      const n = Number(v);
      if (!/^\d+$/.test(v) || !Number.isSafeInteger(n) || n < min) usage(`${a} expects a whole number of at least ${min}, got ${v}`);
      return n;
    };
    if (a === '--time') o.timeS = count(1);
    else if (a === '--seed') o.seed = count(0);
    else if (a === '--hang-ms') o.hangMs = count(100);
    else if (a === '--target') {
      for (const n of value().split(',')) {
        if (!names.has(n)) usage(`--target: unknown target ${n}`);
        o.targets.push(n);
      }
    } else if (a === '--coverage') o.coverage = true;
    else if (a === '--unguided') o.guided = false;
    else if (a === '--replay') o.replay = value();
    else if (a === '--write-corpus') o.writeCorpus = true;
    else usage(`unknown argument ${a}`);
  }
  return o;
}

// ---- the worker: runs batches and reports each ----

type ToParent =
  | { t: 'batch'; target: string; runs: number; seed: number; features: number; kept: number }
  | { t: 'failure'; saved: SavedInput; path: string }
  | { t: 'done' };

interface WorkerJob {
  targets: string[];
  guided: boolean;
  timeS: number;
  seed: number | null;
  slot: SharedArrayBuffer;
}

const HEAD_BYTES = 32;
const CUTS_MAX = 64;
const DATA_AT = HEAD_BYTES + 4 * CUTS_MAX;

/** Writes the input about to run into the shared slot: a head of [inputs begun, target index,
 * data length, knob, cut count], the cuts, the data. */
function recordInput(slot: SharedArrayBuffer, target: number, input: FuzzInput): void {
  const head = new Uint32Array(slot, 0, HEAD_BYTES / 4);
  const cuts = input.cuts.slice(0, CUTS_MAX);
  const data = input.data.subarray(0, INPUT_SLOT_BYTES - DATA_AT);
  new Uint32Array(slot, HEAD_BYTES, cuts.length).set(cuts.map((c) => c >>> 0));
  new Uint8Array(slot, DATA_AT, data.length).set(data);
  head[1] = target;
  head[2] = data.length;
  head[3] = input.knob >>> 0;
  head[4] = cuts.length;
  Atomics.add(head, 0, 1);
}

function readInput(slot: SharedArrayBuffer): { target: number; input: FuzzInput } {
  const head = new Uint32Array(slot, 0, HEAD_BYTES / 4);
  const cuts = [...new Uint32Array(slot, HEAD_BYTES, head[4] as number)];
  const data = new Uint8Array(slot, DATA_AT, head[2] as number).slice();
  return { target: head[1] as number, input: { data, cuts, knob: head[3] as number } };
}

async function workerMain(job: WorkerJob): Promise<void> {
  const port = parentPort;
  if (port === null) return;
  const send = (m: ToParent): void => port.postMessage(m);
  const all = allTargets();
  const targets = job.targets.map((n) => all.find((t) => t.name === n) as FuzzTarget);
  const guides = new Map(targets.map((t) => [t, job.guided ? new CoverageGuide(t) : null]));
  const watched = targets.map(
    (t, i): FuzzTarget => ({
      ...t,
      run: async (input) => {
        recordInput(job.slot, i, input);
        await t.run(input);
        await guides.get(t)?.after(input);
      },
    }),
  );
  const corpora = new Map(targets.map((t) => [t.name, readCorpus(t.name)]));
  const deadline = Date.now() + job.timeS * 1000;
  // Each round gives every target the same time, however slow its inputs (a socket's are).
  const slice = Math.min(SLICE_MS_MAX, (job.timeS * 1000) / targets.length);
  const live = new Set(watched);
  let seed = job.seed;
  while (Date.now() < deadline && live.size > 0) {
    for (const t of [...live]) {
      const end = Math.min(deadline, Date.now() + slice);
      const guide = guides.get(targets[watched.indexOf(t)] as FuzzTarget) ?? null;
      guide?.reset();
      do {
        const s = seed ?? (Math.random() * 0x7fffffff) | 0;
        if (seed !== null) seed++;
        const extra = guide?.kept ?? [];
        const r = await runTarget(t, { runs: t.batchRuns ?? RUNS_PER_BATCH, seed: s, corpus: corpora.get(t.name) ?? [], extra });
        send({ t: 'batch', target: t.name, runs: r.numRuns, seed: s, features: guide?.features ?? 0, kept: extra.length });
        if (r.failed && r.counterexample !== null) {
          const saved = saveable(t.name, s, describe(r.errorInstance), r.counterexample[0]);
          const path = join(FAILURES, `${t.name}-${s}.json`);
          mkdirSync(FAILURES, { recursive: true });
          writeFileSync(path, `${JSON.stringify(saved, null, 2)}\n`);
          send({ t: 'failure', saved, path });
          // The other targets go on; this one has shown what it has to show.
          live.delete(t);
          break;
        }
      } while (Date.now() < end);
      if (Date.now() >= deadline) break;
    }
  }
  for (const t of targets) await t.close?.();
  send({ t: 'done' });
}

// ---- the parent: counts, watches for hangs, prints ----

function fuzz(o: Options): Promise<number> {
  const names = o.targets.length > 0 ? o.targets : allTargets().map((t) => t.name);
  const slot = new SharedArrayBuffer(INPUT_SLOT_BYTES);
  const job: WorkerJob = { targets: names, guided: o.guided, timeS: o.timeS, seed: o.seed, slot };
  const worker = new Worker(fileURLToPath(import.meta.url), { workerData: job });
  const runs = new Map(names.map((n) => [n, { inputs: 0, features: 0, kept: 0 }]));
  let failure = false;
  console.log(`fuzz: ${names.length} targets for ${o.timeS} s${o.seed === null ? ' on fresh random seeds' : ` from seed ${o.seed}`}`);
  return new Promise((resolve) => {
    const head = new Uint32Array(slot, 0, HEAD_BYTES / 4);
    let seen = Atomics.load(head, 0);
    let still = Date.now();
    const watchdog = setInterval(
      () => {
        const now = Atomics.load(head, 0);
        // Until the first input begins, the worker is starting (imports, corpus): not a hang.
        if (now !== seen || now === 0) {
          seen = now;
          still = Date.now();
          return;
        }
        if (Date.now() - still < o.hangMs) return;
        clearInterval(watchdog);
        const { target, input } = readInput(slot);
        const current = names[target] ?? 'unknown';
        const saved = saveable(current, -1, `no progress for ${o.hangMs} ms`, input);
        const path = join(FAILURES, `${current}-hang-${Date.now()}.json`);
        mkdirSync(FAILURES, { recursive: true });
        writeFileSync(path, `${JSON.stringify(saved, null, 2)}\n`);
        console.error(`fuzz: ${current} hung: one input ran for more than ${o.hangMs} ms; input written to ${path}`);
        void worker.terminate();
        report(runs);
        resolve(1);
      },
      Math.min(1000, o.hangMs),
    );
    worker.on('message', (m: ToParent) => {
      if (m.t === 'batch') {
        const r = runs.get(m.target);
        if (r !== undefined) runs.set(m.target, { inputs: r.inputs + m.runs, features: m.features, kept: m.kept });
      } else if (m.t === 'failure') {
        failure = true;
        console.error(`fuzz: ${m.saved.target} failed on seed ${m.saved.seed}: ${m.saved.failure}`);
        console.error(`fuzz: input (shrunk) written to ${m.path}; replay with npm run fuzz -- --replay ${m.path}`);
      } else {
        clearInterval(watchdog);
        report(runs);
        resolve(failure ? 1 : 0);
      }
    });
    worker.on('error', (err) => {
      clearInterval(watchdog);
      console.error(`fuzz: the worker failed: ${describe(err)}`);
      report(runs);
      resolve(1);
    });
  });
}

function report(runs: Map<string, { inputs: number; features: number; kept: number }>): void {
  console.log('target                 inputs  covered blocks  inputs kept for new coverage');
  for (const [name, r] of runs)
    console.log(`${name.padEnd(22)} ${String(r.inputs).padStart(7)} ${String(r.features).padStart(15)} ${String(r.kept).padStart(29)}`);
}

async function replay(path: string): Promise<number> {
  const saved = JSON.parse(readFileSync(path, 'utf8')) as SavedInput;
  const target = allTargets().find((t) => t.name === saved.target);
  if (target === undefined) usage(`--replay ${path}: unknown target ${saved.target}`);
  try {
    await target.run(loadSaved(saved));
    console.log(`fuzz: ${saved.target}: the input of ${path} passes now`);
    return 0;
  } catch (e) {
    console.error(`fuzz: ${saved.target}: ${describe(e)}`);
    if (e instanceof Error && e.cause instanceof Error) console.error(e.cause.stack);
    return 1;
  } finally {
    await target.close?.();
  }
}

/** Runs this same command under c8 and prints the line coverage of each target's modules. */
function coverage(argv: readonly string[], o: Options): number {
  const require = createRequire(import.meta.url);
  const c8 = join(dirname(require.resolve('c8/package.json')), 'bin', 'c8.js');
  const targets = allTargets().filter((t) => o.targets.length === 0 || o.targets.includes(t.name));
  const modules = [...new Set(targets.flatMap((t) => t.modules))];
  // c8 filters on the compiled files, then maps them back to the sources for the report.
  const include = modules.flatMap((m) => ['--include', `build/${m.replace(/\.ts$/, '.js')}`]);
  // Unguided: the guide reads V8's counters and resets them, which would hide from c8 what ran.
  const rest = [...argv.filter((a) => a !== '--coverage' && a !== '--unguided'), '--unguided'];
  const reportDir = join(ROOT, 'build', 'coverage');
  const r = spawnSync(
    process.execPath,
    [
      c8,
      '--reporter=text',
      '--reports-dir',
      reportDir,
      '--temp-directory',
      join(reportDir, 'tmp'),
      ...include,
      process.execPath,
      fileURLToPath(import.meta.url),
      ...rest,
    ],
    { stdio: 'inherit', cwd: ROOT },
  );
  return r.status ?? 1;
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const o = parseArgs(argv);
  if (o.writeCorpus) {
    writeCorpus(o.targets.length > 0 ? o.targets : undefined);
    console.log('fuzz: corpus written to fuzz/corpus');
    return;
  }
  if (o.replay !== null) process.exit(await replay(o.replay));
  if (o.coverage) process.exit(coverage(argv, o));
  process.exit(await fuzz(o));
}

if (isMainThread) await main();
else await workerMain(workerData as WorkerJob);
