// Configuration changes (docs/design.md "Configuration", docs/design.md "Replacing a node that
// forgot"): which configuration a node uses, which members a leader replicates to, and which
// single-server change it proposes next. RaftCore owns one ConfigTracker and applies what the
// functions here decide; nothing here sends, appends or changes role.

import type { MemoryLog } from './log.js';
import type { Configuration, Epoch, Member, Membership } from './membership.js';
import { hasMember, memberOf, quorumOf } from './membership.js';
import type { LogEntry } from './messages.js';
import { Progress } from './progress.js';

/** Replacing a member that forgot (docs/design.md "Replacing a node that forgot"): it must have been silent this many E. */
export const replaceSilentE = 2;
/** A learner is caught up when it holds the whole log and answered a round sent within this many E. */
export const caughtUpRoundE = 1;

/** The latest announcement heard from a node (docs/design.md "Fresh, amnesiac, bootstrap"). */
export interface Announced {
  readonly inc: string;
  readonly membership: Membership;
  readonly peers: string;
  readonly term: number;
  readonly epoch: number;
  readonly epochId: string;
  readonly lastIndex: number;
  readonly voter: boolean;
  readonly stuck: boolean;
  /** Monotonic ms when it arrived. */
  readonly at: number;
}

/** The key of a replicated member in the leader's progress map. */
export function progressKey(node: number, inc: string): string {
  return `${node}.${inc}`;
}

/** The configurations a node's log holds. A node uses the newest one, committed or not. */
export class ConfigTracker {
  /** The configuration before the first entry held (a static one, or the snapshot's); null: none. */
  base: Configuration | null;
  /** Indexes of the configuration entries in the log, ascending. */
  readonly indexes: number[] = [];
  /** The newest configuration in the log, committed or not. */
  config: Configuration = [];
  quorum = 1;
  /** This member is a voter of `config`. */
  isVoter = false;
  private readonly id: number;
  private readonly inc: string;

  constructor(id: number, inc: string, base: Configuration | null, log: MemoryLog) {
    this.id = id;
    this.inc = inc;
    this.base = base;
    for (const e of log.all()) if (e.config !== undefined) this.indexes.push(e.index);
  }

  /** Configuration entries were just written after any truncation that removed some; true when the
   * newest configuration may have changed (the caller then refreshes). */
  noteEntries(written: readonly LogEntry[], truncatedFrom: number | null): boolean {
    let changed = false;
    if (truncatedFrom !== null) changed = this.truncate(truncatedFrom);
    for (const e of written) {
      if (e.config === undefined) continue;
      this.indexes.push(e.index);
      changed = true;
    }
    return changed;
  }

  /** Entries from `from` on left the log; true if a configuration entry went with them. */
  truncate(from: number): boolean {
    let changed = false;
    while ((this.indexes.at(-1) ?? 0) >= from) {
      this.indexes.pop();
      changed = true;
    }
    return changed;
  }

  /** Takes the newest configuration the log holds. */
  refresh(log: MemoryLog): void {
    const at = this.indexes.at(-1);
    const config = at === undefined ? (this.base ?? []) : (log.entry(at).config ?? []);
    this.config = config;
    this.quorum = quorumOf(config);
    this.isVoter = hasMember(config, this.id, this.inc);
  }

  /** The newest configuration entry is not committed yet. */
  pending(commit: number): boolean {
    return (this.indexes.at(-1) ?? 0) > commit;
  }

  /** Node ids that are voters in the newest committed configuration. */
  committedVoterIds(log: MemoryLog): number {
    let at = 0;
    for (const k of this.indexes) if (k <= log.commit) at = k;
    const config = at === 0 ? (this.base ?? []) : (log.entry(at).config ?? []);
    return config.length;
  }

  /** The configuration in force at `index` (held or the snapshot's). */
  at(index: number, log: MemoryLog): Configuration | null {
    let at: number | undefined;
    for (const i of this.indexes) if (i <= index) at = i;
    return at === undefined ? this.base : (log.entry(at).config ?? null);
  }

  /** The configuration entries up to `index` left the log; `config` is the one in force there. */
  dropUpTo(index: number, config: Configuration | null): void {
    while ((this.indexes[0] ?? Number.POSITIVE_INFINITY) <= index) this.indexes.shift();
    this.base = config;
  }
}

/** A learner may join this epoch if it has none or already holds this one. */
function announceJoinable(a: Announced, epoch: Epoch): boolean {
  return a.epoch === 0 || (a.epoch === epoch.generation && a.epochId === epoch.id);
}

/** Leader: one progress per voter member of the configuration, and one per learner (a node id
 * that announced a member the configuration does not list, docs/design.md "Configuration"). New
 * ones start at `next`. */
export function syncProgress(
  progress: Map<string, Progress>,
  self: number,
  config: Configuration,
  announced: ReadonlyMap<number, Announced>,
  epoch: Epoch,
  next: number,
  now: number,
): void {
  const wanted = new Map<string, Member & { voter: boolean }>();
  for (const m of config) if (m.node !== self) wanted.set(progressKey(m.node, m.inc), { ...m, voter: true });
  for (const [node, a] of announced) {
    const k = progressKey(node, a.inc);
    if (!wanted.has(k) && node !== self && announceJoinable(a, epoch)) wanted.set(k, { node, inc: a.inc, voter: false });
  }
  for (const [k, pr] of progress) {
    const w = wanted.get(k);
    if (w === undefined) progress.delete(k);
    else pr.voter = w.voter;
  }
  for (const [k, w] of wanted) {
    if (!progress.has(k)) progress.set(k, new Progress(w.node, w.inc, w.voter, next, now));
  }
}

/** What a leader's next configuration change is judged on. */
export interface ChangeFacts {
  readonly self: number;
  readonly config: Configuration;
  /** Configured node ids: the configuration never grows beyond them. */
  readonly nodes: number;
  readonly announced: ReadonlyMap<number, Announced>;
  readonly progress: ReadonlyMap<string, Progress>;
  readonly lastIndex: number;
  readonly now: number;
  readonly electionTimeoutMs: number;
  /** The simulator's broken rule that swaps a member in one entry. */
  readonly swapMember: boolean;
}

/** One server at a time (thesis §4.1 and the single-server bug fix): first remove a member whose
 * node id came back as another incarnation once it has been silent 2E, then add a caught-up
 * learner. Never add first, never swap in one entry, and never go below two voters once there are
 * two. The configuration to propose, or null. The caller checks that an entry of its term
 * committed and that no other change is pending. */
export function nextConfig(f: ChangeFacts): Configuration | null {
  const silentMs = replaceSilentE * f.electionTimeoutMs;
  for (const m of f.config) {
    if (m.node === f.self) continue;
    const heard = f.announced.get(m.node);
    const pr = f.progress.get(progressKey(m.node, m.inc));
    if (heard === undefined || heard.inc === m.inc || pr === undefined || f.now - pr.lastHeardAt < silentMs) continue;
    if (f.swapMember) {
      const learner = f.progress.get(progressKey(m.node, heard.inc));
      return learner !== undefined ? f.config.map((x) => (x.node === m.node ? { node: m.node, inc: heard.inc } : x)) : null;
    }
    return f.config.length > 2 ? f.config.filter((x) => x !== m) : null;
  }
  if (f.config.length >= f.nodes) return null;
  for (const pr of f.progress.values()) {
    if (pr.voter || memberOf(f.config, pr.node) !== undefined) continue;
    const caughtUp = pr.match >= f.lastIndex && f.now - pr.ackedSentAt <= caughtUpRoundE * f.electionTimeoutMs;
    if (caughtUp) return [...f.config, { node: pr.node, inc: pr.inc }];
  }
  return null;
}
