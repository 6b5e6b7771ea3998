// State file and membership record I/O (docs/design.md "State file"): what is written reads back, and
// every corrupt, foreign, consumed or restored file is refused with its code and its path named.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { DriverError } from '../raft/driver/errors.js';
import {
  acquirePidLock,
  consumeStateFile,
  decodeStateFile,
  encodeStateFile,
  lockPathOf,
  newFileId,
  prevPathOf,
  readForceStartFile,
  readRecord,
  type StateFile,
  writeStateFile,
} from '../raft/driver/state-file.js';

const dir = mkdtempSync(join(tmpdir(), 'raftmq-state-'));
after(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;
const freshPath = (): string => join(dir, `node-${++files}.state`);
const expected = { clusterId: 'raftmq', nodeId: 2 };

function sample(overrides: Partial<StateFile> = {}): StateFile {
  return {
    clusterId: 'raftmq',
    clusterUid: '5f0c6a9e1d2b4c8fa3e7d6b1c0a9f8e7',
    epoch: { generation: 1, id: 'k3' },
    member: { node: 2, inc: 'b7' },
    term: 4,
    vote: 1,
    voteInc: 'a1',
    configuration: null,
    snapshot: null,
    log: [
      {
        index: 1,
        term: 1,
        time: 1000,
        data: null,
        config: [
          { node: 1, inc: 'a1' },
          { node: 2, inc: 'b7' },
          { node: 3, inc: 'c1' },
        ],
      },
      { index: 2, term: 1, time: 1000, data: null },
      { index: 3, term: 4, time: 1500, data: new Uint8Array([0, 255, 7]) },
    ],
    commitIndex: 2,
    clusterTime: 1600,
    fileId: newFileId(),
    ...overrides,
  };
}

function refusedWith(code: string, path: string, fn: () => unknown): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof DriverError, String(err));
    assert.equal(err.code, code);
    assert.ok(err.message.includes(path), `message names the file: ${err.message}`);
    return true;
  });
}

describe('raft state file', { timeout: 20_000 }, () => {
  it('what is written reads back field by field, binary data and configuration entries included', () => {
    const path = freshPath();
    const s = sample();
    writeStateFile(path, s);
    const back = decodeStateFile(readFileSync(path), path, expected);
    assert.deepEqual(
      { ...back, log: back.log.map((e) => ({ ...e, data: e.data === null ? null : [...e.data] })) },
      {
        ...s,
        log: s.log.map((e) => ({ ...e, data: e.data === null ? null : [...e.data] })),
      },
    );
    assert.equal(existsSync(`${path}.tmp-${process.pid}`), false, 'no temporary file left behind');
  });

  it('a snapshot reads back with its chunks, and the log after it starts at its index + 1', () => {
    const path = freshPath();
    const config = [
      { node: 1, inc: 'a1' },
      { node: 2, inc: 'b7' },
      { node: 3, inc: 'c1' },
    ];
    const snapshot = { index: 2, term: 1, time: 1000, config, chunks: [new Uint8Array([1, 2]), new Uint8Array([3])], bytes: 3 };
    const s = sample({
      snapshot,
      configuration: config,
      log: [{ index: 3, term: 4, time: 1500, data: new Uint8Array([9]) }],
      commitIndex: 3,
    });
    writeStateFile(path, s);
    const back = decodeStateFile(readFileSync(path), path, expected);
    assert.deepEqual(
      back.snapshot?.chunks.map((c) => [...c]),
      [[1, 2], [3]],
    );
    assert.deepEqual({ ...back.snapshot, chunks: [] }, { ...snapshot, chunks: [] });
    assert.equal(back.log[0]?.index, 3);
  });

  it('a snapshot that does not fit the log (a gap, a term above the file, chunk bytes that do not add up) is refused as corrupt', () => {
    const path = freshPath();
    const snapshot = { index: 2, term: 1, time: 1000, config: null, chunks: [new Uint8Array([1])], bytes: 1 };
    const log = [{ index: 3, term: 4, time: 1500, data: null }];
    const bad: Partial<StateFile>[] = [
      { snapshot: { ...snapshot, index: 1 }, log, commitIndex: 3 },
      { snapshot: { ...snapshot, term: 5 }, log, commitIndex: 3 },
      { snapshot: { ...snapshot, bytes: 2 }, log, commitIndex: 3 },
      { snapshot: { ...snapshot, time: 2000 }, log, commitIndex: 3 },
      { snapshot, log, commitIndex: 1 },
    ];
    for (const o of bad) refusedWith('RAFT_STATE_FILE_CORRUPT', path, () => decodeStateFile(encodeStateFile(sample(o)), path, expected));
  });

  it('a file with any byte flipped, cut short, or of random bytes is refused as corrupt', () => {
    const path = freshPath();
    const good = encodeStateFile(sample());
    for (const at of [0, 9, 40, good.length - 1]) {
      const bad = Buffer.from(good);
      bad[at] = (bad[at] ?? 0) ^ 0x40;
      refusedWith('RAFT_STATE_FILE_CORRUPT', path, () => decodeStateFile(bad, path, expected));
    }
    refusedWith('RAFT_STATE_FILE_CORRUPT', path, () => decodeStateFile(good.subarray(0, good.length - 3), path, expected));
    refusedWith('RAFT_STATE_FILE_CORRUPT', path, () => decodeStateFile(new Uint8Array(100).fill(7), path, expected));
  });

  it('a well-sealed file whose log breaks the log rules is refused as corrupt', () => {
    const path = freshPath();
    const s = sample();
    const outOfOrder = encodeStateFile({ ...s, log: [s.log[1]!, s.log[0]!] });
    refusedWith('RAFT_STATE_FILE_CORRUPT', path, () => decodeStateFile(outOfOrder, path, expected));
    const aboveTerm = encodeStateFile({ ...s, term: 1 });
    refusedWith('RAFT_STATE_FILE_CORRUPT', path, () => decodeStateFile(aboveTerm, path, expected));
  });

  it('a file of another cluster or another node id is refused as foreign', () => {
    const path = freshPath();
    const bytes = encodeStateFile(sample());
    refusedWith('RAFT_STATE_FILE_FOREIGN', path, () => decodeStateFile(bytes, path, { clusterId: 'other', nodeId: 2 }));
    refusedWith('RAFT_STATE_FILE_FOREIGN', path, () => decodeStateFile(bytes, path, { clusterId: 'raftmq', nodeId: 3 }));
  });

  it('consuming a file notes its id in the record, renames it to .prev, and a restored copy is refused', () => {
    const path = freshPath();
    const s = sample();
    writeStateFile(path, s);
    const resumed = consumeStateFile(path, expected);
    assert.equal(resumed?.fileId, s.fileId);
    assert.equal(existsSync(path), false);
    assert.equal(existsSync(prevPathOf(path)), true);
    assert.deepEqual(readRecord(path, expected)?.consumed, [s.fileId]);
    copyFileSync(prevPathOf(path), path);
    refusedWith('RAFT_STATE_FILE_CONSUMED', path, () => consumeStateFile(path, expected));
    assert.equal(consumeStateFile(freshPath(), expected), null, 'no file: a fresh or amnesiac start');
  });

  it('a file of an older epoch than the record is a restored old copy and is refused', () => {
    const path = freshPath();
    writeStateFile(path, sample({ epoch: { generation: 3, id: 'x' } }));
    consumeStateFile(path, expected);
    writeStateFile(path, sample({ epoch: { generation: 2, id: 'y' } }));
    refusedWith('RAFT_STATE_FILE_CONSUMED', path, () => consumeStateFile(path, expected));
  });

  it('consuming notes the cluster identity in the record; a file of another identity or of an epoch the record does not hold is refused, untouched', () => {
    const path = freshPath();
    const s = sample();
    writeStateFile(path, s);
    consumeStateFile(path, expected);
    assert.equal(readRecord(path, expected)?.clusterUid, s.clusterUid);
    const record = readFileSync(`${path}.member`);
    const foreign = [
      sample({ clusterUid: '0123456789abcdef0123456789abcdef' }),
      sample({ epoch: { generation: 1, id: 'other' } }), // same generation, another epoch: the defect's case
      sample({ epoch: { generation: 2, id: 'k4' } }), // newer than any the record names
      sample({ clusterUid: '', epoch: { generation: 1, id: 'other' } }), // format 1 of another cluster
    ];
    for (const f of foreign) {
      const bytes = encodeStateFile(f);
      writeFileSync(path, bytes);
      refusedWith('RAFT_STATE_FILE_FOREIGN', path, () => consumeStateFile(path, expected));
      assert.deepEqual(readFileSync(path), bytes, 'the file is as it was');
      assert.deepEqual(readFileSync(`${path}.member`), record, 'the record is as it was');
    }
    // A force-start may use an older file, never one of another identity.
    writeStateFile(path, sample({ clusterUid: '0123456789abcdef0123456789abcdef', epoch: { generation: 1, id: 'k0' } }));
    refusedWith('RAFT_STATE_FILE_FOREIGN', path, () => readForceStartFile(path, expected));
  });

  it('a format 1 file and record (written before identities) read back with none, and are resumed by their epoch', () => {
    const fixture = fileURLToPath(new URL('../../test/fixtures/state-format-1/a', import.meta.url));
    const path = freshPath();
    copyFileSync(join(fixture, 'node2.state'), path);
    copyFileSync(join(fixture, 'node2.state.member'), `${path}.member`);
    const old = decodeStateFile(readFileSync(path), path, expected);
    assert.equal(old.clusterUid, '');
    assert.equal(old.member.node, 2);
    const oldRecord = readRecord(path, expected);
    assert.equal(oldRecord?.clusterUid, '');
    assert.deepEqual(oldRecord?.epoch, old.epoch);
    assert.equal(consumeStateFile(path, expected)?.fileId, old.fileId);
    const rewritten = readFileSync(`${path}.member`);
    assert.equal(rewritten.subarray(0, 8).toString(), 'RAFTMQR2', 'the record is rewritten in format 2');
    assert.deepEqual(readRecord(path, expected)?.consumed.at(-1), old.fileId);
    // Another cluster's format 1 file beside this record: its epoch was never this node's.
    copyFileSync(fileURLToPath(new URL('../../test/fixtures/state-format-1/b/node2.state', import.meta.url)), path);
    refusedWith('RAFT_STATE_FILE_FOREIGN', path, () => consumeStateFile(path, expected));
  });

  it('a cluster identity that is not a short string, or a format 1 body that claims one, is corrupt', () => {
    const path = freshPath();
    for (const clusterUid of [7, 'x'.repeat(65)]) {
      const bytes = encodeStateFile(sample({ clusterUid } as unknown as Partial<StateFile>));
      refusedWith('RAFT_STATE_FILE_CORRUPT', path, () => decodeStateFile(bytes, path, expected));
    }
    const v2 = encodeStateFile(sample());
    const v1 = Buffer.concat([Buffer.from('RAFTMQS1'), v2.subarray(8)]);
    refusedWith('RAFT_STATE_FILE_CORRUPT', path, () => decodeStateFile(v1, path, expected));
  });

  it('a corrupt membership record is refused, naming it', () => {
    const path = freshPath();
    writeFileSync(`${path}.member`, 'not a record');
    refusedWith('RAFT_STATE_FILE_CORRUPT', `${path}.member`, () => readRecord(path, expected));
  });

  it('the PID lock refuses while its holder lives and is taken over once its PID is gone', () => {
    const path = freshPath();
    writeFileSync(lockPathOf(path), `${process.ppid}\n`);
    refusedWith('RAFT_STATE_FILE_LOCKED', lockPathOf(path), () => acquirePidLock(path));
    const gone = spawnSync(process.execPath, ['-e', '0']).pid;
    writeFileSync(lockPathOf(path), `${gone}\n`);
    const release = acquirePidLock(path);
    assert.equal(readFileSync(lockPathOf(path), 'utf8').trim(), String(process.pid));
    release();
    assert.equal(existsSync(lockPathOf(path)), false);
  });
});
