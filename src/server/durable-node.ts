// A single node with --data-dir: the directory is locked and checked, the broker's state restored
// from its newest snapshot and log, and the node served on a LocalLog that commits an entry only
// once it is on disk (src/log/local-log.ts, src/log/wal/).
import type { Logger } from 'pino';
import { LocalLog } from '../log/local-log.js';
import { openDataDir } from '../log/wal/data-dir.js';
import { recover } from '../log/wal/recover.js';
import type { Wal } from '../log/wal/wal.js';
import { BrokerNode, type NodeOptions, settingsFrom } from './broker-node.js';
import { DIGEST_SLICE_MS } from './digest-runner.js';
import { DiskWatch, type FreeSpaceProbe, statfsProbe } from './disk-space.js';

export interface DurableSettings {
  dataDir: string;
  snapshotLogBytes: number;
  /** --data-dir-min-free-bytes; 0: the default bound (src/server/disk-space.ts). */
  minFreeBytes: number;
  /** Replaces statfs (tests only: TEST_FREE_BYTES_ENV). */
  probe?: FreeSpaceProbe;
}

/** The data directory as /health and /metrics show it (docs/operations.md "Disk trouble"). */
export interface DataDirStatus {
  path: string;
  /** Bytes free to this process on its file system, at the last reading; null if unreadable. */
  freeBytes: number | null;
  minFreeBytes: number;
  /** New QoS 1/2 messages and new persistent sessions are refused. */
  lowSpace: boolean;
  lastSnapshot: { index: number; bytes: number; writtenAt: string | null };
  /** Bytes of the log's segments. */
  walBytes: number;
  /** fdatasync calls of group commits since start, and the entries they made durable. */
  fsyncs: number;
  entriesWritten: number;
}

/** Segments of a quarter of the snapshot trigger, so a snapshot frees about three of every four
 * segments it covers; at least 64 KiB, at most 64 MiB (each is read whole at start-up). */
export function segmentBytesFor(snapshotLogBytes: number): number {
  return Math.min(64 * 1024 * 1024, Math.max(64 * 1024, Math.floor(snapshotLogBytes / 4)));
}

export interface RunningDurable {
  node: BrokerNode;
  /** What recovery did, for the start line: the snapshot restored (0: none), the log entries
   * replayed after it, and ms from opening the directory to serving. */
  recovered: { snapshotIndex: number; replayed: number; ms: number };
  status(): DataDirStatus;
  stop(): Promise<void>;
}

/** Rejects with DataDirError (nothing changed on disk) when the directory is refused. `fatal` is
 * called when a write or fsync fails later: the node must exit. */
export async function startDurableNode(
  ds: DurableSettings,
  opts: NodeOptions,
  logger: Logger,
  created: (node: BrokerNode) => void,
  fatal: (err: Error) => void,
): Promise<RunningDurable> {
  const dir = await openDataDir(ds.dataDir);
  let wal: Wal | null = null;
  const watch = new DiskWatch({
    dir: ds.dataDir,
    probe: ds.probe ?? statfsProbe(ds.dataDir),
    configuredMinFreeBytes: ds.minFreeBytes,
    lastSnapshotBytes: () => wal?.lastSnapshot.bytes ?? 0,
    logger,
  });
  try {
    const log = new LocalLog({
      node: 1,
      settings: settingsFrom(opts),
      durable: {
        onFatal: (err) => fatal(new Error(`--data-dir ${ds.dataDir}: ${err.message}`)),
      },
    });
    const node = new BrokerNode({ ...opts, storageGate: watch }, log);
    created(node);
    const started = performance.now();
    const recovered = await recover(
      { restore: (image) => node.restore([image]), appliedTime: () => node.appliedTime },
      {
        storage: dir.storage,
        logger,
        segmentBytes: segmentBytesFor(ds.snapshotLogBytes),
        snapshotLogBytes: ds.snapshotLogBytes,
        snapshotSliceMs: DIGEST_SLICE_MS,
      },
    );
    logger.info({ dataDir: ds.dataDir, node: dir.meta.node, ms: Math.round(performance.now() - started) }, 'data directory opened');
    wal = recovered.wal;
    const w = wal;
    log.recovered(recovered);
    log.attachSnapshots(() => node.snapshot());
    await watch.start();
    // start() resolves once this process's serve-start is applied, after every replayed entry.
    await node.start();
    const ms = Math.round(performance.now() - started);
    return {
      node,
      recovered: { snapshotIndex: recovered.snapshotIndex, replayed: recovered.replay.length, ms },
      status: () => ({
        path: ds.dataDir,
        freeBytes: watch.freeBytes,
        minFreeBytes: watch.minFreeBytes,
        lowSpace: watch.low,
        lastSnapshot: {
          index: w.lastSnapshot.index,
          bytes: w.lastSnapshot.bytes,
          writtenAt: w.lastSnapshot.writtenAt === null ? null : new Date(w.lastSnapshot.writtenAt).toISOString(),
        },
        walBytes: w.logBytes,
        fsyncs: w.fsyncs,
        entriesWritten: w.entriesWritten,
      }),
      async stop() {
        watch.stop();
        await node.stop();
        dir.release();
      },
    };
  } catch (err) {
    watch.stop();
    dir.release();
    throw err;
  }
}
