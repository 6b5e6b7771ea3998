// What an operator sees on stdout: --log-format pretty prints pino-pretty's lines, not JSON;
// --log-level warn prints nothing below warn while a node starts and serves. Real processes.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { CLI } from './broker-process.js';
import { publishRoundTrip } from './helpers.js';
import { ClusterNode } from './support/cluster.js';
import { freePort, LOOPBACK } from './support/net.js';

const WAIT_MS = 15_000;

function isJson(line: string): boolean {
  try {
    JSON.parse(line);
    return true;
  } catch {
    return false;
  }
}

describe('log format and level', { timeout: 60_000 }, () => {
  it('--log-format pretty prints lines for a terminal, not JSON', async () => {
    const port = await freePort();
    const n = ClusterNode.spawn(1, ['--host', LOOPBACK, '--port', String(port), '--log-format', 'pretty']);
    try {
      const line = await n.waitForLog((l) => / INFO.*: listening$/.test(l.msg), WAIT_MS);
      assert.equal(isJson(line.msg), false);
      assert.match(line.msg, /^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [^\]]+\] INFO/, 'a time and the level name');
      await publishRoundTrip(port, 'log-format-probe', WAIT_MS);
      n.signal('SIGTERM');
      assert.equal(await n.exited(WAIT_MS), 0);
      const text = n.logs.map((l) => l.msg);
      assert.ok(
        text.some((t) => / INFO.*: stopped$/.test(t)),
        `the stop in the same form: ${text.join(' | ')}`,
      );
      assert.equal(text.filter((t) => t !== '' && isJson(t)).length, 0, 'no JSON line');
    } finally {
      await n.stop();
    }
  });

  it('--log-level warn prints no info line while the node starts and serves', async () => {
    const port = await freePort();
    const n = ClusterNode.spawn(1, ['--host', LOOPBACK, '--port', String(port), '--log-level', 'warn']);
    try {
      await publishRoundTrip(port, 'log-format-probe', WAIT_MS);
      assert.equal(n.logs.length, 0, `nothing at all, a clean start has nothing to warn about: ${JSON.stringify(n.logs)}`);
      n.signal('SIGTERM');
      assert.equal(await n.exited(WAIT_MS), 0);
      // The one exception, documented: the event-loop-delay report at stop.
      const below = n.logs.filter((l) => l.level < 40 && l.msg !== 'event-loop-delay');
      assert.deepEqual(below, []);
    } finally {
      await n.stop();
    }
  });

  it('an unknown --log-format is refused naming the flag', () => {
    const r = spawnSync(process.execPath, [CLI, '--log-format', 'xml'], { encoding: 'utf8', timeout: WAIT_MS });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /--log-format: expected one of json, pretty/);
  });
});
