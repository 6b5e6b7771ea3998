// Apply cost of a failover with many sessions, in the pure state machine (no sockets): N online
// sessions (by i % 4: 3.1.1 clean, 3.1.1 persistent, 5.0 persistent with a will, 5.0 clean with a
// will) end at one serve-start, and their wills fall due together after the will grace. Prints the
// time of the serve-start entry and of the entries that fire the wills (every replica applies the
// same). Figures, not assertions.
// Usage: npm run build && node build/bench/failover-apply.js [N]
import { Harness, msg } from '../src/broker/broker-harness.testkit.js';

const N = Number(process.argv[2] ?? 10_000);
const GRACE_MS = 30_000;
/** Ticks applied at most while draining the wills. */
const ENTRIES_MAX = 1_000_000;

function onlineSessions(h: Harness, n: number): void {
  for (let i = 0; i < n; i++) {
    const conn = h.conn(2 + i);
    const kind = i % 4;
    const v5 = kind >= 2;
    h.connect(conn, `c${i}`, {
      protocol: v5 ? 5 : 4,
      clean: kind === 0 || kind === 3,
      expiryS: kind === 2 ? 300 : kind === 1 ? 0xffff_ffff : 0,
      will: v5 ? { msg: msg(`will/c${i}`, 'gone'), delayS: 0 } : null,
    });
    if (kind === 1 || kind === 2) h.subscribe(conn, 1, [{ filter: `q/${i}`, qos: 1 }]);
  }
}

function watch(h: Harness): void {
  const w = h.conn(1);
  h.connect(w, 'watcher');
  h.subscribe(w, 1, [{ filter: 'will/+', qos: 0 }]);
}

const h = new Harness();
watch(h);
onlineSessions(h, N);
const t0 = performance.now();
h.serveStart(1);
const serveStartMs = performance.now() - t0;
watch(h);
h.time += GRACE_MS;
let entries = 0;
let longest = 0;
let total = 0;
do {
  const a = performance.now();
  h.apply({ t: 'tick' });
  const d = performance.now() - a;
  longest = Math.max(longest, d);
  total += d;
  entries++;
} while (h.broker.deadlinesBacklogged && entries < ENTRIES_MAX);
process.stdout.write(
  `${N} sessions: serve-start entry ${serveStartMs.toFixed(1)} ms; wills after the grace: ${entries} entries, longest ${longest.toFixed(1)} ms, total ${total.toFixed(1)} ms\n`,
);
