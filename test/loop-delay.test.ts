// The event-loop delay report (docs/design.md "Performance principles"): the benchmark reads it from the
// broker's log, under --log-level warn, on SIGUSR2 and at stop.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { connect } from 'node:net';
import { describe, it } from 'node:test';
import { freePort } from '../jepsen-like-tests/net.js';
import { CLI } from './broker-process.js';
import { sleep } from './helpers.js';

const START_WAIT_MS = 10_000;
const POLL_MS = 50;

/** Under --log-level warn the 'listening' line is not written: wait until the port accepts. */
async function waitForPort(port: number): Promise<void> {
  const deadline = Date.now() + START_WAIT_MS;
  while (Date.now() < deadline) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    await sleep(POLL_MS);
  }
  throw new Error(`broker did not listen on ${port} within ${START_WAIT_MS} ms`);
}

function reports(stdout: string): Record<string, unknown>[] {
  return stdout
    .split('\n')
    .filter((l) => l.includes('"event-loop-delay"'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe('event-loop delay report', { timeout: 30_000 }, () => {
  it('logs the delay histogram on SIGUSR2 and at stop even under --log-level warn', async () => {
    const port = await freePort();
    const proc = spawn(process.execPath, [CLI, '--host', '127.0.0.1', '--port', String(port), '--log-level', 'warn'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let stdout = '';
    proc.stdout.setEncoding('utf8').on('data', (c: string) => {
      stdout += c;
    });
    const exited = once(proc, 'exit');
    try {
      await waitForPort(port);
      await sleep(POLL_MS); // the signal handler is installed right after the listener opens
      proc.kill('SIGUSR2');
      const deadline = Date.now() + START_WAIT_MS;
      while (reports(stdout).length === 0 && Date.now() < deadline) await sleep(POLL_MS);
      proc.kill('SIGTERM');
      const [code] = (await exited) as [number | null];
      assert.equal(code, 0);
      const [onSignal, atStop] = reports(stdout);
      assert.equal(onSignal?.on, 'SIGUSR2');
      assert.equal(atStop?.on, 'stop');
      assert.equal(onSignal?.resolutionMs, 10);
      for (const k of ['p50Ms', 'p99Ms', 'p999Ms', 'maxMs']) assert.equal(typeof onSignal?.[k], 'number', k);
      assert.ok((onSignal?.p50Ms as number) <= (onSignal?.maxMs as number), 'p50 ≤ max');
    } finally {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    }
  });
});
