import { RaftError } from '../errors.js';
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
const dataKey = (e: LogEntry): string => (e.data === null ? '(empty)' : decoder.decode(e.data));

/** Checks the Raft safety properties (§5.2 Election Safety, §5.3 Leader Append-Only and Log
 * Matching, §5.4 Leader Completeness and State Machine Safety) after every step, incrementally:
 * each check costs O(entries in the Ready), plus O(committed log) once per election. */
export class SafetyChecker {
  private readonly leaderOfTerm = new Map<number, number>();
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
    this.checkAppended(node, ready);
    this.checkLeader(node, ready);
    this.checkApplied(node, ready);
  }

  private checkAppended(node: RaftCore, ready: Ready): void {
    const log = node.entries();
    for (const e of ready.appended) {
      const key = `${e.index}/${e.term}`;
      const prevTerm = e.index >= 2 ? (log[e.index - 2]?.term ?? -1) : 0;
      const prevTime = e.index >= 2 ? (log[e.index - 2]?.time ?? 0) : 0;
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
    const log = node.entries();
    if (was !== undefined && was.term === term) {
      if (ready.truncatedFrom !== null || log.length < was.lastIndex || log[was.lastIndex - 1]?.term !== was.lastTerm) {
        throw new Violation('leader append-only', `leader ${node.id} of term ${term} lost entries up to ${was.lastIndex}`);
      }
    } else {
      this.newLeader(node, term);
    }
    this.leading.set(node.id, { term, lastIndex: log.length, lastTerm: log.at(-1)?.term ?? 0 });
  }

  private newLeader(node: RaftCore, term: number): void {
    const other = this.leaderOfTerm.get(term);
    if (other !== undefined && other !== node.id) {
      throw new Violation('election safety', `nodes ${other} and ${node.id} both lead term ${term}`);
    }
    this.leaderOfTerm.set(term, node.id);
    this.elections++;
    const log = node.entries();
    // §5.4: an entry committed in a term is in the log of every leader of a higher term. A leader of
    // a lower term can still be elected late (a candidate paused with its votes in flight).
    for (let k = 0; k < this.committed.length; k++) {
      const c = this.committed[k];
      if (c !== undefined && c.commitTerm >= term) break;
      const e = log[k];
      if (c === undefined || e === undefined || e.term !== c.term || dataKey(e) !== c.data) {
        throw new Violation('leader completeness', `leader ${node.id} of term ${term} lacks committed entry ${k + 1}`);
      }
    }
  }

  private checkApplied(node: RaftCore, ready: Ready): void {
    let next = this.applyNext.get(node.id) ?? 1;
    for (const e of ready.committed) {
      if (e.index !== next) throw new Violation('apply order', `node ${node.id} applied ${e.index}, expected ${next}`);
      const before = this.committed[e.index - 2]?.time ?? 0;
      if (e.time < before) throw new Violation('cluster time order', `committed ${e.index} at time ${e.time} after time ${before}`);
      const known = this.committed[e.index - 1];
      const data = dataKey(e);
      if (known === undefined) this.committed.push({ term: e.term, time: e.time, data, commitTerm: node.currentTerm });
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
}
