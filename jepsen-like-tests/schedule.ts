// Fault schedules: a seed and a duration in, a list of fault windows out (pure, so a seed always
// names the same schedule). Each window injects one fault at `atMs` (from the start of the workload)
// and heals it `forMs` later; windows never overlap, and a quiet gap follows each so the cluster can
// recover. Killed nodes cannot rejoin until raft parts 3/4 (amnesia, state files), so a run kills at
// most one node, in its last window, and never restarts it.
import { Prng } from '../raft/core/prng.js';

export const FAULT_CLASSES = ['kill', 'pause', 'partition', 'oneway', 'delay', 'drop'] as const;
export type FaultClass = (typeof FAULT_CLASSES)[number];

/** Whom a fault hits, resolved when it starts: the serving leader, or a node that does not serve. */
export type Target = 'leader' | 'follower';

export type Fault =
  | { kind: 'kill'; target: Target }
  /** SIGSTOP for forMs, then SIGCONT. */
  | { kind: 'pause'; target: Target }
  /** The target's links to and from both others are cut. */
  | { kind: 'partition'; target: Target }
  /** Only the target's outgoing links are cut: it hears the others, they do not hear it. */
  | { kind: 'oneway'; target: Target }
  /** Every link to and from the target is delayed by delayMs. */
  | { kind: 'delay'; target: Target; delayMs: number }
  /** Every link to and from the target breaks with probability dropRate per chunk. */
  | { kind: 'drop'; target: Target; dropRate: number };

export interface Window {
  atMs: number;
  /** 0 for kill: it is never healed. */
  forMs: number;
  fault: Fault;
}

export interface ScheduleOptions {
  seed: number;
  durationMs: number;
  classes: readonly FaultClass[];
  /** E: pause and partition lengths are drawn around it. */
  electionTimeoutMs: number;
  /** Each class exactly once (in a seeded order, kill last) instead of drawn at random. */
  eachOnce?: boolean;
}

/** Quiet time before the first fault, so every subscriber is in and publishing has begun. */
const LEAD_IN_MS = 3_000;

export function parseClasses(text: string): FaultClass[] {
  const out: FaultClass[] = [];
  for (const name of text.split(',')) {
    const t = name.trim();
    if (t === '') continue;
    if (!(FAULT_CLASSES as readonly string[]).includes(t)) {
      throw new Error(`--faults: unknown fault "${t}" (one of ${FAULT_CLASSES.join(', ')})`);
    }
    if (!out.includes(t as FaultClass)) out.push(t as FaultClass);
  }
  return out;
}

function draw(kind: FaultClass, r: Prng, e: number): { fault: Fault; forMs: number } {
  const target: Target = r.chance(0.7) ? 'leader' : 'follower';
  switch (kind) {
    case 'kill':
      return { fault: { kind, target }, forMs: 0 };
    case 'pause':
      // From well inside the lease (nothing should happen) to several E (a failover).
      return { fault: { kind, target }, forMs: r.range(Math.floor(e / 5), 6 * e) };
    case 'partition':
    case 'oneway':
      return { fault: { kind, target }, forMs: r.range(2 * e, 8 * e) };
    case 'delay':
      return { fault: { kind, target, delayMs: r.range(Math.floor(e / 50), Math.floor(e / 2)) }, forMs: r.range(2 * e, 8 * e) };
    case 'drop':
      return { fault: { kind, target, dropRate: r.range(2, 30) / 100 }, forMs: r.range(2 * e, 8 * e) };
    default: {
      const _: never = kind;
      return _;
    }
  }
}

export function makeSchedule(o: ScheduleOptions): Window[] {
  const r = new Prng(o.seed);
  const e = o.electionTimeoutMs;
  const gap = (): number => r.range(4 * e, 10 * e);
  const others = o.classes.filter((c) => c !== 'kill');
  const kinds: FaultClass[] = [];
  if (o.eachOnce === true) {
    const pool = [...others];
    while (pool.length > 0) kinds.push(pool.splice(r.int(pool.length), 1)[0]!);
  }
  const out: Window[] = [];
  let t = LEAD_IN_MS;
  // Leave room after the last window for the kill and for recovery before the workload ends.
  const end = o.durationMs - 6 * e;
  for (let i = 0; ; i++) {
    const kind = o.eachOnce === true ? kinds[i] : others.length > 0 ? others[r.int(others.length)] : undefined;
    if (kind === undefined) break;
    const { fault, forMs } = draw(kind, r, e);
    if (t + forMs + gap() > end) break;
    out.push({ atMs: t, forMs, fault });
    t += forMs + gap();
  }
  if (o.classes.includes('kill') && t < o.durationMs - 4 * e) {
    out.push({ atMs: t, forMs: 0, fault: draw('kill', r, e).fault });
  }
  return out;
}

export function describeFault(f: Fault): string {
  switch (f.kind) {
    case 'kill':
    case 'pause':
    case 'partition':
    case 'oneway':
      return `${f.kind} ${f.target}`;
    case 'delay':
      return `delay ${f.target} ${f.delayMs} ms`;
    case 'drop':
      return `drop ${f.target} ${Math.round(f.dropRate * 100)}%/chunk`;
    default: {
      const _: never = f;
      return _;
    }
  }
}
