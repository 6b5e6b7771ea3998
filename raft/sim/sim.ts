import { RaftError } from '../errors.js';
import type { Message } from '../core/messages.js';
import { Prng } from '../core/prng.js';
import type { UnsafeRule } from '../core/raft.js';
import { RaftCore } from '../core/raft.js';
import { formatEntry, formatMessage } from '../core/test-cluster.js';
import { SafetyChecker, Violation } from './checker.js';
import { EventQueue } from './event-queue.js';

export const faultNames = ['drop', 'dup', 'reorder', 'partition', 'crash'] as const;
export type Fault = (typeof faultNames)[number];

export interface SimOptions {
  readonly seed: number;
  readonly faults: ReadonlySet<Fault>;
  /** E in simulated ms. */
  readonly electionTimeoutMs?: number;
  /** Length of the phase with faults, in simulated ms. Default 200E. */
  readonly faultPhaseMs?: number;
  readonly unsafe?: UnsafeRule;
  /** Record the event list (off for speed; a failing seed is re-run with it on). */
  readonly trace?: boolean;
}

export interface SimStats {
  readonly events: number;
  readonly messages: number;
  readonly elections: number;
  readonly committed: number;
}

export type SimResult =
  | { readonly ok: true; readonly seed: number; readonly stats: SimStats }
  | {
      readonly ok: false;
      readonly seed: number;
      /** The property broken, e.g. 'election safety'; 'core assertion' for a RAFT_INVARIANT. */
      readonly property: string;
      readonly violation: string;
      readonly trace: readonly string[];
    };

type SimEvent =
  | { readonly kind: 'tick'; readonly node: number }
  | { readonly kind: 'deliver'; readonly msg: Message }
  | { readonly kind: 'propose' }
  | { readonly kind: 'crash'; readonly node: number }
  | { readonly kind: 'restart'; readonly node: number }
  | { readonly kind: 'partition' }
  | { readonly kind: 'heal' }
  | { readonly kind: 'quiet' }
  | { readonly kind: 'liveness-probe' }
  | { readonly kind: 'end' };

const ids = [1, 2, 3] as const;
/** Quiet period after the faults: a majority connected for 10E (the brief's liveness window). */
const quietPeriodsE = 10;
/** The liveness marker is proposed from this many E into the quiet period, retried every E/2. */
const probeStartE = 5;
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const markerBytes = 6;

/** Runs one seed; on a violation, runs it again with the trace on so the result carries it. */
export function runSeed(opts: SimOptions): SimResult {
  const result = new Simulation(opts).run();
  if (result.ok || opts.trace === true) return result;
  const traced = new Simulation({ ...opts, trace: true }).run();
  if (traced.ok || traced.violation !== result.violation) {
    throw new RaftError('RAFT_INVARIANT', `seed ${opts.seed} did not replay: ${result.violation}`);
  }
  return traced;
}

/** Three cores, a simulated clock in ms and a network that drops, delays, duplicates, reorders and
 * partitions messages; nodes crash and restart with term, vote and log intact. Everything random
 * comes from one seed. */
class Simulation {
  private readonly e: number;
  private readonly prng: Prng;
  private readonly netRandom: Prng;
  private readonly faults: ReadonlySet<Fault>;
  private readonly queue = new EventQueue<SimEvent>();
  private readonly checker = new SafetyChecker();
  private readonly nodes = new Map<number, RaftCore>();
  private readonly down = new Set<number>();
  /** Directed links that lose everything: `${from}>${to}`. */
  private readonly blocked = new Set<string>();
  /** Per directed link, the latest scheduled delivery; without reorder a link is FIFO. */
  private readonly linkClock = new Map<string, number>();
  private readonly trace: string[] | null;
  private readonly faultEnd: number;
  private now = 0;
  private quiet = false;
  private dropRate: number;
  private proposals = 0;
  private markerCommitted = false;
  private markerProposed = false;
  private stats = { events: 0, messages: 0 };

  constructor(private readonly opts: SimOptions) {
    this.e = opts.electionTimeoutMs ?? 100;
    this.prng = new Prng(opts.seed);
    this.netRandom = this.prng.fork();
    this.faults = opts.faults;
    this.trace = opts.trace === true ? [] : null;
    this.faultEnd = opts.faultPhaseMs ?? 200 * this.e;
    this.dropRate = this.faults.has('drop') ? 0.02 + this.prng.float() * 0.2 : 0;
    // Small bounds make log repair split old-term entries from new ones (Figure 8's precondition);
    // the smallest still let a lagging node catch up within the quiet period.
    this.entriesPerAppendMax = [4, 16, 64][this.prng.int(3)] ?? 64;
    this.inflightAppendsMax = [2, 8][this.prng.int(2)] ?? 8;
  }

  private readonly entriesPerAppendMax: number;
  private readonly inflightAppendsMax: number;

  run(): SimResult {
    try {
      this.schedule();
      for (let ev = this.queue.pop(); ev !== undefined; ev = this.queue.pop()) {
        this.now = ev.at;
        this.stats.events++;
        if (this.handle(ev.item)) break;
      }
      if (!this.markerCommitted) throw new Violation('liveness', `no proposal committed within ${quietPeriodsE}E of quiet`);
    } catch (err) {
      const violation = err instanceof Error ? err.message : String(err);
      const property = err instanceof Violation ? err.property : err instanceof RaftError ? 'core assertion' : 'crash';
      this.record(`VIOLATION ${violation}`);
      return { ok: false, seed: this.opts.seed, property, violation, trace: this.trace ?? [] };
    }
    const stats = { ...this.stats, elections: this.checker.elections, committed: this.checker.committed.length };
    return { ok: true, seed: this.opts.seed, stats };
  }

  private schedule(): void {
    for (const id of ids) {
      this.startNode(id, undefined);
      this.queue.push(this.prng.int(this.tickMs()), { kind: 'tick', node: id });
    }
    this.queue.push(this.prng.int(this.e), { kind: 'propose' });
    if (this.faults.has('partition')) this.queue.push(this.prng.range(this.e, 5 * this.e), { kind: 'partition' });
    if (this.faults.has('crash')) this.queue.push(this.prng.range(this.e, 5 * this.e), { kind: 'crash', node: this.pickNode() });
    this.queue.push(this.faultEnd, { kind: 'quiet' });
    this.queue.push(this.faultEnd + probeStartE * this.e, { kind: 'liveness-probe' });
    this.queue.push(this.faultEnd + quietPeriodsE * this.e, { kind: 'end' });
  }

  /** Returns true at the end of the run. */
  private handle(ev: SimEvent): boolean {
    switch (ev.kind) {
      case 'tick':
        return this.onTick(ev.node);
      case 'deliver':
        return this.onDeliver(ev.msg);
      case 'propose':
        return this.onPropose();
      case 'crash':
        return this.onCrash(ev.node);
      case 'restart':
        return this.onRestart(ev.node);
      case 'partition':
        return this.onPartition();
      case 'heal':
        return this.onHeal();
      case 'quiet':
        return this.onQuiet();
      case 'liveness-probe':
        return this.onLivenessProbe();
      case 'end':
        return true;
      default: {
        const _: never = ev;
        throw new RaftError('RAFT_INVARIANT', `unknown event ${String(_)}`);
      }
    }
  }

  private tickMs(): number {
    return Math.max(1, Math.floor(this.e / 20));
  }

  private onTick(id: number): boolean {
    if (!this.down.has(id)) {
      const node = this.node(id);
      node.tick(this.now, this.now);
      this.flush(node);
    }
    this.queue.push(this.now + this.tickMs(), { kind: 'tick', node: id });
    return false;
  }

  private onDeliver(m: Message): boolean {
    if (this.down.has(m.to)) return false;
    const node = this.node(m.to);
    if (this.trace !== null) this.record(`deliver ${formatMessage(m)}`);
    const error = node.step(m);
    if (error !== null) throw error;
    this.flush(node);
    return false;
  }

  private onPropose(): boolean {
    const leaders = ids.filter((id) => !this.down.has(id) && this.node(id).role === 'leader');
    const id = leaders[this.prng.int(leaders.length)];
    if (id !== undefined) {
      const count = 1 + this.prng.int(3);
      const data: Uint8Array[] = [];
      for (let k = 0; k < count; k++) data.push(encoder.encode(`p${++this.proposals}`));
      const node = this.node(id);
      const r = node.propose(data);
      this.record(`propose to ${id}: ${r.ok ? `${r.firstIndex}..${r.lastIndex}` : r.error.code}`);
      this.flush(node);
    }
    // The quiet period proposes only the liveness marker, so a backlog cannot hide it.
    if (!this.quiet) this.queue.push(this.now + 1 + this.prng.int(this.e / 2), { kind: 'propose' });
    return false;
  }

  private onCrash(id: number): boolean {
    if (!this.quiet && !this.down.has(id)) {
      this.down.add(id);
      this.record(`crash ${id}`);
      this.queue.push(this.now + this.prng.range(this.e / 2, 4 * this.e), { kind: 'restart', node: id });
    }
    if (!this.quiet) this.queue.push(this.now + this.prng.range(this.e, 6 * this.e), { kind: 'crash', node: this.pickNode() });
    return false;
  }

  private onRestart(id: number): boolean {
    if (!this.down.has(id)) return false;
    this.down.delete(id);
    this.startNode(id, this.node(id));
    this.record(`restart ${id}`);
    return false;
  }

  private onPartition(): boolean {
    if (this.quiet) return false;
    this.blocked.clear();
    const a = this.pickNode();
    const b = ids.filter((x) => x !== a)[this.prng.int(2)] ?? a;
    const shape = this.prng.int(3);
    if (shape === 0)
      this.isolate(a); // symmetric: {a} | the other two
    else if (shape === 1)
      this.blocked.add(`${a}>${b}`); // one-way
    else {
      this.blocked.add(`${a}>${b}`); // one node cannot reach either peer, but hears them
      for (const c of ids) if (c !== a && c !== b) this.blocked.add(`${a}>${c}`);
    }
    this.record(`partition ${[...this.blocked].join(' ')}`);
    this.queue.push(this.now + this.prng.range(this.e, 4 * this.e), { kind: 'heal' });
    return false;
  }

  private onHeal(): boolean {
    if (this.blocked.size > 0) this.record('heal');
    this.blocked.clear();
    if (!this.quiet) this.queue.push(this.now + this.prng.range(this.e, 4 * this.e), { kind: 'partition' });
    return false;
  }

  /** Faults stop. Every crashed node restarts, except that in half the seeds one node stays cut
   * off, so the quiet period proves progress with a bare majority. */
  private onQuiet(): boolean {
    this.quiet = true;
    this.dropRate = 0;
    this.blocked.clear();
    for (const id of [...this.down]) this.onRestart(id);
    if (this.faults.size > 0 && this.prng.chance(0.5)) this.isolate(this.pickNode());
    this.record(`quiet ${[...this.blocked].join(' ')}`);
    return false;
  }

  private onLivenessProbe(): boolean {
    if (this.markerProposed) return false;
    const leader = ids.find((id) => !this.down.has(id) && this.node(id).role === 'leader');
    if (leader !== undefined) {
      const node = this.node(leader);
      const r = node.propose([encoder.encode('marker')]);
      this.markerProposed = r.ok;
      this.record(`propose marker to ${leader}: ${r.ok ? r.firstIndex : r.error.code}`);
      this.flush(node);
    }
    if (!this.markerProposed) this.queue.push(this.now + this.e / 2, { kind: 'liveness-probe' });
    return false;
  }

  private isolate(id: number): void {
    for (const other of ids) {
      if (other === id) continue;
      this.blocked.add(`${id}>${other}`);
      this.blocked.add(`${other}>${id}`);
    }
  }

  private pickNode(): number {
    return ids[this.prng.int(ids.length)] ?? 1;
  }

  private node(id: number): RaftCore {
    const n = this.nodes.get(id);
    if (n === undefined) throw new RaftError('RAFT_INVARIANT', `no node ${id}`);
    return n;
  }

  /** Starts a process for `id`: fresh, or resuming the durable state of the one that crashed. */
  private startNode(id: number, crashed: RaftCore | undefined): void {
    const node = new RaftCore({
      id,
      voters: ids,
      electionTimeoutMs: this.e,
      entriesPerAppendMax: this.entriesPerAppendMax,
      inflightAppendsMax: this.inflightAppendsMax,
      random: this.prng.fork(),
      now: this.now,
      ...(crashed === undefined ? {} : { restore: crashed.durableState() }),
      ...(this.opts.unsafe === undefined ? {} : { unsafe: this.opts.unsafe }),
    });
    this.nodes.set(id, node);
    this.checker.restarted(id);
    this.flush(node);
  }

  /** Takes the node's Ready, checks it, and puts its messages on the network. */
  private flush(node: RaftCore): void {
    if (!node.hasReady()) return;
    const ready = node.takeReady();
    if (ready.softState !== null && this.trace !== null) {
      const s = ready.softState;
      this.record(`${node.id} ${s.role} term=${s.term} leader=${s.leader} commit=${s.commit}`);
    }
    this.checker.check(node, ready);
    for (const e of ready.committed) {
      if (e.data !== null && e.data.length === markerBytes && decoder.decode(e.data) === 'marker') this.markerCommitted = true;
      if (this.trace !== null) this.record(`${node.id} applied ${formatEntry(e)}`);
    }
    for (const m of ready.messages) this.send(m);
  }

  private send(m: Message): void {
    this.stats.messages++;
    const link = `${m.from}>${m.to}`;
    if (this.blocked.has(link) || this.netRandom.chance(this.dropRate)) {
      if (this.trace !== null) this.record(`drop ${formatMessage(m)}`);
      return;
    }
    this.enqueue(m, link);
    if (!this.quiet && this.faults.has('dup') && this.netRandom.chance(0.05)) this.enqueue(m, link);
  }

  /** Latency 1-5 ms; with reorder, one message in ten waits up to E/2 more and may overtake or be
   * overtaken; without it each link stays FIFO. */
  private enqueue(m: Message, link: string): void {
    let at = this.now + 1 + this.netRandom.int(5);
    if (!this.quiet && this.faults.has('reorder') && this.netRandom.chance(0.1)) {
      at += this.netRandom.int(this.e / 2);
    } else {
      at = Math.max(at, this.linkClock.get(link) ?? 0);
      this.linkClock.set(link, at);
    }
    this.queue.push(at, { kind: 'deliver', msg: m });
  }

  private record(line: string): void {
    this.trace?.push(`t=${this.now} ${line}`);
  }
}
