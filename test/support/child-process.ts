// Ending a child process this test started, by its PID: the kits of the servers the tests run
// beside raftmq (mosquitto.ts, nats-server.ts) stop and kill their process this way.
import type { ChildProcess } from 'node:child_process';

/** Sends `signal` to the child and resolves once it has exited (at once when it already had);
 * with `killAfterMs`, a SIGKILL follows if it is still running by then. */
export async function signalAndWait(child: ChildProcess, signal: NodeJS.Signals, killAfterMs?: number): Promise<void> {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  process.kill(child.pid, signal);
  const timer =
    killAfterMs === undefined
      ? undefined
      : setTimeout(() => {
          if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) process.kill(child.pid, 'SIGKILL');
        }, killAfterMs);
  await exited;
  clearTimeout(timer);
}
