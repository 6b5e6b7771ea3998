// cluster-scripts/newest-state on cluster nodes' data directories (docs/operations.md "Choosing the
// file to force-start from"), written by the raft storage a node runs (src/cluster/raft-storage.ts)
// with the membership records beside the state files: a directory is ranked by its epoch, last
// term and last index among state files, its force-start command names --data-dir, and it is read
// without a change (no lock taken, a torn tail not cut). A damaged directory, one without a record
// and one whose state file is newer are listed as unusable with the reason, and the node's state
// files are ranked instead. The ranking of real nodes' directories after kill -9 is in
// test/cluster-data-dir.slow.test.ts.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { Epoch } from '../raft/core/membership.js';
import type { LogEntry } from '../raft/core/messages.js';
import { writeRecord, writeStateFile } from '../raft/driver/state-file.js';
import type { Ranked, Report } from '../src/cluster/newest-state.js';
import { openRaftDataDir, raftSegmentName } from '../src/cluster/raft-storage.js';

const SCRIPT = join(process.cwd(), 'cluster-scripts', 'newest-state');
const root = mkdtempSync(join(tmpdir(), 'raftmq-newest-dirs-'));
after(() => rmSync(root, { recursive: true, force: true }));

const quiet = { info() {}, warn() {}, error() {} };
const EPOCH: Epoch = { generation: 1, id: 'epoch-one' };
const UID = 'c'.repeat(32);

const entries = (from: number, to: number, term: number): LogEntry[] => {
  const out: LogEntry[] = [];
  for (let i = from; i <= to; i++) out.push({ index: i, term, time: 1_700_000_000_000 + i, data: new TextEncoder().encode(`m${i}`) });
  return out;
};

interface NodeFiles {
  stateFile: string;
  dataDir: string;
}

/** A stopped node's data directory holding `batches` (one flush each) and its membership record. */
async function node(base: string, id: number, batches: readonly LogEntry[][], record = true): Promise<NodeFiles> {
  const stateFile = join(base, `node${id}.state`);
  const dataDir = join(base, `data${id}`);
  const d = await openRaftDataDir(dataDir, { clusterId: 'raftmq', nodeId: id }, quiet);
  d.storage.setHardState({ term: Math.max(...batches.flat().map((e) => e.term)), vote: 1, voteInc: 'x' });
  for (const b of batches) {
    d.storage.append(b, null);
    await d.storage.flush();
  }
  await d.storage.close();
  d.release();
  if (record) writeRecord(stateFile, { clusterId: 'raftmq', clusterUid: UID, nodeId: id, epoch: EPOCH, consumed: [] });
  return { stateFile, dataDir };
}

/** Every file of a directory with its bytes. */
const contents = (dir: string): Record<string, string> =>
  Object.fromEntries(readdirSync(dir).map((n) => [n, readFileSync(join(dir, n)).toString('hex')]));

function run(args: readonly string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(SCRIPT, args, { encoding: 'utf8', timeout: 20_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function json(args: readonly string[]): Report {
  const r = run(['--json', ...args]);
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout) as Report;
}

const row = (r: Report, path: string): Ranked => {
  const found = r.ranking.find((x) => x.path === path);
  assert.ok(found !== undefined, `${path} ranked: ${JSON.stringify(r.ranking.map((x) => x.path))}`);
  return found;
};

describe('newest-state on data directories', { timeout: 60_000 }, () => {
  it('ranks the data directories of a stopped cluster by their raft state, reads them unchanged, and names --data-dir in the command', async () => {
    const base = mkdtempSync(join(root, 'ranked-'));
    const n1 = await node(base, 1, [entries(1, 4, 1), entries(5, 10, 2)]);
    const n2 = await node(base, 2, [entries(1, 4, 1), entries(5, 7, 2)]);
    // Node 3: a longer log of an older term (an uncommitted tail another leader overwrote).
    const n3 = await node(base, 3, [entries(1, 4, 1), entries(5, 12, 1)]);
    // Node 2's newest segment ends in a torn batch: ranked without it, and the bytes stay.
    const seg2 = join(n2.dataDir, raftSegmentName(1));
    writeFileSync(seg2, Buffer.concat([readFileSync(seg2), Buffer.from('torn batch bytes')]));
    const before = [n1, n2, n3].map((n) => contents(n.dataDir));
    const args = [n1, n2, n3].flatMap((n) => ['--data-dir', n.dataDir, n.stateFile]);

    const r = json(args);
    assert.deepEqual(
      r.ranking.map((x) => [x.node, x.path, x.fromDataDir, x.lastTerm, x.lastIndex, x.commitIndex]),
      [
        [1, n1.dataDir, true, 2, 10, null],
        [2, n2.dataDir, true, 2, 7, null],
        [3, n3.dataDir, true, 1, 12, null],
      ],
    );
    assert.deepEqual(row(r, n1.dataDir).epoch, EPOCH, "the epoch of the node's membership record");
    assert.deepEqual(row(r, n2.dataDir).lacks, { kind: 'behind', entries: 3, notInBest: 0 });
    assert.deepEqual(row(r, n3.dataDir).lacks, { kind: 'behind', entries: 6, notInBest: 8 });
    assert.equal(row(r, n1.dataDir).clusterTime, 1_700_000_000_010, 'the cluster time of its last entry');
    assert.equal(r.forceStart?.from, n1.dataDir);
    assert.equal(r.forceStart?.moveAside, null);
    assert.equal(
      r.forceStart?.command,
      `raftmq <node 1's usual flags> --state-file ${n1.stateFile} --data-dir ${n1.dataDir} --cluster-force-start`,
    );
    assert.deepEqual(r.unusable, []);

    const text = run(args);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, new RegExp(`from node 1's data directory ${n1.dataDir}`));
    assert.match(text.stdout, /no \(data dir\)/);
    assert.deepEqual(
      [n1, n2, n3].map((n) => contents(n.dataDir)),
      before,
      'every file as it was: no lock, no cut, no removal',
    );
  });

  it('lists a damaged directory, one without a record and one behind a newer state file as unusable, and ranks the state files instead', async () => {
    const base = mkdtempSync(join(root, 'unusable-'));
    // Node 1: a byte flipped before the last commit record.
    const n1 = await node(base, 1, [entries(1, 5, 1), entries(6, 8, 1)]);
    const seg1 = join(n1.dataDir, raftSegmentName(1));
    const bytes = readFileSync(seg1);
    bytes[40] = (bytes[40] as number) ^ 0xff;
    writeFileSync(seg1, bytes);
    // Node 2: no membership record beside its state file.
    const n2 = await node(base, 2, [entries(1, 3, 1)], false);
    // Node 3: its state file (written by a later start without the directory) is ahead of it.
    const n3 = await node(base, 3, [entries(1, 3, 1)]);
    writeStateFile(n3.stateFile, {
      clusterId: 'raftmq',
      clusterUid: UID,
      epoch: EPOCH,
      member: { node: 3, inc: 'another-member' },
      term: 1,
      vote: 0,
      voteInc: '',
      configuration: null,
      snapshot: null,
      log: entries(1, 6, 1),
      commitIndex: 6,
      clusterTime: 1_700_000_000_006,
      fileId: 'f3',
    });
    const before = contents(n1.dataDir);
    const r = json([n1, n2, n3].flatMap((n) => ['--data-dir', n.dataDir, n.stateFile]));
    const reasons = new Map(r.unusable.map((u) => [u.path, u]));
    assert.equal(reasons.get(n1.dataDir)?.code, 'DATA_DIR_CORRUPT');
    assert.match(reasons.get(n1.dataDir)?.reason ?? '', new RegExp(raftSegmentName(1)), 'names the segment');
    assert.equal(reasons.get(n2.dataDir)?.code, 'RAFT_RECORD_MISSING');
    assert.equal(reasons.get(n3.dataDir)?.code, 'RAFT_STATE_FILE_NEWER');
    assert.deepEqual(contents(n1.dataDir), before, 'the damaged directory unchanged');
    // Only node 3's state file is there to rank; a start with its directory would be refused, so
    // the command leaves --data-dir out.
    assert.deepEqual(
      r.ranking.map((x) => [x.path, x.fromDataDir, x.lastIndex, x.commitIndex]),
      [[n3.stateFile, false, 6, 6]],
    );
    assert.equal(r.forceStart?.command, `raftmq <node 3's usual flags> --state-file ${n3.stateFile} --cluster-force-start`);
    // Node 2's start with --data-dir reads FILE: were it there, its command would name the directory.
    assert.equal(r.unusable.filter((u) => u.code === 'RAFT_STATE_FILE_MISSING').length, 2, 'nodes 1 and 2 have no state file');
  });

  it('ranks the state files of a node whose data directory is absent or empty, and its command keeps --data-dir', async () => {
    const base = mkdtempSync(join(root, 'empty-'));
    const stateFile = join(base, 'node1.state');
    writeStateFile(stateFile, {
      clusterId: 'raftmq',
      clusterUid: UID,
      epoch: EPOCH,
      member: { node: 1, inc: 'm1' },
      term: 1,
      vote: 0,
      voteInc: '',
      configuration: null,
      snapshot: null,
      log: entries(1, 2, 1),
      commitIndex: 2,
      clusterTime: 1,
      fileId: 'f1',
    });
    const absent = join(base, 'never-made');
    const r = json(['--data-dir', absent, stateFile]);
    assert.deepEqual(
      r.ranking.map((x) => [x.path, x.fromDataDir, x.dataDir]),
      [[stateFile, false, absent]],
    );
    assert.equal(
      r.forceStart?.command,
      `raftmq <node 1's usual flags> --state-file ${stateFile} --data-dir ${absent} --cluster-force-start`,
    );
    // A torn first write leaves a segment with no complete batch: nothing is held there either.
    const torn = join(base, 'torn');
    const d = await openRaftDataDir(torn, { clusterId: 'raftmq', nodeId: 1 }, quiet);
    d.storage.append(entries(1, 1, 1), null);
    await d.storage.flush();
    await d.storage.close();
    d.release();
    truncateSync(join(torn, raftSegmentName(1)), 10);
    assert.deepEqual(
      json(['--data-dir', torn, stateFile]).ranking.map((x) => x.path),
      [stateFile],
    );
  });

  it('refuses a --data-dir with no FILE after it, naming it (exit 2)', () => {
    const r = run(['a.state', '--data-dir', 'dir']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--data-dir dir: no FILE after it/);
    const twice = run(['--data-dir', 'd1', '--data-dir', 'd2', 'a.state']);
    assert.equal(twice.code, 2);
    assert.match(twice.stderr, /--data-dir d2: the one before it \(d1\) has no FILE after it/);
  });
});
