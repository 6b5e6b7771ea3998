// A single node with --data-dir: the directory is locked and checked, the broker's state restored
// from its newest snapshot and log, and the node served on a LocalLog that commits an entry only
// once it is on disk (src/log/local-log.ts, src/log/wal/).
import type { Logger } from 'pino';
import { LocalLog } from '../log/local-log.js';
import { openDataDir } from '../log/wal/data-dir.js';
import { recover } from '../log/wal/recover.js';
import { BrokerNode, type NodeOptions, settingsFrom } from './broker-node.js';
import { DIGEST_SLICE_MS } from './digest-runner.js';

export interface DurableSettings {
  dataDir: string;
  snapshotLogBytes: number;
}

/** Segments of a quarter of the snapshot trigger, so a snapshot frees about three of every four
 * segments it covers; at least 64 KiB, at most 64 MiB (each is read whole at start-up). */
export function segmentBytesFor(snapshotLogBytes: number): number {
  return Math.min(64 * 1024 * 1024, Math.max(64 * 1024, Math.floor(snapshotLogBytes / 4)));
}

export interface RunningDurable {
  node: BrokerNode;
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
  try {
    const log = new LocalLog({
      node: 1,
      settings: settingsFrom(opts),
      durable: {
        onFatal: (err) => fatal(new Error(`--data-dir ${ds.dataDir}: ${err.message}`)),
      },
    });
    const node = new BrokerNode(opts, log);
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
    log.recovered(recovered);
    log.attachSnapshots(() => node.snapshot());
    await node.start();
    return {
      node,
      async stop() {
        await node.stop();
        dir.release();
      },
    };
  } catch (err) {
    dir.release();
    throw err;
  }
}
