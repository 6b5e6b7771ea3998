// cluster-scripts/newest-state on real state files (docs/design.md "Force-start", docs/design.md "Beyond the model"):
// three raft node programs commit entries; one is stopped with SIGTERM early, so its file lacks what
// came after; another is stopped and resumed, which leaves its consumed FILE.prev behind; then the
// rest are stopped. The script must rank the newest file first, say how many entries each other file
// lacks (checked against the entries the files hold), list corrupt, truncated and misshapen files as
// unusable, and print the force-start command. Waits are bounded; only our processes are signalled.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { decodeAnyStateFile, encodeStateFile, prevPathOf, type StateFile } from '../raft/driver/state-file.js';
import type { Ranked, Report } from '../src/cluster/newest-state.js';
import { agreedLeader, linkAll, RaftNodeProcess, stopNodes } from './raft-node-process.js';
import { until } from './support/wait.js';

const E = 300;
const PROPOSE_TRIES_MAX = 5;
const IDS = [1, 2, 3];
const WAIT_MS = 60 * E;
const SCRIPT = join(process.cwd(), 'cluster-scripts', 'newest-state');
const dir = mkdtempSync(join(tmpdir(), 'raftmq-newest-state-'));
const fileOf = (id: number): string => join(dir, `node-${id}.state`);

const start = (id: number): Promise<RaftNodeProcess> => RaftNodeProcess.start(id, IDS, E, 10_000, ['--state-file', fileOf(id)]);

async function sigterm(node: RaftNodeProcess): Promise<void> {
  node.signal('SIGTERM');
  await until(`node ${node.id} to exit after SIGTERM`, async () => (node.alive ? undefined : true), WAIT_MS);
  assert.equal(node.proc.exitCode, 0, node.stderr);
}

/** Commits each text once. A leader change on a busy machine can refuse or lose a proposal ("err
 * RAFT_NOT_LEADER", "err lost"): neither committed it, so it is proposed again to the new leader. */
async function propose(nodes: readonly RaftNodeProcess[], texts: readonly string[]): Promise<void> {
  let left = [...texts];
  for (let attempt = 0; attempt < PROPOSE_TRIES_MAX && left.length > 0; attempt++) {
    const leader = await until('an agreed leader', () => agreedLeader(nodes), WAIT_MS);
    const replies = await leader.requestMany(left.map((t) => `propose ${t}`));
    for (const r of replies) assert.match(r, /^(ok \d+|err lost \d+|err RAFT_NOT_LEADER.*)$/, 'committed, or refused without committing');
    left = left.filter((_, k) => !/^ok /.test(replies[k]!));
  }
  assert.deepEqual(left, [], `committed within ${PROPOSE_TRIES_MAX} leaders`);
}

function run(args: readonly string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(SCRIPT, args, { encoding: 'utf8', timeout: 20_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const textsIn = (f: StateFile): string[] =>
  f.log.flatMap((e) => (e.data === null || e.data.length === 0 ? [] : [new TextDecoder().decode(e.data)]));
const read = (path: string): StateFile => decodeAnyStateFile(readFileSync(path), path);
const behind = (r: Ranked): number => (r.lacks.kind === 'behind' ? r.lacks.entries : -1);

describe('newest-state on the state files of three raft node programs', { timeout: 180_000 }, () => {
  const nodes = new Map<number, RaftNodeProcess>();
  const alive = (): RaftNodeProcess[] => [...nodes.values()].filter((n) => n.alive);
  let early = 0;
  let resumed = 0;
  const corrupt = join(dir, 'corrupt.state');
  const truncated = join(dir, 'truncated.state');
  const misshapen = join(dir, 'misshapen.state');
  after(async () => {
    await stopNodes([...nodes.values()]);
    rmSync(dir, { recursive: true, force: true });
  });

  before(async () => {
    for (const id of IDS) nodes.set(id, await start(id));
    await linkAll(alive());
    const leader = await until(
      'a leader with three caught-up voters',
      async () => {
        const l = await agreedLeader(alive());
        return l !== undefined && (await l.status()).redundant ? l : undefined;
      },
      WAIT_MS,
    );
    await propose(alive(), ['a1', 'a2', 'a3']);
    const [first, second] = IDS.filter((id) => id !== leader.id);
    early = first!;
    resumed = second!;
    await sigterm(nodes.get(early)!);
    await propose(alive(), ['b1', 'b2', 'b3', 'b4']);
    await sigterm(nodes.get(resumed)!);
    nodes.set(resumed, await start(resumed));
    await linkAll(alive());
    assert.ok(existsSync(prevPathOf(fileOf(resumed))), 'the resumed node consumed its file into FILE.prev');
    await propose(alive(), ['c1', 'c2']);
    for (const n of alive()) await sigterm(n);
    writeFileSync(corrupt, 'RAFTMQS1 not a state file, only bytes');
    writeFileSync(truncated, readFileSync(fileOf(early)).subarray(0, 60));
    writeFileSync(misshapen, encodeStateFile({ clusterId: 'raftmq', epoch: 5, log: 'x' } as unknown as StateFile));
  });

  test('ranks the newest file first and says how many entries each other file lacks, checked against their entries', () => {
    const files = [...IDS.map(fileOf), corrupt, truncated, misshapen];
    const r = run(['--json', ...files]);
    assert.equal(r.code, 0, r.stderr);
    const rep = JSON.parse(r.stdout) as Report;
    const paths = rep.ranking.map((x) => x.path);
    assert.equal(rep.ranking.length, 4, `three FILEs and one FILE.prev: ${paths.join(' ')}`);
    const best = rep.ranking[0]!;
    assert.deepEqual(best.lacks, { kind: 'best' });
    assert.ok(!best.prev && best.path !== fileOf(early), `best is a FILE of a node stopped last: ${best.path}`);
    const bestTexts = textsIn(read(best.path));
    for (const t of ['a1', 'a2', 'a3', 'b1', 'b2', 'b3', 'b4', 'c1', 'c2']) assert.ok(bestTexts.includes(t), `best holds ${t}`);

    const earlyRow = rep.ranking.find((x) => x.path === fileOf(early))!;
    const prevRow = rep.ranking.find((x) => x.path === prevPathOf(fileOf(resumed)))!;
    assert.equal(earlyRow.rank, 4, 'the file stopped first ranks last');
    assert.ok(prevRow.prev && prevRow.consumed, 'FILE.prev is marked consumed');
    for (const [row, missing] of [
      [earlyRow, ['b1', 'b2', 'b3', 'b4', 'c1', 'c2']],
      [prevRow, ['c1', 'c2']],
    ] as const) {
      const f = read(row.path);
      assert.deepEqual(
        bestTexts.filter((t) => !textsIn(f).includes(t)),
        missing,
        `${row.path} lacks exactly what came after it stopped`,
      );
      assert.equal(behind(row), best.lastIndex - row.lastIndex, `${row.path}: lacks counts the best file's entries past its own`);
      assert.ok(behind(row) >= missing.length);
      assert.deepEqual(row.lacks, { kind: 'behind', entries: behind(row), notInBest: 0 });
    }
    for (const x of rep.ranking) assert.equal(x.node, read(x.path).member.node);

    assert.deepEqual(rep.unusable.map((u) => [u.path, u.code]).sort(), [
      [corrupt, 'RAFT_STATE_FILE_CORRUPT'],
      [misshapen, 'RAFT_STATE_FILE_CORRUPT'],
      [truncated, 'RAFT_STATE_FILE_CORRUPT'],
    ]);
    assert.equal(rep.forceStart?.node, best.node);
    assert.equal(rep.forceStart?.moveAside, null);
    assert.equal(rep.forceStart?.command, `raftmq <node ${best.node}'s usual flags> --state-file ${best.path} --cluster-force-start`);
  });

  test('the text output lists the same order, the lacks, the unusable files and the command', () => {
    const files = [...IDS.map(fileOf), corrupt];
    const json = JSON.parse(run(['--json', ...files]).stdout) as Report;
    const r = run(files);
    assert.equal(r.code, 0, r.stderr);
    const rows = r.stdout.split('\n').filter((l) => /^\d+ {2}/.test(l));
    assert.deepEqual(
      rows.map((l) => l.split(/ {2,}/)[2]),
      json.ranking.map((x) => x.path),
    );
    const earlyLine = rows.find((l) => l.includes(`${fileOf(early)} `))!;
    assert.match(earlyLine, new RegExp(`${behind(json.ranking.find((x) => x.path === fileOf(early))!)} entries behind$`));
    assert.match(r.stdout, /unusable:\n {2}raft state file is corrupt: \S*corrupt\.state: not a raftmq state file/);
    assert.ok(r.stdout.includes(json.forceStart!.command), r.stdout);
    assert.match(r.stdout, /SIGTERM/);
    assert.match(r.stdout, /amnesiac/);
  });

  test('when the best file is FILE.prev and an older FILE exists, it says to move FILE aside and still names FILE', () => {
    const restored = join(dir, 'restored');
    mkdirSync(restored);
    const file = join(restored, 'node.state');
    copyFileSync(prevPathOf(fileOf(resumed)), file);
    copyFileSync(fileOf(resumed), prevPathOf(file));
    const r = run(['--json', file]);
    assert.equal(r.code, 0, r.stderr);
    const rep = JSON.parse(r.stdout) as Report;
    assert.deepEqual(
      rep.ranking.map((x) => x.path),
      [prevPathOf(file), file],
    );
    assert.equal(rep.forceStart?.moveAside, file);
    assert.equal(rep.forceStart?.stateFile, file);
    const text = run([file]).stdout;
    assert.ok(text.includes(`mv ${file} ${file}.older`), text);
    assert.ok(text.includes(`--state-file ${file} --cluster-force-start`), text);
  });

  test('files of another cluster id, or none usable, exit 1; bad arguments exit 2 naming the argument', () => {
    const other = run(['--cluster-id', 'other', ...IDS.map(fileOf)]);
    assert.equal(other.code, 1, other.stdout);
    assert.match(other.stdout, /of cluster "raftmq", not "other" \(--cluster-id\)/);
    assert.match(other.stdout, /No usable state file/);
    assert.equal(run([corrupt, join(dir, 'nothing-here')]).code, 1);
    const bad = run(['--cluster-id']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--cluster-id/);
    const unknown = run(['--newest', fileOf(1)]);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /--newest/);
    assert.equal(run([]).code, 2);
  });
});
