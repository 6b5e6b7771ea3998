// Three raftmq processes with --data-dir (docs/raft.md "Persistence", docs/guarantees.md): MQTT.js
// publishers stream QoS 1 and QoS 2 to the leader while a persistent subscriber is offline; kill -9
// of all three nodes at once, then all three started again: the cluster serves without a
// force-start, the session is there, every acknowledged message arrives, and no QoS 2 message
// twice. Then kill -9 of one follower: it comes back as the same member, with its log; and so it
// does after a clean stop, which writes its state file too. A node moves to --data-dir from its
// state file, and a state file newer than its directory is refused. kill -9
// keeps the page cache, so this proves crash recovery; power loss is the unit tests' power-cut
// double (src/cluster/raft-storage.test.ts). A torn tail on the leader's last segment after kill -9
// of all three is cut at the restart and loses nothing acknowledged; a byte flipped in the middle
// of a segment refuses that node's start, the file unchanged; and cluster-scripts/newest-state
// ranks the three stopped nodes' data directories.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import mqtt, { type MqttClient } from 'mqtt';
import type { Report } from '../src/cluster/newest-state.js';
import { RaftDirStorage } from '../src/cluster/raft-storage.js';
import { MemStorage } from '../src/log/wal/mem-storage.js';
import { HEADER_BYTES, scanSegment } from '../src/log/wal/segment.js';
import { FsStorage } from '../src/log/wal/storage.js';
import type { LogLine } from './broker-process.js';
import { collect, connect } from './cluster-mqtt.js';
import { Cluster, type ClusterNode } from './support/cluster.js';
import { LOOPBACK } from './support/net.js';
import { until } from './support/wait.js';

const ELECTION_TIMEOUT_MS = 500;
const SERVE_WAIT_MS = 15_000;
const DELIVERY_WAIT_MS = 15_000;
const RESTART_WAIT_MS = 15_000;
/** Acknowledged messages of each publisher before the power goes, and a bound on its stream. */
const ACKED_BEFORE_KILL = 150;
const STREAM_MESSAGES_MAX = 5_000;

const clusters: Cluster[] = [];
after(async () => {
  await Promise.all(clusters.map((c) => c.dispose()));
});

/** Publishes `prefix0`, `prefix1`, … at `qos`, one at a time, until stopped or the connection goes;
 * `acked` holds what the broker acknowledged (PUBACK, or PUBCOMP). */
function stream(client: MqttClient, topic: string, prefix: string, qos: 1 | 2): { acked: string[]; done: Promise<void> } {
  const acked: string[] = [];
  const done = (async () => {
    for (let i = 0; i < STREAM_MESSAGES_MAX; i++) {
      const m = `${prefix}${i}`;
      try {
        await client.publishAsync(topic, m, { qos });
      } catch {
        return;
      }
      acked.push(m);
    }
  })();
  return { acked, done };
}

const logged = (n: ClusterNode, msg: string): LogLine | undefined => n.logs.find((l) => l.msg === msg);

/** The last index a start would load from a stopped node's data directory (read only). */
async function lastIndexIn(dir: string): Promise<number> {
  return (await RaftDirStorage.inspect(new FsStorage(dir))).lastIndex;
}

/** The newest raft segment of a data directory. */
function lastSegment(dir: string): string {
  const segs = readdirSync(dir)
    .filter((n) => /^raft-\d{20}\.seg$/.test(n))
    .sort();
  assert.ok(segs.length > 0, `${dir} holds a segment`);
  return segs.at(-1) as string;
}

/** The least length the newest segment of `dir` can be cut to while a start still loads the log
 * through index `keep` (binary search over copies held in memory: more bytes keep more batches). */
async function leastCutKeeping(dir: string, seg: string, keep: number): Promise<number> {
  const files = new Map<string, Uint8Array>();
  for (const n of readdirSync(dir)) files.set(n, readFileSync(join(dir, n)));
  const whole = files.get(seg) as Uint8Array;
  const loads = async (len: number): Promise<boolean> => {
    const copy = new Map(files);
    copy.set(seg, whole.subarray(0, len));
    try {
      return (await RaftDirStorage.inspect(new MemStorage(copy))).lastIndex >= keep;
    } catch {
      return false;
    }
  };
  let lo = 0;
  let hi = whole.length;
  assert.ok(await loads(hi), `the whole of ${seg} loads through ${keep}`);
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    if (await loads(mid)) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

const SCRIPT = join(process.cwd(), 'cluster-scripts', 'newest-state');

/** MQTT 5 with a session that outlives its connection. */
const v5 = { protocolVersion: 5 as const, properties: { sessionExpiryInterval: 3600 } };

/** Reconnects a persistent subscriber and checks its session survived; the collector is attached
 * before CONNACK, so queued messages that follow it in the same read are kept. */
async function resumeSession(port: number, clientId: string): Promise<{ client: MqttClient; got: string[] }> {
  const client = mqtt.connect({ host: LOOPBACK, port, clientId, clean: false, reconnectPeriod: 0, ...v5 });
  const got = collect(client);
  const ack = await new Promise<{ sessionPresent: boolean }>((resolve, reject) => {
    client.once('connect', resolve);
    client.once('error', reject);
  });
  assert.equal(ack.sessionPresent, true, 'the persistent session survived');
  return { client, got };
}

describe('three-node cluster with --data-dir', { timeout: 90_000 }, () => {
  it('survives kill -9 of all three nodes with every acknowledged message, then a follower rejoins with its log', async () => {
    let dir = '';
    const cluster = await Cluster.start({
      electionTimeoutMs: ELECTION_TIMEOUT_MS,
      prepare: (d) => {
        dir = d;
      },
      extra: (id) => ['--data-dir', join(dir, `data${id}`)],
    });
    clusters.push(cluster);
    const leader = await cluster.serving(SERVE_WAIT_MS);
    const first = await connect(leader.mqttPort, { clientId: 'sub-d', clean: false, ...v5 });
    const granted = await first.client.subscribeAsync({ 'q1/#': { qos: 1 }, 'q2/#': { qos: 2 } });
    assert.deepEqual(
      granted.map((g) => g.qos),
      [1, 2],
    );
    await first.client.endAsync();

    const pubs = await Promise.all(
      ['pub-1a', 'pub-1b', 'pub-2'].map((clientId) => connect(leader.mqttPort, { clientId, clean: true, protocolVersion: 5 })),
    );
    const streams = [
      stream((pubs[0] as { client: MqttClient }).client, 'q1/a', 'a', 1),
      stream((pubs[1] as { client: MqttClient }).client, 'q1/b', 'b', 1),
      stream((pubs[2] as { client: MqttClient }).client, 'q2/c', 'c', 2),
    ];
    await until('each publisher acknowledged', () => streams.every((s) => s.acked.length >= ACKED_BEFORE_KILL), DELIVERY_WAIT_MS);
    // The power goes on all three at once (kill -9 while the streams run).
    await Promise.all(cluster.nodes.map((n) => n.kill9(5_000)));
    for (const p of pubs) p.client.end(true);
    await Promise.all(streams.map((s) => s.done));
    const acked = streams.map((s) => [...s.acked]);

    const restarted = await Promise.all([1, 2, 3].map((id) => cluster.restart(id, [], RESTART_WAIT_MS)));
    for (const n of restarted) {
      const loaded = await n.waitForLog((l) => l.msg === 'raft data directory loaded', RESTART_WAIT_MS);
      assert.ok((loaded.lastIndex as number) > 0, `node ${n.id} loaded its log`);
      assert.equal(logged(n, 'raft started')?.membership, 'member', `node ${n.id} resumed as the same member`);
    }
    const next = await cluster.serving(SERVE_WAIT_MS);
    assert.ok(
      restarted.every((n) => n.logs.every((l) => l.forceStart !== true)),
      'no force-start',
    );

    // The collector is attached before CONNACK: queued messages follow it in the same read.
    const { client: subClient, got } = await resumeSession(next.mqttPort, 'sub-d');
    await until('every acknowledged message', () => acked.every((list) => list.every((m) => got.includes(m))), DELIVERY_WAIT_MS).catch(
      (err: Error) => {
        const missing = acked.map((list) => list.filter((m) => !got.includes(m)));
        throw new Error(
          `${err.message}: acked ${acked.map((l) => l.length).join('/')}, got ${got.length}, missing ${JSON.stringify(missing).slice(0, 400)}`,
        );
      },
    );
    // A marker published after the rest comes after every redelivery, so duplicates would show by then.
    const { client: pub } = await connect(next.mqttPort, { clientId: 'pub-after', clean: true, protocolVersion: 5 });
    await pub.publishAsync('q2/c', 'last', { qos: 2 });
    await until('the message after the restart', () => got.includes('last'), DELIVERY_WAIT_MS);
    const counts = new Map<string, number>();
    for (const m of got) if (m.startsWith('c')) counts.set(m, (counts.get(m) ?? 0) + 1);
    assert.deepEqual(
      [...counts].filter(([, n]) => n > 1),
      [],
      'no QoS 2 message twice',
    );
    subClient.end(true);

    // kill -9 of one follower while the cluster takes more messages: it comes back with its log.
    const follower = cluster.nodes.find((n) => n !== next) as ClusterNode;
    const before = (await follower.health()).body.appliedIndex;
    await follower.kill9(5_000);
    for (let i = 0; i < 20; i++) await pub.publishAsync('q1/a', `later${i}`, { qos: 1 });
    const back = await cluster.restart(follower.id, [], RESTART_WAIT_MS);
    const loaded = await back.waitForLog((l) => l.msg === 'raft data directory loaded', RESTART_WAIT_MS);
    assert.ok(
      (loaded.lastIndex as number) >= before,
      `node ${back.id} loaded its log up to ${String(loaded.lastIndex)} (applied ${before})`,
    );
    assert.equal(logged(back, 'raft started')?.membership, 'member', 'the same member, not amnesiac');
    const leaderCommit = (await next.health()).body.commitIndex;
    await until(
      'the follower caught up',
      async () => ((await back.healthBody(1_000))?.appliedIndex ?? 0) >= leaderCommit,
      DELIVERY_WAIT_MS,
    );
    pub.end(true);

    // A clean stop writes the state file as well; the next start resumes the data directory and
    // consumes that file unused.
    assert.equal(await back.terminate(10_000), 0);
    const again = await cluster.restart(back.id, [], RESTART_WAIT_MS);
    await again.waitForLog((l) => l.msg === 'raft data directory loaded', RESTART_WAIT_MS);
    assert.equal(logged(again, 'raft started')?.membership, 'member');
  });

  it("after kill -9 of all three, a torn tail cut from the leader's last segment loses nothing acknowledged; a flipped byte refuses that node, the file unchanged", async () => {
    let dir = '';
    const cluster = await Cluster.start({
      electionTimeoutMs: ELECTION_TIMEOUT_MS,
      prepare: (d) => {
        dir = d;
      },
      extra: (id) => ['--data-dir', join(dir, `data${id}`)],
    });
    clusters.push(cluster);
    const dataOf = (id: number): string => join(dir, `data${id}`);
    const leader = await cluster.serving(SERVE_WAIT_MS);
    const followers = cluster.nodes.filter((n) => n !== leader);
    const first = await connect(leader.mqttPort, { clientId: 'sub-t', clean: false, ...v5 });
    await first.client.subscribeAsync('t/#', { qos: 1 });
    await first.client.endAsync();
    const { client: pubClient } = await connect(leader.mqttPort, { clientId: 'pub-t', clean: true, protocolVersion: 5 });
    const s = stream(pubClient, 't/a', 'a', 1);
    await until('the publisher acknowledged', () => s.acked.length >= ACKED_BEFORE_KILL, DELIVERY_WAIT_MS);

    // The followers stop (SIGSTOP) and a burst reaches the leader: it writes entries to its disk
    // that no follower holds and no client saw acknowledged, the tail a torn write may take.
    // (Connected first: a CONNECT is an entry, which commits only with a follower.)
    const { client: burst } = await connect(leader.mqttPort, { clientId: 'pub-burst', clean: true });
    const before = ((await leader.health()).body as unknown as { dataDir: { entriesWritten: number } }).dataDir.entriesWritten;
    for (const f of followers) f.pause();
    // A few ms apart, so each is a read and an entry of its own (the publishes of one read share
    // one entry): the tail holds many entries for the cut to fall among.
    for (let i = 0; i < 20; i++) {
      burst.publish('t/burst', `burst${i}`, { qos: 1 }, () => {});
      await new Promise((r) => setTimeout(r, 5));
    }
    await until(
      'the leader wrote the burst',
      async () => {
        const d = ((await leader.health()).body as unknown as { dataDir: { entriesWritten: number } }).dataDir;
        return d.entriesWritten >= before + 10;
      },
      DELIVERY_WAIT_MS,
    );
    await Promise.all(cluster.nodes.map((n) => n.kill9(5_000)));
    pubClient.end(true);
    burst.end(true);
    await s.done;
    const acked = [...s.acked];

    // newest-state ranks the three stopped nodes' directories (there are no state files): the
    // leader's, which holds the burst, first; nothing in them changes.
    const leaderLast = await lastIndexIn(dataOf(leader.id));
    const followerLast = await Promise.all(followers.map((f) => lastIndexIn(dataOf(f.id))));
    const heldByAFollower = Math.max(...followerLast);
    assert.ok(leaderLast > heldByAFollower, `the leader holds entries no follower does: ${leaderLast} > ${heldByAFollower}`);
    const seg = lastSegment(dataOf(leader.id));
    const whole = readFileSync(join(dataOf(leader.id), seg));
    const r = spawnSync(SCRIPT, ['--json', ...[1, 2, 3].flatMap((id) => ['--data-dir', dataOf(id), cluster.stateFile(id)])], {
      encoding: 'utf8',
      timeout: 20_000,
    });
    assert.equal(r.status, 0, r.stderr);
    const ranked = JSON.parse(r.stdout) as Report;
    assert.equal(ranked.ranking.length, 3);
    assert.ok(
      ranked.ranking.every((x) => x.fromDataDir),
      'every node ranked by its data directory',
    );
    assert.equal(ranked.ranking[0]?.path, dataOf(leader.id));
    assert.equal(ranked.ranking[0]?.lastIndex, leaderLast);
    assert.deepEqual(
      ranked.ranking
        .slice(1)
        .map((x) => x.lastIndex)
        .sort(),
      [...followerLast].sort(),
    );
    assert.match(ranked.forceStart?.command ?? '', new RegExp(`--data-dir ${dataOf(leader.id)} --cluster-force-start`));
    assert.deepEqual(readFileSync(join(dataOf(leader.id), seg)), whole, 'newest-state changed nothing');

    // The torn tail: the leader's last segment cut at a random byte past what a follower holds
    // (what a follower holds may be all another acknowledged entry has besides the leader's disk).
    const least = await leastCutKeeping(dataOf(leader.id), seg, heldByAFollower);
    assert.ok(least < whole.length, 'there is a tail to tear');
    const from = Math.max(least, HEADER_BYTES);
    let cut = from + Math.floor(Math.random() * (whole.length - from));
    // Inside a batch, not at its end, so the start has a torn tail to cut.
    if (scanSegment(whole.subarray(0, cut)).end === cut) cut += 1;
    writeFileSync(join(dataOf(leader.id), seg), whole.subarray(0, cut));

    const restarted = await Promise.all([1, 2, 3].map((id) => cluster.restart(id, [], RESTART_WAIT_MS)));
    const old = restarted.find((n) => n.id === leader.id) as ClusterNode;
    const torn = await old.waitForLog((l) => l.msg.startsWith('torn tail after the last commit record cut off'), RESTART_WAIT_MS);
    assert.equal(torn.file, seg);
    assert.ok((torn.offset as number) <= cut, `cut at ${String(torn.offset)}, torn at ${cut}`);
    for (const n of restarted) assert.equal(logged(n, 'raft started')?.membership, 'member', `node ${n.id} resumed as the same member`);
    const next = await cluster.serving(SERVE_WAIT_MS);
    assert.ok(
      restarted.every((n) => n.logs.every((l) => l.forceStart !== true)),
      'no force-start',
    );
    const { client: subClient, got } = await resumeSession(next.mqttPort, 'sub-t');
    await until('every acknowledged message', () => acked.every((m) => got.includes(m)), DELIVERY_WAIT_MS).catch((err: Error) => {
      throw new Error(
        `${err.message}: cut ${cut} of ${whole.length} (${seg}), acked ${acked.length}, got ${got.length}, missing ${JSON.stringify(acked.filter((m) => !got.includes(m))).slice(0, 400)}`,
      );
    });
    subClient.end(true);

    // A byte flipped in the middle of a segment, before its last commit record: a batch that was
    // synced has gone bad, and the node refuses to start, naming the file, which stays as it was.
    const victim = cluster.nodes.find((n) => n !== next) as ClusterNode;
    await victim.kill9(5_000);
    const vseg = join(dataOf(victim.id), lastSegment(dataOf(victim.id)));
    const vbytes = readFileSync(vseg);
    // The offset where the last batch begins: the end of the valid batches in all but its last byte.
    const lastBatch = scanSegment(vbytes.subarray(0, vbytes.length - 1)).end;
    assert.ok(lastBatch > HEADER_BYTES, `${vseg} holds more than one batch`);
    const at = HEADER_BYTES + Math.floor((lastBatch - HEADER_BYTES) / 2);
    vbytes[at] = (vbytes[at] as number) ^ 0xff;
    writeFileSync(vseg, vbytes);
    await assert.rejects(cluster.restart(victim.id, [], RESTART_WAIT_MS));
    const refused = cluster.node(victim.id);
    assert.equal(await refused.exited(5_000), 78);
    assert.ok(refused.stderr.includes(lastSegment(dataOf(victim.id))), `the message names the segment: ${refused.stderr}`);
    assert.deepEqual(readFileSync(vseg), vbytes, 'the segment is unchanged');
  });

  it('a node stopped cleanly without --data-dir moves to one: it resumes its state file into it, then restarts from it after kill -9', async () => {
    let dir = '';
    const cluster = await Cluster.start({
      electionTimeoutMs: ELECTION_TIMEOUT_MS,
      prepare: (d) => {
        dir = d;
      },
    });
    clusters.push(cluster);
    const leader = await cluster.serving(SERVE_WAIT_MS);
    const { client: pub } = await connect(leader.mqttPort, { clientId: 'pub-m', clean: true });
    for (let i = 0; i < 20; i++) await pub.publishAsync('m/x', `m${i}`, { qos: 1 });
    pub.end(true);
    const node = cluster.nodes.find((n) => n !== leader) as ClusterNode;
    const applied = (await node.health()).body.appliedIndex;
    assert.equal(await node.terminate(10_000), 0);
    const data = ['--data-dir', join(dir, `data${node.id}`)];
    const moved = await cluster.restart(node.id, data, RESTART_WAIT_MS);
    await moved.waitForLog((l) => l.msg === 'raft data directory empty', RESTART_WAIT_MS);
    assert.equal(logged(moved, 'raft started')?.membership, 'member', 'resumed from its state file');
    await until(
      'it serves as a follower again',
      async () => ((await moved.healthBody(1_000))?.appliedIndex ?? 0) >= applied,
      DELIVERY_WAIT_MS,
    );
    await moved.kill9(5_000);
    const back = await cluster.restart(node.id, data, RESTART_WAIT_MS);
    const loaded = await back.waitForLog((l) => l.msg === 'raft data directory loaded', RESTART_WAIT_MS);
    assert.ok((loaded.lastIndex as number) >= applied, 'the directory holds the log the state file had');
    assert.equal(logged(back, 'raft started')?.membership, 'member', 'the same member after kill -9');

    // Run once more without --data-dir, so its state file gets ahead of the directory: a start
    // with the directory again is refused rather than roll the member back.
    assert.equal(await back.terminate(10_000), 0);
    const plain = await cluster.restart(node.id, [], RESTART_WAIT_MS);
    const serving = await cluster.serving(SERVE_WAIT_MS);
    const { client: pub2 } = await connect(serving.mqttPort, { clientId: 'pub-m2', clean: true });
    for (let i = 0; i < 5; i++) await pub2.publishAsync('m/x', `n${i}`, { qos: 1 });
    pub2.end(true);
    const commit = (await serving.health()).body.commitIndex;
    await until(
      'it applied the new messages',
      async () => ((await plain.healthBody(1_000))?.appliedIndex ?? 0) >= commit,
      DELIVERY_WAIT_MS,
    );
    assert.equal(await plain.terminate(10_000), 0);
    await assert.rejects(cluster.restart(node.id, data, RESTART_WAIT_MS));
    const refused = cluster.node(node.id);
    assert.equal(await refused.exited(5_000), 78);
    assert.match(refused.stderr, /newer than --data-dir/);
  });

  it("after two nodes lost their disks, --cluster-force-start forces from the survivor's data directory", async () => {
    let dir = '';
    const cluster = await Cluster.start({
      electionTimeoutMs: ELECTION_TIMEOUT_MS,
      prepare: (d) => {
        dir = d;
      },
      extra: (id) => ['--data-dir', join(dir, `data${id}`)],
    });
    clusters.push(cluster);
    const leader = await cluster.serving(SERVE_WAIT_MS);
    const first = await connect(leader.mqttPort, { clientId: 'sub-f', clean: false });
    await first.client.subscribeAsync('f/#', { qos: 1 });
    await first.client.endAsync();
    const { client: pub } = await connect(leader.mqttPort, { clientId: 'pub-f', clean: true });
    const acked: string[] = [];
    for (let i = 0; i < 20; i++) {
      await pub.publishAsync('f/x', `f${i}`, { qos: 1 });
      acked.push(`f${i}`);
    }
    pub.end(true);
    // Only what the survivor acknowledged (made durable) can be forced from: the leader says
    // redundant once every follower's match index reached the commit index.
    await until('every follower acknowledged everything', async () => (await leader.healthBody(1_000))?.redundant === true, SERVE_WAIT_MS);
    // kill -9 of all three; two lose their disks (data directory and state files; the membership
    // record stays, so they come back amnesiac).
    await Promise.all(cluster.nodes.map((n) => n.kill9(5_000)));
    const survivor = cluster.nodes.find((n) => n !== leader) as ClusterNode;
    const lost = cluster.nodes.filter((n) => n !== survivor).map((n) => n.id);
    for (const id of lost) {
      rmSync(join(dir, `data${id}`), { recursive: true, force: true });
      for (const suffix of ['', '.prev']) rmSync(`${cluster.stateFile(id)}${suffix}`, { force: true });
    }
    await Promise.all(lost.map((id) => cluster.restart(id, [], RESTART_WAIT_MS)));
    const back = await cluster.restart(survivor.id, [], RESTART_WAIT_MS);
    await until('the survivor needs a force-start', async () => (await back.healthBody(1_000))?.needsForceStart === true, SERVE_WAIT_MS);
    // It was killed too, so it has no state file: it forces from its data directory.
    await back.kill9(5_000);
    assert.equal(existsSync(cluster.stateFile(survivor.id)), false, 'no state file to force from');
    const forced = await cluster.restart(survivor.id, ['--cluster-force-start'], RESTART_WAIT_MS);
    const next = await cluster.serving(SERVE_WAIT_MS);
    assert.equal(((await next.health()).body.epoch as { generation: number }).generation, 2, 'a new epoch');
    assert.equal(logged(forced, 'raft data directory loaded') !== undefined, true);
    const subClient = mqtt.connect({ host: LOOPBACK, port: next.mqttPort, clientId: 'sub-f', clean: false, reconnectPeriod: 0 });
    const got = collect(subClient);
    const ack = await new Promise<{ sessionPresent: boolean }>((resolve, reject) => {
      subClient.once('connect', resolve);
      subClient.once('error', reject);
    });
    assert.equal(ack.sessionPresent, true, 'the session is in the forced epoch');
    await until('every acknowledged message from the forced epoch', () => acked.every((m) => got.includes(m)), DELIVERY_WAIT_MS);
    subClient.end(true);
  });
});
