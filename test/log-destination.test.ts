// The log destination never holds the broker up: stdout into a pipe whose reader went away
// (EPIPE) or into one nobody reads. The node keeps serving MQTT, counts the lines it dropped, and
// a SIGTERM still ends the process. Real processes, real pipes, MQTT.js clients.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ClusterNodeProcess, LOOPBACK } from './cluster-processes.js';
import { connectClient, disconnect, publish, subscribe } from './helpers.js';

const WAIT_MS = 20_000;
const single = (extra: string[] = []): string[] => ['--host', LOOPBACK, '--port', '0', ...extra];

describe('log destination', { timeout: 120_000 }, () => {
  it('SIGTERM ends a node whose stdout reader has gone away (EPIPE), with exit code 0', async () => {
    const n = ClusterNodeProcess.spawn(1, single(['--log-level', 'debug']));
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

  it('a stdout nobody reads: the node serves MQTT, drops lines, counts and reports them', async () => {
    const n = ClusterNodeProcess.spawn(1, single(['--log-level', 'debug', '--stats-interval-ms', '1', '--log-queue-bytes', '16KiB']));
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
