// The log destination never holds the broker up: stdout into a pipe whose reader went away
// (EPIPE) or into one nobody reads. The node keeps serving MQTT, counts the lines it dropped, and
// a SIGTERM still ends the process. Real processes, real pipes, MQTT.js clients.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { CLI, requireCommand } from './broker-process.js';
import { connectClient, disconnect, publish, publishRoundTrip, subscribe } from './helpers.js';
import { ClusterNode } from './support/cluster.js';
import { freePort, LOOPBACK } from './support/net.js';
import { sleep } from './support/wait.js';

const WAIT_MS = 20_000;
const single = (extra: string[] = []): string[] => ['--host', LOOPBACK, '--port', '0', ...extra];

describe('log destination', { timeout: 120_000 }, () => {
  it('SIGTERM ends a node whose stdout reader has gone away (EPIPE), with exit code 0', async () => {
    const n = ClusterNode.spawn(1, single(['--log-level', 'debug']));
    try {
      await n.waitForLog((l) => l.msg === 'listening', WAIT_MS);
      // The read end closes: every later write of the node to stdout fails with EPIPE.
      n.proc.stdout?.destroy();
      const c = await connectClient(n.mqttPort);
      await disconnect(c);
      n.signal('SIGTERM');
      const code = await n.exited(WAIT_MS);
      assert.equal(code, 0, `a clean exit; stderr: ${n.stderr}`);
      assert.equal(n.proc.signalCode, null, 'not killed');
      assert.doesNotMatch(n.stderr, /EPIPE|Uncaught/, 'no crash on the broken pipe');
    } finally {
      await n.stop();
    }
  });

  it('stdout on a full disk (/dev/full, ENOSPC): the node serves, and SIGTERM ends it with 0', async () => {
    const full = openSync('/dev/full', 'w');
    const port = await freePort();
    const proc = spawn(process.execPath, [CLI, '--host', LOOPBACK, '--port', String(port), '--log-level', 'debug'], {
      stdio: ['ignore', full, 'pipe'],
    });
    closeSync(full);
    let stderr = '';
    proc.stderr?.setEncoding('utf8').on('data', (c: string) => {
      stderr += c;
    });
    const exited = once(proc, 'exit');
    try {
      await publishRoundTrip(port, 'probe', WAIT_MS);
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), WAIT_MS);
      const [code, signal] = (await exited) as [number | null, string | null];
      clearTimeout(timer);
      assert.equal(signal, null, 'not killed');
      assert.equal(code, 0, `a clean exit; stderr: ${stderr}`);
      assert.doesNotMatch(stderr, /ENOSPC|Uncaught/, 'no crash on the full disk');
    } finally {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    }
  });

  it('a stdout nobody reads: the node serves MQTT, drops lines, counts and reports them', async () => {
    const n = ClusterNode.spawn(1, single(['--log-level', 'debug', '--stats-interval-ms', '1', '--log-queue-bytes', '16KiB']));
    try {
      await n.waitForLog((l) => l.msg === 'listening', WAIT_MS);
      const port = n.mqttPort;
      // Never drained from here on: the pipe fills, then the node's bounded queue.
      n.proc.stdout?.pause();
      for (let i = 0; i < 30; i++) {
        const c = await connectClient(port, { clientId: `round-trip-${i}` });
        await subscribe(c, `t/${i}`, 1);
        const got = c.waitFor((m) => m.topic === `t/${i}`, `the publish of round ${i}`);
        await publish(c, `t/${i}`, `m${i}`, { qos: 1 });
        assert.equal((await got).payload, `m${i}`);
        await disconnect(c);
        await new Promise((r) => setTimeout(r, 100));
      }
      n.proc.stdout?.resume();
      const report = await n.waitForLog((l) => l.msg === 'log lines dropped: the log destination was full', WAIT_MS);
      assert.ok((report.dropped as number) > 0, 'the lines dropped are counted');
      assert.equal(report.level, 40, 'at warn');
      const stats = await n.waitForLog((l) => l.msg === 'stats' && (l.logLinesDropped as number) > 0, WAIT_MS);
      assert.ok((stats.logLinesDropped as number) >= (report.dropped as number), 'the stats line carries the total');
      n.signal('SIGTERM');
      assert.equal(await n.exited(WAIT_MS), 0);
      const stopped = n.logs.find((l) => l.msg === 'stopped');
      assert.ok(stopped !== undefined && (stopped.logLinesDropped as number) > 0, 'the stop line carries the total');
    } finally {
      await n.stop();
    }
  });
});

describe('log destination: a terminal', { timeout: 120_000 }, () => {
  it('stopped with Ctrl-S: the node serves, drops lines, reports them once resumed, and stops', async () => {
    requireCommand('script', 'bsdutils');
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-tty-'));
    const pidFile = join(dir, 'pid');
    // script(1) gives the node a terminal of its own; ^S typed into it stops its output (IXON).
    const node = [
      process.execPath,
      CLI,
      '--host',
      LOOPBACK,
      '--port',
      String(port),
      '--stats-interval-ms',
      '1',
      '--log-queue-bytes',
      '16KiB',
    ];
    const sh = `${node.map((a) => `'${a}'`).join(' ')} & echo $! > '${pidFile}'; wait $!`;
    const term = spawn('script', ['-qec', sh, '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    term.stdout?.setEncoding('utf8').on('data', (c: string) => {
      out += c;
    });
    const exited = once(term, 'exit');
    let pid = 0;
    try {
      await publishRoundTrip(port, 'probe', WAIT_MS);
      pid = Number(readFileSync(pidFile, 'utf8'));
      assert.ok(pid > 0);
      term.stdin?.write('\x13');
      for (let i = 0; i < 20; i++) {
        await publishRoundTrip(port, 'probe', WAIT_MS);
        await sleep(100);
      }
      term.stdin?.write('\x11');
      const deadline = Date.now() + WAIT_MS;
      const report = (): Record<string, unknown> | undefined =>
        out
          .split(/\r?\n/)
          .filter((l) => l.includes('log lines dropped'))
          .map((l) => JSON.parse(l) as Record<string, unknown>)[0];
      while (report() === undefined && Date.now() < deadline) await sleep(50);
      assert.ok(((report()?.dropped as number | undefined) ?? 0) > 0, 'lines were dropped while the terminal was stopped');
      process.kill(pid, 'SIGTERM');
      const timer = setTimeout(() => term.kill('SIGKILL'), WAIT_MS);
      const [code] = (await exited) as [number | null];
      clearTimeout(timer);
      assert.equal(code, 0, 'the node exited 0 (script -e passes its status on)');
    } finally {
      if (term.exitCode === null && term.signalCode === null) {
        if (pid > 0) process.kill(pid, 'SIGKILL');
        term.kill('SIGKILL');
      }
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
