// Forwarding and receiving QoS 1 across shards (docs/scale-out.md "Forwarding",
// docs/scale-out.md "Receiving"), with single-node shards and a real nats-server -js: every QoS 1
// message a publisher on a had acknowledged and that a route or placement rule sends to b is in b's
// inbound stream (read there before any receiver takes it) once, in order, with the origin, the log
// identity and a contiguous sequence, and a's outbox for b empties as JetStream acknowledges; with
// NATS out of reach the outbox fills to its bound and then refuses the publish (0x97); end to end,
// b's subscriber gets every message a's publisher had acknowledged, once, in order; and b refuses,
// logs and counts what does not decode or names an unknown shard, applies a message ahead of a gap
// only once the gap fills, and drops a repeat; and across a stop and start of nats-server in the
// middle of a stream, b's subscriber still gets every acknowledged message once, in order.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import pino from 'pino';
import { Registry } from 'prom-client';
import { healthSource, singleNodeStatus } from '../src/cluster/cluster-node.js';
import { NodeMetrics } from '../src/cluster/metrics.js';
import {
  decodeForwarded,
  encodeForwarded,
  HDR_LOG,
  HDR_ORIGIN,
  HDR_SEQ,
  inboundStream,
  inboundSubject,
} from '../src/scale/forward-codec.js';
import { Placement } from '../src/scale/placement.js';
import { RouteBucket } from '../src/scale/route-bucket.js';
import { RouteRules } from '../src/scale/routes.js';
import type { BrokerNode, NodeOptions } from '../src/server/broker-node.js';
import { type RunningDurable, startDurableNode } from '../src/server/durable-node.js';
import { connectClient, counter, nodeOptions, startNode, type TestClient, withTimeout } from './helpers.js';
import { parseMetrics } from './prom-text.js';
import { NatsServer } from './support/nats-server.js';
import { freePort } from './support/net.js';
import { idsOf } from './support/shards.js';
import { sleep, until } from './support/wait.js';

const SHARDS = ['a', 'b'];
const placement = new Placement(SHARDS);
const rules = new RouteRules(['devices/{client}/cmd'], placement);

let server: NatsServer;
const nodes: BrokerNode[] = [];
const durables: RunningDurable[] = [];
const dirs: string[] = [];
const clients: TestClient[] = [];
const connections: NatsConnection[] = [];
let bucketSeq = 0;

before(async () => {
  server = await NatsServer.start();
});
/** Each test is a deployment of its own: its nodes stop and the shards' streams (with their
 * durable consumers) go when it ends, since the names are per shard, not per test. */
afterEach(async () => {
  for (const c of clients.splice(0)) c.client.end(true);
  for (const n of nodes.splice(0)) await n.stop();
  for (const d of durables.splice(0)) await d.stop();
  const nc = await connect({ servers: server.url, reconnect: false, timeout: 5_000 });
  const jsm = await jetstreamManager(nc);
  for (const s of SHARDS) await jsm.streams.delete(inboundStream(s)).catch(() => false);
  await nc.close();
});
after(async () => {
  for (const nc of connections) await nc.close().catch(() => undefined);
  await server?.dispose();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function shardOptions(shard: string, bucket: string, servers = [server.url]): Partial<NodeOptions> {
  return { shard: { shard, placement, addresses: null }, nats: { servers, rules, bucket } };
}

async function shardNode(shard: string, bucket: string, extra: Partial<NodeOptions> = {}): Promise<BrokerNode> {
  const n = await startNode({ ...shardOptions(shard, bucket), ...extra });
  nodes.push(n);
  return n;
}

async function client(node: BrokerNode, clientId: string): Promise<TestClient> {
  const c = await connectClient(node.port, { clientId, clean: true, protocolVersion: 5 });
  clients.push(c);
  return c;
}

interface Stored {
  origin: string | undefined;
  log: string | undefined;
  seq: number;
  topic: string;
  payload: string;
}

/** Every message in shard `dest`'s inbound stream, in stream order. */
async function inbound(dest: string): Promise<Stored[]> {
  const nc = await connect({ servers: server.url, reconnect: false, timeout: 5_000 });
  connections.push(nc);
  const jsm = await jetstreamManager(nc);
  const name = inboundStream(dest);
  const info = await jsm.streams.info(name);
  const out: Stored[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq && out.length < 100_000; seq++) {
    const m = await jsm.streams.getMessage(name, { seq });
    if (m === null) continue;
    const msg = decodeForwarded(m.data);
    out.push({
      origin: m.header.get(HDR_ORIGIN),
      log: m.header.get(HDR_LOG),
      seq: Number(m.header.get(HDR_SEQ)),
      topic: msg.topic,
      payload: new TextDecoder().decode(msg.payload),
    });
  }
  return out;
}

/** Shards a and b on a fresh bucket, a subscriber on b to `root/#` (QoS 1) whose route a holds,
 * and a publisher on a; the client ids start with `prefix`. */
async function acrossShards(prefix: string, root: string): Promise<{ a: BrokerNode; b: BrokerNode; sub: TestClient; pub: TestClient }> {
  const bucket = `forward-t${++bucketSeq}`;
  const a = await shardNode('a', bucket);
  const b = await shardNode('b', bucket);
  const [subId] = idsOf(SHARDS, 'b', 1, `${prefix}sub`);
  const [pubId] = idsOf(SHARDS, 'a', 1, `${prefix}pub`);
  const sub = await client(b, subId as string);
  await withTimeout(sub.client.subscribeAsync(`${root}/#`, { qos: 1 }), 5_000, 'SUBACK');
  await until('b’s route in a’s table', () => (a.shardLink?.table.match(`${root}/x`).length ?? 0) === 1);
  return { a, b, sub, pub: await client(a, pubId as string) };
}

/** One scrape of a node's /metrics series, as the health server would serve it. */
async function scrape(node: BrokerNode): Promise<Map<string, number>> {
  const m = new NodeMetrics(
    new Registry(),
    healthSource(node, () => singleNodeStatus(node)),
  );
  try {
    return parseMetrics(await m.scrape());
  } finally {
    m.close();
  }
}

describe('forwarding QoS 1 to another shard over a real nats-server', { timeout: 90_000 }, () => {
  it('puts every acknowledged message for b into b’s stream once, in order, with a contiguous sequence', async () => {
    const bucket = `forward-t${++bucketSeq}`;
    const a = await shardNode('a', bucket);
    // No node serves b here, so what is forwarded stays in its stream to be read: b's route is
    // written as b's serving node would write it.
    const nc = await connect({ servers: server.url, reconnect: false, timeout: 5_000 });
    connections.push(nc);
    const routes = await RouteBucket.open(nc, { shard: 'b', placement, bucket, log: () => undefined });
    assert.equal((await routes.put('t/#', 1, { epoch: 1, term: 1, index: 1 })).kind, 'written');
    const [pubId, localId] = idsOf(SHARDS, 'a', 2, 'fpub');
    const [devB] = idsOf(SHARDS, 'b', 1, 'fdev');
    await until('b’s route in a’s table', () => (a.shardLink?.table.match('t/x').length ?? 0) === 1);
    const pub = await client(a, pubId as string);
    const local = await client(a, localId as string);
    await withTimeout(local.client.subscribeAsync('t/#', { qos: 1 }), 5_000, 'SUBACK on a');

    const N = 200;
    for (let i = 0; i < N; i++) {
      // Acknowledged after the local commit, as before; forwarding comes after.
      await withTimeout(pub.client.publishAsync('t/x', `m${i}`, { qos: 1 }), 5_000, `PUBACK ${i}`);
    }
    // A placement rule sends b's device's command topic to b with no route; QoS 0 and topics no
    // route matches stay on a.
    await withTimeout(pub.client.publishAsync(`devices/${devB}/cmd`, 'cmd', { qos: 1 }), 5_000, 'PUBACK cmd');
    await withTimeout(pub.client.publishAsync('other/x', 'no route', { qos: 1 }), 5_000, 'PUBACK other');
    await withTimeout(pub.client.publishAsync('t/x', 'qos0', { qos: 0 }), 5_000, 'QoS 0');

    await until('a’s outbox for b emptied by JetStream acknowledgements', () => {
      const o = a.shardOutbox('b');
      return o !== undefined && o.items.length === 0 && o.position === N + 2;
    });
    const got = await inbound('b');
    const log = a.shardOutbox('b')?.log;
    assert.equal(got.length, N + 1, 'each once');
    assert.deepEqual(
      got.map((m) => m.seq),
      Array.from({ length: N + 1 }, (_, i) => i + 1),
      'contiguous, in order',
    );
    assert.ok(got.every((m) => m.origin === 'a' && m.log === log));
    assert.deepEqual(
      got.slice(0, N).map((m) => m.payload),
      Array.from({ length: N }, (_, i) => `m${i}`),
    );
    assert.deepEqual(got[N], { origin: 'a', log, seq: N + 1, topic: `devices/${devB}/cmd`, payload: 'cmd' });
    await local.waitFor((m) => m.payload === `m${N - 1}`, 'local delivery goes on');
    assert.equal(counter(a, 'forward-failed'), 0);
  });

  it('fills the outbox while NATS is out of reach, then refuses the publish with 0x97', async () => {
    const closed = await freePort();
    const a = await shardNode('a', `forward-t${++bucketSeq}`, {
      ...shardOptions('a', 'unused', [`nats://127.0.0.1:${closed}`]),
      bridgeOutboxMessages: 3,
    });
    const [pubId] = idsOf(SHARDS, 'a', 1, 'fullpub');
    const [devB] = idsOf(SHARDS, 'b', 1, 'fulldev');
    const pub = await client(a, pubId as string);
    for (let i = 0; i < 3; i++) {
      const r = await withTimeout(pub.client.publishAsync(`devices/${devB}/cmd`, `c${i}`, { qos: 1 }), 5_000, `PUBACK ${i}`);
      assert.ok(((r as { reasonCode?: number } | undefined)?.reasonCode ?? 0) < 0x80, JSON.stringify(r));
    }
    const refused = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no PUBACK for the fourth publish')), 5_000);
      pub.client.on('packetreceive', (p) => {
        if (p.cmd !== 'puback') return;
        clearTimeout(timer);
        resolve((p as { reasonCode?: number }).reasonCode ?? 0);
      });
      pub.client.publish(`devices/${devB}/cmd`, 'c3', { qos: 1 }, () => undefined);
    });
    assert.equal(refused, 0x97);
    assert.equal(counter(a, 'shard-outbox-refused'), 1);
    assert.equal(a.shardOutbox('b')?.items.length, 3);
  });

  it('delivers every message a publisher on a had acknowledged to b’s subscriber, in order, with no gap', async () => {
    const { a, b, sub, pub } = await acrossShards('e2e', 't');
    const N = 300;
    const acked: string[] = [];
    for (let i = 0; i < N; i++) {
      await withTimeout(pub.client.publishAsync('t/x', `e${i}`, { qos: 1 }), 5_000, `PUBACK ${i}`);
      acked.push(`e${i}`);
    }
    await sub.waitFor((m) => m.payload === `e${N - 1}`, 'the last message on b', 30_000);
    assert.deepEqual(
      sub.messages.map((m) => m.payload),
      acked,
      'every acknowledged message, once, in order',
    );
    assert.ok(sub.messages.every((m) => m.topic === 't/x' && m.packet.qos === 1));
    const log = a.shardOutbox('b')?.log as string;
    assert.equal(b.highestFrom('a', log), N);
    await until('every forwarded message acknowledged to JetStream', () => b.shardLink?.receiver.received === N);
    await until('acknowledged messages leave the work-queue stream', async () => (await inbound('b')).length === 0);
    assert.equal(counter(b, 'forward-in-refused'), 0);

    // /metrics of both shards say the same (docs/scale-out.md "Health and metrics").
    await until('a’s outbox for b empty', () => a.shardOutbox('b')?.items.length === 0);
    const [ma, mb] = await Promise.all([scrape(a), scrape(b)]);
    assert.equal(ma.get('raftmq_nats_connected'), 1);
    assert.equal(ma.get('raftmq_shard_forwarded_total'), N);
    assert.equal(ma.get('raftmq_shard_outbox_messages{shard="b"}'), 0);
    assert.equal(ma.get('raftmq_shard_outbox_bytes{shard="b"}'), 0);
    assert.ok((ma.get('raftmq_shard_remote_routes') ?? 0) >= 1, 'b’s route in a’s table');
    assert.equal(mb.get('raftmq_shard_received_total'), N);
    assert.equal(mb.get('raftmq_shard_in_refused_total'), 0);
    assert.equal(mb.get('raftmq_shard_route_writes_pending'), 0);
  });

  it('refuses what does not decode or names an unknown shard; applies a message ahead of a gap only after it fills', async () => {
    const bucket = `forward-t${++bucketSeq}`;
    const b = await shardNode('b', bucket);
    const [subId] = idsOf(SHARDS, 'b', 1, 'badsub');
    const sub = await client(b, subId as string);
    await withTimeout(sub.client.subscribeAsync('g/#', { qos: 1 }), 5_000, 'SUBACK');
    await until('b receiving', () => b.shardLink?.connected === true);
    const nc = await connect({ servers: server.url, reconnect: false, timeout: 5_000 });
    connections.push(nc);
    const js = jetstream(nc);
    const jsm = await jetstreamManager(nc);
    await until('b’s stream made', async () => (await jsm.streams.info(inboundStream('b')).catch(() => null)) !== null);
    const put = async (hdrs: Record<string, string>, data: Uint8Array): Promise<void> => {
      const h = headers();
      for (const [k, v] of Object.entries(hdrs)) h.set(k, v);
      await js.publish(inboundSubject('b'), data, { headers: h });
    };
    const good = (payload: string): Uint8Array =>
      encodeForwarded({ topic: 'g/1', payload: new TextEncoder().encode(payload), qos: 1, retain: false });
    const bad: Array<[Record<string, string>, Uint8Array]> = [
      [{ [HDR_ORIGIN]: 'a', [HDR_LOG]: 'L1', [HDR_SEQ]: '1' }, new TextEncoder().encode('not msgpack at all')],
      [{ [HDR_ORIGIN]: 'zz', [HDR_LOG]: 'L1', [HDR_SEQ]: '1' }, good('unknown')],
      [{ [HDR_ORIGIN]: 'b', [HDR_LOG]: 'L1', [HDR_SEQ]: '1' }, good('self')],
      [{ [HDR_LOG]: 'L1', [HDR_SEQ]: '1' }, good('no origin')],
      [{ [HDR_ORIGIN]: 'a', [HDR_LOG]: 'L1', [HDR_SEQ]: '0' }, good('seq 0')],
      [{ [HDR_ORIGIN]: 'a', [HDR_LOG]: 'L 1', [HDR_SEQ]: '1' }, good('bad log')],
      [
        { [HDR_ORIGIN]: 'a', [HDR_LOG]: 'L1', [HDR_SEQ]: '1' },
        encodeForwarded({ topic: 'g/#', payload: new Uint8Array(), qos: 1, retain: false }),
      ],
    ];
    for (const [h, d] of bad) await put(h, d);
    await until('every bad message refused', () => counter(b, 'forward-in-refused') === bad.length);
    assert.equal(b.shardLink?.receiver.refused, bad.length);
    assert.equal(b.highestFrom('a', 'L1'), 0, 'none reached the state machine');

    // Sequence 3 arrives first: not applied, left for redelivery; 1 and 2 then fill the gap.
    await put({ [HDR_ORIGIN]: 'a', [HDR_LOG]: 'L1', [HDR_SEQ]: '3' }, good('three'));
    await until('the gap seen', () => counter(b, 'shard-in-gap') >= 1);
    assert.equal(b.highestFrom('a', 'L1'), 0);
    await put({ [HDR_ORIGIN]: 'a', [HDR_LOG]: 'L1', [HDR_SEQ]: '1' }, good('one'));
    await put({ [HDR_ORIGIN]: 'a', [HDR_LOG]: 'L1', [HDR_SEQ]: '2' }, good('two'));
    // A repeat of 1 is dropped (and acknowledged).
    await put({ [HDR_ORIGIN]: 'a', [HDR_LOG]: 'L1', [HDR_SEQ]: '1' }, good('one again'));
    await until('3 applied after the gap filled', () => b.highestFrom('a', 'L1') === 3);
    await sub.waitFor((m) => m.payload === 'three', 'three on b');
    await until('the repeat dropped', () => counter(b, 'shard-in-repeat') >= 1);
    assert.deepEqual(
      sub.messages.map((m) => m.payload),
      ['one', 'two', 'three'],
    );
    assert.equal(counter(b, 'forward-in-refused'), bad.length);
  });

  it('forwards after a restart what the outbox held, with the same log identity and sequences', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-forward-'));
    dirs.push(dir);
    const port = await freePort();
    const bucket = `forward-t${++bucketSeq}`;
    const startA = async (servers: string[]): Promise<RunningDurable> => {
      const d = await startDurableNode(
        { dataDir: dir, snapshotLogBytes: 64 << 20, minFreeBytes: 0 },
        nodeOptions({ ...shardOptions('a', bucket, servers), port }),
        pino({ level: 'silent' }),
        () => undefined,
        (err) => assert.fail(err),
      );
      durables.push(d);
      return d;
    };
    // NATS out of reach: the messages wait in the outbox, in the state on disk.
    let a = await startA([`nats://127.0.0.1:${await freePort()}`]);
    const [pubId] = idsOf(SHARDS, 'a', 1, 'restartpub');
    const [devB] = idsOf(SHARDS, 'b', 1, 'restartdev');
    const pub = await connectClient(a.node.port, { clientId: pubId as string, clean: true, protocolVersion: 5 });
    for (let i = 0; i < 3; i++)
      await withTimeout(pub.client.publishAsync(`devices/${devB}/cmd`, `r${i}`, { qos: 1 }), 5_000, `PUBACK ${i}`);
    const log = a.node.shardOutbox('b')?.log;
    assert.equal(a.node.shardOutbox('b')?.items.length, 3);
    pub.client.end(true);
    await a.stop();
    durables.splice(durables.indexOf(a), 1);

    a = await startA([server.url]);
    await until('the outbox forwarded after the restart', () => a.node.shardOutbox('b')?.items.length === 0);
    const got = await inbound('b');
    assert.deepEqual(
      got.map((m) => [m.log, m.seq, m.payload]),
      [
        [log, 1, 'r0'],
        [log, 2, 'r1'],
        [log, 3, 'r2'],
      ],
    );
  });

  // Last: it stops the shared nats-server for a while.
  it('delivers every acknowledged message once, in order, across a stop and start of nats-server mid-stream', async () => {
    const { a, b, sub, pub } = await acrossShards('outage', 'o');
    const N = 400;
    const acked: string[] = [];
    for (let i = 0; i < N; i++) {
      if (i === 150) {
        await server.stop();
        await until('both links down', () => a.shardLink?.connected === false && b.shardLink?.connected === false);
      }
      // While NATS is down a acknowledges after its local commit and keeps the messages in its outbox.
      if (i === 250) {
        assert.ok((a.shardOutbox('b')?.items.length ?? 0) >= 100, 'the messages of the outage wait in a’s outbox');
        await server.run();
      }
      await withTimeout(pub.client.publishAsync('o/x', `o${i}`, { qos: 1 }), 5_000, `PUBACK ${i}`);
      acked.push(`o${i}`);
    }
    await sub.waitFor((m) => m.payload === `o${N - 1}`, 'the last message on b', 60_000);
    // A repeat would come after the last message; give it the time of a redelivery.
    await sleep(1_000);
    assert.deepEqual(
      sub.messages.map((m) => m.payload),
      acked,
      'every acknowledged message, once, in order',
    );
    await until('a’s outbox for b emptied', () => a.shardOutbox('b')?.items.length === 0);
    assert.equal(counter(b, 'forward-in-refused'), 0);
    console.log(`# NATS outage: repeats dropped on b ${counter(b, 'shard-in-repeat')}, gaps held back ${counter(b, 'shard-in-gap')}`);
  });
});
