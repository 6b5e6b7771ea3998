// The state file and the membership record beside it (docs/design.md "State file", docs/design.md "Fresh, amnesiac,
// bootstrap"). Layout of both: 8 magic bytes, a 32-byte SHA-256 of the body, then the msgpackr
// body. Every byte read back is untrusted: a bad checksum, a bad shape, another cluster or node, or
// a file already consumed is refused with a stable code and a message naming the file.
//
// Format 2 (magic RAFTMQS2 / RAFTMQR2) adds the cluster identity: a random id made when a cluster
// is bootstrapped (or force-started without one), which no two clusters share whatever their
// --cluster-id. Format 1 files and records, written before it existed, are still read, with an
// empty identity; a node writes format 2 from then on.
//
// This module is the format only (encode, decode, validate: no files, no clock, no randomness), so
// the simulator runs the shipped encoding; state-file.ts reads and writes the files.
import { createHash } from 'node:crypto';
import { Packr } from 'msgpackr';
import type { Configuration, Epoch, Member } from '../core/membership.js';
import type { LogEntry } from '../core/messages.js';
import type { RaftCore } from '../core/raft.js';
import type { Snapshot } from '../core/snapshot.js';
import { DriverError } from './errors.js';

const stateMagic = Buffer.from('RAFTMQS2');
const recordMagic = Buffer.from('RAFTMQR2');
/** Format 1: no cluster identity. */
const stateMagicV1 = Buffer.from('RAFTMQS1');
const recordMagicV1 = Buffer.from('RAFTMQR1');
/** A cluster identity is 32 hex digits; a longer string read back is refused as corrupt. */
const clusterUidCharsMax = 64;
const digestBytes = 32;
/** The record remembers this many consumed file ids: enough for every file a node could be handed. */
export const consumedIdsMax = 64;
const packr = new Packr({ useRecords: false, mapsAsObjects: true });

export interface StateFile {
  readonly clusterId: string;
  /** The cluster identity ('' in a format 1 file, or for a node that never learned it). */
  readonly clusterUid: string;
  readonly epoch: Epoch;
  readonly member: Member;
  readonly term: number;
  readonly vote: number;
  readonly voteInc: string;
  /** The configuration before the first entry of `log` (null: none). */
  readonly configuration: Configuration | null;
  /** The newest snapshot (§7), whose last index precedes the first entry of `log`; null: the log
   * starts at index 1. */
  readonly snapshot: Snapshot | null;
  readonly log: readonly LogEntry[];
  readonly commitIndex: number;
  /** Cluster ms when the state was taken. */
  readonly clusterTime: number;
  /** Random id of this file; the membership record notes it when the file is consumed. */
  readonly fileId: string;
}

/** The durable membership record beside the state file: written before a node first applies
 * anything of an epoch, and when it consumes a state file. */
export interface MembershipRecord {
  readonly clusterId: string;
  /** The cluster identity this node took part in ('' in a format 1 record, or none known yet). */
  readonly clusterUid: string;
  readonly nodeId: number;
  readonly epoch: Epoch;
  /** File ids of state files consumed, newest last (at most consumedIdsMax). */
  readonly consumed: readonly string[];
}

export interface Expected {
  readonly clusterId: string;
  readonly nodeId: number;
}

// ---- encoding ----

/** What a state file records of a core: its identity, durable state, log and commit index, with
 * the cluster time, file id and cluster identity the caller gives. */
export function stateOfCore(core: RaftCore, clusterTime: number, fileId: string, clusterUid: string): StateFile {
  const d = core.durableState();
  return {
    clusterId: core.clusterId,
    clusterUid,
    epoch: core.epoch,
    member: core.member,
    term: d.term,
    vote: d.vote,
    voteInc: d.voteInc ?? '',
    configuration: d.baseConfig ?? null,
    snapshot: d.snapshot ?? null,
    log: d.entries,
    commitIndex: core.commitIndex,
    clusterTime,
    fileId,
  };
}

export function encodeStateFile(s: StateFile): Buffer {
  return seal(stateMagic, s);
}

export function decodeStateFile(bytes: Uint8Array, path: string, expected: Expected): StateFile {
  const v = decodeAnyStateFile(bytes, path);
  if (v.clusterId !== expected.clusterId || v.member.node !== expected.nodeId) {
    const detail = `${path} is of cluster ${JSON.stringify(v.clusterId)} node ${v.member.node}`;
    throw new DriverError('RAFT_STATE_FILE_FOREIGN', `${detail}, this is ${JSON.stringify(expected.clusterId)} node ${expected.nodeId}`);
  }
  return v;
}

/** Checksum, shape and log rules only, for a file whose owner is not known yet (newest-state reads
 * every node's file and learns each one's node id from it). */
export function decodeAnyStateFile(bytes: Uint8Array, path: string): StateFile {
  const { value, version } = open([stateMagic, stateMagicV1], bytes, path, 'state file');
  const v = version === 1 ? withoutUid(value) : value;
  if (!isStateFile(v)) throw new DriverError('RAFT_STATE_FILE_CORRUPT', `${path}: fields missing or of the wrong type`);
  return v;
}

/** A format 1 body with the identity it did not have; a body that claims one anyway is refused. */
function withoutUid(v: unknown): unknown {
  if (typeof v !== 'object' || v === null || 'clusterUid' in v) return null;
  return { ...v, clusterUid: '' };
}

export function encodeRecord(r: MembershipRecord): Buffer {
  return seal(recordMagic, r);
}

export function decodeRecord(bytes: Uint8Array, path: string, expected: Expected): MembershipRecord {
  const { value, version } = open([recordMagic, recordMagicV1], bytes, path, 'membership record');
  const v = (version === 1 ? withoutUid(value) : value) as Partial<MembershipRecord> | null;
  const ok =
    typeof v === 'object' &&
    v !== null &&
    typeof v.clusterId === 'string' &&
    isClusterUid(v.clusterUid) &&
    Number.isSafeInteger(v.nodeId) &&
    isEpoch(v.epoch) &&
    Array.isArray(v.consumed) &&
    v.consumed.every((x) => typeof x === 'string');
  if (!ok) throw new DriverError('RAFT_STATE_FILE_CORRUPT', `${path}: membership record fields missing or of the wrong type`);
  const r = v as MembershipRecord;
  if (r.clusterId !== expected.clusterId || r.nodeId !== expected.nodeId) {
    throw new DriverError('RAFT_STATE_FILE_FOREIGN', `${path} is the record of cluster ${JSON.stringify(r.clusterId)} node ${r.nodeId}`);
  }
  return r;
}

function seal(magic: Buffer, value: unknown): Buffer {
  const body = packr.pack(value);
  const digest = createHash('sha256').update(body).digest();
  return Buffer.concat([magic, digest, body]);
}

/** The body under one of `magics` (newest format first; all of one length), and its format: 2 for
 * the first magic, 1 for the second. */
function open(magics: readonly [Buffer, Buffer], bytes: Uint8Array, path: string, what: string): { value: unknown; version: 1 | 2 } {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const magicBytes = magics[0].length;
  const head = magicBytes + digestBytes;
  const at = buf.length < head ? -1 : magics.findIndex((m) => buf.subarray(0, magicBytes).equals(m));
  if (at < 0) throw new DriverError('RAFT_STATE_FILE_CORRUPT', `${path}: not a raftmq ${what}`);
  const body = buf.subarray(head);
  if (!createHash('sha256').update(body).digest().equals(buf.subarray(magicBytes, head))) {
    throw new DriverError('RAFT_STATE_FILE_CORRUPT', `${path}: checksum mismatch`);
  }
  try {
    return { value: packr.unpack(body), version: at === 0 ? 2 : 1 };
  } catch (err) {
    throw new DriverError('RAFT_STATE_FILE_CORRUPT', `${path}: ${(err as Error).message}`);
  }
}

const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const isClusterUid = (v: unknown): v is string => typeof v === 'string' && v.length <= clusterUidCharsMax;
const isEpoch = (v: unknown): v is Epoch =>
  typeof v === 'object' && v !== null && isCount((v as Epoch).generation) && typeof (v as Epoch).id === 'string';
const isMember = (v: unknown): v is Member =>
  typeof v === 'object' && v !== null && isCount((v as Member).node) && typeof (v as Member).inc === 'string';
const isConfig = (v: unknown): v is Configuration => Array.isArray(v) && v.every(isMember);

/** A snapshot's chunks are raw bytes; its place in the log is checked like the log itself. */
function isSnapshot(v: unknown, term: number): v is Snapshot {
  if (typeof v !== 'object' || v === null) return false;
  const s = v as Partial<Snapshot>;
  if (!isCount(s.index) || s.index < 1 || !isCount(s.term) || s.term < 1 || s.term > term || !isCount(s.time)) return false;
  if (!(s.config === null || isConfig(s.config)) || !Array.isArray(s.chunks) || s.chunks.length === 0) return false;
  let bytes = 0;
  for (const c of s.chunks as unknown[]) {
    if (!(c instanceof Uint8Array)) return false;
    bytes += c.length;
  }
  return s.bytes === bytes;
}

/** The log is checked like an append from a peer: contiguous indexes from the snapshot's, terms and
 * times never decreasing (from the snapshot's) and no term above the file's, configuration entries
 * without data. */
function isLog(v: unknown, term: number, base: Snapshot | null): v is LogEntry[] {
  if (!Array.isArray(v)) return false;
  const first = (base?.index ?? 0) + 1;
  let lastTerm = base?.term ?? 0;
  let lastTime = base?.time ?? 0;
  for (let k = 0; k < v.length; k++) {
    const e = v[k] as Partial<LogEntry> | null;
    if (typeof e !== 'object' || e === null || e.index !== first + k || !isCount(e.term) || !isCount(e.time)) return false;
    if (e.term < lastTerm || e.term > term || e.time < lastTime) return false;
    if (e.data !== null && !(e.data instanceof Uint8Array)) return false;
    if (e.config !== undefined && (e.data !== null || !isConfig(e.config))) return false;
    lastTerm = e.term;
    lastTime = e.time;
  }
  return true;
}

function isStateFile(v: unknown): v is StateFile {
  if (typeof v !== 'object' || v === null) return false;
  const s = v as Partial<StateFile>;
  return (
    typeof s.clusterId === 'string' &&
    isClusterUid(s.clusterUid) &&
    isEpoch(s.epoch) &&
    isMember(s.member) &&
    isCount(s.term) &&
    isCount(s.vote) &&
    typeof s.voteInc === 'string' &&
    (s.configuration === null || isConfig(s.configuration)) &&
    (s.snapshot === null || isSnapshot(s.snapshot, s.term)) &&
    isLog(s.log, s.term, s.snapshot) &&
    isCount(s.commitIndex) &&
    s.commitIndex >= (s.snapshot?.index ?? 0) &&
    s.commitIndex <= (s.snapshot?.index ?? 0) + s.log.length &&
    isCount(s.clusterTime) &&
    typeof s.fileId === 'string'
  );
}

/** The identity a node resuming `file` runs with: the file's, else the record's (a format 1 file
 * adopted by a node that learned the identity in the same epoch); '' when neither knows one. */
export function resumedUid(file: StateFile, record: MembershipRecord | null): string {
  return file.clusterUid !== '' ? file.clusterUid : (record?.clusterUid ?? '');
}
