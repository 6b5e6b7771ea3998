// npm run soak -- --minutes M [--cluster] [--seed S] [--json FILE]
// A bounded mixed MQTT workload against one raftmq node, or three as a cluster with the load on
// the serving leader, for M minutes. Each minute every node's heap is collected (a full GC forced
// through Node's inspector) and read with its RSS from the node's /metrics. Exit 1, naming the
// figure, when a heap grows more than 1 %/min over the last two thirds of the run, an acknowledged
// QoS 1/2 message did not reach the persistent subscriber, a will of an abrupt close was not
// published (or one of a normal disconnect was), the slow subscriber's queue went over its bound,
// or a node died (docs/operations.md "The soak").
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { livePids } from '../test/support/cluster.js';
import { sleep } from '../test/support/wait.js';
import { endOf, type SoakTarget, sample, startTarget } from './soak/nodes.js';
import { failures, HEAP_GROWTH_MAX_PCT_PER_MIN, heapGrowthPctPerMin, lastTwoThirds, type MemorySample } from './soak/verdict.js';
import { Workload, type WorkloadReport } from './soak/workload.js';

/** The slow subscriber's queue bound (every session's, --max-queued-messages). */
const MAX_QUEUED = 100;
const MINUTES_MAX = 24 * 60;

export interface SoakReport {
  minutes: number;
  cluster: boolean;
  seed: number;
  /** The node the load went to. */
  servingNode: number;
  samples: MemorySample[];
  /** Heap growth per node over the last two thirds of the run (%/min). */
  growth: { node: number; pctPerMin: number | null }[];
  workload: WorkloadReport;
  ends: { node: number; exit: string | null }[];
  failures: string[];
}

function usage(msg: string): never {
  console.error(`soak: ${msg}\nusage: npm run soak -- --minutes M [--cluster] [--seed S] [--json FILE]`);
  process.exit(2);
}

const mib = (b: number): string => (b / 2 ** 20).toFixed(1);

function print(r: SoakReport): void {
  console.log(
    `soak: ${r.minutes} min, ${r.cluster ? `three nodes, load on the serving leader (node ${r.servingNode})` : 'one node'}, seed ${r.seed}`,
  );
  console.log('minute  node  heap MiB (after forced GC)  RSS MiB  queued');
  for (const s of r.samples) {
    console.log(
      `${String(s.minute).padStart(6)}  ${String(s.node).padStart(4)}  ${mib(s.heapUsedBytes).padStart(26)}  ${mib(s.rssBytes).padStart(7)}  ${String(s.queuedMessages).padStart(6)}`,
    );
  }
  for (const g of r.growth) {
    console.log(
      `heap growth node ${g.node}, last two thirds: ${g.pctPerMin === null ? 'n/a' : `${g.pctPerMin.toFixed(3)} %/min`} (at most ${HEAP_GROWTH_MAX_PCT_PER_MIN})`,
    );
  }
  const w = r.workload;
  console.log(
    `checked: ${w.checkedSent} sent, ${w.acked} QoS 1/2 acknowledged, ${w.lost} lost, ${w.qos2Duplicates} QoS 2 duplicates, ${w.checkerReconnects} subscriber reconnects`,
  );
  if (w.lost > 0) console.log(`first lost sequence numbers: ${w.lostSeqs.join(', ')}`);
  console.log(
    `connections: ${w.connections} (${w.persistentConnections} persistent); wills: ${w.willsOfAbrupt} of ${w.abruptCloses} abrupt closes, ${w.willsOfNormal} after a normal disconnect`,
  );
  console.log(
    `subscriptions: ${w.subscribes} subscribes, ${w.unsubscribes} unsubscribes; shared: ${w.sharedPublished} published, ${w.sharedReceived} received`,
  );
  console.log(`slow subscriber: ${w.slowBursts} bursts, ${w.slowReceived} received, at most ${w.slowHeldMax} held (bound ${w.slowBound})`);
  console.log(`client errors: ${w.errors}${w.firstError === null ? '' : ` (first: ${w.firstError})`}`);
  for (const e of r.ends) console.log(`node ${e.node}: ${e.exit ?? 'ran to the end'}`);
  if (r.failures.length === 0) console.log('soak: pass');
  for (const f of r.failures) console.log(`soak: FAIL ${f}`);
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      minutes: { type: 'string' },
      cluster: { type: 'boolean', default: false },
      seed: { type: 'string' },
      json: { type: 'string' },
    },
  });
  const minutes = Number(values.minutes);
  // Two minutes at least: the heap criterion needs two samples after the first third.
  if (!Number.isInteger(minutes) || minutes < 2 || minutes > MINUTES_MAX)
    usage(`--minutes must be a whole number from 2 to ${MINUTES_MAX}`);
  const seed = values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(values.seed);
  if (!Number.isInteger(seed) || seed < 0) usage('--seed must be a non-negative integer');
  const cluster = values.cluster === true;

  const target: SoakTarget = await startTarget(cluster, ['--max-queued-messages', String(MAX_QUEUED)]);
  const samples: MemorySample[] = [];
  const sampleAll = async (minute: number): Promise<void> => {
    for (const n of target.nodes) {
      if (!n.alive) continue;
      try {
        samples.push(await sample(n, minute, true));
      } catch (err) {
        console.error(`soak: minute ${minute}, node ${n.id}: ${(err as Error).message}`);
      }
    }
  };
  let report: SoakReport;
  try {
    await sampleAll(0);
    const start = Date.now();
    const workload = new Workload({ port: target.serving.mqttPort, seed, deadline: start + minutes * 60_000, maxQueued: MAX_QUEUED });
    const sampler = (async () => {
      for (let m = 1; m <= minutes; m++) {
        await sleep(Math.max(0, start + m * 60_000 - Date.now()));
        await sampleAll(m);
        const heaps = samples.filter((s) => s.minute === m).map((s) => `node ${s.node} ${mib(s.heapUsedBytes)}/${mib(s.rssBytes)} MiB`);
        console.log(`soak: minute ${m}: heap/RSS ${heaps.join(', ')}`);
      }
    })();
    const [w] = await Promise.all([workload.run(), sampler]);
    const ends = target.nodes.map((n) => ({ node: n.id, exit: endOf(n) }));
    const growth = target.nodes.map((n) => ({
      node: n.id,
      pctPerMin: heapGrowthPctPerMin(
        lastTwoThirds(
          samples.filter((s) => s.node === n.id),
          minutes,
        ),
      ),
    }));
    report = {
      minutes,
      cluster,
      seed,
      servingNode: target.serving.id,
      samples,
      growth,
      workload: w,
      ends,
      failures: failures(minutes, samples, w, ends),
    };
  } finally {
    await target.stop();
  }
  print(report);
  if (values.json !== undefined) writeFileSync(values.json, `${JSON.stringify(report, null, 2)}\n`);
  return report.failures.length === 0 ? 0 : 1;
}

// Whatever ends this process (an uncaught error included), no broker it started outlives it.
process.on('exit', () => {
  for (const pid of livePids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {}
  }
});

// A signal ends the run through process.exit, so that the handler above runs.
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => process.exit(1));

main().then(
  (code) => process.exit(code),
  (err: Error) => {
    console.error(`soak: FAIL ${err.message}`);
    process.exit(1);
  },
);
