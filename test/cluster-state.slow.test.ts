// Memory loss, clean stops and force-start with three real raftmq processes on loopback (docs/design.md
// "State file", docs/design.md "Force-start", docs/design.md "Beyond the model"): a node killed with SIGKILL comes back amnesiac
// and is made a voter again, after which a second leader kill is survived; a cluster stopped with
// SIGTERM on every node starts again with its sessions, queued and retained messages; kill -9 of
// all three leaves nobody serving and every node saying needsForceStart; force-start is refused
// while the others serve and brings the cluster back from the survivor's file after two memory
// losses. Recovery times are printed, never asserted.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import mqtt from 'mqtt';
import { CLI } from './broker-process.js';
import { collect, connect, killLeader } from './cluster-mqtt.js';
import { Cluster, type ClusterNode, type Health } from './support/cluster.js';
import { LOOPBACK } from './support/net.js';
import { until } from './support/wait.js';

const ELECTION_TIMEOUT_MS = 300;
const SERVE_WAIT_MS = 20_000;
const REDUNDANT_WAIT_MS = 30_000;
const DELIVERY_WAIT_MS = 15_000;
const EXIT_WAIT_MS = 10_000;
/** Exit codes of a cluster node, as docs/errors.md lists them. */
const EXIT_FORCE_START_FAILED = 75;
const EXIT_STATE_FILE_REFUSED = 78;
const NEWEST_STATE = fileURLToPath(new URL('../../cluster-scripts/newest-state', import.meta.url));

const clusters: Cluster[] = [];
after(async () => {
  await Promise.all(clusters.map((c) => c.dispose()));
});

async function startCluster(): Promise<{ cluster: Cluster; leader: ClusterNode }> {
  const cluster = await Cluster.start({ electionTimeoutMs: ELECTION_TIMEOUT_MS });
  clusters.push(cluster);
  return { cluster, leader: await cluster.serving(SERVE_WAIT_MS) };
}

/** Health of a live node, or null while it does not answer. */
async function healthOf(n: ClusterNode): Promise<Health | null> {
  return n.alive ? n.health().catch(() => null) : null;
}

async function untilHealth(n: ClusterNode, what: string, pred: (h: Health) => boolean, timeoutMs: number): Promise<Health> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const h = await healthOf(n);
    if (h !== null && pred(h)) return h;
    if (Date.now() > deadline) throw new Error(`node ${n.id}: timed out waiting for ${what}; last /health ${JSON.stringify(h?.body)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Publishes `count` QoS 1 messages through a fresh client and returns them once all are acked. */
async function publish(port: number, topic: string, prefix: string, count: number, retain = false): Promise<string[]> {
  const { client } = await connect(port, { clientId: `pub-${prefix}`, clean: true });
  const acked: string[] = [];
  for (let i = 0; i < count; i++) {
    await client.publishAsync(topic, `${prefix}${i}`, { qos: 1, retain });
    acked.push(`${prefix}${i}`);
  }
  await client.endAsync();
  return acked;
}

/** A persistent QoS 1 subscription of `clientId` to `filter`, then offline. */
async function persistentSubscriber(port: number, clientId: string, filter: string): Promise<void> {
  const { client } = await connect(port, { clientId, clean: false });
  await client.subscribeAsync(filter, { qos: 1 });
  await client.endAsync();
}

/** Reconnects `clientId` with its session and waits until every message of `expected` arrived.
 * The message handler is attached before CONNACK: queued messages follow it in the same read. */
async function drain(port: number, clientId: string, expected: readonly string[]): Promise<string[]> {
  const client = mqtt.connect({ host: LOOPBACK, port, clientId, clean: false, reconnectPeriod: 0, connectTimeout: 5_000 });
  const got = collect(client);
  try {
    const ack = await new Promise<{ sessionPresent: boolean }>((resolve, reject) => {
      client.once('connect', resolve);
      client.once('error', reject);
    });
    assert.equal(ack.sessionPresent, true, `${clientId}: the session is there`);
    await until(`${clientId}: ${expected.length} messages`, () => expected.every((m) => got.includes(m)), DELIVERY_WAIT_MS).catch(
      (err: Error) => {
        throw new Error(`${err.message}; missing ${expected.filter((m) => !got.includes(m)).join(' ')}`);
      },
    );
    return got;
  } finally {
    client.end(true);
  }
}

async function retainedOn(port: number, topic: string): Promise<string> {
  const { client } = await connect(port, { clientId: `ret-${Math.random().toString(36).slice(2)}`, clean: true });
  const got = collect(client);
  try {
    await client.subscribeAsync(topic, { qos: 1 });
    await until(`a retained message on ${topic}`, () => got.length > 0, DELIVERY_WAIT_MS);
    return got[0]!;
  } finally {
    client.end(true);
  }
}

async function sigtermAll(cluster: Cluster): Promise<void> {
  for (const n of cluster.nodes) n.signal('SIGTERM');
  const codes = await Promise.all(cluster.nodes.map((n) => n.exited(EXIT_WAIT_MS)));
  assert.deepEqual(codes, [0, 0, 0], 'every node exits 0 on SIGTERM');
}

async function kill(n: ClusterNode): Promise<void> {
  n.signal('SIGKILL');
  await n.exited(EXIT_WAIT_MS);
}

describe('cluster memory loss, clean stop and force-start', { timeout: 240_000 }, () => {
  it('a killed node rejoins without memory, and once /health says redundant a second leader kill is survived', async () => {
    const { cluster, leader } = await startCluster();
    await persistentSubscriber(leader.mqttPort, 'sub-r', 'r/#');
    const acked = await publish(leader.mqttPort, 'r/x', 'one-', 20);

    const first = await killLeader(cluster, leader, SERVE_WAIT_MS);
    const t0 = performance.now();
    const back = await cluster.restart(leader.id);
    const amnesiac = await untilHealth(back, 'its first /health', () => true, 5_000);
    assert.equal(amnesiac.body.membership, 'amnesiac', 'no state file after kill -9: it comes back without memory');
    await untilHealth(first.next, 'redundant', (h) => h.body.redundant, REDUNDANT_WAIT_MS);
    const redundantMs = Math.round(performance.now() - t0);
    const rejoined = await untilHealth(back, 'member again', (h) => h.body.membership === 'member', 5_000);
    assert.equal(rejoined.body.needsForceStart, false);
    console.log(
      `# amnesiac node ${back.id} restarted to redundant on leader ${first.next.id}: ${redundantMs} ms (E = ${ELECTION_TIMEOUT_MS} ms)`,
    );

    acked.push(...(await publish(first.next.mqttPort, 'r/x', 'two-', 20)));
    const second = await killLeader(cluster, first.next, SERVE_WAIT_MS);
    console.log(`# second kill -9, of node ${first.next.id}, to first CONNACK on node ${second.next.id}: ${second.ms} ms`);
    await drain(second.next.mqttPort, 'sub-r', acked);
  });

  it('a cluster stopped with SIGTERM on every node starts again with its sessions, queued and retained messages', async () => {
    const { cluster, leader } = await startCluster();
    await persistentSubscriber(leader.mqttPort, 'sub-s', 's/#');
    await publish(leader.mqttPort, 'keep/me', 'kept-', 1, true);
    const queued = await publish(leader.mqttPort, 's/x', 'queued-', 30);
    await sigtermAll(cluster);
    for (const n of cluster.nodes) {
      assert.ok(
        n.logs.some((l) => l.msg === 'state file written'),
        `node ${n.id} wrote its state file: ${n.logs
          .slice(-8)
          .map((l) => JSON.stringify(l))
          .join('\n')}`,
      );
      assert.ok(existsSync(cluster.stateFile(n.id)));
    }

    // A file of another node or cluster is refused without being consumed.
    const peers = cluster.peers;
    const other = spawnSync(
      process.execPath,
      [CLI, '--port', '0', '--cluster-node', '1', '--cluster-peers', peers, '--state-file', cluster.stateFile(2)],
      {
        encoding: 'utf8',
        timeout: EXIT_WAIT_MS,
      },
    );
    assert.equal(other.status, EXIT_STATE_FILE_REFUSED, other.stderr);
    assert.match(other.stderr, new RegExp(cluster.stateFile(2)), 'the message names the file');
    const foreign = spawnSync(
      process.execPath,
      [
        CLI,
        '--port',
        '0',
        '--cluster-node',
        '2',
        '--cluster-peers',
        peers,
        '--cluster-id',
        'another',
        '--state-file',
        cluster.stateFile(2),
      ],
      { encoding: 'utf8', timeout: EXIT_WAIT_MS },
    );
    assert.equal(foreign.status, EXIT_STATE_FILE_REFUSED, foreign.stderr);
    assert.match(foreign.stderr, new RegExp(cluster.stateFile(2)));

    const t0 = performance.now();
    await Promise.all([1, 2, 3].map((id) => cluster.restart(id)));
    const next = await cluster.serving(SERVE_WAIT_MS);
    console.log(`# restart of all three from their state files to a serving leader: ${Math.round(performance.now() - t0)} ms`);
    for (const n of cluster.nodes) assert.equal((await n.health()).body.membership, 'member', `node ${n.id} resumed as the same member`);
    await drain(next.mqttPort, 'sub-s', queued);
    assert.equal(await retainedOn(next.mqttPort, 'keep/me'), 'kept-0');
  });

  it('after kill -9 of all three nobody serves and every node says needsForceStart', async () => {
    const { cluster, leader } = await startCluster();
    await publish(leader.mqttPort, 'gone/x', 'gone-', 5, true);
    // All three joined the epoch (a leader serves with two; a third that never joined would come
    // back fresh, not amnesiac).
    await untilHealth(leader, 'redundant', (h) => h.body.redundant, REDUNDANT_WAIT_MS);
    await Promise.all(cluster.nodes.map(kill));
    await Promise.all([1, 2, 3].map((id) => cluster.restart(id)));
    for (const n of cluster.nodes) {
      const h = await untilHealth(n, 'needsForceStart', (x) => x.body.needsForceStart, SERVE_WAIT_MS);
      assert.equal(h.body.membership, 'amnesiac');
      assert.equal(h.code, 503);
      // The line an operator alerts on, at error, once.
      const alert = await n.waitForLog((l) => l.msg === 'force-start needed', SERVE_WAIT_MS);
      assert.equal(alert.level, 50);
      assert.equal(alert.node, n.id);
      assert.equal(typeof alert.reason, 'string');
    }
    // A few election timeouts later still nobody serves, and nobody started an empty cluster.
    await new Promise((r) => setTimeout(r, 10 * ELECTION_TIMEOUT_MS));
    for (const n of cluster.nodes) {
      const h = await n.health();
      assert.equal(h.code, 503, `node ${n.id} does not serve`);
      assert.equal(h.body.serving, false);
      assert.equal(h.body.epoch, null, 'no new epoch was made');
      assert.equal(n.mqttPort, 0, `node ${n.id} never listened for MQTT`);
      assert.equal(n.logs.filter((l) => l.msg === 'force-start needed').length, 1, 'once per change, not per poll');
    }
  });

  it('force-start is refused while the others serve, and after two memory losses brings the cluster back from the survivor', async () => {
    const { cluster, leader } = await startCluster();
    const uid = (await untilHealth(leader, 'a cluster identity', (h) => h.body.clusterUid !== null, SERVE_WAIT_MS)).body.clusterUid;
    await persistentSubscriber(leader.mqttPort, 'sub-f', 'f/#');
    await publish(leader.mqttPort, 'keep/f', 'kept-', 1, true);
    const queued = await publish(leader.mqttPort, 'f/x', 'queued-', 20);

    // Refused: a follower stopped cleanly and force-started while the other two serve.
    const follower = cluster.nodes.find((n) => n !== leader)!;
    follower.signal('SIGTERM');
    assert.equal(await follower.exited(EXIT_WAIT_MS), 0);
    const refused = await cluster.restart(follower.id, ['--cluster-force-start']);
    assert.equal(await refused.exited(SERVE_WAIT_MS), EXIT_FORCE_START_FAILED, refused.stderr);
    assert.match(refused.stderr, /force/i, 'stderr says why');
    assert.equal((await leader.health()).code, 200, 'the serving leader was not disturbed');
    // Its file was used up by the attempt: it comes back amnesiac and is made a voter again.
    await cluster.restart(follower.id);
    await untilHealth(leader, 'redundant', (h) => h.body.redundant, REDUNDANT_WAIT_MS);

    // Two memory losses: the survivor is stopped cleanly (it writes its file even when not serving),
    // the others come back amnesiac, and the survivor force-starts from its file.
    const survivor = cluster.nodes.find((n) => n !== leader && n.id !== follower.id)!;
    await Promise.all([kill(leader), kill(cluster.nodes[follower.id - 1]!)]);
    const lost = [leader.id, follower.id];
    await Promise.all(lost.map((id) => cluster.restart(id)));
    const stuck = await untilHealth(survivor, 'needsForceStart', (h) => h.body.needsForceStart, SERVE_WAIT_MS);
    assert.equal(stuck.code, 503, 'the survivor alone does not serve');
    survivor.signal('SIGTERM');
    assert.equal(await survivor.exited(EXIT_WAIT_MS), 0);
    assert.ok(
      survivor.logs.some((l) => l.msg === 'state file written'),
      'written although it did not serve',
    );
    // The operator's helper picks the survivor's file and prints the force-start for its node.
    const ranked = spawnSync('bash', [NEWEST_STATE, '--json', ...[1, 2, 3].map((id) => cluster.stateFile(id))], {
      encoding: 'utf8',
      timeout: EXIT_WAIT_MS,
    });
    assert.equal(ranked.status, 0, ranked.stderr);
    const report = JSON.parse(ranked.stdout) as {
      ranking: { node: number; path: string }[];
      forceStart: { node: number; command: string } | null;
    };
    assert.equal(report.ranking[0]?.path, cluster.stateFile(survivor.id), ranked.stdout);
    assert.equal(report.forceStart?.node, survivor.id);
    assert.match(report.forceStart?.command ?? '', /--cluster-force-start/);
    const t0 = performance.now();
    const forced = await cluster.restart(survivor.id, ['--cluster-force-start']);
    const next = await cluster.serving(SERVE_WAIT_MS);
    console.log(`# force-start of node ${forced.id} to a serving leader (node ${next.id}): ${Math.round(performance.now() - t0)} ms`);
    const h = await next.health();
    assert.equal((h.body.epoch as { generation: number }).generation, 2, 'a new epoch');
    for (const n of cluster.nodes) {
      await untilHealth(n, 'the identity in the forced epoch', (x) => x.body.clusterUid === uid, SERVE_WAIT_MS);
    }
    // Read while the two nodes without memory may still be rejoining as new members: the leader's
    // configuration changes then go in beside its serve-start, and its CONNACKs must not wait.
    await drain(next.mqttPort, 'sub-f', queued);
    assert.equal(await retainedOn(next.mqttPort, 'keep/f'), 'kept-0');
  });
});
