// Bridged QoS 2 across kill -9 of the raftmq leader on a three-node cluster, with Debian's Mosquitto
// as the remote. Outbound (docs/bridges.md "QoS 2 to the remote"): every message raftmq
// acknowledged reaches a subscriber on Mosquitto exactly once. Inbound (at the end of the file):
// every message Mosquitto sends is published here once.
//
// A plain kill rarely lands between a PUBREC and its record's commit, so the test makes it land
// there: a relay between the nodes and Mosquitto holds the bridge's packets while a publisher's
// QoS 2 messages are committed (so a window of PUBLISHes waits in the relay), the leader is cut off
// from its peers, and the relay lets the PUBLISHes through. Mosquitto answers PUBREC to each; the
// cut-off leader cannot commit their record, so it must not send PUBREL. It is killed, and the new
// leader, which knows only the outbox, sends each again with DUP and the same packet id; Mosquitto,
// still holding the ids in the bridge's session, delivers each once.
//
// The second case runs that on a copy of the broker with a planted bug, `pubrel-before-record`
// (PUBREL written as the PUBREC arrives, before the record is committed): Mosquitto delivers those
// messages at the PUBREL, the new leader sends them again as PUBLISH, and Mosquitto, whose session
// no longer holds their ids, delivers them again. The duplicates must show.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import mqtt from 'mqtt';
import { buildPatched } from '../jepsen-like-tests/mutants.js';
import { collect, connect } from './cluster-mqtt.js';
import { BRIDGE_MUTANTS } from './support/bridge-mutants.js';
import { Cluster } from './support/cluster.js';
import { Mosquitto } from './support/mosquitto.js';
import { freePort, LOOPBACK, PeerLinks } from './support/net.js';
import { PACKET, PacketRelay, publishOf } from './support/packet-relay.js';
import { sleep, until } from './support/wait.js';

const SERVE_WAIT_MS = 15_000;
const FAILOVER_WAIT_MS = 15_000;
const DELIVERY_WAIT_MS = 60_000;
/** QoS 2 messages published and acknowledged before the cut. */
const N = 60;
/** QoS 2 messages a 3.1.1 remote is sent at once (max-inflight-qos2, src/server/bridge/bridge-config.ts BRIDGE_MAX_INFLIGHT_QOS2_V4_DEFAULT). */
const WINDOW = 20;
/** How long the cut-off leader is watched for a PUBREL after the remote's PUBRECs reached it. */
const WATCH_MS = 300;
const BUILD = fileURLToPath(new URL('..', import.meta.url));

describe('outbound QoS 2 bridge across kill -9 of the raftmq leader', { timeout: 180_000 }, () => {
  const cleanups: (() => Promise<void>)[] = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  /** The hold, the cut, the PUBRECs the leader cannot record, the kill and the count at the remote;
   * `mutantCli`: the nodes run that copy of the broker, which must deliver some message twice. */
  async function recordsLostWithTheLeader(mutantCli?: string): Promise<void> {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    /** Set at the release: what the cut-off leader sends after it, and what the remote answers. */
    let holding = false;
    let released = false;
    let killed = false;
    let pubrecsAfterRelease = 0;
    let pubrelsBeforeKill = 0;
    const held: number[] = [];
    /** The new leader's PUBLISHes: packet id and DUP. */
    const resent: { pid: number; dup: boolean }[] = [];
    const relay = new PacketRelay(remote.port, {
      up: (f) => {
        if (f.type === PACKET.PUBLISH && holding && !released) held.push(publishOf(f).pid);
        if (f.type === PACKET.PUBLISH && killed) {
          const { pid, dup } = publishOf(f);
          resent.push({ pid, dup });
        }
        if (f.type === PACKET.PUBREL && released && !killed) pubrelsBeforeKill++;
        return 'pass';
      },
      down: (f) => {
        if (f.type === PACKET.PUBREC && released && !killed) pubrecsAfterRelease++;
        return 'pass';
      },
    });
    const relayPort = await relay.listen();
    cleanups.push(() => relay.close());

    const sub = (await connect(remote.port, { clientId: 'q2-checker', clean: true })).client;
    cleanups.push(async () => {
      sub.end(true);
    });
    const got = collect(sub);
    await sub.subscribeAsync('remote/#', { qos: 2 });

    let conf = '';
    const links = new PeerLinks();
    cleanups.push(() => links.close());
    const cluster = await Cluster.start({
      ...(mutantCli === undefined ? {} : { cli: mutantCli }),
      electionTimeoutMs: 500,
      link: links.link,
      prepare: (dir) => {
        conf = join(dir, 'bridge.yaml');
        writeFileSync(
          conf,
          `bridge: ["up=mqtt://${LOOPBACK}:${relayPort}"]\nbridges:\n  up:\n    keepalive-s: 60\n    topic: ["# out 2 q/ remote/"]\n`,
        );
      },
      extra: () => ['--config', conf],
    });
    cleanups.push(() => cluster.dispose());
    const leader = await cluster.serving(SERVE_WAIT_MS);
    const followers = cluster.nodes.filter((n) => n !== leader);

    const pub = (await connect(leader.mqttPort, { clientId: 'q2-pub', clean: true })).client;
    cleanups.push(async () => {
      pub.end(true);
    });
    await pub.publishAsync('q/probe', 'probe', { qos: 2 });
    await until('the probe through the bridge', () => got.includes('probe'), SERVE_WAIT_MS);

    relay.hold();
    holding = true;
    for (let i = 0; i < N; i++) await pub.publishAsync('q/x', String(i), { qos: 2 });
    // Every one committed and acknowledged; a window of them written to the relay and held there.
    await until(`${WINDOW} PUBLISHes held`, () => held.length >= WINDOW, DELIVERY_WAIT_MS);
    pub.end(true);
    links.isolate(leader.id);
    released = true;
    relay.release();
    await until('the PUBRECs of the held window at the cut-off leader', () => pubrecsAfterRelease >= WINDOW, DELIVERY_WAIT_MS);
    if (mutantCli === undefined) {
      await sleep(WATCH_MS);
      assert.equal(pubrelsBeforeKill, 0, 'no PUBREL from a leader that cannot commit the PUBREC record');
    } else await until('the planted bug writing PUBREL', () => pubrelsBeforeKill > 0, DELIVERY_WAIT_MS);
    const t0 = performance.now();
    await leader.kill9(5_000);
    killed = true;
    const next = await cluster.serving(FAILOVER_WAIT_MS, followers);
    console.log(
      `# kill -9 of node ${leader.id} (cut off, ${pubrecsAfterRelease} PUBRECs unrecorded) to node ${next.id} serving: ${Math.round(performance.now() - t0)} ms`,
    );

    // Forwarded in log order: once the last one is at the remote, what the new leader sent again
    // before it is too.
    const end = (await connect(next.mqttPort, { clientId: 'q2-end', clean: true })).client;
    cleanups.push(async () => {
      end.end(true);
    });
    await end.publishAsync('q/x', 'end', { qos: 2 });
    await until('the last message at the remote', () => got.includes('end'), DELIVERY_WAIT_MS);
    const counts = new Map<string, number>();
    for (const m of got) counts.set(m, (counts.get(m) ?? 0) + 1);
    const duplicates = [...counts.entries()].filter(([, c]) => c > 1).map(([m]) => m);
    const missing = Array.from({ length: N }, (_, i) => String(i)).filter((m) => !counts.has(m));
    console.log(
      `# QoS 2 across kill -9${mutantCli === undefined ? '' : ' (planted pubrel-before-record)'}: ${N} acknowledged, ${missing.length} missing, ${duplicates.length} delivered twice at the remote, ${relay.connections} bridge connections`,
    );
    assert.deepEqual(missing, [], 'every acknowledged message at the remote');
    if (mutantCli !== undefined) {
      assert.ok(duplicates.length > 0, 'the planted bug delivers a message twice');
      return;
    }
    assert.deepEqual(duplicates, [], 'none twice');
    // The ids come from the replicated state: the new leader sends the held window again under the
    // ids the old one used, with DUP.
    assert.deepEqual(
      resent.slice(0, held.length),
      held.map((pid) => ({ pid, dup: true })),
    );
    const firsts = got.filter((m) => /^\d+$/.test(m)).map(Number);
    assert.deepEqual(
      firsts,
      Array.from({ length: N }, (_, i) => i),
      'in the order published',
    );
  }

  it('every acknowledged message reaches the remote once when the leader dies holding unrecorded PUBRECs', () =>
    recordsLostWithTheLeader());

  it('catches the planted bug pubrel-before-record: it delivers messages twice', () =>
    recordsLostWithTheLeader(buildPatched('pubrel-before-record', BRIDGE_MUTANTS['pubrel-before-record'], BUILD)));
});

// Inbound (docs/bridges.md "QoS 2 from the remote"): Mosquitto sends a window of QoS 2 messages to
// the bridge; the leader commits them (publishing each to the local subscriber) while the relay
// holds its PUBRECs, and dies with them. Mosquitto, keeping the bridge's session, sends each again
// with DUP to the new leader, which holds their ids in the replicated state: it answers PUBREC and
// does not publish them again. The second case runs a copy of the broker whose apply ignores the
// ids held (`bridge-in-ignores-held-ids`), and requires the duplicates to show.
describe('inbound QoS 2 bridge across kill -9 of the raftmq leader', { timeout: 180_000 }, () => {
  const cleanups: (() => Promise<void>)[] = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  async function pubrecsLostWithTheLeader(mutantCli?: string): Promise<void> {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    let killed = false;
    /** PUBCOMPs raftmq sent the remote: the probes' flows are over when there is one per probe. */
    let pubcomps = 0;
    let probes = 0;
    const redelivered: string[] = [];
    const relay = new PacketRelay(remote.port, {
      up: (f) => {
        if (f.type === PACKET.PUBCOMP) pubcomps++;
        return 'pass';
      },
      down: (f) => {
        if (f.type === PACKET.PUBLISH && killed) {
          const p = publishOf(f);
          if (p.dup) redelivered.push(p.payload);
        }
        return 'pass';
      },
    });
    const relayPort = await relay.listen();
    cleanups.push(() => relay.close());
    const rpub = (await connect(remote.port, { clientId: 'in2-pub', clean: true })).client;
    cleanups.push(async () => {
      rpub.end(true);
    });

    // Fixed MQTT ports, so the subscriber lists every node (MQTT.js `servers`) and one client, with
    // its QoS 2 state, follows the leader.
    const mqttPorts = [await freePort(), await freePort(), await freePort()];
    let conf = '';
    const cluster = await Cluster.start({
      ...(mutantCli === undefined ? {} : { cli: mutantCli }),
      electionTimeoutMs: 500,
      prepare: (dir) => {
        conf = join(dir, 'bridge.yaml');
        writeFileSync(
          conf,
          `bridge: ["up=mqtt://${LOOPBACK}:${relayPort}"]\nbridges:\n  up:\n    keepalive-s: 60\n    topic: ["in/# in 2"]\n`,
        );
      },
      extra: (id) => ['--config', conf, '--port', String(mqttPorts[id - 1])],
    });
    cleanups.push(() => cluster.dispose());
    const leader = await cluster.serving(SERVE_WAIT_MS);
    const followers = cluster.nodes.filter((n) => n !== leader);
    const servers = mqttPorts.map((port) => ({ host: LOOPBACK, port }));
    const sub = mqtt.connect({ servers, clientId: 'in2-sub', clean: false, reconnectPeriod: 100, connectTimeout: 2_000 });
    cleanups.push(async () => {
      sub.end(true);
    });
    const got: string[] = [];
    sub.on('message', (_t, payload) => got.push(payload.toString()));
    await new Promise<void>((resolve) => sub.once('connect', () => resolve()));
    await sub.subscribeAsync('in/#', { qos: 2 });
    // The bridge's subscription at the remote is in place once a message gets through.
    await until(
      'a message through the bridge',
      async () => {
        await rpub.publishAsync('in/probe', 'probe', { qos: 2 });
        probes++;
        return got.includes('probe');
      },
      SERVE_WAIT_MS,
    );
    // Each of the remote's inflight slots free for the window.
    await until("the probes' flows completed", () => pubcomps >= probes, SERVE_WAIT_MS);

    relay.hold();
    const done = Array.from({ length: WINDOW }, (_, i) => rpub.publishAsync('in/x', String(i), { qos: 2 }));
    const window = Array.from({ length: WINDOW }, (_, i) => String(i));
    // Committed and published here; their PUBRECs held in the relay.
    await until('the window at the local subscriber', () => window.every((m) => got.includes(m)), DELIVERY_WAIT_MS);
    killed = true;
    await leader.kill9(5_000);
    // The PUBRECs die with the leader; the new one's packets pass.
    relay.discard();
    await cluster.serving(FAILOVER_WAIT_MS, followers);
    await Promise.all(done);
    await rpub.publishAsync('in/x', 'end', { qos: 2 });
    await until('the last message', () => got.includes('end'), DELIVERY_WAIT_MS);
    const twice = window.filter((m) => got.filter((x) => x === m).length > 1);
    console.log(
      `# inbound QoS 2 across kill -9${mutantCli === undefined ? '' : ' (planted bridge-in-ignores-held-ids)'}: ${WINDOW} committed with their PUBRECs lost, ${redelivered.length} sent again by the remote, ${twice.length} published twice`,
    );
    assert.ok(redelivered.length > 0, 'the remote sent the window again');
    if (mutantCli !== undefined) {
      assert.ok(twice.length > 0, 'the planted bug publishes a message twice');
      return;
    }
    assert.deepEqual(twice, [], 'none published twice');
  }

  it('a message committed with its PUBREC lost is not published again when the remote sends it to the new leader', () =>
    pubrecsLostWithTheLeader());

  it('catches the planted bug bridge-in-ignores-held-ids: it publishes messages twice', () =>
    pubrecsLostWithTheLeader(buildPatched('bridge-in-ignores-held-ids', BRIDGE_MUTANTS['bridge-in-ignores-held-ids'], BUILD)));
});
