import type { Configuration, Epoch } from '../core/membership.js';
import { formatConfig, majoritiesOverlap } from '../core/membership.js';
import type { LogEntry, VoteResponse } from '../core/messages.js';
import type { RaftCore, Ready } from '../core/raft.js';
import type { SnapshotMeta } from '../core/snapshot.js';
import { RaftError } from '../errors.js';

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
  /** Per epoch (`generation.id`): the committed log and configuration. Within an epoch the
   * paper's properties hold; across a force-start the new epoch's committed log starts as the
   * forced file's log (docs/design.md "Force-start"). */
  private readonly epochs = new Map<string, EpochLog>();
  /** `${index}/${term}` -> the entry's data and the term before it, as first seen on any node. */
  private readonly entryAt = new Map<string, { data: string; prevTerm: number }>();
  /** Next index each node's current process must apply. */
  private readonly applyNext = new Map<number, number>();
  /** While a node leads: its term and last index, which may only grow (Leader Append-Only). */
  private readonly leading = new Map<number, { term: number; lastIndex: number; lastTerm: number }>();

  /** Leaders elected so far (one per term at most). */
  elections = 0;
  /** Durable mode: a vote counts once its grant is sent, not when the core records it, since a
   * power cut may take back a vote that was never durable and so never sent. */
  private votesFromGrants = false;

  countVotesFromGrants(): void {
    this.votesFromGrants = true;
  }

  /** Durable mode: `node` sent a granted vote; no member grants two in a term. */
  granted(node: RaftCore, m: VoteResponse): void {
    this.noteVote(`${node.id}.${node.incarnation}`, node, m.term, `${m.to}.${m.toInc}`);
  }

  /** Durable mode: `node` restarted from its storage. Its term may be below the one it reached
   * before the cut (a term never made durable is lost with the power); it never goes below what it
   * restarted with. */
  restoredFromStorage(node: RaftCore): void {
    this.memberTerm.set(`${node.id}.${node.incarnation}`, node.currentTerm);
  }

  /** The committed log of the newest epoch (highest generation, then longest). */
  get committed(): readonly CommittedEntry[] {
    let best: EpochLog | undefined;
    for (const log of this.epochs.values()) {
      const newer = best === undefined || log.generation > best.generation;
      if (newer || (log.generation === best?.generation && log.committed.length > best.committed.length)) best = log;
    }
    return best?.committed ?? [];
  }

  /** The committed log of one epoch (empty if nothing committed in it). */
  committedIn(epoch: Epoch): readonly CommittedEntry[] {
    return this.epochs.get(`${epoch.generation}.${epoch.id}`)?.committed ?? [];
  }

  /** Epochs in which something committed. */
  get epochCount(): number {
    return this.epochs.size;
  }

  private epochLog(node: RaftCore): EpochLog {
    const key = epochKey(node);
    let log = this.epochs.get(key);
    if (log === undefined) {
      log = { generation: node.epoch.generation, committed: [], config: null };
      this.epochs.set(key, log);
    }
    return log;
  }

  /** `node` just made a new epoch from its state file (`file`, of epoch `from`), all of it
   * committed: the new epoch's log is that log followed by new entries, so it seeds the epoch's
   * committed log, which every node of the epoch must then apply and every leader of it hold. A
   * snapshot in the file holds entries the old epoch committed; they are copied from its log. */
  forced(node: RaftCore, from: Epoch, file: { readonly snapshot: SnapshotMeta | null; readonly log: readonly LogEntry[] }): void {
    const log = this.epochLog(node);
    if (log.committed.length > 0) throw new Violation('force-start', `epoch ${epochKey(node)} existed before node ${node.id} forced it`);
    const snap = file.snapshot;
    if (snap !== null) {
      const old = this.committedIn(from);
      if (old[snap.index - 1]?.term !== snap.term) {
        throw new Violation(
          'force-start',
          `node ${node.id} forced from a snapshot at ${snap.index}/${snap.term} its epoch never committed`,
        );
      }
      for (const c of old.slice(0, snap.index)) log.committed.push({ ...c, commitTerm: 0 });
    }
    let prevTerm = snap?.term ?? 0;
    for (const e of file.log) {
      const held = termTimeAt(node, e.index);
      if (held === undefined || held.term !== e.term) {
        throw new Violation('force-start', `node ${node.id} forced epoch ${epochKey(node)} without entry ${e.index} of its file`);
      }
      log.committed.push({ term: e.term, time: e.time, data: dataKey(e), commitTerm: 0 });
      this.entryAt.set(`${epochKey(node)}/${e.index}/${e.term}`, { data: dataKey(e), prevTerm });
      prevTerm = e.term;
    }
  }

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
    const sameLog =
      before.lastIndex === after.lastIndex &&
      before.snapshotIndex === after.snapshotIndex &&
      termTimeAt(before, before.lastIndex)?.term === termTimeAt(after, after.lastIndex)?.term;
    if (b.term < a.term || b.vote !== a.vote || b.voteInc !== a.voteInc || !sameLog) {
      throw new Violation(
        'rollback',
        `member ${after.id}.${after.incarnation} resumed with term ${b.term} vote ${b.vote} and log to ${after.lastIndex}, had ${a.term} ${a.vote} ${before.lastIndex}`,
      );
    }
  }

  private checkVote(node: RaftCore, ready: Ready): void {
    const member = `${node.id}.${node.incarnation}`;
    const term = node.currentTerm;
    if (term < (this.memberTerm.get(member) ?? 0)) throw new Violation('rollback', `member ${member} went back to term ${term}`);
    this.memberTerm.set(member, term);
    const hs = ready.hardState;
    if (hs === null || hs.vote === 0 || this.votesFromGrants) return;
    this.noteVote(member, node, hs.term, `${hs.vote}.${hs.voteInc}`);
  }

  private noteVote(member: string, node: RaftCore, term: number, vote: string): void {
    const key = `${member}/${node.epoch.generation}.${node.epoch.id}/${term}`;
    const before = this.votes.get(key);
    if (before !== undefined && before !== vote)
      throw new Violation('double vote', `member ${member} voted for ${before} and ${vote} in term ${term}`);
    this.votes.set(key, vote);
  }

  private checkAppended(node: RaftCore, ready: Ready): void {
    for (const e of ready.appended) {
      const key = `${epochKey(node)}/${e.index}/${e.term}`;
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
    const committed = this.epochLog(node).committed;
    for (let k = 0; k < committed.length; k++) {
      const c = committed[k];
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
    if (s === null && ready.committed.length === 0) return;
    const epoch = this.epochLog(node);
    const committed = epoch.committed;
    if (s !== null) {
      // §7: a snapshot holds only committed entries, so its last one is known to every checker.
      const known = committed[s.index - 1];
      if (known === undefined || known.term !== s.term || known.time !== s.time) {
        throw new Violation(
          'state machine safety',
          `node ${node.id} restored a snapshot at ${s.index}/${s.term} that is not the committed log's`,
        );
      }
      next = s.index + 1;
    }
    for (const e of ready.committed) {
      if (e.index !== next) throw new Violation('apply order', `node ${node.id} applied ${e.index}, expected ${next}`);
      const before = committed[e.index - 2]?.time ?? 0;
      if (e.time < before) throw new Violation('cluster time order', `committed ${e.index} at time ${e.time} after time ${before}`);
      const known = committed[e.index - 1];
      const data = dataKey(e);
      if (known === undefined) {
        committed.push({ term: e.term, time: e.time, data, commitTerm: node.currentTerm });
        if (e.config !== undefined) this.checkConfigChange(epoch, e.index, e.config);
        // docs/design.md "Force-start": an epoch serves only once two node ids vote in it, so no
        // proposal commits while its configuration lists one.
        if (e.data !== null && epoch.config !== null && epoch.config.length < 2) {
          throw new Violation(
            'lone epoch serves',
            `${e.index}/${e.term} "${data}" committed with the one voter ${formatConfig(epoch.config)}`,
          );
        }
      } else if (known.term !== e.term || known.time !== e.time || known.data !== data) {
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
  private checkConfigChange(epoch: EpochLog, index: number, config: Configuration): void {
    const before = epoch.config;
    epoch.config = config;
    if (before !== null && !majoritiesOverlap(before, config)) {
      throw new Violation('configuration overlap', `committed ${index} changes ${formatConfig(before)} to ${formatConfig(config)}`);
    }
  }
}

interface CommittedEntry {
  readonly term: number;
  readonly time: number;
  readonly data: string;
  /** The term in which it committed: the first node to apply it is the leader that committed it
   * or a follower told so by that leader, so its current term then is that term (0: a forced
   * file's entry, committed before the epoch began). */
  readonly commitTerm: number;
}

interface EpochLog {
  readonly generation: number;
  /** The committed log, as first applied by any node of the epoch; index k holds entry k + 1. */
  readonly committed: CommittedEntry[];
  /** The newest committed configuration; each next one must share a majority with it. */
  config: Configuration | null;
}

const epochKey = (node: RaftCore): string => `${node.epoch.generation}.${node.epoch.id}`;
