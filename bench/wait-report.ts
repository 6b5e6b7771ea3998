// Reads the traces bench/wait-trace.ts wrote for a three-node run and says where a proposal waited:
//   node build/bench/wait-report.js DIR
// The leader is the process that proposed. For each batch it handed to the core: the commit time
// (batch to the apply of its last entry) and, for each follower, the leader's write of the next
// append to it, the follower's read of it, the follower's answer, and the leader's read of that
// answer. Then the leader's silent stretches (no traced event for over 1 ms) and the GC pauses among
// them, and each process's context switches.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { EV_APPLY, EV_BATCH, EV_GC, EV_PROPOSE, EV_READ, EV_WRITE, FIELDS } from './wait-trace.js';

interface Trace {
  pid: string;
  ev: Float64Array;
  n: number;
  switches: string;
}

const at = (t: Trace, i: number, f = 0): number => t.ev[i * FIELDS + f] as number;
/** An event's time: a GC pause's start, anything else when recorded. */
const timeOf = (t: Trace, i: number): number => (at(t, i, 1) === EV_GC ? at(t, i, 4) || at(t, i, 0) : at(t, i, 0));

function load(dir: string): Trace[] {
  return readdirSync(dir)
    .filter((f) => /^trace-\d+\.bin$/.test(f))
    .map((f) => {
      const b = readFileSync(join(dir, f));
      const ev = new Float64Array(b.buffer, b.byteOffset, b.length / 8);
      const pid = f.slice(6, -4);
      let switches = '';
      try {
        switches = readFileSync(join(dir, `trace-${pid}.txt`), 'utf8')
          .replace(/\s+/g, ' ')
          .trim();
      } catch {}
      return { pid, ev, n: ev.length / FIELDS, switches };
    });
}

/** How often each (local port, remote port) pair has events of a kind. */
function pairs(t: Trace, kind: number): Map<string, number> {
  const m = new Map<string, number>();
  for (let i = 0; i < t.n; i++) {
    if (at(t, i, 1) !== kind) continue;
    const k = `${at(t, i, 2)}:${at(t, i, 3)}`;
    m.set(k, (m.get(k) ?? 0) + 1);
  }
  return m;
}

interface Link {
  follower: Trace;
  /** The socket the leader writes appends on, as leader port and follower port. */
  appendLeader: number;
  appendFollower: number;
  /** The socket the follower answers on. */
  answerLeader: number;
  answerFollower: number;
}

/** The busiest socket pair each way between the leader and a follower. */
function linkOf(leader: Trace, f: Trace): Link | null {
  const busiest = (theirs: Map<string, number>, ours: Map<string, number>): [number, number] | null => {
    let best: [number, number, number] | null = null;
    for (const [k, c] of theirs) {
      const [a, b] = k.split(':').map(Number) as [number, number];
      if (ours.has(`${b}:${a}`) && (best === null || c > best[2])) best = [a, b, c];
    }
    return best === null ? null : [best[0], best[1]];
  };
  const append = busiest(pairs(f, EV_READ), pairs(leader, EV_WRITE));
  const answer = busiest(pairs(f, EV_WRITE), pairs(leader, EV_READ));
  if (append === null || answer === null) return null;
  return { follower: f, appendFollower: append[0], appendLeader: append[1], answerFollower: answer[0], answerLeader: answer[1] };
}

/** The first event at or after `from` that matches. */
function next(t: Trace, from: number, match: (i: number) => boolean): number {
  let lo = 0;
  let hi = t.n;
  while (lo < hi) {
    const m = (lo + hi) >> 1;
    if (at(t, m) < from) lo = m + 1;
    else hi = m;
  }
  for (let i = lo; i < t.n; i++) if (match(i)) return at(t, i);
  return Number.NaN;
}

const pct = (sorted: readonly number[], p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? Number.NaN;
const us = (ms: number): string => (Number.isNaN(ms) ? '–' : (ms * 1000).toFixed(0));
const quartet = (a: number[]): string => {
  const s = [...a].sort((x, y) => x - y);
  return [0.5, 0.9, 0.99, 0.999].map((p) => us(pct(s, p))).join(' / ');
};

function main(dir: string): void {
  const traces = load(dir);
  const leader = traces.find((t) => {
    for (let i = 0; i < t.n; i++) if (at(t, i, 1) === EV_PROPOSE) return true;
    return false;
  });
  if (leader === undefined) throw new Error(`no trace in ${dir} has a proposal (RAFTMQ_WAIT_TRACE_DIR set for every broker?)`);
  const links = traces.filter((t) => t !== leader).map((f) => linkOf(leader, f));
  if (links.some((l) => l === null)) throw new Error('a follower trace shares no socket with the leader');
  const ls = links as Link[];
  // Entries: proposed, batched, applied.
  const proposed = new Map<number, number>();
  const batched = new Map<number, number>();
  const hold: number[] = [];
  const commit: number[] = [];
  const applies: [number, number][] = [];
  for (let i = 0; i < leader.n; i++) {
    const kind = at(leader, i, 1);
    if (kind === EV_PROPOSE) proposed.set(at(leader, i, 2), at(leader, i));
    else if (kind === EV_BATCH) for (let x = at(leader, i, 2); x <= at(leader, i, 3); x++) batched.set(x, at(leader, i));
    else if (kind === EV_APPLY) {
      applies.push([at(leader, i), at(leader, i, 3)]);
      for (let x = at(leader, i, 2); x <= at(leader, i, 3); x++) {
        const p = proposed.get(x);
        const b = batched.get(x);
        if (p !== undefined && b !== undefined) {
          hold.push(b - p);
          commit.push(at(leader, i) - p);
        }
        proposed.delete(x);
        batched.delete(x);
      }
    }
  }
  process.stdout.write(`leader ${leader.pid}: ${commit.length} entries; µs p50 / p90 / p99 / p99.9\n`);
  process.stdout.write(`  proposed → batched (hold)   ${quartet(hold)}\n  proposed → applied (commit) ${quartet(commit)}\n`);
  // Batches and the path of their appends.
  interface Batch {
    t: number;
    ms: number;
    paths: number[][];
  }
  const batches: Batch[] = [];
  let ai = 0;
  for (let i = 0; i < leader.n; i++) {
    if (at(leader, i, 1) !== EV_BATCH) continue;
    const t = at(leader, i);
    const last = at(leader, i, 3);
    while (ai < applies.length && (applies[ai] as [number, number])[1] < last) ai++;
    const done = applies.slice(ai).find(([ta, l]) => l >= last && ta >= t);
    if (done === undefined) continue;
    const paths = ls.map((l) => {
      const f = l.follower;
      const wrote = next(
        leader,
        t,
        (j) => at(leader, j, 1) === EV_WRITE && at(leader, j, 2) === l.appendLeader && at(leader, j, 3) === l.appendFollower,
      );
      const read = next(f, wrote - 0.05, (j) => at(f, j, 1) === EV_READ && at(f, j, 2) === l.appendFollower);
      const answered = next(f, read, (j) => at(f, j, 1) === EV_WRITE && at(f, j, 2) === l.answerFollower);
      const heard = next(
        leader,
        answered - 0.05,
        (j) => at(leader, j, 1) === EV_READ && at(leader, j, 2) === l.answerLeader && at(leader, j, 3) === l.answerFollower,
      );
      return [wrote - t, read - wrote, answered - read, heard - answered];
    });
    batches.push({ t, ms: done[0] - t, paths });
  }
  batches.sort((a, b) => a.ms - b.ms);
  const ms = batches.map((b) => b.ms);
  process.stdout.write(`batches ${batches.length}: batched → applied µs p50 / p90 / p99 / p99.9 ${quartet(ms)}\n`);
  // The leader writes a batch's appends one follower after the other; a wide gap is the leader
  // not running between the two writes (on shared cores: the follower it woke first runs in its place).
  if (ls.length === 2) {
    const gaps = batches
      .map((x) => Math.abs((x.paths[0]?.[0] ?? Number.NaN) - (x.paths[1]?.[0] ?? Number.NaN)))
      .filter((g) => !Number.isNaN(g));
    process.stdout.write(`between the leader's writes of a batch's two appends µs p50 / p90 / p99 / p99.9 ${quartet(gaps)}\n`);
  }
  const slow = batches.slice(Math.floor(batches.length * 0.99));
  const sum = (p: number[]): number => p.reduce((a, b) => a + (Number.isNaN(b) ? 0 : b), 0);
  const mean = [0, 0, 0, 0];
  for (const b of slow) {
    const faster = b.paths.reduce((m, p) => (sum(p) < sum(m) ? p : m));
    faster.forEach((x, k) => {
      mean[k] = (mean[k] as number) + (Number.isNaN(x) ? 0 : x) / slow.length;
    });
  }
  process.stdout.write(
    `slowest 1 % (${slow.length} batches, ≥ ${us(slow[0]?.ms ?? Number.NaN)} µs), the faster follower's path, mean µs:\n` +
      `  leader writes the append ${us(mean[0] as number)}, follower reads it ${us(mean[1] as number)}, ` +
      `follower answers ${us(mean[2] as number)}, leader reads the answer ${us(mean[3] as number)}\n`,
  );
  // Silent stretches of the leader.
  const pauses: [number, number][] = [];
  for (let i = 0; i < leader.n; i++) if (at(leader, i, 1) === EV_GC) pauses.push([timeOf(leader, i), timeOf(leader, i) + at(leader, i, 2)]);
  let silent = 0;
  let inGc = 0;
  let prev = Number.NaN;
  for (let i = 0; i < leader.n; i++) {
    if (at(leader, i, 1) === EV_GC) continue;
    const t = at(leader, i);
    if (t - prev > 1) {
      silent++;
      if (pauses.some(([s, e]) => s < t && e > prev)) inGc++;
    }
    prev = t;
  }
  process.stdout.write(`leader silent over 1 ms: ${silent} times, ${inGc} of them during a GC pause (${pauses.length} pauses)\n`);
  for (const t of traces) process.stdout.write(`${t === leader ? 'leader' : 'follower'} ${t.pid}: ${t.switches}\n`);
}

main(process.argv[2] ?? '.');
