// Fault schedules: a seed and a duration in, a list of fault windows out (pure, so a seed always
// names the same schedule). Each window injects one fault at `atMs` (from the start of the workload)
// and heals it `forMs` later; windows never overlap, and a quiet gap follows each so the cluster can
// recover. A kill is healed by starting the process again with the same flags (it comes back
// amnesiac, docs/design.md "Fresh, amnesiac, bootstrap"); a restart stops a node with SIGTERM and starts it
// again from its state file. The model allows one memory loss at a time, the next only after /health
// says `redundant` (docs/design.md "The model"): that wait depends on the
// cluster, so the runner does it before each fault that stops a process, and shifts the rest of the
// schedule by what it waited.
import { Prng } from '../raft/core/prng.js';

export const FAULT_CLASSES = ['kill', 'restart', 'restart-all', 'pause', 'pause-cut', 'partition', 'oneway', 'delay', 'drop'] as const;
export type FaultClass = (typeof FAULT_CLASSES)[number];

/** Whom a fault hits, resolved when it starts: the serving leader, or a node that does not serve. */
export type Target = 'leader' | 'follower';

export type Fault =
  /** SIGKILL (memory lost), started again forMs later. */
  | { kind: 'kill'; target: Target }
  /** SIGTERM, wait for exit 0, started again forMs later (resumes its state file). */
  | { kind: 'restart'; target: Target }
  /** SIGTERM to all three, wait for every exit 0, all started again forMs later. */
  | { kind: 'restart-all' }
  /** SIGSTOP for forMs, then SIGCONT. */
  | { kind: 'pause'; target: Target }
  /** SIGSTOP and every link to and from the target cut for forMs (a rival is elected and serves),
   * then SIGCONT with the links still cut for cutAfterMs: the resumed node hears no peer before its
   * first turn, so only its own lease stops it from serving what its clients sent meanwhile. */
  | { kind: 'pause-cut'; target: Target; cutAfterMs: number }
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
  /** How long the fault lasts; for kill and restarts, the time between exit and the new start. */
  forMs: number;
  fault: Fault;
}

export interface ScheduleOptions {
  seed: number;
  durationMs: number;
  classes: readonly FaultClass[];
  /** E: fault lengths and gaps are drawn around it. */
  electionTimeoutMs: number;
  /** Exactly these faults (a class listed twice runs twice), in a seeded order, instead of drawn at
   * random from `classes`; every one must fit in durationMs or makeSchedule throws. */
  plan?: readonly FaultClass[];
}

/** Quiet time before the first fault, so every subscriber is in and publishing has begun. */
export const LEAD_IN_MS = 3_000;

/** The faults that stop a process: each may cost (or, while a node is out, risk) a memory loss,
 * so each waits for `redundant`. */
export function stopsProcesses(kind: FaultClass): boolean {
  return kind === 'kill' || kind === 'restart' || kind === 'restart-all';
}

/** Room left at the end of the workload, in units of E, for the last fault to heal and the
 * cluster to recover before publishing stops. */
const TAIL_E = 4;

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
      // Down from one E (the survivors have barely noticed) to several (a replacement is under way).
      return { fault: { kind, target }, forMs: r.range(e, 6 * e) };
    case 'restart':
      return { fault: { kind, target }, forMs: r.range(0, 2 * e) };
    case 'restart-all':
      return { fault: { kind }, forMs: r.range(0, 2 * e) };
    case 'pause':
      // From well inside the lease (nothing should happen) to several E (a failover).
      return { fault: { kind, target }, forMs: r.range(Math.floor(e / 5), 6 * e) };
    case 'pause-cut':
      // Long enough that a rival serves at least E before the resume (the client-side check's slack).
      return { fault: { kind, target: 'leader', cutAfterMs: Math.floor(e / 2) }, forMs: r.range(4 * e, 6 * e) };
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

/** Quiet time after a window. A stop and start takes real time beyond forMs (the handover, the
 * state file, a new election); the runner shifts the schedule by that, so the gap stays quiet. */
function gap(r: Prng, e: number): number {
  return r.range(3 * e, 8 * e);
}

export function makeSchedule(o: ScheduleOptions): Window[] {
  const r = new Prng(o.seed);
  const e = o.electionTimeoutMs;
  const end = o.durationMs - TAIL_E * e;
  const out: Window[] = [];
  let t = LEAD_IN_MS;
  if (o.plan !== undefined) {
    const pool = [...o.plan];
    while (pool.length > 0) {
      const kind = pool.splice(r.int(pool.length), 1)[0]!;
      const { fault, forMs } = draw(kind, r, e);
      out.push({ atMs: t, forMs, fault });
      t += forMs + gap(r, e);
    }
    if (t > end)
      throw new Error(`a schedule of ${o.plan.length} faults needs ${Math.ceil((t + TAIL_E * e) / 1000)} s, not ${o.durationMs / 1000} s`);
    return out;
  }
  if (o.classes.length === 0) return out;
  for (;;) {
    const { fault, forMs } = draw(o.classes[r.int(o.classes.length)]!, r, e);
    const next = t + forMs + gap(r, e);
    if (next > end) break;
    out.push({ atMs: t, forMs, fault });
    t = next;
  }
  return out;
}

export function describeFault(f: Fault): string {
  switch (f.kind) {
    case 'kill':
    case 'restart':
    case 'pause':
    case 'pause-cut':
    case 'partition':
    case 'oneway':
      return `${f.kind} ${f.target}`;
    case 'restart-all':
      return f.kind;
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
