// Route propagation delay (docs/scale-out.md "Route propagation"): how long a route written by one
// shard takes to reach another shard's route table through one nats-server -js. Shard a writes a
// new route into the route bucket (src/scale/route-bucket.ts); shard b, on its own NATS connection,
// watches the bucket into its RouteTable. Per route: the write's own time (read, then create with
// an expected revision, until JetStream acknowledged it) and the time from the start of the write
// until b's table holds it. Routes are written one at a time, so the figure is latency, not
// throughput.
//
//   node build/bench/route-propagation.js [--routes 500]
//
// Starts and stops its own nats-server (Debian's nats-server) on a free loopback port.
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { connect } from '@nats-io/transport-node';
import { Placement } from '../src/scale/placement.js';
import { RouteBucket } from '../src/scale/route-bucket.js';
import { type Route, RouteTable } from '../src/scale/routes.js';
import { NatsServer } from '../test/support/nats-server.js';

const ROUTES_MAX = 100_000;
/** How long one route may take to arrive before the run gives up (ms). */
const ARRIVAL_TIMEOUT_MS = 10_000;

const { values } = parseArgs({ options: { routes: { type: 'string', default: '500' } } });
const routes = Number(values.routes);
if (!Number.isInteger(routes) || routes < 1 || routes > ROUTES_MAX) {
  console.error(`route-propagation: --routes must be 1 to ${ROUTES_MAX}`);
  process.exit(2);
}

/** A route table that tells when a route arrives, so the run waits without polling. */
class ObservedTable extends RouteTable {
  private waiting: { filter: string; resolve: () => void } | null = null;

  override set(route: Route): void {
    super.set(route);
    if (this.waiting !== null && route.filter === this.waiting.filter) this.waiting.resolve();
  }

  /** Resolves when `filter` of shard `shard` is in the table (at once if it is). */
  arrival(shard: string, filter: string): Promise<void> {
    if (this.get(shard, filter) !== undefined) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${filter} did not arrive in ${ARRIVAL_TIMEOUT_MS} ms`)), ARRIVAL_TIMEOUT_MS);
      this.waiting = {
        filter,
        resolve: () => {
          clearTimeout(timer);
          this.waiting = null;
          resolve();
        },
      };
    });
  }
}

const quantile = (sorted: readonly number[], q: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
const summary = (xs: number[]): string => {
  const s = [...xs].sort((a, b) => a - b);
  return `p50 ${quantile(s, 0.5).toFixed(2)} ms, p99 ${quantile(s, 0.99).toFixed(2)} ms, max ${(s[s.length - 1] as number).toFixed(2)} ms`;
};

const server = await NatsServer.start();
const placement = new Placement(['a', 'b']);
const log = (r: { key: string; reason: string }): void => console.error(`route refused: ${r.key}: ${r.reason}`);
const ncA = await connect({ servers: server.url, reconnect: false });
const ncB = await connect({ servers: server.url, reconnect: false });
try {
  const a = await RouteBucket.open(ncA, { shard: 'a', placement, log });
  const b = await RouteBucket.open(ncB, { shard: 'b', placement, log });
  const tableB = new ObservedTable('b');
  const watcher = await b.watch(tableB);
  const writes: number[] = [];
  const arrivals: number[] = [];
  for (let i = 0; i < routes; i++) {
    const filter = `bench/${i}/+`;
    const t0 = performance.now();
    let arrivedAt = 0;
    const arrived = tableB.arrival('a', filter).then(() => {
      arrivedAt = performance.now();
    });
    const r = await a.put(filter, 1, { epoch: 1, term: 1, index: i + 1 });
    const t1 = performance.now();
    if (r.kind !== 'written') throw new Error(`route ${i}: ${r.kind}`);
    await arrived;
    writes.push(t1 - t0);
    arrivals.push(arrivedAt - t0);
  }
  watcher.stop();
  console.log(`routes: ${routes}, one at a time, through one nats-server (${server.url})`);
  console.log(`write (read + create, acknowledged): ${summary(writes)}`);
  console.log(`write start to the other shard's table: ${summary(arrivals)}`);
  console.log(`refused: ${a.refused + b.refused}`);
} finally {
  await ncA.close();
  await ncB.close();
  await server.dispose();
}
