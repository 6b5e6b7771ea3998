// Outbound bridge messages across kill -9 of the raftmq leader on a three-node cluster
// (docs/bridges.md "The promise"): publishers stream QoS 1 to raftmq on topics an outbound rule
// forwards (remapped) to Debian's Mosquitto, and the serving leader is killed mid-stream. Every
// message raftmq acknowledged (PUBACK) to its publisher must reach a subscriber on Mosquitto, and
// each publisher's messages must first arrive there in the order it published them. A new leader
// forwards again what the old one had sent and not had recorded as completed (bridge-position), and
// a publisher re-sends what it had not got PUBACK for: duplicates, allowed at QoS 1, counted and
// printed. A fourth case runs the plain kill at QoS 2 end to end, where none may arrive twice.
//
// A plain kill finds little in the outbox (a loopback remote keeps up), so the second case first
// turns the relay between the nodes and Mosquitto into a black hole: the leader's bridge writes into
// it and gets no PUBACK, the outbox fills with messages raftmq acknowledged, and the kill lands with
// them there. A third case runs that on a copy of the broker with a planted bug,
// `bridge-position-on-write` (a QoS 1 message counted completed when written to the socket, not at
// its PUBACK), and requires it to lose acknowledged messages, so the check keeps its teeth.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import mqtt, { type MqttClient } from 'mqtt';
import { buildPatched } from '../jepsen-like-tests/mutants.js';
import { connect } from './cluster-mqtt.js';
import { BRIDGE_MUTANTS } from './support/bridge-mutants.js';
import { Cluster, type ClusterNode } from './support/cluster.js';
import { Mosquitto } from './support/mosquitto.js';
import { freePort, LOOPBACK } from './support/net.js';
import { until } from './support/wait.js';

const ELECTION_TIMEOUT_MS = 500;
const SERVE_WAIT_MS = 15_000;
const FAILOVER_WAIT_MS = 15_000;
const DELIVERY_WAIT_MS = 60_000;
const PUBLISHERS = 3;
/** Messages acknowledged to all publishers before the kill, and after it before they stop. */
const BEFORE_KILL = 150;
const AFTER_KILL = 150;
/** A bound on each publisher's stream, whatever happens. */
const STREAM_MESSAGES_MAX = 5_000;
const BUILD = fileURLToPath(new URL('..', import.meta.url));

/** A TCP relay from the raftmq nodes to the remote that can turn into a black hole: it then reads
 * and discards what either side sends, on open connections and new ones, until restored. */
class HoleRelay {
  private readonly server: Server;
  private readonly open = new Set<Socket>();
  private hole = false;

  constructor(target: number) {
    this.server = createServer((s) => {
      s.on('error', () => {});
      this.open.add(s);
      s.on('close', () => this.open.delete(s));
      const t = tcpConnect(target, LOOPBACK);
      t.on('error', () => s.destroy());
      s.on('close', () => t.destroy());
      t.on('close', () => s.destroy());
      s.on('data', (chunk: Buffer) => {
        if (!this.hole) t.write(chunk);
      });
      t.on('data', (chunk: Buffer) => {
        if (!this.hole) s.write(chunk);
      });
    });
  }

  async listen(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, LOOPBACK, () => resolve()));
    return (this.server.address() as { port: number }).port;
  }

  /** From now on nothing passes, either way. */
  blackHole(): void {
    this.hole = true;
  }

  /** Things pass again; the connections that were black-holed are closed, so they start over. */
  restore(): void {
    for (const s of this.open) s.destroy();
    this.hole = false;
  }

  close(): Promise<void> {
    for (const s of this.open) s.destroy();
    return new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** The bridge's outbox depth in a node's /health; undefined when it does not answer. */
async function outboxDepth(n: ClusterNode): Promise<number | undefined> {
  const body = (await n.healthBody(2_000)) as { bridges?: { outbox: number }[] } | null;
  return body?.bridges?.[0]?.outbox;
}

describe('outbound bridge across kill -9 of the raftmq leader', { timeout: 180_000 }, () => {
  const cleanups: (() => Promise<void>)[] = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  /** The stream, the kill and the checks. `hole`: the remote is black-holed before the kill, so the
   * outbox holds acknowledged messages when the leader dies; `mutantCli`: the nodes run that copy
   * of the broker, which must lose some of them; `qos`: of the publishes, the rule and the remote's
   * subscriber, end to end (at 2 none may arrive twice). */
  async function killMidStream(hole: boolean, mutantCli?: string, qos: 1 | 2 = 1): Promise<void> {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    const relay = new HoleRelay(remote.port);
    const relayPort = await relay.listen();
    cleanups.push(() => relay.close());
    // Payloads as they arrive at the remote's subscriber, in arrival order.
    const arrived: string[] = [];
    const rsub = (await connect(remote.port, { clientId: 'remote-sub', clean: true })).client;
    cleanups.push(async () => {
      rsub.end(true);
    });
    let endSeen = false;
    rsub.on('message', (topic, payload) => {
      // The rule remaps site/x/... to cloud/x/...: anything else is not ours to count.
      if (topic === 'cloud/x/end') endSeen = true;
      else if (topic.startsWith('cloud/x/')) arrived.push(payload.toString());
    });
    await rsub.subscribeAsync('cloud/#', { qos });

    // Fixed MQTT ports, so each publisher lists all three nodes (MQTT.js `servers`) and reconnects
    // with its session to whichever serves, re-sending what was not acknowledged.
    const mqttPorts = [await freePort(), await freePort(), await freePort()];
    let conf = '';
    const cluster = await Cluster.start({
      ...(mutantCli === undefined ? {} : { cli: mutantCli }),
      electionTimeoutMs: ELECTION_TIMEOUT_MS,
      prepare: (dir) => {
        conf = join(dir, 'bridge.yaml');
        writeFileSync(
          conf,
          `bridge: ["up=mqtt://${LOOPBACK}:${relayPort}"]\nbridges:\n  up:\n    topic: ["x/# out ${qos} site/ cloud/"]\n`,
        );
      },
      extra: (id) => ['--config', conf, '--port', String(mqttPorts[id - 1])],
    });
    cleanups.push(() => cluster.dispose());
    const leader = await cluster.serving(SERVE_WAIT_MS);
    const followers = cluster.nodes.filter((n) => n !== leader);
    await until('the leader logs its bridge connected', () => leader.logs.some((l) => l.msg === 'bridge connected'), SERVE_WAIT_MS);

    const servers = mqttPorts.map((port) => ({ host: LOOPBACK, port }));
    const pubs: MqttClient[] = [];
    for (let k = 0; k < PUBLISHERS; k++) {
      const c = mqtt.connect({ servers, clientId: `out-pub-${k}`, clean: false, reconnectPeriod: 100, connectTimeout: 2_000 });
      pubs.push(c);
      cleanups.push(async () => {
        c.end(true);
      });
      await new Promise<void>((resolve) => c.once('connect', () => resolve()));
    }
    let streaming = true;
    const acked: string[][] = pubs.map(() => []);
    const total = (): number => acked.reduce((n, a) => n + a.length, 0);
    // One publish in flight per publisher at a time: its acknowledged messages are in publish
    // order, which is the order they must first arrive in at the remote.
    const stream = async (k: number): Promise<void> => {
      const pub = pubs[k] as MqttClient;
      for (let i = 0; streaming && i < STREAM_MESSAGES_MAX; i++) {
        await pub.publishAsync(`site/x/p${k}`, `p${k}:${i}`, { qos });
        (acked[k] as string[]).push(`p${k}:${i}`);
      }
    };
    const streams = pubs.map((_, k) => stream(k));
    await until('messages streaming', () => total() >= BEFORE_KILL, DELIVERY_WAIT_MS);
    await until('messages at the remote before the kill', () => arrived.length > 0, DELIVERY_WAIT_MS);
    if (hole) {
      relay.blackHole();
      const atHole = total();
      await until('acknowledgements while the remote is a black hole', () => total() >= atHole + AFTER_KILL, DELIVERY_WAIT_MS);
      if (mutantCli === undefined) {
        const depth = await outboxDepth(leader);
        assert.ok((depth ?? 0) > 0, `the outbox holds acknowledged messages at the kill (${depth})`);
      } else {
        // The planted bug shows itself here: the position passes what went into the hole.
        await until('the planted bug emptying the outbox into the hole', async () => (await outboxDepth(leader)) === 0, DELIVERY_WAIT_MS);
      }
    }
    const atKill = total();
    const arrivedAtKill = arrived.length;
    const t0 = performance.now();
    await leader.kill9(5_000);
    relay.restore();
    const next = await cluster.serving(FAILOVER_WAIT_MS, followers);
    const ms = Math.round(performance.now() - t0);
    await until('acknowledgements from the new leader', () => total() >= atKill + AFTER_KILL, DELIVERY_WAIT_MS);
    streaming = false;
    await Promise.all(streams);

    const all = acked.flat();
    if (mutantCli !== undefined) {
      // The bridge forwards in log order and the remote delivers in order what it sends, so once a
      // message published after all the others is there, everything the new leader forwarded is.
      await (pubs[0] as MqttClient).publishAsync('site/x/end', 'end', { qos: 1 });
      await until('the last message at the remote', () => endSeen, DELIVERY_WAIT_MS);
      const got = new Set(arrived);
      const missing = all.filter((m) => !got.has(m));
      console.log(`# planted bridge-position-on-write: ${missing.length} of ${all.length} acknowledged messages lost`);
      assert.ok(missing.length > 0, 'the planted bug loses acknowledged messages');
      return;
    }
    await until(
      'every acknowledged message at the remote',
      () => {
        const got = new Set(arrived);
        return all.every((m) => got.has(m));
      },
      DELIVERY_WAIT_MS,
    );
    const counts = new Map<string, number>();
    for (const m of arrived) counts.set(m, (counts.get(m) ?? 0) + 1);
    const duplicates = [...counts.values()].reduce((n, c) => n + c - 1, 0);
    console.log(
      `# outbound QoS ${qos} across kill -9 of node ${leader.id}${hole ? ' (remote black-holed first)' : ''} (node ${next.id} serving after ${ms} ms): ${all.length} acknowledged ` +
        `(${atKill} before the kill), ${arrived.length} arrivals at the remote (${arrivedAtKill} before the kill), ${duplicates} duplicates`,
    );
    for (let k = 0; k < PUBLISHERS; k++) {
      // First arrivals of this publisher's messages, in arrival order: their sequence numbers rise.
      const seen = new Set<string>();
      const firsts: number[] = [];
      for (const m of arrived) {
        if (!m.startsWith(`p${k}:`) || seen.has(m)) continue;
        seen.add(m);
        firsts.push(Number(m.slice(m.indexOf(':') + 1)));
      }
      const outOfOrder = firsts.filter((n, i) => i > 0 && n < (firsts[i - 1] as number));
      assert.deepEqual(outOfOrder, [], `publisher ${k}: messages first arrive in the order published`);
      const sent = acked[k] as string[];
      assert.ok(firsts.length >= sent.length, `publisher ${k}: ${firsts.length} distinct messages arrived, ${sent.length} acknowledged`);
    }
    assert.ok(
      [...counts.keys()].every((m) => /^p\d:\d+$/.test(m) && Number(m.slice(m.indexOf(':') + 1)) < (acked[Number(m[1])]?.length ?? 0)),
      'nothing arrives that was not published',
    );
    // QoS 2 from the publishers through the remote: raftmq takes each once across the failover
    // (the publisher's session), and the bridge forwards each once (docs/bridges.md "QoS 2 to the remote").
    if (qos === 2) assert.equal(duplicates, 0, 'at QoS 2 none arrives twice');
  }

  it('every message raftmq acknowledged reaches the remote, in order per publisher', () => killMidStream(false));

  it('the same when the outbox holds acknowledged messages at the kill (the remote black-holed first)', () => killMidStream(true));

  it('at QoS 2 from the publishers to the remote, none arrives twice', () => killMidStream(false, undefined, 2));

  it('catches the planted bug bridge-position-on-write: it loses acknowledged messages', () =>
    killMidStream(true, buildPatched('bridge-position-on-write', BRIDGE_MUTANTS['bridge-position-on-write'], BUILD)));
});
