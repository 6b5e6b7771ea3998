// Disk trouble on a three-node cluster with --data-dir, as real processes with MQTT.js clients
// (docs/operations.md "A cluster node's data directory"): when the serving leader's data directory
// is low on space it refuses new QoS 1/2 messages and new persistent sessions with the MQTT 5 and
// 3.1.1 answers of a single node, says so in /health, /metrics and the log, and resumes when space
// returns; a follower low on space says so on its own /health. /metrics carries the fsync counters
// of raft's storage.
//
// Low space is reached through RAFTMQ_TEST_FREE_BYTES_FILE, one file per node (a tiny file system
// would need root to mount).
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { RC } from '../src/protocol/reason-codes.js';
import { TEST_FREE_BYTES_ENV } from '../src/server/disk-space.js';
import { connectClient, disconnect, refusedConnect, rejection, subscribe, withTimeout } from './helpers.js';
import { parseMetrics } from './prom-text.js';
import { Cluster, type ClusterNode } from './support/cluster.js';
import { httpGet } from './support/net.js';

const MiB = 1024 * 1024;
const SERVE_WAIT_MS = 15_000;
/** The watch reads free space every second; a transition is logged within a few. */
const WATCH_WAIT_MS = 10_000;

interface DataDirBlock {
  path: string;
  lowSpace: boolean;
  freeBytes: number | null;
  minFreeBytes: number;
  walBytes: number;
  fsyncs: number;
  entriesWritten: number;
}

async function dataDirOf(n: ClusterNode): Promise<DataDirBlock> {
  const h = (await n.health()).body as unknown as { dataDir?: DataDirBlock };
  assert.ok(h.dataDir !== undefined, `node ${n.id}: /health has a dataDir block`);
  return h.dataDir;
}

async function metricsOf(n: ClusterNode): Promise<Map<string, number>> {
  return parseMetrics((await httpGet(n.healthPort, '/metrics')).text);
}

const clusters: Cluster[] = [];
after(async () => {
  await Promise.all(clusters.map((c) => c.dispose()));
});

describe('three-node cluster with --data-dir in disk trouble', { timeout: 90_000 }, () => {
  it("below the leader's free-space bound refuses new QoS 1/2 messages and persistent sessions with 0x97 (3.1.1: close, CONNACK 3), says so, and resumes when space returns", async () => {
    let dir = '';
    const freeFile = (id: number): string => join(dir, `free${id}`);
    const cluster = await Cluster.start({
      prepare: (d) => {
        dir = d;
        for (const id of [1, 2, 3]) writeFileSync(freeFile(id), String(1024 * MiB));
      },
      extra: (id) => ['--data-dir', join(dir, `data${id}`)],
      env: (id) => ({ [TEST_FREE_BYTES_ENV]: freeFile(id) }),
    });
    clusters.push(cluster);
    const leader = await cluster.serving(SERVE_WAIT_MS);
    const follower = cluster.nodes.find((n) => n !== leader) as ClusterNode;
    const port = leader.mqttPort;

    const keeper = await connectClient(port, {
      protocolVersion: 5,
      clientId: 'keeper',
      clean: false,
      properties: { sessionExpiryInterval: 3600 },
    });
    await subscribe(keeper, 'k/#', 1);
    await disconnect(keeper);
    const p5 = await connectClient(port, { protocolVersion: 5, clientId: 'p5' });
    const p4 = await connectClient(port, { protocolVersion: 4, clientId: 'p4' });
    await p5.client.publishAsync('k/1', 'before', { qos: 1 });

    writeFileSync(freeFile(leader.id), String(MiB)); // below the 64 MiB floor
    await leader.waitForLog((l) => l.level === 40 && l.msg.startsWith('data directory low on space'), WATCH_WAIT_MS);

    assert.equal(await rejection(p5.client.publishAsync('k/2', 'q1', { qos: 1 })), RC.QUOTA_EXCEEDED, 'v5 PUBACK 0x97');
    assert.equal(await rejection(p5.client.publishAsync('k/2', 'q2', { qos: 2 })), RC.QUOTA_EXCEEDED, 'v5 PUBREC 0x97');
    await p5.client.publishAsync('k/2', 'q0', { qos: 0 });
    assert.equal(
      await refusedConnect(port, { protocolVersion: 5, clientId: 'new5', properties: { sessionExpiryInterval: 60 } }),
      RC.QUOTA_EXCEEDED,
      'a new v5 persistent session: CONNACK 0x97',
    );
    assert.equal(
      await refusedConnect(port, { protocolVersion: 4, clientId: 'new4', clean: false }),
      3,
      'a new 3.1.1 persistent session: CONNACK 3',
    );
    const back = await connectClient(port, {
      protocolVersion: 5,
      clientId: 'keeper',
      clean: false,
      properties: { sessionExpiryInterval: 3600 },
    });
    assert.equal(back.connack.sessionPresent, true, 'an existing persistent session resumes, so its queue can drain');
    await back.waitFor((m) => m.payload === 'before', 'the queued message');
    await disconnect(back);
    // 3.1.1 has no refusing PUBACK: the connection closes and the client keeps the message.
    p4.client.publish('k/3', 'q1-311', { qos: 1 });
    await withTimeout(p4.closed, 5_000, 'the 3.1.1 publisher closed');

    const d = await dataDirOf(leader);
    assert.equal(d.path, join(dir, `data${leader.id}`));
    assert.equal(d.lowSpace, true);
    assert.equal(d.freeBytes, MiB);
    assert.equal(d.minFreeBytes, 64 * MiB);
    assert.ok(d.walBytes > 0, `the raft segments' bytes: ${d.walBytes}`);
    const m = await metricsOf(leader);
    assert.equal(m.get('raftmq_data_dir_low_space'), 1);
    assert.equal(m.get('raftmq_data_dir_free_bytes'), MiB);
    assert.ok((m.get('raftmq_limit_refused_total{limit="storage_low"}') ?? 0) >= 4, 'refusals counted');
    // The group commits of raft's storage: entries per fsync is the ratio of the two counters.
    const fsyncs = m.get('raftmq_data_dir_fsyncs_total') ?? 0;
    const entries = m.get('raftmq_data_dir_entries_written_total') ?? 0;
    assert.ok(fsyncs > 0 && entries > 0, `fsyncs ${fsyncs}, raft entries ${entries}`);
    assert.ok(d.fsyncs > 0 && d.entriesWritten > 0, '/health carries the same counters');
    assert.equal((await dataDirOf(follower)).lowSpace, false, "a follower's own disk is not low");

    writeFileSync(freeFile(leader.id), String(1024 * MiB));
    await leader.waitForLog((l) => l.level === 30 && l.msg.startsWith('data directory space returned'), WATCH_WAIT_MS);
    await withTimeout(p5.client.publishAsync('k/4', 'after', { qos: 1 }), 5_000, 'PUBACK after space returned');
    assert.equal((await dataDirOf(leader)).lowSpace, false);
    assert.equal((await metricsOf(leader)).get('raftmq_data_dir_low_space'), 0);
    assert.equal(leader.logs.filter((l) => l.msg.startsWith('data directory low on space')).length, 1, 'warned once');

    // A follower low on space says so itself; it admits no clients, so nothing else changes.
    writeFileSync(freeFile(follower.id), String(MiB));
    await follower.waitForLog((l) => l.level === 40 && l.msg.startsWith('data directory low on space'), WATCH_WAIT_MS);
    assert.equal((await dataDirOf(follower)).lowSpace, true);
    assert.equal((await metricsOf(follower)).get('raftmq_data_dir_low_space'), 1);
    await disconnect(p5);
  });
});
