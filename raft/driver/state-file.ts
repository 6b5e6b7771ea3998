// The state file and the membership record on disk (docs/design.md "State file"): durable writes,
// consuming a file at start, the force-start file, and the PID lock beside it. The bytes of both are
// state-format.ts, re-exported here for the driver and the tools that read the files.
import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { type Epoch, sameEpoch } from '../core/membership.js';
import { DriverError } from './errors.js';
import { takePidLock } from './pid-lock.js';
import {
  consumedIdsMax,
  decodeRecord,
  decodeStateFile,
  type Expected,
  encodeRecord,
  encodeStateFile,
  type MembershipRecord,
  resumedUid,
  type StateFile,
} from './state-format.js';

export * from './state-format.js';

export const newFileId = (): string => randomBytes(16).toString('hex');
/** 128 random bits: made once per cluster, at bootstrap or at a force-start that knows none. */
export const newClusterUid = (): string => randomBytes(16).toString('hex');
export const recordPathOf = (stateFile: string): string => `${stateFile}.member`;
export const lockPathOf = (stateFile: string): string => `${stateFile}.lock`;
export const prevPathOf = (stateFile: string): string => `${stateFile}.prev`;

// ---- files ----

/** Write-temp, fsync, rename, fsync of the directory: after a crash the path holds the old bytes
 * or the new, never a mix. */
export function writeDurably(path: string, bytes: Uint8Array): void {
  const temp = `${path}.tmp-${process.pid}`;
  const fd = openSync(temp, 'w', 0o600);
  try {
    writeFileSync(fd, bytes);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(temp, path);
  syncDir(dirname(path));
}

export function syncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Written only after raft traffic has stopped (docs/design.md "State file"). */
export function writeStateFile(path: string, s: StateFile): void {
  writeDurably(path, encodeStateFile(s));
}

/** The record, or null when there is none (a fresh node). */
export function readRecord(stateFile: string, expected: Expected): MembershipRecord | null {
  const path = recordPathOf(stateFile);
  const bytes = readIfExists(path);
  return bytes === null ? null : decodeRecord(bytes, path, expected);
}

export function writeRecord(stateFile: string, r: MembershipRecord): void {
  writeDurably(recordPathOf(stateFile), encodeRecord(r));
}

/** At start, before any raft message: a valid, unconsumed file is consumed (the record notes its
 * id, the file becomes FILE.prev, the directory is synced) and returned; null when there is no
 * file (the start is fresh or amnesiac). A file whose id the record lists, or whose epoch is older
 * than the record's, is a consumed or restored copy and refused: resuming it would roll back a
 * member's term, vote and log. */
export function consumeStateFile(path: string, expected: Expected): StateFile | null {
  const file = peekStateFile(path, expected);
  if (file === null) return null;
  const record = readRecord(path, expected);
  const consumed = [...(record?.consumed ?? []), file.fileId].slice(-consumedIdsMax);
  const clusterUid = resumedUid(file, record);
  writeRecord(path, { clusterId: expected.clusterId, clusterUid, nodeId: expected.nodeId, epoch: file.epoch, consumed });
  renameSync(path, prevPathOf(path));
  syncDir(dirname(path));
  return file;
}

/** The checks of consumeStateFile without its writes: the file a start would resume, or null. */
export function peekStateFile(path: string, expected: Expected): StateFile | null {
  const bytes = readIfExists(path);
  if (bytes === null) return null;
  const file = decodeStateFile(bytes, path, expected);
  const record = readRecord(path, expected);
  if (record !== null) {
    if (record.consumed.includes(file.fileId)) {
      throw new DriverError('RAFT_STATE_FILE_CONSUMED', `${path} (file id ${file.fileId}) was consumed before; it is a restored copy`);
    }
    if (file.epoch.generation < record.epoch.generation) {
      throw new DriverError(
        'RAFT_STATE_FILE_CONSUMED',
        `${path} is of epoch ${file.epoch.generation}, older than ${record.epoch.generation}`,
      );
    }
    refuseOtherCluster(file, record, path);
  }
  return file;
}

/** A file this node wrote is of the epoch its record holds: the record is written before a node
 * takes part in an epoch, and again before each state file. So a file of another epoch that is not
 * older (older ones are restored copies, refused above), or of another cluster identity, was
 * written by a node of another cluster, whatever --cluster-id they share: resuming it would take
 * this node out of its own cluster. A format 1 file (no identity) is judged by its epoch alone, so
 * that the file a node wrote before identities existed is adopted once. */
function refuseOtherCluster(file: StateFile, record: MembershipRecord, path: string): void {
  const recordUid = record.clusterUid;
  if (recordUid !== '' && file.clusterUid !== '' && file.clusterUid !== recordUid) {
    throw new DriverError(
      'RAFT_STATE_FILE_FOREIGN',
      `${path} is of cluster identity ${file.clusterUid}; this node's record ${recordPathOf(path)} is of ${recordUid}`,
    );
  }
  if (record.epoch.generation !== 0 && !sameEpoch(file.epoch, record.epoch)) {
    const of = (e: Epoch): string => `${e.generation}/${e.id}`;
    throw new DriverError(
      'RAFT_STATE_FILE_FOREIGN',
      `${path} is of epoch ${of(file.epoch)}, which this node never joined (its record ${recordPathOf(path)} is of epoch ${of(record.epoch)}): a file of another cluster`,
    );
  }
}

/** docs/design.md "Force-start": the file to force from, FILE or else the consumed FILE.prev (a
 * force-start is not a resume, so a consumed file may serve, and so may one older than the epoch
 * the record shows: the forced epoch is made newer than both). */
export function readForceStartFile(path: string, expected: Expected): { file: StateFile; path: string } {
  const record = readRecord(path, expected);
  for (const p of [path, prevPathOf(path)]) {
    const bytes = readIfExists(p);
    if (bytes === null) continue;
    const file = decodeStateFile(bytes, p, expected);
    // Forcing may use a file older than the record, but not one of another cluster identity.
    const recordUid = record?.clusterUid ?? '';
    if (recordUid !== '' && file.clusterUid !== '' && file.clusterUid !== recordUid) {
      throw new DriverError(
        'RAFT_STATE_FILE_FOREIGN',
        `${p} is of cluster identity ${file.clusterUid}; this node's record is of ${recordUid}`,
      );
    }
    return { file, path: p };
  }
  throw new DriverError('RAFT_STATE_FILE_MISSING', `neither ${path} nor ${prevPathOf(path)} exists to force-start from`);
}

function readIfExists(path: string): Buffer | null {
  try {
    return readFileSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

// ---- PID lock (docs/design.md "Links": covers a second process of one node id on one host) ----

/** Takes the lock beside the state file; a lock whose PID is gone is taken over. */
export function acquirePidLock(stateFile: string): () => void {
  const path = lockPathOf(stateFile);
  return takePidLock(path, (why) => {
    if (why.t === 'io') return why.err;
    if (why.t === 'held') return new DriverError('RAFT_STATE_FILE_LOCKED', `${path} is held by live process ${why.pid}`);
    return new DriverError('RAFT_STATE_FILE_LOCKED', `${path}: another process took the lock meanwhile`);
  });
}
