// The raftmq command in cluster mode, as three real processes on loopback: it starts without
// waiting to serve, answers /health and /metrics on every node, refuses a second process of one
// node id at once, and refuses peer links of another secret. These hold whether or not a node
// holds a lease; serving itself is checked in test/cluster-failover.slow.test.ts. With --data-dir
// it refuses a directory of another node, cluster or mode, and a damaged one, naming it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { RaftDirStorage, raftSegmentName } from '../src/cluster/raft-storage.js';
import { FsStorage } from '../src/log/wal/storage.js';
import { CLI } from './broker-process.js';
import { connectClient, disconnect, publish, subscribe } from './helpers.js';
import { parseMetrics } from './prom-text.js';
import { Cluster, ClusterNode } from './support/cluster.js';
import { freePort, httpGet, LOOPBACK } from './support/net.js';

const ELECTION_WAIT_MS = 10_000;

describe('raftmq cluster mode', { timeout: 60_000 }, () => {
  let cluster: Cluster;
  before(async () => {
    cluster = await Cluster.start();
  });
  after(async () => {
    await cluster?.dispose();
  });

  it('elects one leader that every node names, and /health answers 200 exactly where serving is true', async () => {
    const deadline = Date.now() + ELECTION_WAIT_MS;
    let leaders: number[] = [];
    while (Date.now() < deadline) {
      const hs = await Promise.all(cluster.nodes.map((n) => n.health()));
      leaders = hs.filter((h) => h.body.role === 'leader').map((h) => h.body.node);
      const named = new Set(hs.map((h) => h.body.leader));
      const committed = hs.every((h) => h.body.commitIndex >= 1);
      if (leaders.length === 1 && named.size === 1 && named.has(leaders[0]!) && committed) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(leaders.length, 1, 'one leader');
    const hs = await Promise.all(cluster.nodes.map((n) => n.health()));
    for (const h of hs) {
      assert.equal(h.code, h.body.serving ? 200 : 503, `node ${h.body.node}: status code follows serving`);
      assert.equal(h.body.needsForceStart, false);
      assert.equal(h.body.membership, 'member', 'every node of a bootstrapped cluster is a voter of its epoch');
      const epoch = h.body.epoch as { generation: number; id: string } | null;
      assert.equal(epoch?.generation, 1, 'the bootstrap made epoch 1');
      assert.equal(epoch?.id, (hs[0]!.body.epoch as { id: string }).id, 'one epoch for all three');
      assert.equal(typeof h.body.term, 'number');
      assert.equal(typeof h.body.leaseRemainingMs, 'number');
      assert.ok(h.body.commitIndex >= 1, 'every node knows the bootstrap entry committed');
      if (h.body.role !== 'leader') assert.equal(h.body.redundant, false, 'only the leader judges redundancy');
    }
    assert.ok(hs.filter((h) => h.code === 200).length <= 1, 'never two nodes serving');
    // Liveness answers 200 on every running node, followers included.
    for (const n of cluster.nodes) assert.equal((await httpGet(n.healthPort, '/live')).code, 200, `node ${n.id} /live`);
  });

  it('reports Prometheus metrics on every node, and the raft series on the leader with its role and term', async () => {
    const r = await httpGet(cluster.nodes[0]!.healthPort, '/metrics');
    assert.equal(r.code, 200);
    for (const name of [
      'raftmq_connections',
      'raftmq_connections_total',
      'raftmq_raft_term',
      'raftmq_raft_commit_index',
      'raftmq_raft_leader',
    ]) {
      assert.match(r.text, new RegExp(`^${name} [0-9.e+-]+$`, 'm'), name);
    }
    assert.equal((await httpGet(cluster.nodes[0]!.healthPort, '/nothing')).code, 404);

    // The leader's view: every peer's match lag, last contact and clock offset, once its heartbeats
    // have carried clock samples from both followers.
    const deadline = Date.now() + ELECTION_WAIT_MS;
    for (;;) {
      const hs = await Promise.all(cluster.nodes.map((n) => n.health()));
      const i = hs.findIndex((h) => h.body.role === 'leader');
      const leader = i < 0 ? undefined : cluster.nodes[i];
      const m = leader === undefined ? new Map<string, number>() : parseMetrics((await httpGet(leader.healthPort, '/metrics')).text);
      const peers = [1, 2, 3].filter((id) => id !== leader?.id);
      const want = [
        ...peers.map((p) => `raftmq_raft_peer_match_lag{peer="${p}"}`),
        ...peers.map((p) => `raftmq_raft_peer_last_contact_seconds{peer="${p}"}`),
        ...[1, 2, 3].map((n) => `raftmq_raft_clock_offset_seconds{node="${n}"}`),
      ];
      if (leader !== undefined && want.every((s) => m.has(s))) {
        assert.equal(m.get('raftmq_raft_role{role="leader"}'), 1);
        assert.equal(m.get('raftmq_raft_role{role="follower"}'), 0);
        assert.equal(m.get('raftmq_raft_term'), hs[i]!.body.term);
        assert.equal(m.get('raftmq_raft_leader'), leader.id);
        // A fresh cluster's first leader is its bootstrap node, elected without a campaign.
        assert.ok(m.has('raftmq_raft_elections_total'));
        assert.ok((m.get('raftmq_raft_leader_changes_total') ?? 0) >= 1);
        for (const p of peers) assert.equal(m.get(`raftmq_raft_peer_connected{peer="${p}"}`), 1);
        for (const s of ['raftmq_raft_redundant', 'raftmq_raft_needs_force_start', 'raftmq_raft_last_index']) assert.ok(m.has(s), s);
        break;
      }
      if (Date.now() > deadline)
        throw new Error(`no leader with every raft series; have ${[...m.keys()].filter((k) => k.startsWith('raftmq_raft')).join(' ')}`);
      await new Promise((res) => setTimeout(res, 50));
    }
  });

  it('times the commit of a client command on the leader, and its delivery', async () => {
    const leader = await cluster.serving(ELECTION_WAIT_MS);
    const c = await connectClient(leader.mqttPort, { clientId: 'metrics-commit' });
    try {
      await subscribe(c, 'commit/#', 1);
      // One PUBLISH in 32 is offered as a delivery probe.
      for (let i = 0; i < 40; i++) await publish(c, 'commit/x', String(i), { qos: 1 });
      await c.waitFor(() => c.messages.length === 40, 'the 40 messages back');
    } finally {
      await disconnect(c);
    }
    const m = parseMetrics((await httpGet(leader.healthPort, '/metrics')).text);
    assert.ok((m.get('raftmq_raft_commit_latency_seconds_count') ?? 0) >= 1, 'commit latency sampled');
    assert.ok((m.get('raftmq_publish_delivery_latency_seconds_count') ?? 0) >= 1, 'delivery latency sampled');
  });

  it('publishes $SYS/broker/cluster/... from the serving leader, from its local table', async () => {
    const leader = await cluster.serving(ELECTION_WAIT_MS);
    const c = await connectClient(leader.mqttPort, { clientId: 'sys-cluster' });
    try {
      await subscribe(c, '$SYS/broker/cluster/#');
      await c.waitFor(() => c.messages.length >= 4, 'the four cluster topics');
      const got = new Map(c.messages.map((m) => [m.topic, m.payload]));
      const h = (await leader.health()).body;
      assert.equal(got.get('$SYS/broker/cluster/role'), 'leader');
      assert.equal(got.get('$SYS/broker/cluster/leader'), String(leader.id));
      assert.equal(got.get('$SYS/broker/cluster/term'), String(h.term));
      assert.match(got.get('$SYS/broker/cluster/redundant') ?? '', /^(true|false)$/);
    } finally {
      await disconnect(c);
    }
  });

  it('refuses a second process of the same node id at once, naming the peer port', () => {
    const r = spawnSync(
      process.execPath,
      [
        CLI,
        '--host',
        LOOPBACK,
        '--port',
        '0',
        '--cluster-node',
        '2',
        '--cluster-peers',
        cluster.peers,
        '--state-file',
        cluster.stateFile(2),
      ],
      { encoding: 'utf8', timeout: 10_000 },
    );
    assert.equal(r.status, 1);
    const port = cluster.peers.split(',')[1]!.split(':')[1]!;
    assert.match(r.stderr, new RegExp(`cannot listen for peers: 127\\.0\\.0\\.1:${port}: address in use`));
  });

  it('exits 2 naming the flag for a peer list that is not three nodes', () => {
    const r = spawnSync(process.execPath, [CLI, '--cluster-node', '1', '--cluster-peers', '1=a:1,2=b:2', '--state-file', 's'], {
      encoding: 'utf8',
      timeout: 10_000,
    });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /--cluster-peers: a cluster is exactly 3 nodes/);
  });
});

describe('raftmq cluster links', { timeout: 30_000 }, () => {
  it('refuses and logs the link of a node with another cluster secret', async () => {
    const ports = [await freePort(), await freePort(), await freePort()];
    const peers = ports.map((p, i) => `${i + 1}=${LOOPBACK}:${p}`).join(',');
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-secret-'));
    const start = (id: number, secret: string) =>
      ClusterNode.spawn(id, [
        '--host',
        LOOPBACK,
        '--port',
        '0',
        '--cluster-node',
        String(id),
        '--cluster-peers',
        peers,
        '--cluster-secret',
        secret,
        '--state-file',
        join(dir, `s${id}`),
      ]);
    const a = start(1, 'right');
    const b = start(2, 'wrong');
    try {
      const refused = await a.waitForLog((l) => l.msg === 'peer link closed' && String(l.code).startsWith('auth-'), 10_000);
      assert.equal(refused.level, 40, 'logged as a warning');
      assert.equal(
        a.logs.some((l) => l.msg === 'peer link up'),
        false,
        'no link came up between different secrets',
      );
    } finally {
      await Promise.all([a.stop(), b.stop()]);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('raftmq cluster mode: a node given other configuration', { timeout: 60_000 }, () => {
  it('/health configMatchesServing is false exactly on nodes whose settings differ from the serving leader', async () => {
    // docs/design.md "The seam": every node is given the same files, and /health reports a node whose
    // configuration differs. Node 3 gets another will grace; whoever serves, the odd side says so.
    const cluster = await Cluster.start({ extra: (id) => (id === 3 ? ['--will-grace-s', '31'] : []) });
    try {
      const server = await cluster.serving(ELECTION_WAIT_MS);
      const period = (await server.health()).body.servePeriod;
      const deadline = Date.now() + ELECTION_WAIT_MS;
      let hs = await Promise.all(cluster.nodes.map((n) => n.health()));
      // Followers learn the serving leader's hash when they apply its serve-start.
      while (Date.now() < deadline && hs.some((h) => h.body.appliedIndex < period)) {
        await new Promise((r) => setTimeout(r, 50));
        hs = await Promise.all(cluster.nodes.map((n) => n.health()));
      }
      for (const h of hs) {
        const same = (h.body.node === 3) === (server.id === 3);
        assert.equal(h.body.configMatchesServing, same, `node ${h.body.node} (server ${server.id})`);
      }
    } finally {
      await cluster.dispose();
    }
  });
});

describe('raftmq cluster mode with --data-dir: refusals at start', { timeout: 60_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'raftmq-cluster-data-dir-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const peers = '1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3';
  const start = (dataDir: string) =>
    spawnSync(
      process.execPath,
      [CLI, '--cluster-node', '1', '--cluster-peers', peers, '--state-file', join(dir, 'node1.state'), '--data-dir', dataDir],
      { encoding: 'utf8', timeout: 10_000 },
    );
  const meta = (d: string, m: Record<string, unknown>): void => {
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, 'meta.json'), `${JSON.stringify({ format: 'raftmq-data', version: 1, node: 'x', ...m })}\n`);
  };

  it('refuses the data directory of another node id, of another cluster or of a single node: exit 78 naming it', () => {
    const cases: [string, Record<string, unknown>][] = [
      ['other-node', { mode: 'cluster', clusterId: 'raftmq', nodeId: 2, incarnation: 'i' }],
      ['other-cluster', { mode: 'cluster', clusterId: 'elsewhere', nodeId: 1, incarnation: 'i' }],
      ['single', { mode: 'single' }],
    ];
    for (const [name, m] of cases) {
      const d = join(dir, name);
      meta(d, m);
      const r = start(d);
      assert.equal(r.status, 78, `${name}: ${r.stderr}`);
      assert.ok(r.stderr.includes(join(d, 'meta.json')), `${name}: the message names the directory: ${r.stderr}`);
    }
  });

  it('refuses a segment damaged before its last commit record: exit 78 naming the file, which is left as it was', async () => {
    const d = join(dir, 'damaged');
    meta(d, { mode: 'cluster', clusterId: 'raftmq', nodeId: 1, incarnation: 'i' });
    const { storage } = await RaftDirStorage.open({ storage: new FsStorage(d), logger: { info() {}, warn() {}, error() {} } });
    for (let i = 1; i <= 4; i++) {
      storage.append([{ index: i, term: 1, time: i, data: new Uint8Array(40).fill(i) }], null);
      await storage.flush();
    }
    await storage.close();
    const seg = join(d, raftSegmentName(1));
    const bytes = readFileSync(seg);
    bytes[60] = (bytes[60] as number) ^ 0xff;
    writeFileSync(seg, bytes);
    const r = start(d);
    assert.equal(r.status, 78, r.stderr);
    assert.match(r.stderr, new RegExp(raftSegmentName(1)));
    assert.deepEqual(readFileSync(seg), bytes, 'the segment is unchanged');
  });
});
