import { RaftError } from '../errors.js';
import type { Configuration } from '../core/membership.js';
import { formatConfig, majoritiesOverlap } from '../core/membership.js';
import type { LogEntry } from '../core/messages.js';
import type { RaftCore, Ready } from '../core/raft.js';

/** A safety property broken in a run; the simulator stops at the first one. */
export class Violation extends RaftError {
  constructor(
    readonly property: string,
    detail: string,
  ) {
    super('RAFT_SIM_VIOLATION', `${property}: ${detail}`);
    this.name = 'Violation';
  }
}

const decoder = new TextDecoder();

const dataKey = (e: LogEntry): string =>
  e.config !== undefined ? `config(${formatConfig(e.config)})` : e.data === null ? '(empty)' : decoder.decode(e.data);

/** Term and time of `index` on `node`: from its log, or where its log was compacted to; undefined
 * for a compacted index. */
function termTimeAt(node: RaftCore, index: number): { term: number; time: number } | undefined {
  const term = node.termAt(index);
  return term === undefined ? undefined : { term, time: node.timeAt(index) };
}

/** Checks the Raft safety properties (§5.2 Election Safety, §5.3 Leader Append-Only and Log
 * Matching, §5.4 Leader Completeness and State Machine Safety) after every step, incrementally:
 * each check costs O(entries in the Ready), plus O(committed log) once per election. */
export class SafetyChecker {
  /** `${epoch}/${term}` -> leader node id: at most one leader per (epoch, term). */
  private readonly leaderOfTerm = new Map<string, number>();
  /** `${member}/${term}` -> `${vote}`: no member votes twice in a term. */
  private readonly votes = new Map<string, string>();
  /** Highest term each member reached: it never goes back. */
  private readonly memberTerm = new Map<string, number>();
  /** The newest committed configuration; each next one must share a majority with it. */
  private committedConfig: Configuration | null = null;
  /** `${index}/${term}` -> the entry's data and the term before it, as first seen on any node. */
  private readonly entryAt = new Map<string, { data: string; prevTerm: number }>();
  /** The committed log, as first applied by any node; index k holds entry k + 1. `commitTerm` is
   * the term in which it committed: the first node to apply it is the leader that committed it or
   * a follower told so by that leader, so its current term then is that term. */
  readonly committed: { term: number; time: number; data: string; commitTerm: number }[] = [];
  /** Next index each node's current process must apply. */
  private readonly applyNext = new Map<number, number>();
  /** While a node leads: its term and last index, which may only grow (Leader Append-Only). */
  private readonly leading = new Map<number, { term: number; lastIndex: number; lastTerm: number }>();

  /** Leaders elected so far (one per term at most). */
  elections = 0;

  restarted(id: number): void {
    this.applyNext.set(id, 1);
    this.leading.delete(id);
  }

  /** Call after every input to `node` with the Ready it produced. */
  check(node: RaftCore, ready: Ready): void {
    this.checkVote(node, ready);
    // Leaders first: a second leader in a term is named as such, not as the conflicting entry that
    // its first append makes.
    this.checkLeader(node, ready);
    this.checkAppended(node, ready);
    this.checkApplied(node, ready);
  }

  /** A member resumed from its state file: its term, vote and log are what it stopped with. */
  resumed(before: RaftCore, after: RaftCore): void {
    const a = before.durableState();
    const b = after.durableState();
    const sameLog = before.lastIndex === after.lastIndex && before.snapshotIndex === after.snapshotIndex && termTimeAt(before, before.lastIndex)?.term === termTimeAt(after, after.lastIndex)?.term;
    if (b.term < a.term || b.vote !== a.vote || b.voteInc !== a.voteInc || !sameLog) {
      throw new Violation('rollback', `member ${after.id}.${after.incarnation} resumed with term ${b.term} vote ${b.vote} and log to ${after.lastIndex}, had ${a.term} ${a.vote} ${before.lastIndex}`);
    }
  }

  private checkVote(node: RaftCore, ready: Ready): void {
    const member = `${node.id}.${node.incarnation}`;
    const term = node.currentTerm;
    if (term < (this.memberTerm.get(member) ?? 0)) throw new Violation('rollback', `member ${member} went back to term ${term}`);
    this.memberTerm.set(member, term);
    const hs = ready.hardState;
    if (hs === null || hs.vote === 0) return;
    const key = `${member}/${node.epoch.generation}.${node.epoch.id}/${hs.term}`;
    const vote = `${hs.vote}.${hs.voteInc}`;
    const before = this.votes.get(key);
    if (before !== undefined && before !== vote) throw new Violation('double vote', `member ${member} voted for ${before} and ${vote} in term ${hs.term}`);
    this.votes.set(key, vote);
  }

  private checkAppended(node: RaftCore, ready: Ready): void {
    for (const e of ready.appended) {
      const key = `${e.index}/${e.term}`;
      const prev = termTimeAt(node, e.index - 1);
      const prevTerm = prev?.term ?? -1;
      const prevTime = prev?.time ?? 0;
      if (e.time < prevTime) {
        throw new Violation('cluster time order', `node ${node.id} holds ${e.index} at time ${e.time} after time ${prevTime}`);
      }
      const seen = this.entryAt.get(key);
      const data = dataKey(e);
      if (seen === undefined) this.entryAt.set(key, { data, prevTerm });
      else if (seen.data !== data || seen.prevTerm !== prevTerm) {
        throw new Violation(
          'log matching',
          `node ${node.id} holds ${key} "${data}" after term ${prevTerm}; ` +
            `another node holds "${seen.data}" after term ${seen.prevTerm}`,
        );
      }
    }
  }

  private checkLeader(node: RaftCore, ready: Ready): void {
    const was = this.leading.get(node.id);
    if (node.role !== 'leader') {
      this.leading.delete(node.id);
      return;
    }
    const term = node.currentTerm;
    if (was !== undefined && was.term === term) {
      // An index the leader compacted since is covered by its snapshot of committed entries.
      const held = termTimeAt(node, was.lastIndex);
      const compacted = was.lastIndex < node.firstIndex - 1;
      if (ready.truncatedFrom !== null || node.lastIndex < was.lastIndex || (!compacted && held?.term !== was.lastTerm)) {
        throw new Violation('leader append-only', `leader ${node.id} of term ${term} lost entries up to ${was.lastIndex}`);
      }
    } else {
      this.newLeader(node, term);
    }
    this.leading.set(node.id, { term, lastIndex: node.lastIndex, lastTerm: termTimeAt(node, node.lastIndex)?.term ?? 0 });
  }

  private newLeader(node: RaftCore, term: number): void {
    const key = `${node.epoch.generation}.${node.epoch.id}/${term}`;
    const other = this.leaderOfTerm.get(key);
    if (other !== undefined && other !== node.id) {
      throw new Violation('election safety', `nodes ${other} and ${node.id} both lead term ${term}`);
    }
    this.leaderOfTerm.set(key, node.id);
    this.elections++;
    const log = node.entries();
    const first = node.firstIndex;
    // §5.4: an entry committed in a term is in the log of every leader of a higher term. A leader of
    // a lower term can still be elected late (a candidate paused with its votes in flight). Entries
    // the leader compacted are in its snapshot, whose last term must match.
    for (let k = 0; k < this.committed.length; k++) {
      const c = this.committed[k];
      if (c !== undefined && c.commitTerm >= term) break;
      if (k + 1 < first - 1) continue;
      if (k + 1 === first - 1) {
        if (c === undefined || termTimeAt(node, k + 1)?.term !== c.term) {
          throw new Violation('leader completeness', `leader ${node.id} of term ${term} has a snapshot at ${k + 1} of another term`);
        }
        continue;
      }
      const e = log[k + 1 - first];
      if (c === undefined || e === undefined || e.term !== c.term || dataKey(e) !== c.data) {
        throw new Violation('leader completeness', `leader ${node.id} of term ${term} lacks committed entry ${k + 1}`);
      }
    }
  }

  private checkApplied(node: RaftCore, ready: Ready): void {
    let next = this.applyNext.get(node.id) ?? 1;
    const s = ready.snapshot;
    if (s !== null) {
      // §7: a snapshot holds only committed entries, so its last one is known to every checker.
      const known = this.committed[s.index - 1];
      if (known === undefined || known.term !== s.term || known.time !== s.time) {
        throw new Violation('state machine safety', `node ${node.id} restored a snapshot at ${s.index}/${s.term} that is not the committed log's`);
      }
      next = s.index + 1;
    }
    for (const e of ready.committed) {
      if (e.index !== next) throw new Violation('apply order', `node ${node.id} applied ${e.index}, expected ${next}`);
      const before = this.committed[e.index - 2]?.time ?? 0;
      if (e.time < before) throw new Violation('cluster time order', `committed ${e.index} at time ${e.time} after time ${before}`);
      const known = this.committed[e.index - 1];
      const data = dataKey(e);
      if (known === undefined) {
        this.committed.push({ term: e.term, time: e.time, data, commitTerm: node.currentTerm });
        if (e.config !== undefined) this.checkConfigChange(e.index, e.config);
      }
      else if (known.term !== e.term || known.time !== e.time || known.data !== data) {
        throw new Violation(
          'state machine safety',
          `node ${node.id} applied ${e.index}/${e.term} "${data}", ` + `another applied ${e.index}/${known.term} "${known.data}"`,
        );
      }
      next++;
    }
    this.applyNext.set(node.id, next);
  }

  /** Thesis §4.1: consecutive committed configurations have overlapping majorities. */
  private checkConfigChange(index: number, config: Configuration): void {
    const before = this.committedConfig;
    this.committedConfig = config;
    if (before !== null && !majoritiesOverlap(before, config)) {
      throw new Violation('configuration overlap', `committed ${index} changes ${formatConfig(before)} to ${formatConfig(config)}`);
    }
  }
}
