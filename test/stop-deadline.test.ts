// A stop always ends within --shutdown-timeout-ms and a cluster node always leaves its state file
// (docs/design.md "State file"): with its stdout reader gone (EPIPE), and when the stop is held up
// past the timeout. What holds it up here is real: an MQTT client that never closes its side of
// the connection keeps a listener's close waiting for its grace period, longer than the timeout.
// Then what is left of the stop is given up, the state file is written and the process exits 1.
// Real processes; waits are bounded, never asserted.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { Cluster, ClusterNode } from './support/cluster.js';
import { LOOPBACK } from './support/net.js';

const WAIT_MS = 30_000;
const TIMEOUT_MS = 300;

/** Until the leader reports every node caught up (a handover has a target). */
async function redundant(leader: ClusterNode): Promise<void> {
  const deadline = Date.now() + WAIT_MS;
  while (!(await leader.health()).body.redundant) {
    if (Date.now() > deadline) throw new Error('the cluster never became redundant');
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** A client that connects (resolves at its CONNACK) and never closes its side: the broker's FIN
 * is not answered. */
async function stubbornClient(port: number): Promise<Socket> {
  const s = connect({ host: LOOPBACK, port, allowHalfOpen: true });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no CONNACK')), WAIT_MS);
    s.once('error', reject);
    s.once('connect', () => {
      // CONNECT, MQTT 3.1.1, clean session, keep-alive 60 s, empty client id.
      s.write(Buffer.from([0x10, 12, 0, 4, 0x4d, 0x51, 0x54, 0x54, 4, 2, 0, 60, 0, 0]));
    });
    s.once('data', (d: Buffer) => {
      clearTimeout(timer);
      if (d[0] === 0x20) resolve();
      else reject(new Error(`not a CONNACK: ${d.toString('hex')}`));
    });
  });
  s.on('error', () => {});
  s.on('data', () => {});
  return s;
}

function order(n: ClusterNode, msgs: string[]): number[] {
  const all = n.logs.map((l) => l.msg);
  return msgs.map((m) => all.indexOf(m));
}

function inOrder(at: number[]): boolean {
  return at.every((i, k) => i >= 0 && (k === 0 || i > (at[k - 1] as number)));
}

describe('stop deadline', { timeout: 180_000 }, () => {
  it('a single node whose stop is held up past the timeout exits 1 and says so', async () => {
    const n = ClusterNode.spawn(1, ['--host', LOOPBACK, '--port', '0', '--shutdown-timeout-ms', String(TIMEOUT_MS)]);
    let s: Socket | undefined;
    try {
      await n.waitForLog((l) => l.msg === 'listening', WAIT_MS);
      s = await stubbornClient(n.mqttPort);
      n.signal('SIGTERM');
      const code = await n.exited(WAIT_MS);
      const msgs = n.logs.map((l) => l.msg);
      assert.equal(code, 1, `a stop that timed out; ${msgs.join(' | ')}`);
      const at = order(n, ['stopping', 'stop timed out', 'stopped']);
      assert.ok(inOrder(at), `stop order ${at.join(', ')}: ${msgs.join(' | ')}`);
      assert.equal(n.logs[at[1]!]!.level, 40, 'at warn');
      assert.equal(n.logs[at[1]!]!.timeoutMs, TIMEOUT_MS);
      assert.equal(n.logs[at[2]!]!.level, 40, 'the stop that timed out ends at warn');
    } finally {
      s?.destroy();
      await n.stop();
    }
  });

  it('SIGTERM of a leader whose stdout reader is gone: exits 0 and writes its state file', async () => {
    const cluster = await Cluster.start({ extra: () => ['--shutdown-timeout-ms', '5000'] });
    try {
      const leader = await cluster.serving(WAIT_MS);
      await redundant(leader);
      // Consumed at start (renamed to FILE.prev): the file exists again only if the stop wrote it.
      assert.equal(existsSync(cluster.stateFile(leader.id)), false);
      leader.proc.stdout?.destroy();
      leader.signal('SIGTERM');
      const code = await leader.exited(WAIT_MS);
      assert.equal(code, 0, `a clean exit; stderr: ${leader.stderr}`);
      assert.equal(leader.proc.signalCode, null, 'not killed');
      assert.ok(existsSync(cluster.stateFile(leader.id)), 'the state file is on disk');
      await cluster.serving(WAIT_MS, cluster.alive);
    } finally {
      await cluster.dispose();
    }
  });

  it('a leader whose stop is held up past the timeout writes its state file, then exits 1', async () => {
    const cluster = await Cluster.start({ extra: () => ['--shutdown-timeout-ms', String(TIMEOUT_MS)] });
    let s: Socket | undefined;
    try {
      const leader = await cluster.serving(WAIT_MS);
      await redundant(leader);
      s = await stubbornClient(leader.mqttPort);
      leader.signal('SIGTERM');
      const code = await leader.exited(WAIT_MS);
      const msgs = leader.logs.map((l) => l.msg);
      assert.equal(code, 1, `a stop that timed out; stderr: ${leader.stderr}; ${msgs.join(' | ')}`);
      const at = order(leader, ['stopping', 'state file written', 'stopped']);
      assert.ok(inOrder(at), `stop order ${at.join(', ')}: ${msgs.join(' | ')}`);
      assert.ok(msgs.includes('stop timed out'));
      assert.equal(leader.logs[at[1]!]!.file, cluster.stateFile(leader.id));
      assert.ok(existsSync(cluster.stateFile(leader.id)), 'the state file is on disk');
    } finally {
      s?.destroy();
      await cluster.dispose();
    }
  });
});
