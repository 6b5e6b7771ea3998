import { RaftError } from '../errors.js';
import type { Membership } from './membership.js';
import { formatConfig } from './membership.js';
import type { LogEntry, Message } from './messages.js';
import { Prng } from './prng.js';
import type { DurableState, RaftOptions, Ready } from './raft.js';
import { RaftCore } from './raft.js';
import type { Snapshot } from './snapshot.js';

/** A tiny deterministic harness for unit tests and scenario scripts: three cores, one clock, a
 * FIFO of messages, partitions, crash and restart. No randomness beyond the seeded PRNG. */
export type NodeOptions = Partial<Omit<RaftOptions, 'id' | 'voters' | 'random' | 'now' | 'restore'>>;

export interface TestClusterOptions {
  readonly ids?: readonly number[];
  readonly electionTimeoutMs?: number;
  readonly seed?: number;
  readonly node?: NodeOptions;
  readonly restore?: ReadonlyMap<number, DurableState>;
  /** Sees every Ready (e.g. the simulator's safety checker) and every process start. */
  readonly observer?: ClusterObserver;
  /** Start with no configuration, as fresh nodes that must bootstrap (docs/design.md "Fresh, amnesiac,
   * bootstrap"), each with its own incarnation; default: a static configuration of `ids`. */
  readonly fresh?: boolean;
  /** With `fresh`: how each node starts (default 'fresh'). */
  readonly membership?: ReadonlyMap<number, Membership>;
}

export interface ClusterObserver {
  check(node: RaftCore, ready: Ready): void;
  restarted(id: number): void;
}

/** The identity fields of a message between members of a static configuration (`voters`), for
 * tests that build messages by hand. */
export const staticEnvelope = { cluster: 'raftmq', epoch: 1, epochId: 'static', fromInc: '0', toInc: '0' } as const;

/** Bound on delivery rounds in stabilize(): two cores that answer each other forever are a bug. */
const stabilizeRoundsMax = 10_000;

export class TestCluster {
  readonly ids: readonly number[];
  readonly electionTimeoutMs: number;
  now = 0;
  private readonly nodes = new Map<number, RaftCore>();
  private readonly down = new Set<number>();
  private readonly prng: Prng;
  private readonly nodeOptions: NodeOptions;
  private readonly observer: ClusterObserver | null;
  private readonly fresh: boolean;
  /** Process starts per node id, for incarnations. */
  private readonly starts = new Map<number, number>();
  /** Group number per node id; messages cross groups only when healed. */
  private groups: Map<number, number> | null = null;
  queue: Message[] = [];
  /** Human-readable record of what happened since the last drainOutput(). */
  private output: string[] = [];
  readonly applied = new Map<number, LogEntry[]>();
  /** The snapshot each node's current process restored last (Ready.snapshot). */
  readonly restored = new Map<number, Snapshot>();

  constructor(opts: TestClusterOptions = {}) {
    this.ids = opts.ids ?? [1, 2, 3];
    this.electionTimeoutMs = opts.electionTimeoutMs ?? 100;
    this.prng = new Prng(opts.seed ?? 1);
    this.nodeOptions = opts.node ?? {};
    this.observer = opts.observer ?? null;
    this.fresh = opts.fresh === true;
    for (const id of this.ids) this.start(id, opts.restore?.get(id), opts.membership?.get(id) ?? 'fresh');
  }

  node(id: number): RaftCore {
    const n = this.nodes.get(id);
    if (n === undefined || this.down.has(id)) throw new RaftError('RAFT_SCENARIO_BAD_COMMAND', `no running node ${id}`);
    return n;
  }

  running(): RaftCore[] {
    return this.ids.filter((id) => !this.down.has(id)).map((id) => this.node(id));
  }

  /** Advances the clock by `ms` and ticks every running node once at the new time. */
  tick(ms: number): void {
    this.now += ms;
    for (const n of this.running()) n.tick(this.now, this.now);
    this.collect();
  }

  /** Ticks in steps of `step` ms until `ms` have passed, delivering messages after each step. */
  run(ms: number, step = 10): void {
    for (let t = 0; t < ms; t += step) {
      this.tick(step);
      this.stabilize();
    }
  }

  partition(groups: readonly (readonly number[])[]): void {
    this.groups = new Map();
    groups.forEach((g, k) => {
      for (const id of g) this.groups?.set(id, k);
    });
  }

  heal(): void {
    this.groups = null;
  }

  crash(id: number): void {
    this.node(id);
    this.down.add(id);
    this.queue = this.queue.filter((m) => m.to !== id && m.from !== id);
    this.output.push(`${id} crashed`);
  }

  restart(id: number): void {
    const old = this.nodes.get(id);
    if (old === undefined || !this.down.has(id)) throw new RaftError('RAFT_SCENARIO_BAD_COMMAND', `node ${id} is not down`);
    this.down.delete(id);
    this.start(id, old.durableState(), 'member');
    this.output.push(`${id} restarted`);
  }

  /** Restarts a crashed node without its state: a new incarnation that knows nothing. */
  restartAmnesiac(id: number): void {
    if (!this.down.has(id)) throw new RaftError('RAFT_SCENARIO_BAD_COMMAND', `node ${id} is not down`);
    this.down.delete(id);
    this.start(id, undefined, 'amnesiac');
    this.output.push(`${id} restarted amnesiac`);
  }

  /** Delivers queued messages (and everything they cause) until the network is quiet. Messages
   * that `keep` rejects, or that cross a partition, are dropped. */
  stabilize(keep: (m: Message) => boolean = () => true): void {
    this.collect();
    for (let round = 0; this.queue.length > 0; round++) {
      if (round >= stabilizeRoundsMax) throw new RaftError('RAFT_INVARIANT', 'stabilize did not converge');
      const batch = this.queue;
      this.queue = [];
      for (const m of batch) this.deliver(m, keep(m));
      this.collect();
    }
  }

  leader(): RaftCore | undefined {
    return this.running().find((n) => n.role === 'leader');
  }

  drainOutput(): string[] {
    const out = this.output;
    this.output = [];
    return out;
  }

  status(): string[] {
    return this.ids.map((id) => {
      if (this.down.has(id)) return `${id}: down`;
      const n = this.node(id);
      const s = n.softState();
      const log = n.entries().map(formatEntry).join(' ');
      return `${id}: ${s.role} term=${s.term} leader=${s.leader} commit=${s.commit} log=[${log}]`;
    });
  }

  private start(id: number, restore: DurableState | undefined, membership: Membership): void {
    const n = (this.starts.get(id) ?? 0) + 1;
    const resumed = restore !== undefined ? this.nodes.get(id) : undefined;
    this.starts.set(id, n);
    const identity: Partial<RaftOptions> = this.fresh
      ? {
          nodes: this.ids,
          // A resumed state file keeps the member and the epoch; anything else is a new member.
          incarnation: resumed?.incarnation ?? `${String.fromCharCode(96 + id)}${n}`,
          membership,
          ...(resumed === undefined ? {} : { epoch: resumed.epoch }),
        }
      : { voters: this.ids };
    const opts: RaftOptions = {
      electionTimeoutMs: this.electionTimeoutMs,
      ...this.nodeOptions,
      ...identity,
      id,
      random: this.prng.fork(),
      now: this.now,
      ...(restore === undefined ? {} : { restore }),
    };
    this.nodes.set(id, new RaftCore(opts));
    this.applied.set(id, []);
    this.restored.delete(id);
    this.observer?.restarted(id);
    this.collectFrom(this.node(id));
  }

  private deliver(m: Message, keep: boolean): void {
    const crosses = this.groups !== null && this.groups.get(m.from) !== this.groups.get(m.to);
    if (!keep || crosses || this.down.has(m.to)) {
      this.output.push(`dropped ${formatMessage(m)}`);
      return;
    }
    this.output.push(formatMessage(m));
    const error = this.node(m.to).step(m);
    if (error !== null) this.output.push(`${m.to} refused: ${error.code}`);
  }

  private collect(): void {
    for (const n of this.running()) this.collectFrom(n);
  }

  private collectFrom(n: RaftCore): void {
    if (!n.hasReady()) return;
    const r = n.takeReady();
    this.observer?.check(n, r);
    if (r.softState !== null) {
      const s = r.softState;
      this.output.push(`${n.id} is ${s.role} term=${s.term} leader=${s.leader} commit=${s.commit}`);
    }
    if (r.truncatedFrom !== null) this.output.push(`${n.id} truncated from ${r.truncatedFrom}`);
    if (r.snapshot !== null) this.restored.set(n.id, r.snapshot);
    if (r.snapshot !== null) this.output.push(`${n.id} restored snapshot at ${r.snapshot.index}/${r.snapshot.term}`);
    if (r.committed.length > 0) {
      this.applied.get(n.id)?.push(...r.committed);
      this.output.push(`${n.id} applied ${r.committed.map(formatEntry).join(' ')}`);
    }
    this.queue.push(...r.messages);
  }
}

const decoder = new TextDecoder();

export function formatEntry(e: LogEntry): string {
  if (e.config !== undefined) return `${e.index}/${e.term}:config(${formatConfig(e.config)})`;
  return e.data === null ? `${e.index}/${e.term}` : `${e.index}/${e.term}:${decoder.decode(e.data)}`;
}

export function formatMessage(m: Message): string {
  const head = `${m.from}->${m.to} ${m.type} t${m.term}`;
  switch (m.type) {
    case 'pre-vote-request':
    case 'vote-request':
      return `${head} last=${m.lastIndex}/${m.lastTerm}`;
    case 'pre-vote-response':
    case 'vote-response':
      return `${head} ${m.granted ? 'granted' : 'rejected'}`;
    case 'append':
      return `${head} prev=${m.prevIndex}/${m.prevTerm} [${m.entries.map(formatEntry).join(' ')}] commit=${m.commit}`;
    case 'append-response':
      return m.success ? `${head} ok index=${m.index}` : `${head} rejected index=${m.index} hint=${m.hint}`;
    case 'heartbeat':
      return `${head} commit=${m.commit}`;
    case 'heartbeat-response':
    case 'timeout-now':
      return head;
    case 'announce':
      return `${head} ${m.membership}${m.voter ? ' voter' : ''}${m.stuck ? ' stuck' : ''} last=${m.lastIndex}/${m.lastTerm}`;
    case 'snapshot':
      return `${head} at=${m.index}/${m.lastTerm} chunk ${m.seq + 1}/${m.chunks} (${m.data.length} bytes)`;
    case 'snapshot-response':
      return `${head} at=${m.index} received=${m.received} match=${m.match}`;
    default: {
      const _: never = m;
      return String(_);
    }
  }
}
