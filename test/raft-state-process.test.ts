// The node program refuses a state file it must not resume (docs/design.md "State file"): corrupt,
// another node's, or a consumed copy put back; and a second process on the same state file. Each
// exits 78 with a message naming the file, before it takes part in raft.
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { EXIT_STATE_FILE_REFUSED } from '../raft/driver/node-app.js';
import { lockPathOf, newFileId, prevPathOf, type StateFile, writeStateFile } from '../raft/driver/state-file.js';
import { RaftNodeProcess, runToExit } from './raft-node-process.js';

const E = 200;
const IDS = [1, 2, 3];
const PEERS = IDS.map((p) => `${p}=127.0.0.1:0`).join(',');
const dir = mkdtempSync(join(tmpdir(), 'raftmq-node-state-'));
const started: RaftNodeProcess[] = [];
after(async () => {
  await Promise.all(started.map((n) => n.kill()));
  rmSync(dir, { recursive: true, force: true });
});

function stateOf(node: number): StateFile {
  const inc = `inc${node}`;
  return {
    clusterId: 'raftmq',
    clusterUid: '',
    epoch: { generation: 1, id: 'e1' },
    member: { node, inc },
    term: 2,
    vote: 0,
    voteInc: '',
    configuration: null,
    snapshot: null,
    log: [{ index: 1, term: 1, time: 0, data: null, config: IDS.map((n) => ({ node: n, inc: `inc${n}` })) }],
    commitIndex: 1,
    clusterTime: 0,
    fileId: newFileId(),
  };
}

const argsFor = (id: number, file: string): string[] => [
  '--id',
  String(id),
  '--peers',
  PEERS,
  '--election-timeout-ms',
  String(E),
  '--state-file',
  file,
];

async function refused(id: number, file: string, named: string): Promise<string> {
  const r = await runToExit(argsFor(id, file));
  assert.equal(r.code, EXIT_STATE_FILE_REFUSED, `exit code; stderr: ${r.stderr}`);
  assert.ok(r.stderr.includes(named), `the message names ${named}: ${r.stderr}`);
  return r.stderr;
}

describe('raft node program: refused state files', { timeout: 60_000 }, () => {
  test('a corrupt state file is refused, named, and left in place', async () => {
    const file = join(dir, 'corrupt.state');
    writeFileSync(file, 'RAFTMQS1 this is not a state file at all, just bytes');
    assert.match(await refused(1, file, file), /corrupt/);
    assert.ok(existsSync(file), 'a refused file is not consumed');
  });

  test("another node's state file is refused as foreign", async () => {
    const file = join(dir, 'foreign.state');
    writeStateFile(file, stateOf(2));
    assert.match(await refused(1, file, file), /another cluster or node/);
  });

  test('a consumed file put back (a restored copy) is refused; the PID lock of a killed node is taken over', async () => {
    const file = join(dir, 'restored.state');
    writeStateFile(file, stateOf(1));
    const node = await RaftNodeProcess.start(1, IDS, E, 10_000, ['--state-file', file]);
    started.push(node);
    const status = await node.status();
    assert.equal(status.membership, 'member');
    assert.equal(status.incarnation, 'inc1', 'resumed as the same member');
    assert.ok(!existsSync(file) && existsSync(prevPathOf(file)), 'the file became FILE.prev');
    await node.kill();
    assert.ok(existsSync(lockPathOf(file)), 'kill -9 leaves the lock behind');
    copyFileSync(prevPathOf(file), file);
    assert.match(await refused(1, file, file), /consumed before/);
  });

  test('a second process on a state file whose lock a live process holds is refused, naming the lock', async () => {
    const file = join(dir, 'locked.state');
    const first = await RaftNodeProcess.start(2, IDS, E, 10_000, ['--state-file', file]);
    started.push(first);
    assert.equal((await first.status()).membership, 'fresh');
    assert.match(await refused(2, file, lockPathOf(file)), new RegExp(`live process ${first.pid}`));
  });
});
