// Inbound bridge messages across kill -9 of the raftmq leader on a three-node cluster
// (docs/bridges.md "Inbound"): a publisher on Debian's Mosquitto streams QoS 1 into a topic the
// bridge takes inbound; the leader is killed mid-stream. A relay between the nodes and Mosquitto
// reads the bridge's traffic and records every message raftmq acknowledged (PUBACK) to the remote:
// each of them must reach the raftmq subscriber after the failover, and so must every message the
// publisher got PUBACK for from Mosquitto, which keeps the rest in the bridge's session there.
// Duplicates (at least once) are counted and printed, not judged.
//
// A plain kill rarely lands between a message's proposal and its commit, so the second case cuts
// the leader off from its peers first (the nodes talk through relays): it receives messages it
// cannot commit, and must not acknowledge them to the remote (an acknowledgement before the
// commit loses them at the kill). A third case runs that on a copy of the broker with that bug
// planted (`bridge-in-ack-before-commit`) and requires the loss to show, so the check keeps its
// teeth.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import mqtt, { type MqttClient } from 'mqtt';
import { buildPatched } from '../jepsen-like-tests/mutants.js';
import { collect, connect } from './cluster-mqtt.js';
import { BRIDGE_MUTANTS } from './support/bridge-mutants.js';
import { Cluster } from './support/cluster.js';
import { Mosquitto } from './support/mosquitto.js';
import { LOOPBACK, PeerLinks } from './support/net.js';
import { ackPid, PACKET, PacketRelay, publishOf } from './support/packet-relay.js';
import { until } from './support/wait.js';

const SERVE_WAIT_MS = 15_000;
const FAILOVER_WAIT_MS = 15_000;
const DELIVERY_WAIT_MS = 60_000;
/** Messages the publisher sends, and after how many of them the leader is killed. */
const N = 400;
const KILL_AFTER = 200;

const BUILD = fileURLToPath(new URL('..', import.meta.url));

/** A relay from the raftmq nodes to Mosquitto that reads MQTT 3.1.1 in both directions: the
 * remote's QoS 1 PUBLISHes (packet id → payload, per connection) and the bridge's PUBACKs, so
 * `acked` holds every payload raftmq acknowledged to the remote, and `sent` every payload of a
 * QoS 1 PUBLISH the remote sent to the bridge. */
function recordingRelay(target: number): { relay: PacketRelay; acked: Set<string>; sent: Set<string> } {
  const acked = new Set<string>();
  const sent = new Set<string>();
  const pending = new Map<string, string>();
  const relay = new PacketRelay(target, {
    down: (f, conn) => {
      if (f.type !== PACKET.PUBLISH) return 'pass';
      const p = publishOf(f);
      if (p.qos === 0) return 'pass';
      pending.set(`${conn} ${p.pid}`, p.payload);
      sent.add(p.payload);
      return 'pass';
    },
    up: (f, conn) => {
      if (f.type !== PACKET.PUBACK) return 'pass';
      const payload = pending.get(`${conn} ${ackPid(f)}`);
      if (payload !== undefined) acked.add(payload);
      return 'pass';
    },
  });
  return { relay, acked, sent };
}

describe('inbound bridge across kill -9 of the raftmq leader', { timeout: 180_000 }, () => {
  const cleanups: (() => Promise<void>)[] = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  /** The stream, the kill and the checks; `isolate`: the leader is cut off from its peers before
   * the kill, so it holds messages it could not commit; `mutantCli`: the nodes run that copy of the
   * broker, which must lose messages it acknowledged. */
  async function killMidStream(isolate: boolean, mutantCli?: string): Promise<void> {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    const { relay: proxy, ...relay } = recordingRelay(remote.port);
    const relayPort = await proxy.listen();
    cleanups.push(() => proxy.close());
    const rpub = (await connect(remote.port, { clientId: 'remote-pub', clean: true })).client;
    cleanups.push(async () => {
      rpub.end(true);
    });
    // Retained at the remote: its arrival here shows the bridge's subscription is in place.
    await rpub.publishAsync('in/ready', 'ready', { qos: 1, retain: true });

    let conf = '';
    const links = new PeerLinks();
    cleanups.push(() => links.close());
    const cluster = await Cluster.start({
      ...(mutantCli === undefined ? {} : { cli: mutantCli }),
      electionTimeoutMs: 500,
      link: links.link,
      prepare: (dir) => {
        conf = join(dir, 'bridge.yaml');
        writeFileSync(conf, `bridge: ["up=mqtt://${LOOPBACK}:${relayPort}"]\nbridges:\n  up:\n    topic: ["in/# in 1"]\n`);
      },
      extra: () => ['--config', conf],
    });
    cleanups.push(() => cluster.dispose());
    const leader = await cluster.serving(SERVE_WAIT_MS);
    const followers = cluster.nodes.filter((n) => n !== leader);

    const subOpts = { clientId: 'in-sub', clean: false } as const;
    let sub: MqttClient = (await connect(leader.mqttPort, subOpts)).client;
    const got: string[] = collect(sub);
    await sub.subscribeAsync('in/#', { qos: 1 });
    await until('the retained message through the bridge', () => got.includes('ready'), SERVE_WAIT_MS);

    const published: string[] = [];
    const publishRange = async (from: number, to: number): Promise<void> => {
      for (let i = from; i < to; i++) {
        await rpub.publishAsync('in/x', String(i), { qos: 1 });
        published.push(String(i));
      }
    };
    await publishRange(0, KILL_AFTER);
    // Some messages are committed and acknowledged, some in flight at the bridge, some still
    // queued at the remote when the leader dies.
    await until('inbound messages flowing', () => got.length > 10, DELIVERY_WAIT_MS);
    let streaming: Promise<void>;
    if (isolate) {
      await until('the first half at the bridge', () => relay.sent.has(String(KILL_AFTER - 1)), DELIVERY_WAIT_MS);
      links.isolate(leader.id);
      const sentBefore = new Set(relay.sent);
      streaming = publishRange(KILL_AFTER, N);
      // Messages reach the leader, which proposes them and cannot commit them.
      await until('messages at the bridge of the cut-off leader', () => relay.sent.size > sentBefore.size, DELIVERY_WAIT_MS);
      if (mutantCli !== undefined) {
        // The planted bug shows itself here: it acknowledges what it cannot commit.
        const lost = await until(
          'the cut-off leader acknowledging a message it received after the cut',
          () => {
            const l = [...relay.acked].filter((m) => !sentBefore.has(m));
            return l.length > 0 ? l : null;
          },
          DELIVERY_WAIT_MS,
        );
        await leader.kill9(5_000);
        const next = await cluster.serving(FAILOVER_WAIT_MS, followers);
        await streaming;
        sub.end(true);
        sub = mqtt.connect({ host: LOOPBACK, port: next.mqttPort, ...subOpts, reconnectPeriod: 0 });
        cleanups.push(async () => {
          sub.end(true);
        });
        sub.on('message', (_t, payload) => got.push(payload.toString()));
        // The remote delivers the bridge's session in order, so once the last message is here
        // everything it still held for the bridge is here too.
        await rpub.publishAsync('in/x', 'end', { qos: 1 });
        await until('the last message', () => got.includes('end'), DELIVERY_WAIT_MS);
        const missing = lost.filter((m) => !got.includes(m));
        console.log(`# planted ack-before-commit: ${missing.length} of ${lost.length} messages acknowledged by the cut-off leader lost`);
        assert.ok(missing.length > 0, 'the planted bug loses a message the remote got PUBACK for');
        return;
      }
    } else streaming = publishRange(KILL_AFTER, N);
    const ackedBeforeKill = new Set(relay.acked);
    const t0 = performance.now();
    await leader.kill9(5_000);
    const next = await cluster.serving(FAILOVER_WAIT_MS, followers);
    console.log(
      `# kill -9 of node ${leader.id}${isolate ? ' (cut off first)' : ''} to node ${next.id} serving: ${Math.round(performance.now() - t0)} ms`,
    );
    await streaming;
    sub.end(true);

    // The handler goes on before CONNACK, so no redelivery is missed.
    sub = mqtt.connect({ host: LOOPBACK, port: next.mqttPort, ...subOpts, reconnectPeriod: 0 });
    cleanups.push(async () => {
      sub.end(true);
    });
    sub.on('message', (_t, payload) => got.push(payload.toString()));
    const ack = await new Promise<{ sessionPresent: boolean }>((resolve, reject) => {
      sub.once('connect', resolve);
      sub.once('error', reject);
    });
    assert.equal(ack.sessionPresent, true, "the subscriber's session is on the new leader");

    assert.ok(ackedBeforeKill.size > 0, 'the killed leader had acknowledged messages to the remote');
    await until('every message raftmq acknowledged to the remote', () => [...relay.acked].every((m) => got.includes(m)), DELIVERY_WAIT_MS);
    await until('every message the remote accepted from its publisher', () => published.every((m) => got.includes(m)), DELIVERY_WAIT_MS);
    assert.equal(published.length, N);
    const counts = new Map<string, number>();
    for (const m of got) if (m !== 'ready') counts.set(m, (counts.get(m) ?? 0) + 1);
    const duplicates = [...counts.values()].reduce((n, c) => n + c - 1, 0);
    const streamed = (acked: Set<string>): number => [...acked].filter((m) => m !== 'ready').length;
    console.log(
      `# inbound across kill -9${isolate ? ' (cut off first)' : ''}: ${N} published at the remote, ${streamed(relay.acked)} acknowledged by raftmq (${streamed(ackedBeforeKill)} before the kill), ${duplicates} duplicates at the subscriber`,
    );
    assert.ok(
      [...counts.keys()].every((m) => published.includes(m)),
      'nothing arrives that was not published',
    );
  }

  it('every message raftmq acknowledged to the remote reaches a raftmq subscriber after the failover', () => killMidStream(false));

  it('the same when the leader dies holding messages it could not commit (cut off from its peers)', () => killMidStream(true));

  it('catches the planted bug bridge-in-ack-before-commit: it loses messages the remote got PUBACK for', () =>
    killMidStream(true, buildPatched('bridge-in-ack-before-commit', BRIDGE_MUTANTS['bridge-in-ack-before-commit'], BUILD)));
});
