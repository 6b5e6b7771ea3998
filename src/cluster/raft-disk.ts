// Disk trouble on a cluster node with --data-dir (docs/operations.md "A cluster node's data
// directory"): the single node's free-space watch (src/server/disk-space.ts) over the directory
// that holds raft's log, and the directory's status as /health and /metrics show it. The bound
// reserves twice the newest raft snapshot, since freeing space needs a snapshot and a checkpoint
// that rewrites the entries after it. The watch gates what this node admits; a leader does not
// learn of a follower's low space (that would need the followers' free space in raft messages).
import type { Logger } from 'pino';
import { DiskWatch, type FreeSpaceProbe, statfsProbe } from '../server/disk-space.js';
import type { DataDirStatus } from '../server/durable-node.js';
import type { RaftDirStorage } from './raft-storage.js';

export interface RaftDiskOptions {
  dir: string;
  storage: RaftDirStorage;
  /** --data-dir-min-free-bytes; 0: the default bound. */
  minFreeBytes: number;
  /** Replaces statfs (tests only: TEST_FREE_BYTES_ENV). */
  probe?: FreeSpaceProbe | undefined;
  logger: Logger;
}

/** The watch of a cluster node's data directory, not yet started. */
export function raftDiskWatch(o: RaftDiskOptions): DiskWatch {
  return new DiskWatch({
    dir: o.dir,
    probe: o.probe ?? statfsProbe(o.dir),
    configuredMinFreeBytes: o.minFreeBytes,
    lastSnapshotBytes: () => o.storage.lastSnapshot.bytes,
    logger: o.logger,
  });
}

/** The `dataDir` block of /health and the raftmq_data_dir_* series: `walBytes` is the raft
 * segments' bytes, `fsyncs` the fdatasync calls that closed a batch, `entriesWritten` the raft log
 * entries those batches made durable. */
export function raftDataDirStatus(dir: string, st: RaftDirStorage, watch: DiskWatch): DataDirStatus {
  const snap = st.lastSnapshot;
  return {
    path: dir,
    freeBytes: watch.freeBytes,
    minFreeBytes: watch.minFreeBytes,
    lowSpace: watch.low,
    lastSnapshot: {
      index: snap.index,
      bytes: snap.bytes,
      writtenAt: snap.writtenAt === null ? null : new Date(snap.writtenAt).toISOString(),
    },
    walBytes: st.logBytes,
    fsyncs: st.fsyncs,
    entriesWritten: st.entriesWritten,
  };
}
