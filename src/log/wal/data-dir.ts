// The data directory of --data-dir: its metadata file (format version and node identity) and its
// PID lock, checked before anything in it is read. Layout:
//
//   meta.json     {"format":"raftmq-data","version":1,"mode":"single","node":"<random id>"}
//                 a cluster node's: {..., "mode":"cluster", "clusterId": "...", "nodeId": 2,
//                 "incarnation": "<the member it holds the raft state of>"}
//   lock          the PID of the process that uses the directory
//   wal-*.seg, snap-*.snap   see wal.ts (single node)
//   raft-*.seg, raft-snap-*.snap   see src/cluster/raft-storage.ts (cluster node)
//
// A directory of another format version or mode, or a non-empty directory without meta.json, is
// refused before anything is written; so is a directory whose lock a live process holds. The lock is
// the cluster's PID lock idea (raft/driver/state-file.ts): a lock whose PID is gone (kill -9) is
// taken over.
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { takePidLock } from '../../../raft/driver/pid-lock.js';
import { FsStorage, type Storage } from './storage.js';
import { DataDirError } from './wal.js';

export const META_NAME = 'meta.json';
export const LOCK_NAME = 'lock';
export const DATA_FORMAT = 'raftmq-data';
export const DATA_VERSION = 1;

export interface DataDirMeta {
  format: string;
  version: number;
  mode: 'single' | 'cluster';
  node: string;
  /** Cluster mode: --cluster-id and --cluster-node of the node it belongs to. */
  clusterId?: string;
  nodeId?: number;
  /** Cluster mode: the incarnation of the member whose raft state it holds. */
  incarnation?: string;
}

/** A cluster node's metadata: every cluster field present. */
export type ClusterDataDirMeta = DataDirMeta & { mode: 'cluster'; clusterId: string; nodeId: number; incarnation: string };

/** Whose directory this must be: a single node's, or a cluster node's of this cluster and id. */
export type DataDirOwner = { mode: 'single' } | { mode: 'cluster'; clusterId: string; nodeId: number; incarnation: string };

export interface DataDir {
  readonly dir: string;
  readonly storage: Storage;
  readonly meta: DataDirMeta;
  /** Removes the lock if this process still holds it. */
  release(): void;
}

/** Creates the directory if need be, takes its lock and checks (or, in an empty directory, writes)
 * its metadata. Throws DataDirError naming the directory or file. */
export async function openDataDir(dir: string, owner: DataDirOwner = { mode: 'single' }): Promise<DataDir> {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw new DataDirError('DATA_DIR_FOREIGN', `--data-dir ${dir}: cannot create: ${(err as Error).message}`);
  }
  const release = acquireLock(join(dir, LOCK_NAME));
  try {
    const storage = new FsStorage(dir);
    const meta = await readOrCreateMeta(storage, dir, owner);
    return { dir, storage, meta, release };
  } catch (err) {
    release();
    throw err;
  }
}

async function readOrCreateMeta(storage: Storage, dir: string, owner: DataDirOwner): Promise<DataDirMeta> {
  const path = join(dir, META_NAME);
  const bytes = await storage.read(META_NAME);
  if (bytes === null) {
    // A temporary metadata file is what a crash during the first start leaves.
    const temp = `${META_NAME}.tmp`;
    const others = readdirSync(dir).filter((n) => n !== LOCK_NAME && n !== temp);
    if (others.length > 0) {
      throw new DataDirError('DATA_DIR_FOREIGN', `--data-dir ${dir} is not empty and has no ${META_NAME}: not a raftmq data directory`);
    }
    const meta: DataDirMeta = { format: DATA_FORMAT, version: DATA_VERSION, mode: owner.mode, node: randomBytes(8).toString('hex') };
    if (owner.mode === 'cluster') Object.assign(meta, { clusterId: owner.clusterId, nodeId: owner.nodeId, incarnation: owner.incarnation });
    await writeMeta(storage, meta);
    return meta;
  }
  const v = parseMeta(bytes, path);
  if (v.mode !== owner.mode) {
    const self = owner.mode === 'single' ? 'a single node' : 'a cluster node';
    throw new DataDirError('DATA_DIR_FOREIGN', `${path}: a data directory of mode ${JSON.stringify(v.mode)}, this node is ${self}`);
  }
  if (owner.mode === 'cluster' && (v.clusterId !== owner.clusterId || v.nodeId !== owner.nodeId || typeof v.incarnation !== 'string')) {
    throw new DataDirError(
      'DATA_DIR_FOREIGN',
      `${path}: the data directory of node ${String(v.nodeId)} of cluster ${JSON.stringify(v.clusterId)}, this is node ${owner.nodeId} of ${JSON.stringify(owner.clusterId)}`,
    );
  }
  return v as DataDirMeta;
}

/** meta.json's format and version checked; the mode and owner are the caller's to check. */
function parseMeta(bytes: Uint8Array, path: string): Partial<DataDirMeta> {
  let v: Partial<DataDirMeta> | null;
  try {
    v = JSON.parse(Buffer.from(bytes).toString('utf8')) as Partial<DataDirMeta> | null;
  } catch (err) {
    throw new DataDirError('DATA_DIR_CORRUPT', `${path}: not JSON (${(err as Error).message})`);
  }
  if (typeof v !== 'object' || v === null || v.format !== DATA_FORMAT || typeof v.node !== 'string') {
    throw new DataDirError('DATA_DIR_CORRUPT', `${path}: not the metadata of a raftmq data directory`);
  }
  if (v.version !== DATA_VERSION) {
    throw new DataDirError(
      'DATA_DIR_FOREIGN',
      `${path}: data directory format version ${String(v.version)}, this build uses ${DATA_VERSION}`,
    );
  }
  return v;
}

/** A cluster node's meta.json in `dir`, read without taking the lock or writing anything (tools
 * that read a stopped node's directory); null when there is none. Throws DataDirError naming it
 * when it is not a cluster node's metadata of this format. */
export async function readClusterMeta(dir: string): Promise<ClusterDataDirMeta | null> {
  const path = join(dir, META_NAME);
  const bytes = await new FsStorage(dir).read(META_NAME);
  if (bytes === null) return null;
  const v = parseMeta(bytes, path);
  if (v.mode !== 'cluster' || typeof v.clusterId !== 'string' || !Number.isSafeInteger(v.nodeId) || typeof v.incarnation !== 'string') {
    throw new DataDirError('DATA_DIR_FOREIGN', `${path}: not the data directory of a cluster node (mode ${JSON.stringify(v.mode)})`);
  }
  return v as ClusterDataDirMeta;
}

/** Replaces meta.json: temporary file, fsync, rename, fsync of the directory. */
export async function writeMeta(storage: Storage, meta: DataDirMeta): Promise<void> {
  const temp = `${META_NAME}.tmp`;
  if ((await storage.read(temp)) !== null) await storage.remove(temp);
  const f = await storage.create(temp);
  await f.append([Buffer.from(`${JSON.stringify(meta)}\n`)]);
  await f.sync();
  await f.close();
  await storage.rename(temp, META_NAME);
  await storage.syncDir();
}

/** Takes the lock; a lock whose PID is gone is taken over. Returns its release. */
export function acquireLock(path: string): () => void {
  return takePidLock(path, (why) => {
    if (why.t === 'io') return new DataDirError('DATA_DIR_LOCKED', `${path}: cannot take the lock: ${why.err.message}`);
    if (why.t === 'held')
      return new DataDirError('DATA_DIR_LOCKED', `${path} is held by live process ${why.pid}: one process per data directory`);
    return new DataDirError('DATA_DIR_LOCKED', `${path}: another process took the lock meanwhile`);
  });
}
