import { readFileSync, unlinkSync, writeFileSync } from 'node:fs';

// One process per file: a lock file holding the PID of its process, written exclusively. A lock
// whose process is gone (kill -9, a power cut) is taken over; a live holder refuses. Used beside a
// state file (raft/driver/state-file.ts) and in a single node's data directory (src/log/wal).

/** Why the lock was not taken: the file could not be written, a live process holds it, or another
 * process took it over between two attempts. */
export type LockRefusal =
  | { readonly t: 'io'; readonly err: Error }
  | { readonly t: 'held'; readonly pid: number }
  | { readonly t: 'raced' };

/** Takes the lock at `path`, or throws what `refuse` makes of the reason. Returns its release,
 * which removes the file only while it still holds this process's PID. */
export function takePidLock(path: string, refuse: (why: LockRefusal) => Error): () => void {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(path, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
      return () => releasePidLock(path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw refuse({ t: 'io', err: err as Error });
    }
    let holder = Number.NaN;
    try {
      holder = Number.parseInt(readFileSync(path, 'utf8'), 10);
    } catch {
      // gone meanwhile: try again
    }
    if (Number.isSafeInteger(holder) && holder > 0 && holder !== process.pid && pidAlive(holder)) throw refuse({ t: 'held', pid: holder });
    try {
      unlinkSync(path);
    } catch {
      // gone meanwhile
    }
  }
  throw refuse({ t: 'raced' });
}

function releasePidLock(path: string): void {
  try {
    if (readFileSync(path, 'utf8').trim() === String(process.pid)) unlinkSync(path);
  } catch {
    // already gone: nothing to release
  }
}

/** A process that exists and is not a zombie: a killed holder whose parent has not reaped it yet
 * (an orphan waits for init to) has exited and writes nothing more, so its lock is stale. */
function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  return !zombie(pid);
}

/** Linux: the state field of /proc/PID/stat, after the command name in parentheses, is Z. Elsewhere
 * (no /proc) a process that answers the signal counts as alive. */
function zombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z';
  } catch {
    return false;
  }
}
