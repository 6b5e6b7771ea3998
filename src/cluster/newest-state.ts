// Which state file to force-start from (docs/design.md "Force-start", docs/design.md "Beyond the model"): every node's
// FILE and FILE.prev, or the raft state of its --data-dir (docs/operations.md "A cluster node's
// data directory"), ranked by epoch generation, then last log term, then last index. The epoch
// comes first because a newer epoch was forced later and the older one can never serve again; within
// an epoch, term then index is Raft's "at least as up-to-date" order (§5.4.1), so the first file
// holds every entry a majority of that epoch acknowledged. Pure: the files are read by
// newest-state-main.ts.
import type { Epoch } from '../../raft/core/membership.js';
import type { DurableState } from '../../raft/core/raft.js';
import type { StateFile } from '../../raft/driver/state-file.js';

/** One file that decoded: a node's FILE or its FILE.prev. */
export interface Candidate {
  /** The path read: FILE, or FILE.prev when `prev`. */
  readonly path: string;
  /** FILE: what the owner's --state-file names. */
  readonly stateFile: string;
  readonly prev: boolean;
  /** A .prev, or a FILE whose id the membership record lists: not resumable, yet fine to force from. */
  readonly consumed: boolean;
  /** Whether FILE exists beside this candidate (always, unless `prev`): a force-start reads FILE
   * before FILE.prev. */
  readonly fileExists: boolean;
  readonly file: StateFile;
  /** The node's --data-dir, named in its force-start command; absent: the node has none. */
  readonly dataDir?: string;
  /** The state is the data directory's (`path` is the directory): a force-start with --data-dir
   * forces from it, before FILE and FILE.prev. `file` is built by dataDirState. */
  readonly fromDataDir?: boolean;
}

/** What a cluster node's data directory holds, as newest-state ranks it: its metadata (cluster id,
 * node id, member), the epoch and cluster identity of the membership record beside its state file
 * (written before anything of an epoch is stored), and the raft state a start would load. */
export interface DataDirState {
  readonly clusterId: string;
  readonly nodeId: number;
  readonly incarnation: string;
  readonly record: { readonly epoch: Epoch; readonly clusterUid: string };
  readonly state: DurableState;
}

/** The data directory's state in the shape of a state file. A data directory keeps no commit index
 * (it is not part of raft's durable state; the commit column shows none) and no time of its own:
 * the cluster time is its last entry's, or its snapshot's. */
export function dataDirState(d: DataDirState): StateFile {
  const last = d.state.entries.at(-1);
  return {
    clusterId: d.clusterId,
    clusterUid: d.record.clusterUid,
    epoch: d.record.epoch,
    member: { node: d.nodeId, inc: d.incarnation },
    term: d.state.term,
    vote: d.state.vote,
    voteInc: d.state.voteInc ?? '',
    configuration: d.state.baseConfig ?? null,
    snapshot: d.state.snapshot ?? null,
    log: d.state.entries,
    commitIndex: 0,
    clusterTime: last?.time ?? d.state.snapshot?.time ?? 0,
    fileId: '',
  };
}

/** A file that was given (or found beside one) and cannot be used, with why. */
export interface Unusable {
  readonly path: string;
  readonly code: string;
  readonly reason: string;
}

/** How much a candidate lacks relative to the first-ranked one. */
export type Lacks =
  | { readonly kind: 'best' }
  /** `entries`: the best file's entries this one does not hold; `notInBest`: entries of this one past
   * the point where the two logs agree (an uncommitted tail another leader overwrote). */
  | { readonly kind: 'behind'; readonly entries: number; readonly notInBest: number }
  | { readonly kind: 'other-epoch' };

export interface Ranked {
  readonly rank: number;
  readonly node: number;
  readonly path: string;
  readonly stateFile: string;
  readonly prev: boolean;
  readonly consumed: boolean;
  /** The node's --data-dir; null: none given. */
  readonly dataDir: string | null;
  /** The state ranked is the data directory's (`path` is the directory). */
  readonly fromDataDir: boolean;
  readonly epoch: Epoch;
  readonly lastTerm: number;
  readonly lastIndex: number;
  /** null for a data directory, which keeps none. */
  readonly commitIndex: number | null;
  /** Cluster ms (since the Unix epoch) when the state was taken. */
  readonly clusterTime: number;
  readonly lacks: Lacks;
}

export interface ForceStartPlan {
  readonly node: number;
  /** The --state-file to give the node: FILE, even when the chosen file is FILE.prev. */
  readonly stateFile: string;
  /** The --data-dir to give the node; null: none. */
  readonly dataDir: string | null;
  /** The file the force-start will read. */
  readonly from: string;
  /** FILE, when the chosen file is FILE.prev and FILE exists (a force-start would read FILE). */
  readonly moveAside: string | null;
  readonly command: string;
}

export interface Report {
  readonly clusterId: string;
  readonly ranking: readonly Ranked[];
  readonly unusable: readonly Unusable[];
  /** null when nothing is usable. */
  readonly forceStart: ForceStartPlan | null;
}

/** Index and term of a file's last entry: the log's last, or the snapshot's if the log is empty. */
export function lastOf(file: StateFile): { index: number; term: number } {
  const last = file.log[file.log.length - 1];
  if (last !== undefined) return { index: last.index, term: last.term };
  return { index: file.snapshot?.index ?? 0, term: file.snapshot?.term ?? 0 };
}

const commitOf = (c: Candidate): number => (c.fromDataDir === true ? 0 : c.file.commitIndex);

/** Best first. After the design's three keys: FILE before FILE.prev (no file to move aside), the
 * higher commit index (a data directory's counts as 0), the later cluster time, then the path, so
 * the order is total. */
export function compareCandidates(a: Candidate, b: Candidate): number {
  const la = lastOf(a.file);
  const lb = lastOf(b.file);
  return (
    b.file.epoch.generation - a.file.epoch.generation ||
    lb.term - la.term ||
    lb.index - la.index ||
    Number(a.prev) - Number(b.prev) ||
    commitOf(b) - commitOf(a) ||
    b.file.clusterTime - a.file.clusterTime ||
    (a.path < b.path ? -1 : a.path > b.path ? 1 : 0)
  );
}

const sameEpoch = (a: Epoch, b: Epoch): boolean => a.generation === b.generation && a.id === b.id;

/** The term of entry `index` in `file`: 'compacted' below its snapshot, undefined past its end. */
function termAt(file: StateFile, index: number): number | 'compacted' | undefined {
  if (index === 0) return 0;
  const base = file.snapshot?.index ?? 0;
  if (index < base) return 'compacted';
  if (index === base) return file.snapshot!.term;
  return file.log[index - base - 1]?.term;
}

/** The highest index at which both logs hold the same entry. An equal term at an index means equal
 * logs up to there (Log Matching, §5.3). Below either file's snapshot the terms are gone: the other
 * file's compacted entries were committed, and the best file, ranked higher, holds them (Leader
 * Completeness, §5.4); an entry the best file compacted cannot be compared, and counts as agreeing. */
function agreedIndex(best: StateFile, other: StateFile): number {
  for (let i = Math.min(lastOf(best).index, lastOf(other).index); i > 0; i--) {
    const a = termAt(best, i);
    const b = termAt(other, i);
    if (a === 'compacted' || b === 'compacted' || a === b) return i;
  }
  return 0;
}

export function lacksOf(best: StateFile, other: StateFile): Lacks {
  if (!sameEpoch(best.epoch, other.epoch)) return { kind: 'other-epoch' };
  const agreed = agreedIndex(best, other);
  return { kind: 'behind', entries: lastOf(best).index - agreed, notInBest: lastOf(other).index - agreed };
}

export function rank(candidates: readonly Candidate[]): Ranked[] {
  const sorted = [...candidates].sort(compareCandidates);
  const best = sorted[0];
  return sorted.map((c, k) => {
    const last = lastOf(c.file);
    return {
      rank: k + 1,
      node: c.file.member.node,
      path: c.path,
      stateFile: c.stateFile,
      prev: c.prev,
      consumed: c.consumed,
      dataDir: c.dataDir ?? null,
      fromDataDir: c.fromDataDir === true,
      epoch: c.file.epoch,
      lastTerm: last.term,
      lastIndex: last.index,
      commitIndex: c.fromDataDir === true ? null : c.file.commitIndex,
      clusterTime: c.file.clusterTime,
      lacks: k === 0 || best === undefined ? { kind: 'best' } : lacksOf(best.file, c.file),
    };
  });
}

/** Quotes a path for a POSIX shell when it holds anything beyond the plainly safe characters. */
export function shellQuote(s: string): string {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`;
}

/** A node with a data directory that holds a state forces from it, whatever FILE holds; one whose
 * directory holds none forces from FILE, else FILE.prev, as a node without one. */
export function planForceStart(best: Candidate): ForceStartPlan {
  const node = best.file.member.node;
  const dataDir = best.dataDir ?? null;
  const dataDirFlag = dataDir === null ? '' : ` --data-dir ${shellQuote(dataDir)}`;
  return {
    node,
    stateFile: best.stateFile,
    dataDir,
    from: best.path,
    moveAside: best.fromDataDir !== true && best.prev && best.fileExists ? best.stateFile : null,
    command: `raftmq <node ${node}'s usual flags> --state-file ${shellQuote(best.stateFile)}${dataDirFlag} --cluster-force-start`,
  };
}

export function report(clusterId: string, candidates: readonly Candidate[], unusable: readonly Unusable[]): Report {
  const { ofCluster, foreign } = byClusterIdentity(candidates);
  const ranking = rank(ofCluster);
  const best = [...ofCluster].sort(compareCandidates)[0];
  return { clusterId, ranking, unusable: [...unusable, ...foreign], forceStart: best === undefined ? null : planForceStart(best) };
}

/** Files of one --cluster-id may still be of two clusters (each made its identity at bootstrap): a
 * force-start from the other's file would bring that cluster's state here. The identity that the
 * files of the most node ids carry is the cluster's; files of another one are unusable, and when no
 * identity is carried by more node ids than every other, none of the files that carry one is used.
 * Files without an identity (format 1, or written before the node learned it) are ranked as before. */
export function byClusterIdentity(candidates: readonly Candidate[]): { ofCluster: Candidate[]; foreign: Unusable[] } {
  const nodesOf = new Map<string, Set<number>>();
  for (const c of candidates) {
    const uid = c.file.clusterUid;
    if (uid === '') continue;
    const nodes = nodesOf.get(uid) ?? new Set<number>();
    nodes.add(c.file.member.node);
    nodesOf.set(uid, nodes);
  }
  if (nodesOf.size <= 1) return { ofCluster: [...candidates], foreign: [] };
  const counts = [...nodesOf].map(([uid, nodes]) => ({ uid, nodes: nodes.size })).sort((a, b) => b.nodes - a.nodes);
  const winner = counts[0]!.nodes > counts[1]!.nodes ? counts[0]!.uid : null;
  const ofCluster: Candidate[] = [];
  const foreign: Unusable[] = [];
  for (const c of candidates) {
    const uid = c.file.clusterUid;
    if (uid === '' || uid === winner) {
      ofCluster.push(c);
      continue;
    }
    const reason =
      winner === null
        ? `${c.path} is of cluster identity ${uid}; the files given are of ${nodesOf.size} identities, none held by more nodes`
        : `${c.path} is of cluster identity ${uid}, the other files of ${winner}: a file of another cluster`;
    foreign.push({ path: c.path, code: 'RAFT_STATE_FILE_FOREIGN', reason });
  }
  return { ofCluster, foreign };
}

// ---- text ----

function lacksText(l: Lacks): string {
  switch (l.kind) {
    case 'best':
      return '- (best)';
    case 'other-epoch':
      return 'other epoch';
    case 'behind':
      return l.notInBest === 0 ? `${l.entries} entries behind` : `${l.entries} entries behind, ${l.notInBest} not in best`;
    default: {
      const _: never = l;
      return _;
    }
  }
}

const columns = ['rank', 'node', 'path', 'epoch', 'last term', 'last index', 'commit', 'cluster time', 'consumed', 'lacks'];

/** Epoch ids and refusal messages carry untrusted bytes: no control character reaches a terminal. */
const printable = (s: string): string => s.replace(/\p{Cc}/gu, '?');

/** ISO time, or the bare number when it is past what a Date holds (an untrusted file may say so). */
function timeText(ms: number): string {
  const d = new Date(ms);
  return Number.isNaN(d.getTime()) ? String(ms) : d.toISOString();
}

function rowOf(r: Ranked): string[] {
  return [
    String(r.rank),
    String(r.node),
    r.path,
    `${r.epoch.generation}/${printable(r.epoch.id.slice(0, 8))}`,
    String(r.lastTerm),
    String(r.lastIndex),
    r.commitIndex === null ? '-' : String(r.commitIndex),
    timeText(r.clusterTime),
    r.fromDataDir ? 'no (data dir)' : r.consumed ? (r.prev ? 'yes (.prev)' : 'yes') : 'no',
    lacksText(r.lacks),
  ];
}

function table(rows: readonly string[][]): string[] {
  const widths = columns.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  return rows.map((r) => r.map((cell, c) => (c === r.length - 1 ? cell : cell.padEnd(widths[c]!))).join('  '));
}

function procedure(plan: ForceStartPlan, dataDirs: boolean): string[] {
  const n = plan.node;
  const steps = [
    'Force-start only when the cluster cannot come back by itself (every /health says needsForceStart: true).',
    'After a clean stop of all three nodes, start them as usual instead: any two of the files resume everything committed.',
    ...(dataDirs ? ['Nodes whose data directories are whole come back after kill -9 or a power cut as well: start them as usual.'] : []),
    '',
    `Procedure (docs/operations.md "Choosing the file to force-start from"), from node ${n}'s ${plan.from === plan.dataDir ? 'data directory' : 'file'} ${plan.from}:`,
    '  1. Stop every node that still runs with SIGTERM (each writes its state file, even when not serving),',
    '     then run newest-state again on the files they wrote.',
  ];
  if (plan.moveAside !== null) {
    steps.push(
      `  2. On node ${n}, move the older ${plan.moveAside} aside (a force-start reads FILE before FILE.prev):`,
      `       mv ${shellQuote(plan.moveAside)} ${shellQuote(`${plan.moveAside}.older`)}`,
    );
  } else {
    steps.push(`  2. Node ${n} keeps its files where they are.`);
  }
  steps.push(
    `  3. On node ${n} (the path as that node sees it):`,
    `       ${plan.command}`,
    '  4. On each other node, move its --state-file (and its --data-dir, if it has one) aside (keep them),',
    '     then start it as usual: it starts amnesiac and joins the new epoch as a learner. The new epoch',
    '     serves once two node ids are voters.',
    'Everything acknowledged after the chosen file was written is lost; QoS 2 flows in progress may be duplicated.',
  );
  return steps;
}

export function renderText(r: Report): string {
  const dataDirs = r.ranking.some((x) => x.fromDataDir);
  const what = dataDirs ? 'usable states (state files and data directories)' : 'usable state files';
  const lines: string[] = [`cluster ${r.clusterId}: ${r.ranking.length} ${what}, best first`];
  if (r.ranking.length > 0) lines.push(...table([columns, ...r.ranking.map(rowOf)]));
  if (r.unusable.length > 0) {
    lines.push('', 'unusable:');
    for (const u of r.unusable) lines.push(`  ${printable(u.reason)}`);
  }
  lines.push('');
  if (r.forceStart === null) lines.push('No usable state file: nothing to force-start from.');
  else lines.push(...procedure(r.forceStart, dataDirs));
  return `${lines.join('\n')}\n`;
}
