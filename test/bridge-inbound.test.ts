// Inbound bridge rules with real parts (docs/bridges.md "Inbound"): Debian's Mosquitto as the
// remote, a publisher there and a subscriber at raftmq (MQTT.js).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { type BridgeSpec, bridgeSpecs } from '../src/server/bridge/bridge-config.js';
import type { BrokerNode } from '../src/server/broker-node.js';
import { connectClient, disconnect, publish, startNode, subscribe, type TestClient } from './helpers.js';
import { Mosquitto } from './support/mosquitto.js';
import { CuttableRelay, LOOPBACK } from './support/net.js';
import { ackPid, CloseOnce, PACKET, PacketRelay, publishOf } from './support/packet-relay.js';
import { until } from './support/wait.js';

interface Line {
  level: number;
  msg: string;
  [k: string]: unknown;
}

function specs(url: string, topics: string[], more: Record<string, unknown> = {}): BridgeSpec[] {
  return bridgeSpecs({ bridge: [`up=${url}`], bridges: { up: { topic: topics, ...more } } });
}

async function bridgedNode(bridges: BridgeSpec[], extra: Record<string, unknown> = {}): Promise<{ node: BrokerNode; lines: Line[] }> {
  const lines: Line[] = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as Line) });
  const node = await startNode({ logger, bridges, bridgeRules: bridges.flatMap((b) => b.rules), ...extra });
  return { node, lines };
}

const PUBACK_9 = Buffer.from([0x40, 0x02, 0x00, 0x09]);

const numbers = (c: TestClient): number[] => c.messages.map((m) => Number(m.payload));

describe('inbound bridge rules with Mosquitto', { timeout: 60_000 }, () => {
  const cleanups: (() => Promise<void>)[] = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it('brings QoS 0 and 1 in with the remote prefix remapped, at the lower QoS, and stores retained messages', async () => {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    const rpub = await connectClient(remote.port);
    cleanups.push(() => disconnect(rpub));
    // Retained before the bridge subscribes: its arrival shows the subscription is in place.
    await publish(rpub, 'cloud/dev/cmd/ready', 'r', { qos: 1, retain: true });
    const { node } = await bridgedNode(specs(remote.url, ['cmd/# in 1 dev/ cloud/dev/', 'raw/# in 0']));
    cleanups.push(() => node.stop());
    const sub = await connectClient(node.port);
    cleanups.push(() => disconnect(sub));
    await subscribe(sub, '#', 1);
    await sub.waitFor((m) => m.topic === 'dev/cmd/ready', 'the retained message, remapped');
    await publish(rpub, 'cloud/dev/cmd/a', '1', { qos: 1 });
    await publish(rpub, 'cloud/dev/cmd/b', '2', { qos: 0 });
    await publish(rpub, 'raw/x', '3', { qos: 1 });
    await publish(rpub, 'elsewhere', '4', { qos: 1 });
    await publish(rpub, 'cloud/dev/cmd/last', '5', { qos: 1 });
    await sub.waitFor((m) => m.payload === '5', 'the last message');
    // QoS 0 is routed at once and QoS 1 after its commit, so their order may differ.
    const got = sub.messages
      .filter((m) => m.topic !== 'dev/cmd/ready')
      .map((m) => `${m.topic} ${m.payload} ${m.packet.qos}`)
      .sort();
    assert.deepEqual(got, ['dev/cmd/a 1 1', 'dev/cmd/b 2 0', 'dev/cmd/last 5 1', 'raw/x 3 0']);
    const late = await connectClient(node.port);
    cleanups.push(() => disconnect(late));
    await subscribe(late, 'dev/cmd/ready', 0);
    const r = await late.waitFor((m) => m.topic === 'dev/cmd/ready', 'the retained message from the local store');
    assert.equal(r.packet.retain, true);
    await until('every message counted', () => node.bridgeStatus()[0]?.received === 5);
  });

  for (const protocol of [4, 5] as const) {
    it(`a both rule does not bring back what it sent out, nor send out what it brought in (MQTT ${protocol === 4 ? "3.1.1, Mosquitto's bridge bit" : '5, No Local'})`, async () => {
      const remote = await Mosquitto.start();
      cleanups.push(() => remote.dispose());
      const rsub = await connectClient(remote.port);
      cleanups.push(() => disconnect(rsub));
      await subscribe(rsub, 'loop/#', 1);
      const rpub = await connectClient(remote.port);
      cleanups.push(() => disconnect(rpub));
      await publish(rpub, 'loop/ready', 'r', { qos: 1, retain: true });
      const { node } = await bridgedNode(specs(remote.url, ['loop/# both 1'], { 'protocol-version': protocol }));
      cleanups.push(() => node.stop());
      const local = await connectClient(node.port);
      cleanups.push(() => disconnect(local));
      await subscribe(local, 'loop/#', 1);
      await local.waitFor((m) => m.topic === 'loop/ready', 'the subscription at the remote in place');
      await publish(local, 'loop/x', 'out', { qos: 1 });
      await rsub.waitFor((m) => m.topic === 'loop/x', 'the local message at the remote');
      await publish(rpub, 'loop/y', 'in', { qos: 1 });
      // The remote would send an echo of loop/x to the bridge before loop/y, and the bridge
      // proposes in arrival order: once loop/y is here, an echo would be too.
      await local.waitFor((m) => m.topic === 'loop/y', 'the remote message here');
      await publish(local, 'loop/z', 'last', { qos: 1 });
      // loop/z goes out after anything loop/y would have put in the outbox.
      await rsub.waitFor((m) => m.topic === 'loop/z', 'the last message at the remote');
      const here = local.messages.map((m) => m.topic).filter((t) => t !== 'loop/ready');
      assert.deepEqual(here, ['loop/x', 'loop/y', 'loop/z'], 'nothing came back');
      const there = rsub.messages.map((m) => m.topic).filter((t) => t !== 'loop/ready');
      assert.deepEqual(there, ['loop/x', 'loop/y', 'loop/z'], 'nothing went back out');
    });
  }

  it('brings QoS 2 in once each, also when the connection drops before our PUBREC or PUBCOMP reaches the remote', async () => {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    /** What the remote sent, in order: "publish PID", "publish PID dup", "pubrel PID". */
    const flow: string[] = [];
    const once = new CloseOnce();
    // Our PUBREC for the 4th message and our PUBCOMP for the 8th are lost with the connection: the
    // remote sends the 4th again (DUP), which must not be published twice, and PUBREL for the 8th.
    let recs = 0;
    let comps = 0;
    const relay = new PacketRelay(remote.port, {
      up: (f) => {
        if (f.type === PACKET.PUBREC && ++recs === 4) return once.close('pubrec');
        if (f.type === PACKET.PUBCOMP && ++comps === 8) return once.close('pubcomp');
        return 'pass';
      },
      down: (f) => {
        if (f.type === PACKET.PUBLISH) {
          const p = publishOf(f);
          if (p.qos === 2) flow.push(`publish ${p.pid}${p.dup ? ' dup' : ''}`);
        } else if (f.type === PACKET.PUBREL) flow.push(`pubrel ${ackPid(f)}`);
        return 'pass';
      },
    });
    const relayPort = await relay.listen();
    cleanups.push(() => relay.close());
    const rpub = await connectClient(remote.port);
    cleanups.push(() => disconnect(rpub));
    await publish(rpub, 'r/q/ready', 'r', { qos: 1, retain: true });
    const { node } = await bridgedNode(specs(`mqtt://${LOOPBACK}:${relayPort}`, ['q/# in 2 "" r/']));
    cleanups.push(() => node.stop());
    const sub = await connectClient(node.port);
    cleanups.push(() => disconnect(sub));
    await subscribe(sub, 'q/#', 2);
    await sub.waitFor((m) => m.topic === 'q/ready', 'the subscription at the remote in place');
    const N = 12;
    for (let i = 1; i <= N; i++) await publish(rpub, 'r/q/x', String(i), { qos: 2 });
    await until('every message here', () => new Set(numbers(sub).filter((n) => !Number.isNaN(n))).size === N, 30_000);
    // The remote sends in order, so what it sent again before the last message was applied before it.
    // Each message counted once (and the retained one at each reconnect, which a 3.1.1 remote resends).
    await until('the last flow completed', () => (node.bridgeStatus()[0]?.received ?? 0) >= N + 1, 30_000);
    const got = sub.messages.filter((m) => m.topic === 'q/x');
    assert.deepEqual(
      got.map((m) => Number(m.payload)),
      Array.from({ length: N }, (_, i) => i + 1),
      `each once, in order (the remote sent: ${flow.join(', ')})`,
    );
    assert.ok(
      got.every((m) => m.packet.qos === 2),
      'at QoS 2',
    );
    await until('both drops', () => once.count === 2, 30_000);
    assert.ok(
      flow.some((x) => x.endsWith(' dup')),
      `the remote sent a message again after the lost PUBREC: ${flow.join(', ')}`,
    );
    await until('the bridge up again', () => node.bridgeStatus()[0]?.state === 'up');
  });

  it('QoS 1 messages published while the bridge is down, and across a restart of the remote, all arrive (persistent session)', async () => {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    const relay = new CuttableRelay(remote.port);
    const relayPort = await relay.listen();
    cleanups.push(() => relay.close());
    let rpub = await connectClient(remote.port);
    await publish(rpub, 'r/s/ready', 'r', { qos: 1, retain: true });
    const { node, lines } = await bridgedNode(specs(`mqtt://${LOOPBACK}:${relayPort}`, ['s/# in 1 "" r/']));
    cleanups.push(() => node.stop());
    const sub = await connectClient(node.port);
    cleanups.push(() => disconnect(sub));
    await subscribe(sub, 's/#', 1);
    await sub.waitFor((m) => m.topic === 's/ready', 'the subscription at the remote in place');
    const N = 60;
    for (let i = 0; i < N; i++) {
      if (i === 20) {
        relay.cut();
        await until('the bridge down', () => node.bridgeStatus()[0]?.state !== 'up');
      }
      if (i === 40) {
        // The remote keeps the bridge's session and its queue across its own restart.
        await disconnect(rpub);
        await remote.stop();
        await remote.run();
        rpub = await connectClient(remote.port);
      }
      if (i === 50) relay.down = false;
      await publish(rpub, 'r/s/x', String(i), { qos: 1 });
    }
    cleanups.push(() => disconnect(rpub));
    await until('every message here', () => new Set(numbers(sub).filter((n) => !Number.isNaN(n))).size === N, 30_000);
    assert.ok(lines.some((l) => l.msg === 'bridge down' && l.bridge === 'up'));
  });

  it('a message from the remote that a full outbox refuses here is not acknowledged there, and arrives once the outbox drains', async () => {
    const src = await Mosquitto.start();
    cleanups.push(() => src.dispose());
    const dst = await Mosquitto.start();
    cleanups.push(async () => {
      dst.resume();
      await dst.dispose();
    });
    const bridges = bridgeSpecs({
      bridge: [`src=${src.url}`, `dst=${dst.url}`],
      bridges: { src: { topic: ['x/# in 1'] }, dst: { topic: ['x/# out 1 "" fwd/'] } },
    });
    const { node } = await bridgedNode(bridges, { bridgeOutboxMessages: 2 });
    cleanups.push(() => node.stop());
    const rsub = await connectClient(dst.port);
    cleanups.push(() => disconnect(rsub));
    await subscribe(rsub, 'fwd/#', 1);
    const rpub = await connectClient(src.port);
    cleanups.push(() => disconnect(rpub));
    await publish(rpub, 'x/ready', 'r', { qos: 1, retain: true });
    await rsub.waitFor((m) => m.topic === 'fwd/x/ready', 'the path through both bridges');
    // The second remote reads nothing: what goes to it stays in the outbox, which takes 2.
    dst.pause();
    for (let i = 0; i < 5; i++) await publish(rpub, 'x/n', String(i), { qos: 1 });
    await until('a refusal for the full outbox', () => (node.counters.get('bridge-outbox-refused') ?? 0) > 0);
    dst.resume();
    await until('all 5 at the second remote', () => new Set(numbers(rsub).filter((n) => !Number.isNaN(n))).size === 5, 30_000);
  });

  it('bad input from the remote is counted and named; a PUBLISH we did not subscribe to is acknowledged and dropped; garbage reconnects', async () => {
    // A fake remote: CONNACK, then a QoS 1 PUBLISH on a topic no rule takes; on the second
    // connection, bytes that are not MQTT.
    let accepted = 0;
    const acks: Buffer[] = [];
    const server: Server = createServer((s) => {
      s.on('error', () => {});
      const n = accepted++;
      s.once('data', () => {
        if (n === 0) {
          const topic = Buffer.from('nobody/asked');
          const body = Buffer.concat([Buffer.from([0, topic.length]), topic, Buffer.from([0, 9]), Buffer.from('x')]);
          s.write(Buffer.from([0x20, 0x02, 0x00, 0x00]));
          s.write(Buffer.concat([Buffer.from([0x32, body.length]), body]));
          s.on('data', (b: Buffer) => {
            acks.push(b);
            // Acknowledged: this connection has done its part.
            if (Buffer.concat(acks).includes(PUBACK_9)) s.destroy();
          });
        } else s.end(Buffer.from([0x20, 0x02, 0x00, 0x00, 0xf0, 0x00]));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, LOOPBACK, () => resolve()));
    cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const port = (server.address() as { port: number }).port;
    const { node, lines } = await bridgedNode(specs(`mqtt://${LOOPBACK}:${port}`, ['cmd/# in 1']));
    cleanups.push(() => node.stop());
    // The SUBSCRIBE (0x82) and the PUBACK (0x40, packet id 9) come back on the first connection.
    await until('the PUBACK for the unexpected PUBLISH', () => Buffer.concat(acks).includes(PUBACK_9));
    assert.equal(node.counters.get('bridge-in-no-rule'), 1);
    // The first connection is cut; the second answers with a packet of a reserved type.
    await until('a protocol error logged', () =>
      lines.some((l) => l.msg === 'bridge down' && /not MQTT|unexpected/.test(String(l.reason))),
    );
    assert.ok((node.counters.get('bridge-protocol-error') ?? 0) >= 1);
    assert.ok((node.bridgeStatus()[0]?.rejected ?? 0) >= 2);
  });
});
