// Start-up from a data directory: the newest snapshot that restores, then the log after it, then
// the repairs (a torn tail cut, leftovers removed) and the WAL opened for appending. Everything that
// refuses the start happens before the first write, so a refused directory is left as it was.
import type { Entry } from '../../broker/commands.js';
import { CommandDecodeError, decodeCommand } from '../command-codec.js';
import type { Recovered } from '../local-log.js';
import { DataDirError, readWal, Wal, type WalOptions } from './wal.js';

/** The state machine recovery restores into. */
export interface RecoveryHost {
  /** Replaces the state with a snapshot image; throws on one it cannot use, leaving the state as
   * it was. */
  restore(image: Uint8Array): void;
  /** Time of the last entry the state applied. */
  appliedTime(): number;
}

export interface RecoveryReport extends Recovered {
  /** The snapshot restored; null: the log was replayed from its start. */
  snapshot: string | null;
  /** Its index; 0 without one. */
  snapshotIndex: number;
}

export async function recover(host: RecoveryHost, opts: WalOptions): Promise<RecoveryReport> {
  const { logger } = opts;
  const contents = await readWal(opts.storage, logger);
  let chosen: { name: string; index: number } | null = null;
  const refused: string[] = [];
  for (const snap of contents.snapshots) {
    try {
      host.restore(snap.image);
      chosen = snap;
      break;
    } catch (err) {
      logger.warn({ file: snap.name, err: (err as Error).message }, 'snapshot does not restore; an older one or the log is tried');
      refused.push(`${snap.name} (${(err as Error).message})`);
    }
  }
  if (chosen === null && !contents.fromStart) {
    throw new DataDirError('DATA_DIR_CORRUPT', `snapshot ${refused.join(', ')} does not restore and the log does not go back to index 1`);
  }
  const base = chosen?.index ?? 0;
  const replay: Entry[] = [];
  for (const e of contents.entries) {
    if (e.index <= base) continue;
    try {
      replay.push({ index: e.index, time: e.time, cmd: decodeCommand(e.data) });
    } catch (err) {
      if (!(err instanceof CommandDecodeError)) throw err;
      throw new DataDirError('DATA_DIR_CORRUPT', `${contents.segmentOf(e.index)}: entry ${e.index}: ${err.message}`);
    }
  }
  const last = replay.at(-1);
  const wal = await Wal.open(contents, opts);
  const lastIndex = last?.index ?? base;
  const lastTime = Math.max(host.appliedTime(), last?.time ?? 0);
  logger.info({ snapshot: chosen?.name ?? null, snapshotIndex: base, replayed: replay.length, lastIndex }, 'data directory recovered');
  return { wal, replay, lastIndex, lastTime, snapshot: chosen?.name ?? null, snapshotIndex: base };
}
