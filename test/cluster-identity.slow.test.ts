// Cluster identity with real raftmq processes (docs/design.md "Identity"): two separate three-node
// clusters with the same --cluster-id each make their own identity at bootstrap and every node
// learns its cluster's, a node that lost its memory and its record too learns it again; a state file of one cluster copied to a node of the other is refused with
// exit 78 and left as it was, byte for byte; a node that resumes such a file with no record of its
// own to compare says at error level, once, and in /health that its peers leave it out, while its
// cluster goes on with the other two. State files written before identities existed (fixtures of
// format 1) are resumed once and rewritten in format 2; one of another such cluster is refused by
// its epoch; such a cluster gets its identity at its next force-start.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CLI } from './broker-process.js';
import { collect, connect } from './cluster-mqtt.js';
import { Cluster, ClusterNode, clusterNodeArgs, type Health } from './support/cluster.js';
import { LOOPBACK } from './support/net.js';
import { until } from './support/wait.js';

const ELECTION_TIMEOUT_MS = 300;
const SERVE_WAIT_MS = 20_000;
const IDENTITY_WAIT_MS = 20_000;
const EXIT_WAIT_MS = 10_000;
/** 10 election timeouts (raft/driver OUT_OF_MEMBERSHIP_E), with room for a loaded machine. */
const OUT_OF_MEMBERSHIP_WAIT_MS = 30_000;
const EXIT_STATE_FILE_REFUSED = 78;
const FORMAT_1 = fileURLToPath(new URL('../../test/fixtures/state-format-1', import.meta.url));

type IdentityHealth = Health['body'];

const clusters: Cluster[] = [];
const extra: ClusterNode[] = [];
after(async () => {
  await Promise.all(extra.map((n) => n.stop()));
  await Promise.all(clusters.map((c) => c.dispose()));
});

async function healthOf(n: ClusterNode): Promise<IdentityHealth | null> {
  if (!n.alive) return null;
  return n.health().then(
    (h) => h.body as IdentityHealth,
    () => null,
  );
}

/** A serving cluster whose three nodes report one cluster identity; returns it. */
async function identifiedCluster(): Promise<{ cluster: Cluster; uid: string }> {
  const cluster = await Cluster.start({ electionTimeoutMs: ELECTION_TIMEOUT_MS });
  clusters.push(cluster);
  await cluster.serving(SERVE_WAIT_MS);
  const uid = await until(
    'every node to know the cluster identity',
    async () => {
      const hs = await Promise.all(cluster.nodes.map(healthOf));
      const uids = new Set(hs.map((h) => h?.clusterUid ?? null));
      const [only] = [...uids];
      return uids.size === 1 && typeof only === 'string' ? only : null;
    },
    IDENTITY_WAIT_MS,
  );
  return { cluster, uid };
}

/** The flags Cluster gives node `id` (its state file included). */
function argsOf(cluster: Pick<Cluster, 'peers' | 'stateFile'>, id: number): string[] {
  return clusterNodeArgs({ peers: cluster.peers, stateFile: (n) => cluster.stateFile(n), electionTimeoutMs: ELECTION_TIMEOUT_MS }, id);
}

async function sigterm(n: ClusterNode): Promise<void> {
  n.signal('SIGTERM');
  assert.equal(await n.exited(EXIT_WAIT_MS), 0, `node ${n.id} exits 0 on SIGTERM`);
}

function fixtureInto(dir: string, cluster: 'a' | 'b'): void {
  for (const name of readdirSync(join(FORMAT_1, cluster))) copyFileSync(join(FORMAT_1, cluster, name), join(dir, name));
}

const bytesOr = (path: string): Buffer | null => (existsSync(path) ? readFileSync(path) : null);

describe('cluster identity', { timeout: 240_000 }, () => {
  it('two clusters of one --cluster-id: a state file of the other is refused with exit 78 and not touched', async () => {
    const [a, b] = await Promise.all([identifiedCluster(), identifiedCluster()]);
    assert.notEqual(a.uid, b.uid, 'each cluster made its own identity');
    assert.match(a.uid, /^[0-9a-f]{32}$/, '128 random bits');

    // A node that lost everything, its record too, comes back fresh and learns the identity from
    // its peers' hellos; nobody says it is out.
    const lost = b.cluster.nodes[2]!;
    lost.signal('SIGKILL');
    await lost.exited(EXIT_WAIT_MS);
    rmSync(`${b.cluster.stateFile(3)}.member`);
    const back = await b.cluster.restart(3);
    await until(
      'the fresh node to be a voter of its cluster identity',
      async () => {
        const h = await healthOf(back);
        return h?.voter === true && h.clusterUid === b.uid ? h : null;
      },
      IDENTITY_WAIT_MS,
    );
    const everyNode = [...a.cluster.nodes, ...b.cluster.nodes];
    assert.deepEqual(
      everyNode.filter((n) => n.logs.some((l) => l.code === 'RAFT_OUT_OF_MEMBERSHIP')).map((n) => n.id),
      [],
      'no node of either cluster reported itself out',
    );

    await sigterm(a.cluster.nodes[1]!);
    await sigterm(b.cluster.nodes[1]!);
    const path = a.cluster.stateFile(2);
    copyFileSync(b.cluster.stateFile(2), path);
    const before = { file: readFileSync(path), record: bytesOr(`${path}.member`), prev: bytesOr(`${path}.prev`) };
    assert.notEqual(before.record, null, 'node 2 of A has its own record');

    const r = spawnSync(process.execPath, [CLI, ...argsOf(a.cluster, 2)], { encoding: 'utf8', timeout: EXIT_WAIT_MS });
    assert.equal(r.status, EXIT_STATE_FILE_REFUSED, r.stderr);
    assert.match(r.stderr, /RAFT_STATE_FILE_FOREIGN|another cluster|cluster identity/);
    assert.ok(r.stderr.includes(path), 'the message names the file');
    assert.ok(r.stderr.includes(b.uid) && r.stderr.includes(a.uid), 'both identities are named');
    assert.deepEqual(readFileSync(path), before.file, 'the file is byte for byte as it was');
    assert.deepEqual(bytesOr(`${path}.member`), before.record, 'the record is not rewritten');
    assert.deepEqual(bytesOr(`${path}.prev`), before.prev, 'nothing renamed to .prev');
  });

  it('a node that resumed a file of another cluster says at error level, once, and in /health that it is out', async () => {
    const [a, b] = await Promise.all([identifiedCluster(), identifiedCluster()]);
    await sigterm(a.cluster.nodes[1]!);
    await sigterm(b.cluster.nodes[1]!);
    // No record of its own to compare with: the start resumes the file, and only the peers can tell.
    const path = a.cluster.stateFile(2);
    rmSync(`${path}.member`);
    copyFileSync(b.cluster.stateFile(2), path);
    const n = ClusterNode.spawn(2, argsOf(a.cluster, 2));
    extra.push(n);
    const line = await n.waitForLog((l) => l.msg === 'health listening', EXIT_WAIT_MS);
    n.healthPort = line.port as number;

    const h = await until(
      '/health to report the node out of its cluster membership',
      async () => {
        const got = await healthOf(n);
        return got?.outOfMembership != null ? got : null;
      },
      OUT_OF_MEMBERSHIP_WAIT_MS,
    );
    assert.equal(h.clusterUid, b.uid, 'it runs with the identity of the file');
    assert.deepEqual(Object.keys(h.outOfMembership!.peers).sort(), ['1', '3']);
    assert.match(h.outOfMembership!.peers['1']!, new RegExp(a.uid));
    assert.equal(h.serving, false);
    // Twice as long again: still one error line, not one per tick.
    const firstFor = h.outOfMembership!.forMs;
    await until(
      'the state to last',
      async () => {
        const later = await healthOf(n);
        return (later?.outOfMembership?.forMs ?? 0) >= 2 * firstFor ? later : null;
      },
      OUT_OF_MEMBERSHIP_WAIT_MS,
    );
    const errors = n.logs.filter((l) => l.code === 'RAFT_OUT_OF_MEMBERSHIP');
    assert.equal(errors.length, 1, 'one error line');
    assert.equal(errors[0]!.level, 50, 'at error level');

    // The cluster's own nodes refused the links and logged it once each, and serve on two voters.
    const leader = await a.cluster.serving(SERVE_WAIT_MS, [a.cluster.nodes[0]!, a.cluster.nodes[2]!]);
    const refusals = leader.logs.filter((l) => l.code === 'identity-mismatch' && l.peer === 2);
    assert.equal(refusals.length, 1, 'logged once although node 2 redials');
    assert.equal((await healthOf(leader))?.redundant, false);
  });

  it('state files of format 1 are resumed once and rewritten in format 2; one of another such cluster is refused', async () => {
    // Node 2's record of cluster A beside node 2's file of cluster B, both written before
    // identities: the file is of an epoch the record does not hold.
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-format1-'));
    try {
      fixtureInto(dir, 'a');
      const path = join(dir, 'node2.state');
      copyFileSync(join(FORMAT_1, 'b', 'node2.state'), path);
      // Refused before any peer is dialed: the ports need not be real.
      const cluster = { peers: `1=${LOOPBACK}:1,2=${LOOPBACK}:2,3=${LOOPBACK}:3`, stateFile: (id: number) => join(dir, `node${id}.state`) };
      const record = readFileSync(`${path}.member`);
      const r = spawnSync(process.execPath, [CLI, ...argsOf(cluster, 2)], { encoding: 'utf8', timeout: EXIT_WAIT_MS });
      assert.equal(r.status, EXIT_STATE_FILE_REFUSED, r.stderr);
      assert.match(r.stderr, /never joined/);
      assert.deepEqual(readFileSync(path), readFileSync(join(FORMAT_1, 'b', 'node2.state')), 'the file is as it was');
      assert.deepEqual(readFileSync(`${path}.member`), record, 'the record is as it was');
      assert.equal(existsSync(`${path}.prev`), false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }

    const cluster = await Cluster.start({ electionTimeoutMs: ELECTION_TIMEOUT_MS, prepare: (d) => fixtureInto(d, 'a') });
    clusters.push(cluster);
    const leader = await cluster.serving(SERVE_WAIT_MS);
    for (const n of cluster.nodes) {
      const h = await healthOf(n);
      assert.equal(h?.membership, 'member', `node ${n.id} resumed its format 1 file as the same member`);
      assert.equal(h?.clusterUid, null, 'a cluster formed before identities has none until a force-start');
    }
    const { client } = await connect(leader.mqttPort, { clientId: 'format1-reader', clean: true });
    const got = collect(client);
    await client.subscribeAsync('fixture/retained', { qos: 1 });
    await until('the retained message of the fixture', () => got.length > 0, SERVE_WAIT_MS);
    assert.equal(got[0], 'written before cluster identities');
    await client.endAsync();

    for (const n of cluster.nodes) await sigterm(n);
    for (const id of [1, 2, 3]) {
      const path = cluster.stateFile(id);
      assert.equal(readFileSync(path).subarray(0, 8).toString(), 'RAFTMQS2', `node ${id} wrote format 2`);
      assert.equal(readFileSync(`${path}.member`).subarray(0, 8).toString(), 'RAFTMQR2');
    }
    // Adopted once: the format 1 file put back is a consumed copy.
    const written = readFileSync(cluster.stateFile(1));
    copyFileSync(join(FORMAT_1, 'a', 'node1.state'), cluster.stateFile(1));
    const again = spawnSync(process.execPath, [CLI, ...argsOf(cluster, 1)], { encoding: 'utf8', timeout: EXIT_WAIT_MS });
    assert.equal(again.status, EXIT_STATE_FILE_REFUSED, again.stderr);
    assert.match(again.stderr, /consumed before/);

    // A force-start makes the identity such a cluster lacks, and the two nodes that lost their
    // state learn it from the forced node's hellos of the new epoch.
    writeFileSync(cluster.stateFile(1), written);
    for (const id of [2, 3]) rmSync(cluster.stateFile(id));
    await Promise.all([cluster.restart(1, ['--cluster-force-start']), cluster.restart(2), cluster.restart(3)]);
    await cluster.serving(SERVE_WAIT_MS);
    const made = await until(
      'one identity on all three',
      async () => {
        const uids = new Set((await Promise.all(cluster.nodes.map(healthOf))).map((h) => h?.clusterUid ?? null));
        const [only] = [...uids];
        return uids.size === 1 && typeof only === 'string' ? only : null;
      },
      IDENTITY_WAIT_MS,
    );
    assert.match(made, /^[0-9a-f]{32}$/);
  });
});
