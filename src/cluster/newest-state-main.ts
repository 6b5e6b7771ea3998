// cluster-scripts/newest-state: `newest-state [--cluster-id ID] [--json] [--data-dir DIR] FILE...`.
// Reads each node's state file FILE and FILE.prev beside it without consuming either, or, for a
// FILE given after `--data-dir DIR`, the raft state of that node's data directory (read only: no
// lock taken, no torn tail cut), ranks them (newest-state.ts) and prints the ranking and the
// force-start command. Every byte read is untrusted: a file or directory that does not decode is
// listed with the reason. Exit codes: 0 a ranking, 1 nothing usable, 2 bad arguments (the message
// names the argument).
import { readFileSync, statSync } from 'node:fs';
import type { DurableState } from '../../raft/core/raft.js';
import { DriverError } from '../../raft/driver/errors.js';
import { decodeAnyStateFile, type MembershipRecord, prevPathOf, readRecord, type StateFile } from '../../raft/driver/state-file.js';
import { type ClusterDataDirMeta, readClusterMeta } from '../log/wal/data-dir.js';
import { FsStorage } from '../log/wal/storage.js';
import { DataDirError } from '../log/wal/wal.js';
import { type Candidate, dataDirState, lastOf, renderText, report, type Unusable } from './newest-state.js';
import { RaftDirStorage } from './raft-storage.js';

const EXIT_RANKED = 0;
const EXIT_NONE_USABLE = 1;
const EXIT_BAD_ARGS = 2;

const usage =
  "usage: newest-state [--cluster-id ID] [--json] [--data-dir DIR] FILE...   (FILE: a node's --state-file; FILE.prev is read too; --data-dir DIR before a FILE: that node's --data-dir)";

/** One node as given: its --state-file and, when `--data-dir DIR` preceded it, its data directory. */
interface NodeArg {
  readonly stateFile: string;
  readonly dataDir: string | null;
}

interface Args {
  readonly clusterId: string;
  readonly json: boolean;
  readonly files: readonly NodeArg[];
}

class BadArgs extends Error {}

function parseArgs(argv: readonly string[]): Args | 'help' {
  let clusterId = 'raftmq';
  let json = false;
  const files: NodeArg[] = [];
  let dataDir: string | null = null;
  const file = (stateFile: string): void => {
    files.push({ stateFile, dataDir });
    dataDir = null;
  };
  for (let k = 0; k < argv.length; k++) {
    const a = argv[k]!;
    if (a === '--') {
      for (const f of argv.slice(k + 1)) file(f);
      break;
    }
    if (a === '--help' || a === '-h') return 'help';
    if (a === '--json') json = true;
    else if (a === '--cluster-id' || a.startsWith('--cluster-id=')) {
      const v = a === '--cluster-id' ? argv[++k] : a.slice('--cluster-id='.length);
      if (v === undefined || v === '') throw new BadArgs('--cluster-id needs a non-empty value');
      clusterId = v;
    } else if (a === '--data-dir' || a.startsWith('--data-dir=')) {
      const v = a === '--data-dir' ? argv[++k] : a.slice('--data-dir='.length);
      if (v === undefined || v === '') throw new BadArgs('--data-dir needs a directory');
      if (dataDir !== null) throw new BadArgs(`--data-dir ${v}: the one before it (${dataDir}) has no FILE after it`);
      dataDir = v;
    } else if (a.startsWith('-')) throw new BadArgs(`unknown argument ${a}`);
    else file(a);
  }
  if (dataDir !== null) throw new BadArgs(`--data-dir ${dataDir}: no FILE after it (the --state-file of the node it belongs to)`);
  if (files.length === 0) throw new BadArgs('FILE missing: give the --state-file path of at least one node');
  if (files.some((f) => f.stateFile === '')) throw new BadArgs('FILE: an empty path');
  const seen = new Map<string, NodeArg>();
  for (const f of files) {
    const before = seen.get(f.stateFile);
    if (before !== undefined && before.dataDir !== f.dataDir)
      throw new BadArgs(`FILE ${f.stateFile} is given twice, with other --data-dir`);
    seen.set(f.stateFile, f);
  }
  return { clusterId, json, files: [...seen.values()] };
}

type Read = { kind: 'file'; file: StateFile } | { kind: 'unusable'; unusable: Unusable };

const unusable = (path: string, code: string, reason: string): Read => ({ kind: 'unusable', unusable: { path, code, reason } });

/** Reads and checks one file; never throws for what the file holds. Only regular files are read (a
 * FIFO would hang the read). */
function readOne(path: string, clusterId: string): Read {
  let bytes: Buffer;
  try {
    if (!statSync(path).isFile()) return unusable(path, 'NOT_A_FILE', `${path}: not a regular file`);
    bytes = readFileSync(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'READ_FAILED';
    return unusable(path, code, `${path}: cannot read: ${code}`);
  }
  let file: StateFile;
  try {
    file = decodeAnyStateFile(bytes, path);
  } catch (err) {
    if (err instanceof DriverError) return unusable(path, err.code, err.message);
    return unusable(path, 'RAFT_STATE_FILE_CORRUPT', `${path}: ${(err as Error).message}`);
  }
  if (file.clusterId !== clusterId) {
    const reason = `${path} is of cluster ${JSON.stringify(file.clusterId)}, not ${JSON.stringify(clusterId)} (--cluster-id)`;
    return unusable(path, 'RAFT_STATE_FILE_FOREIGN', reason);
  }
  return { kind: 'file', file };
}

/** File ids the membership record beside FILE lists as consumed; none when it is missing or bad
 * (the record only adds the "consumed" mark to a FILE that was put back after its start). */
function consumedIds(stateFile: string, clusterId: string, nodeId: number): readonly string[] {
  try {
    return readRecord(stateFile, { clusterId, nodeId })?.consumed ?? [];
  } catch {
    return [];
  }
}

const exists = (path: string): boolean => {
  try {
    statSync(path);
    return true;
  } catch {
    return false;
  }
};

/** What a node's data directory gives newest-state: its state as a candidate; or nothing to rank
 * there, so its FILE and FILE.prev are ranked (`none`: it holds no raft state, and a force-start
 * with it reads FILE, else FILE.prev); or a reason it cannot be used (then FILE and FILE.prev are
 * ranked too; `withDir`: a start with the directory reads FILE, so the command names it; else such
 * a start would be refused, and the command leaves it out). */
type DirRead = { kind: 'state'; candidate: Candidate } | { kind: 'none' } | { kind: 'unusable'; unusable: Unusable; withDir: boolean };

async function readDataDir(n: NodeArg & { dataDir: string }, clusterId: string): Promise<DirRead> {
  const dir = n.dataDir;
  const bad = (code: string, reason: string, withDir = false): DirRead => ({
    kind: 'unusable',
    unusable: { path: dir, code, reason },
    withDir,
  });
  try {
    if (!statSync(dir).isDirectory()) return bad('NOT_A_DIRECTORY', `${dir}: not a directory`);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'READ_FAILED';
    // An absent directory is what a node whose disk was lost starts with: it forces from FILE.
    if (code === 'ENOENT') return { kind: 'none' };
    return bad(code, `${dir}: cannot read: ${code}`);
  }
  let meta: ClusterDataDirMeta | null;
  let state: DurableState | null;
  try {
    meta = await readClusterMeta(dir);
    if (meta === null) return { kind: 'none' };
    if (meta.clusterId !== clusterId) {
      return bad(
        'DATA_DIR_FOREIGN',
        `${dir} is of cluster ${JSON.stringify(meta.clusterId)}, not ${JSON.stringify(clusterId)} (--cluster-id)`,
      );
    }
    state = (await RaftDirStorage.inspect(new FsStorage(dir))).state;
  } catch (err) {
    if (err instanceof DataDirError) return bad(err.code, err.message);
    const code = (err as NodeJS.ErrnoException).code ?? 'READ_FAILED';
    return bad(code, `${dir}: cannot read: ${(err as Error).message}`);
  }
  if (state === null) return { kind: 'none' };
  let record: MembershipRecord | null;
  try {
    record = readRecord(n.stateFile, { clusterId, nodeId: meta.nodeId });
  } catch (err) {
    const code = err instanceof DriverError ? err.code : 'RAFT_RECORD_UNREADABLE';
    return bad(code, `${dir}: the membership record beside ${n.stateFile} cannot be used: ${(err as Error).message}`, true);
  }
  // Without an epoch in the record, a start (forced or not) reads FILE as a node without the directory does.
  if (record === null || record.epoch.generation === 0) {
    return bad('RAFT_RECORD_MISSING', `${dir}: no membership record with an epoch beside ${n.stateFile}: a start with it reads FILE`, true);
  }
  const file = dataDirState({ clusterId: meta.clusterId, nodeId: meta.nodeId, incarnation: meta.incarnation, record, state });
  // The driver's rule (raft/driver planFromStorage): a state file newer than the directory refuses a start with it.
  const beside = exists(n.stateFile) ? readOne(n.stateFile, clusterId) : null;
  if (beside?.kind === 'file') {
    const f = beside.file;
    if (f.member.inc !== meta.incarnation || f.term > state.term || lastOf(f).index > lastOf(file).index) {
      return bad(
        'RAFT_STATE_FILE_NEWER',
        `${dir}: ${n.stateFile} is newer than the directory, so a start with --data-dir is refused; move one of them away`,
      );
    }
  }
  return {
    kind: 'state',
    candidate: {
      path: dir,
      stateFile: n.stateFile,
      prev: false,
      consumed: false,
      fileExists: exists(n.stateFile),
      file,
      dataDir: dir,
      fromDataDir: true,
    },
  };
}

async function collect(args: Args): Promise<{ candidates: Candidate[]; unusable: Unusable[] }> {
  const candidates: Candidate[] = [];
  const bad: Unusable[] = [];
  for (const n of args.files) {
    const stateFile = n.stateFile;
    let dataDir: string | null = null;
    if (n.dataDir !== null) {
      const d = await readDataDir({ stateFile, dataDir: n.dataDir }, args.clusterId);
      if (d.kind === 'state') {
        // A force-start with --data-dir forces from the directory: FILE and FILE.prev are not used.
        candidates.push(d.candidate);
        continue;
      }
      if (d.kind === 'unusable') bad.push(d.unusable);
      if (d.kind === 'none' || d.withDir) dataDir = n.dataDir;
    }
    const fileExists = exists(stateFile);
    const prevPath = prevPathOf(stateFile);
    if (!fileExists && !exists(prevPath)) {
      bad.push({ path: stateFile, code: 'RAFT_STATE_FILE_MISSING', reason: `${stateFile}: no such file, nor ${prevPath}` });
      continue;
    }
    for (const [path, prev] of [
      [stateFile, false],
      [prevPath, true],
    ] as const) {
      if (prev ? !exists(path) : !fileExists) continue;
      const r = readOne(path, args.clusterId);
      if (r.kind === 'unusable') {
        bad.push(r.unusable);
        continue;
      }
      const consumed = prev || consumedIds(stateFile, args.clusterId, r.file.member.node).includes(r.file.fileId);
      candidates.push({ path, stateFile, prev, consumed, fileExists, file: r.file, ...(dataDir === null ? {} : { dataDir }) });
    }
  }
  return { candidates, unusable: bad };
}

async function main(argv: readonly string[]): Promise<number> {
  let args: Args | 'help';
  try {
    args = parseArgs(argv);
  } catch (err) {
    if (!(err instanceof BadArgs)) throw err;
    process.stderr.write(`newest-state: ${err.message}\n${usage}\n`);
    return EXIT_BAD_ARGS;
  }
  if (args === 'help') {
    process.stdout.write(`${usage}\n`);
    return EXIT_RANKED;
  }
  const { candidates, unusable: bad } = await collect(args);
  const r = report(args.clusterId, candidates, bad);
  process.stdout.write(args.json ? `${JSON.stringify(r, null, 2)}\n` : renderText(r));
  return r.ranking.length > 0 ? EXIT_RANKED : EXIT_NONE_USABLE;
}

process.exitCode = await main(process.argv.slice(2));
