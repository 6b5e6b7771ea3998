// Raft state files and membership records (raft/driver/state-file.ts). Random bytes rarely pass
// the SHA-256 check, so most inputs are taken as the msgpackr body and sealed with a good digest
// first: a file a buggy writer or a hostile hand made. Rules: decodeStateFile and decodeRecord
// throw nothing but DriverError (corrupt or foreign); a state file they accept starts a raft core
// as the driver starts one (raft/driver/driver.ts restoreOf) without breaking an invariant, and
// the core ticks; a refusal of the core's options is a RaftError naming the option.
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { Packr } from 'msgpackr';
import type { LogEntry } from '../../raft/core/messages.js';
import { Prng } from '../../raft/core/prng.js';
import { RaftCore } from '../../raft/core/raft.js';
import { DriverError } from '../../raft/driver/errors.js';
import { decodeRecord, decodeStateFile, type MembershipRecord, type StateFile } from '../../raft/driver/state-file.js';
import { RaftError } from '../../raft/errors.js';
import { check, type FuzzInput, type FuzzTarget, MSGPACK_TOKENS, onlyTyped, valueMutated } from '../harness.js';

const EXPECTED = { clusterId: 'c', nodeId: 1 };
const NODES = [1, 2, 3];
const packr = new Packr({ useRecords: false, mapsAsObjects: true });
// Format 2 (with the cluster identity) and format 1, which is still read.
const STATE_MAGIC = [Buffer.from('RAFTMQS2'), Buffer.from('RAFTMQS1')] as const;
const RECORD_MAGIC = [Buffer.from('RAFTMQR2'), Buffer.from('RAFTMQR1')] as const;

function seal(magic: Buffer, body: Uint8Array): Uint8Array {
  const digest = createHash('sha256').update(body).digest();
  return new Uint8Array(Buffer.concat([magic, digest, body]));
}

const members = [
  { node: 1, inc: 'i1' },
  { node: 2, inc: 'i2' },
  { node: 3, inc: 'i3' },
];

export function sampleState(log: LogEntry[], snapshot: boolean): StateFile {
  const base = snapshot ? 4 : 0;
  return {
    clusterId: 'c',
    clusterUid: '0123456789abcdef0123456789abcdef',
    epoch: { generation: 1, id: 'e' },
    member: { node: 1, inc: 'i1' },
    term: 3,
    vote: 2,
    voteInc: 'i2',
    configuration: members,
    snapshot: snapshot ? { index: 4, term: 2, time: 900, config: members, chunks: [Uint8Array.of(1, 2, 3)], bytes: 3 } : null,
    log: log.map((e, k) => ({ ...e, index: base + 1 + k })),
    commitIndex: base + Math.min(1, log.length),
    clusterTime: 1000,
    fileId: 'f00d',
  };
}

const sampleRecord: MembershipRecord = {
  clusterId: 'c',
  clusterUid: '0123456789abcdef0123456789abcdef',
  nodeId: 1,
  epoch: { generation: 1, id: 'e' },
  consumed: ['f00d'],
};

const entry = fc.record({
  index: fc.constant(0),
  term: fc.integer({ min: 2, max: 3 }),
  time: fc.constant(1000),
  data: fc.option(fc.uint8Array({ maxLength: 8 })),
});
const states = fc.tuple(fc.array(entry, { maxLength: 4 }), fc.boolean()).map(([log, snap]) =>
  sampleState(
    [...log].sort((a, b) => a.term - b.term),
    snap,
  ),
);
const validBody: fc.Arbitrary<Uint8Array> = fc.oneof(
  states.map((st) => packr.pack(st) as Uint8Array),
  valueMutated(fc.oneof(states, fc.constant(sampleRecord))).map((v) => packr.pack(v) as Uint8Array),
  fc.constant(packr.pack(sampleRecord) as Uint8Array),
);

/** Knob bit 0: a record, else a state file. Bits 1-2 zero: the bytes are the whole file, as read;
 * else they are the body, sealed here, as format 2 or (bit 3) format 1. */
export function runStateFile(input: FuzzInput): void {
  const record = (input.knob & 1) === 1;
  const raw = ((input.knob >> 1) & 3) === 0;
  const format = (input.knob >> 3) & 1;
  const bytes = raw ? input.data : seal((record ? RECORD_MAGIC : STATE_MAGIC)[format] as Buffer, input.data);
  const driverError = (e: unknown) =>
    e instanceof DriverError && (e.code === 'RAFT_STATE_FILE_CORRUPT' || e.code === 'RAFT_STATE_FILE_FOREIGN');
  if (record) {
    onlyTyped(() => decodeRecord(bytes, 'fuzz.member', EXPECTED), driverError, 'decodeRecord');
    return;
  }
  const file = onlyTyped(() => decodeStateFile(bytes, 'fuzz.state', EXPECTED), driverError, 'decodeStateFile');
  if (file === undefined) return;
  const core = onlyTyped(
    () =>
      new RaftCore({
        id: 1,
        nodes: NODES,
        electionTimeoutMs: 100,
        random: new Prng(input.knob),
        now: 0,
        clusterId: file.clusterId,
        incarnation: file.member.inc,
        membership: 'member',
        epoch: file.epoch,
        restore: {
          term: file.term,
          vote: file.vote,
          voteInc: file.voteInc,
          entries: file.log,
          baseConfig: file.configuration,
          snapshot: file.snapshot,
        },
      }),
    (e) => e instanceof RaftError && e.code === 'RAFT_BAD_OPTIONS',
    'a raft core started from an accepted state file',
  );
  if (core === undefined) return;
  onlyTyped(
    () => {
      core.tick(1000, 1_700_000_000_000);
      core.tick(2000, 1_700_000_001_000);
    },
    () => false,
    'ticking a raft core started from an accepted state file',
  );
  check(core.durableState().term >= file.term, 'the core forgot the term of its state file');
}

export const stateFile: FuzzTarget = {
  name: 'state-file',
  modules: ['raft/driver/state-file.ts'],
  valid: validBody,
  dictionary: MSGPACK_TOKENS,
  run: runStateFile,
};

/** Seed corpus: bodies of a state file with and without a snapshot, and of a record (knob bit 0
 * picks which reader; the files are bodies, sealed by the target). */
export function stateFileCorpus(): Uint8Array[] {
  const log: LogEntry[] = [
    { index: 0, term: 2, time: 1000, data: null },
    { index: 0, term: 3, time: 1001, data: Uint8Array.of(0xc1, 1) },
  ];
  return [
    packr.pack(sampleState(log, false)),
    packr.pack(sampleState(log, true)),
    packr.pack(sampleState([], false)),
    packr.pack(sampleRecord),
  ];
}
