// SIGTERM of the serving leader (docs/design.md "State file", docs/operations.md "What happens on each failure"): it stops serving, hands
// leadership to a caught-up peer, stops raft traffic and exits within --shutdown-timeout-ms; another
// node serves after about a round trip instead of an election timeout. The time from the signal to
// the first CONNACK on the new leader is printed, never asserted.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { describe, it } from 'node:test';
import mqtt from 'mqtt';
import { Cluster } from './support/cluster.js';
import { LOOPBACK } from './support/net.js';

const ELECTION_TIMEOUT_MS = 500;
const SHUTDOWN_TIMEOUT_MS = 3_000;
const WAIT_MS = 15_000;

function connack(port: number, timeoutMs: number): Promise<void> {
  const client = mqtt.connect({ host: LOOPBACK, port, reconnectPeriod: 0, connectTimeout: timeoutMs, clientId: 'probe', clean: true });
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no CONNACK from ${port}`)), timeoutMs);
    client.once('connect', () => resolve());
    client.once('error', reject);
    client.once('close', () => reject(new Error(`closed by ${port}`)));
    void timer;
  }).finally(() => client.end(true));
}

describe('SIGTERM of the cluster leader', { timeout: 60_000 }, () => {
  it('hands leadership over, exits 0 within the shutdown timeout, and another node serves', async () => {
    const cluster = await Cluster.start({
      electionTimeoutMs: ELECTION_TIMEOUT_MS,
      extra: () => ['--shutdown-timeout-ms', String(SHUTDOWN_TIMEOUT_MS)],
    });
    try {
      const leader = await cluster.serving(WAIT_MS);
      // Handover needs a caught-up peer: wait until the leader reports every node caught up.
      const ready = Date.now() + WAIT_MS;
      while (!(await leader.health()).body.redundant && Date.now() < ready) await new Promise((r) => setTimeout(r, 25));
      const others = cluster.nodes.filter((n) => n !== leader);
      const t0 = performance.now();
      leader.signal('SIGTERM');
      const deadline = t0 + WAIT_MS;
      let ms = -1;
      let next = leader;
      while (ms < 0) {
        next = await cluster.serving(Math.max(1, deadline - performance.now()), others);
        try {
          await connack(next.mqttPort, 1_000);
          ms = Math.round(performance.now() - t0);
        } catch (err) {
          if (performance.now() > deadline) throw err;
        }
      }
      const code = await leader.exited(SHUTDOWN_TIMEOUT_MS + 2_000);
      const exitMs = Math.round(performance.now() - t0);
      console.log(
        `# SIGTERM of leader ${leader.id} to first CONNACK on node ${next.id}: ${ms} ms; process exited after ${exitMs} ms (E = ${ELECTION_TIMEOUT_MS} ms)`,
      );
      assert.equal(code, 0, 'a clean exit');
      const handed = leader.logs.find((l) => l.msg === 'leadership handed over');
      assert.ok(handed !== undefined, `the leader logged the handover: ${leader.logs.map((l) => l.msg).join(' | ')}`);
      assert.equal(
        leader.logs.some((l) => l.msg === 'stop timed out'),
        false,
        'the whole stop finished within --shutdown-timeout-ms',
      );
      const order = ['serving ended', 'leadership handed over', 'state file written'];
      const at = order.map((m) => leader.logs.findIndex((l) => l.msg === m));
      assert.ok(
        at.every((i, k) => i >= 0 && (k === 0 || i > (at[k - 1] as number))),
        `stop order ${at.join(', ')}`,
      );
      const written = leader.logs[at[2]!]!;
      assert.equal(written.file, cluster.stateFile(leader.id), 'the file of --state-file');
      assert.ok(existsSync(cluster.stateFile(leader.id)), 'and it is on disk');
    } finally {
      await cluster.dispose();
    }
  });
});
