// cluster-scripts/newest-state: `newest-state [--cluster-id ID] [--json] FILE...`. Reads each
// node's state file FILE and FILE.prev beside it without consuming either, ranks them
// (newest-state.ts) and prints the ranking and the force-start command. Every byte read is
// untrusted: a file that does not decode is listed with the reason. Exit codes: 0 a ranking, 1 no
// usable file, 2 bad arguments (the message names the argument).
import { readFileSync, statSync } from 'node:fs';
import { DriverError } from '../../raft/driver/errors.js';
import { decodeAnyStateFile, prevPathOf, readRecord, type StateFile } from '../../raft/driver/state-file.js';
import { type Candidate, renderText, report, type Unusable } from './newest-state.js';

const EXIT_RANKED = 0;
const EXIT_NONE_USABLE = 1;
const EXIT_BAD_ARGS = 2;

const usage = "usage: newest-state [--cluster-id ID] [--json] FILE...   (FILE: a node's --state-file; FILE.prev is read too)";

interface Args {
  readonly clusterId: string;
  readonly json: boolean;
  readonly files: readonly string[];
}

class BadArgs extends Error {}

function parseArgs(argv: readonly string[]): Args | 'help' {
  let clusterId = 'raftmq';
  let json = false;
  const files: string[] = [];
  for (let k = 0; k < argv.length; k++) {
    const a = argv[k]!;
    if (a === '--') {
      files.push(...argv.slice(k + 1));
      break;
    }
    if (a === '--help' || a === '-h') return 'help';
    if (a === '--json') json = true;
    else if (a === '--cluster-id' || a.startsWith('--cluster-id=')) {
      const v = a === '--cluster-id' ? argv[++k] : a.slice('--cluster-id='.length);
      if (v === undefined || v === '') throw new BadArgs('--cluster-id needs a non-empty value');
      clusterId = v;
    } else if (a.startsWith('-')) throw new BadArgs(`unknown argument ${a}`);
    else files.push(a);
  }
  if (files.length === 0) throw new BadArgs('FILE missing: give the --state-file path of at least one node');
  if (files.some((f) => f === '')) throw new BadArgs('FILE: an empty path');
  return { clusterId, json, files: [...new Set(files)] };
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

function collect(args: Args): { candidates: Candidate[]; unusable: Unusable[] } {
  const candidates: Candidate[] = [];
  const bad: Unusable[] = [];
  for (const stateFile of args.files) {
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
      candidates.push({ path, stateFile, prev, consumed, fileExists, file: r.file });
    }
  }
  return { candidates, unusable: bad };
}

function main(argv: readonly string[]): number {
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
  const { candidates, unusable: bad } = collect(args);
  const r = report(args.clusterId, candidates, bad);
  process.stdout.write(args.json ? `${JSON.stringify(r, null, 2)}\n` : renderText(r));
  return r.ranking.length > 0 ? EXIT_RANKED : EXIT_NONE_USABLE;
}

process.exitCode = main(process.argv.slice(2));
