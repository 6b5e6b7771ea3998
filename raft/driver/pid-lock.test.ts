import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { type LockRefusal, takePidLock } from './pid-lock.js';

const dir = mkdtempSync(join(tmpdir(), 'raftmq-pid-lock-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const refuse = (why: LockRefusal): Error => new Error(why.t === 'held' ? `held by ${why.pid}` : why.t);

/** Waits (bounded) until /proc says `pid` is in state `state`. */
async function procState(pid: number, state: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === state) return;
    } catch {
      // not there yet
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`process ${pid} never reached state ${state}`);
}

describe('PID lock', () => {
  it('refuses while its holder runs, and is taken over once the holder is a zombie nobody reaped', async () => {
    // A child that has exited but whose parent never waits for it is a zombie: it answers
    // kill(pid, 0), yet it holds nothing. A node killed with -9 whose parent (a script that
    // exited, so init) has not reaped it yet looks like that, and must not keep its lock.
    const parent = spawn('bash', ['-c', 'sleep 30 & echo $!; read; exec sleep 30'], { stdio: ['pipe', 'pipe', 'ignore'] });
    try {
      const pid = await new Promise<number>((resolve) =>
        parent.stdout.once('data', (b: Buffer) => resolve(Number.parseInt(b.toString(), 10))),
      );
      const path = join(dir, 'node.lock');
      writeFileSync(path, `${pid}\n`);
      await procState(pid, 'S');
      assert.throws(() => takePidLock(path, refuse), new RegExp(`held by ${pid}`));
      parent.stdin.write('\n'); // bash execs into a sleep that never reaps the first child
      await new Promise((r) => setTimeout(r, 100));
      process.kill(pid, 'SIGKILL');
      await procState(pid, 'Z');
      const release = takePidLock(path, refuse);
      assert.equal(readFileSync(path, 'utf8').trim(), String(process.pid));
      release();
    } finally {
      parent.kill('SIGKILL');
    }
  });
});
