// Bridges with real parts (docs/bridges.md): Debian's Mosquitto as the remote, started by the test
// on a free loopback port; an MQTT.js client on the remote checks what arrives.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { type BridgeSpec, bridgeSpecs } from '../src/server/bridge/bridge-config.js';
import { BRIDGE_BACKOFF_FIRST_MS, BRIDGE_CONNECT_TIMEOUT_MS } from '../src/server/bridge/bridge-link.js';
import type { BrokerNode } from '../src/server/broker-node.js';
import { BrokerProcess } from './broker-process.js';
import { connectClient, connectPacket, disconnect, publish, RawClient, startNode, subscribe, type TestClient } from './helpers.js';
import { parseMetrics } from './prom-text.js';
import { Cluster } from './support/cluster.js';
import { Mosquitto } from './support/mosquitto.js';
import { freePort, httpGet, LOOPBACK } from './support/net.js';
import { ackPid, CloseOnce, PACKET, PacketRelay, publishOf } from './support/packet-relay.js';
import { sleep, until } from './support/wait.js';

const CLI = new URL('../src/cli.js', import.meta.url).pathname;
/** How far a Node timer may fire before performance.now() reaches its delay (ms). */
const TIMER_SLACK_MS = 2;
const dir = mkdtempSync(join(tmpdir(), 'raftmq-bridge-'));

function specs(url: string, topics: string[], more: Record<string, unknown> = {}): BridgeSpec[] {
  return bridgeSpecs({ bridge: [`up=${url}`], bridges: { up: { topic: topics, ...more } } });
}

interface Line {
  level: number;
  msg: string;
  [k: string]: unknown;
}

/** A node bridged by `bridges`, whose log lines are kept. */
async function bridgedNode(bridges: BridgeSpec[], extra: Record<string, unknown> = {}): Promise<{ node: BrokerNode; lines: Line[] }> {
  const lines: Line[] = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as Line) });
  const node = await startNode({ logger, bridges, bridgeRules: bridges.flatMap((b) => b.rules), ...extra });
  return { node, lines };
}

const up = (node: BrokerNode): boolean => node.bridgeStatus().every((b) => b.state === 'up');

/** The payload numbers in arrival order. */
const numbers = (c: TestClient): number[] => c.messages.map((m) => Number(m.payload));

describe('bridges to Mosquitto', { timeout: 120_000 }, () => {
  const cleanups: (() => Promise<void>)[] = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it('forwards QoS 0 and 1 with the local prefix remapped, and only what the rules match', async () => {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    const { node } = await bridgedNode(specs(remote.url, ['# out 1 site/ cloud/site1/', 'alerts out 0']));
    cleanups.push(() => node.stop());
    const sub = await connectClient(remote.port);
    cleanups.push(() => disconnect(sub));
    await subscribe(sub, '#', 1);
    await until('the bridge is up', () => up(node));
    const pub = await connectClient(node.port);
    cleanups.push(() => disconnect(pub));
    await publish(pub, 'site/a/b', '1', { qos: 1 });
    await publish(pub, 'site/c', '2', { qos: 0 });
    await publish(pub, 'alerts', '3', { qos: 1 });
    await publish(pub, 'elsewhere', '4', { qos: 1 });
    await publish(pub, 'site/last', '5', { qos: 1 });
    await sub.waitFor((m) => m.payload === '5', 'the last message at the remote');
    const got = sub.messages.map((m) => [m.topic, m.payload, m.packet.qos]);
    assert.deepEqual(got, [
      ['cloud/site1/a/b', '1', 1],
      ['cloud/site1/c', '2', 0],
      ['alerts', '3', 0],
      ['cloud/site1/last', '5', 1],
    ]);
    // The remote completed everything, so the replicated outbox is empty.
    await until('an empty outbox', () => node.bridgeStatus()[0]?.outbox === 0);
    assert.equal(node.bridgeStatus()[0]?.forwarded, 4);
  });

  it('forwards QoS 2 once each, also when the connection drops before a PUBREC or a PUBCOMP reaches raftmq', async () => {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    /** What raftmq sent, in order: "publish PID", "publish PID dup", "pubrel PID". */
    const flow: string[] = [];
    const once = new CloseOnce();
    // The connection closes at the first PUBREC for packet id 7 (raftmq has not seen it: a
    // PUBLISH with DUP and the same id must follow) and at the first PUBCOMP for 10 (its PUBREC is
    // recorded: a PUBREL must follow, never a PUBLISH).
    const relay = new PacketRelay(remote.port, {
      up: (f) => {
        if (f.type === PACKET.PUBLISH) {
          const p = publishOf(f);
          flow.push(`publish ${p.pid}${p.dup ? ' dup' : ''}`);
          assert.equal(p.qos, 2, 'forwarded at QoS 2');
        } else if (f.type === PACKET.PUBREL) flow.push(`pubrel ${ackPid(f)}`);
        return 'pass';
      },
      down: (f) => {
        if (f.type === PACKET.PUBREC && ackPid(f) === 7) return once.close('pubrec 7');
        if (f.type === PACKET.PUBCOMP && ackPid(f) === 10) return once.close('pubcomp 10');
        return 'pass';
      },
    });
    const relayPort = await relay.listen();
    cleanups.push(() => relay.close());
    const { node } = await bridgedNode(specs(`mqtt://${LOOPBACK}:${relayPort}`, ['q/# out 2']));
    cleanups.push(() => node.stop());
    const sub = await connectClient(remote.port);
    cleanups.push(() => disconnect(sub));
    await subscribe(sub, 'q/#', 2);
    await until('the bridge is up', () => up(node));
    const pub = await connectClient(node.port);
    cleanups.push(() => disconnect(pub));
    const N = 30;
    for (let i = 1; i <= N; i++) await publish(pub, 'q/x', String(i), { qos: 2 });
    await until('every message at the remote', () => new Set(numbers(sub)).size === N, 30_000);
    await until('an empty outbox', () => node.bridgeStatus()[0]?.outbox === 0, 30_000);
    assert.deepEqual(
      numbers(sub),
      Array.from({ length: N }, (_, i) => i + 1),
      'each once, in order',
    );
    assert.ok(
      sub.messages.every((m) => m.packet.qos === 2),
      'at QoS 2',
    );
    assert.equal(once.count, 2, 'both drops happened');
    assert.ok(relay.connections >= 3, `reconnected after each drop (${relay.connections} connections)`);
    const of = (pid: number): string[] => flow.filter((x) => x.split(' ')[1] === String(pid));
    for (let pid = 1; pid <= N; pid++) {
      const f = of(pid);
      assert.ok(f[0]?.startsWith(`publish ${pid}`), `PUBLISH first for ${pid}: ${f.join(', ')}`);
      const rel = f.indexOf(`pubrel ${pid}`);
      assert.ok(rel > 0, `PUBREL for ${pid}`);
      assert.ok(!f.slice(rel).some((x) => x.startsWith('publish')), `no PUBLISH of ${pid} once its PUBREC was recorded: ${f.join(', ')}`);
    }
    // DUP only on what may have reached the remote before: not before the first drop.
    assert.deepEqual(of(1), ['publish 1', 'pubrel 1']);
    assert.ok(of(7).includes('publish 7 dup'), `sent again with DUP after the lost PUBREC: ${of(7).join(', ')}`);
    assert.equal(of(10).filter((x) => x === 'pubrel 10').length, 2, `PUBREL again after the lost PUBCOMP: ${of(10).join(', ')}`);
    assert.equal(node.bridgeStatus()[0]?.forwarded, N);
  });

  for (const c of [
    {
      name: 'QoS 2 to a 3.1.1 remote within max-inflight-qos2',
      settings: { 'max-inflight-qos2': 3 },
      rule: 'q/# out 2',
      qos: 2 as const,
      bound: 3,
    },
    { name: 'QoS 1 within max-inflight', settings: { 'max-inflight': 5 }, rule: 'q/# out 1', qos: 1 as const, bound: 5 },
  ]) {
    it(`keeps ${c.name}, while the remote completes none`, async () => {
      const remote = await Mosquitto.start();
      cleanups.push(() => remote.dispose());
      // The remote's PUBACKs and PUBRECs are dropped, so nothing raftmq sends is ever completed.
      const sent: number[] = [];
      const relay = new PacketRelay(remote.port, {
        up: (f) => {
          if (f.type === PACKET.PUBLISH) sent.push(Number(publishOf(f).payload));
          return 'pass';
        },
        down: (f) => (f.type === PACKET.PUBACK || f.type === PACKET.PUBREC ? 'drop' : 'pass'),
      });
      const relayPort = await relay.listen();
      cleanups.push(() => relay.close());
      const { node } = await bridgedNode(specs(`mqtt://${LOOPBACK}:${relayPort}`, [c.rule], c.settings));
      cleanups.push(() => node.stop());
      await until('the bridge is up', () => up(node));
      const pub = await connectClient(node.port);
      cleanups.push(() => disconnect(pub));
      const N = 12;
      for (let i = 1; i <= N; i++) await publish(pub, 'q/x', String(i), { qos: c.qos });
      await until(`${c.bound} messages sent`, () => sent.length >= c.bound);
      // The window fills within one pump, so more would already be on their way: 300 ms more lets
      // any that were sent reach the relay.
      await sleep(300);
      assert.deepEqual(
        sent,
        Array.from({ length: c.bound }, (_, i) => i + 1),
        `the first ${c.bound} only`,
      );
      assert.equal(node.bridgeStatus()[0]?.outbox, N);
    });
  }

  it("publishes Mosquitto's $SYS/broker/connection/NAME/state: 1 while the bridge is up, 0 once its remote stops", async () => {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    const { node } = await bridgedNode(specs(remote.url, ['s/# out 1']), { sysIntervalS: 1 });
    cleanups.push(() => node.stop());
    await until('the bridge is up', () => up(node));
    const watcher = await connectClient(node.port);
    cleanups.push(() => disconnect(watcher));
    await subscribe(watcher, '$SYS/broker/connection/+/state', 0);
    const state = (): string | undefined => watcher.messages.filter((m) => m.topic === '$SYS/broker/connection/up/state').at(-1)?.payload;
    await until('state 1', () => state() === '1');
    await remote.stop();
    await until('state 0', () => state() === '0');
  });

  it('delivers every acknowledged QoS 1 message at least once, in order, while the remote is stopped and started again', async () => {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    const { node, lines } = await bridgedNode(specs(remote.url, ['stream/# out 1 "" r/']));
    cleanups.push(() => node.stop());
    // A persistent subscriber: Mosquitto keeps its queue across the stop.
    const sub = await connectClient(remote.port, { clientId: 'checker', clean: false, reconnectPeriod: 200 });
    cleanups.push(() => disconnect(sub));
    await subscribe(sub, 'r/#', 1);
    await until('the bridge is up', () => up(node));
    const pub = await connectClient(node.port);
    cleanups.push(() => disconnect(pub));
    const N = 300;
    let downAt = -1;
    for (let i = 0; i < N; i++) {
      if (i === 100) {
        await remote.stop();
        downAt = i;
      }
      if (i === 200) await remote.run();
      await publish(pub, 'stream/x', String(i), { qos: 1 });
    }
    assert.equal(downAt, 100);
    await until('every acknowledged message at the remote', () => new Set(numbers(sub)).size === N, 60_000);
    const got = numbers(sub);
    const firsts = got.filter((n, i) => got.indexOf(n) === i);
    assert.deepEqual(
      firsts,
      Array.from({ length: N }, (_, i) => i),
      'first arrivals in publish order',
    );
    assert.ok(
      lines.some((l) => l.msg === 'bridge down' && l.bridge === 'up' && typeof l.reason === 'string' && l.level === 40),
      'a warning naming the bridge and the reason',
    );
    assert.ok(lines.some((l) => l.msg === 'bridge up' && l.bridge === 'up'));
    await until('an empty outbox', () => node.bridgeStatus()[0]?.outbox === 0);
  });

  it('logs one error line when the remote stays down for down-alert-s, and the outage length when it is up again', async () => {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    const { node, lines } = await bridgedNode(specs(remote.url, ['a/# out 1'], { 'down-alert-s': 1 }));
    cleanups.push(() => node.stop());
    await until('the bridge is up', () => up(node));
    const pub = await connectClient(node.port);
    cleanups.push(() => disconnect(pub));
    await remote.stop();
    await publish(pub, 'a/x', 'waiting', { qos: 1 });
    const alert = await until('the alert', () => lines.find((l) => l.msg === 'bridge down for long'), 20_000);
    assert.equal(alert.level, 50, 'at error');
    assert.equal(alert.bridge, 'up');
    // Node's timers run on the event loop's millisecond clock, which may trail performance.now() by
    // up to a millisecond: a timer of 1,000 ms can measure 999.
    assert.ok(Number(alert.downMs) >= 1_000 - TIMER_SLACK_MS, `down for ${String(alert.downMs)} ms`);
    assert.ok(Number(alert.attempts) >= 1);
    assert.equal(typeof alert.reason, 'string');
    assert.equal(alert.outbox, 1, 'what waits for the remote');
    // More failed attempts of the same outage: warnings, and no second alert.
    const downs = (): number => lines.filter((l) => l.msg === 'bridge down').length;
    const before = downs();
    await until('another failed attempt', () => downs() > before, 20_000);
    await remote.run();
    const back = await until('the bridge up again', () => lines.find((l) => l.msg === 'bridge up'), 40_000);
    assert.ok(Number(back.downMs) >= 1_000 - TIMER_SLACK_MS, `the outage length (${String(back.downMs)} ms)`);
    assert.equal(lines.filter((l) => l.msg === 'bridge down for long').length, 1, 'one alert per outage');
  });

  it('sends again what the remote took but never acknowledged: paused, then killed, the remote gets it after its restart', async () => {
    // Mosquitto saves its sessions every second, so the subscriber's survives the kill.
    const remote = await Mosquitto.start(['autosave_interval 1']);
    cleanups.push(() => remote.dispose());
    const { node } = await bridgedNode(specs(remote.url, ['s/# out 1']));
    cleanups.push(() => node.stop());
    const sub = await connectClient(remote.port, { clientId: 'checker2', clean: false, reconnectPeriod: 200 });
    cleanups.push(() => disconnect(sub));
    await subscribe(sub, 's/#', 1);
    await until('the subscriber saved by the remote', () => existsSync(join(remote.dir, 'mosquitto.db')));
    await until('the bridge is up', () => up(node));
    const pub = await connectClient(node.port);
    cleanups.push(() => disconnect(pub));
    for (let i = 0; i < 50; i++) await publish(pub, 's/x', String(i), { qos: 1 });
    await until('the first 50 at the remote', () => new Set(numbers(sub)).size === 50);
    remote.pause();
    // Acknowledged by raftmq and written to the paused remote's socket in the turn of their commit,
    // never acknowledged by it.
    for (let i = 50; i < 80; i++) await publish(pub, 's/x', String(i), { qos: 1 });
    await remote.kill();
    for (let i = 80; i < 100; i++) await publish(pub, 's/x', String(i), { qos: 1 });
    await remote.run();
    await until('all 100 at the remote', () => new Set(numbers(sub)).size === 100, 60_000);
    const got = numbers(sub);
    assert.deepEqual(
      got.filter((n, i) => got.indexOf(n) === i),
      Array.from({ length: 100 }, (_, i) => i),
    );
  });

  it('a three-node cluster forwards from its serving leader only', async () => {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    const conf = join(dir, 'cluster-bridge.yaml');
    writeFileSync(conf, `bridge: ["up=${remote.url}"]\nbridges:\n  up:\n    topic: ["data/# out 1 \\"\\" from-cluster/"]\n`);
    const cluster = await Cluster.start({ extra: () => ['--config', conf] });
    cleanups.push(() => cluster.dispose());
    const sub = await connectClient(remote.port);
    cleanups.push(() => disconnect(sub));
    await subscribe(sub, 'from-cluster/#', 1);
    const leader = await cluster.serving(15_000);
    await until('the leader logs its bridge connected', () => leader.logs.some((l) => l.msg === 'bridge connected'));
    const pub = await connectClient(leader.mqttPort);
    cleanups.push(() => disconnect(pub));
    for (let i = 0; i < 20; i++) await publish(pub, `data/${i}`, String(i), { qos: 1 });
    await until('20 messages at the remote', () => new Set(numbers(sub)).size === 20, 20_000);
    assert.deepEqual(
      [...new Set(sub.messages.map((m) => m.topic))],
      Array.from({ length: 20 }, (_, i) => `from-cluster/data/${i}`),
    );
    for (const n of cluster.nodes) {
      if (n === leader) continue;
      assert.ok(!n.logs.some((l) => l.msg === 'bridge connected' || l.msg === 'bridge down'), `follower ${n.id} ran no bridge`);
    }
  });

  it('a remote that refuses, answers garbage or disconnects is retried with a log line naming the reason; local traffic goes on', async () => {
    const behaviours: ((s: Socket) => void)[] = [
      (s) => s.end(Buffer.from([0x20, 0x02, 0x00, 0x05])), // CONNACK: not authorized
      (s) => s.end(Buffer.from('HTTP/1.1 400 Bad Request\r\n\r\n')),
      (s) => s.destroy(),
    ];
    let accepted = 0;
    const server: Server = createServer((s) => {
      s.on('error', () => {});
      s.once('data', () => (behaviours[accepted++ % behaviours.length] as (s: Socket) => void)(s));
    });
    await new Promise<void>((resolve) => server.listen(0, LOOPBACK, () => resolve()));
    cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const port = (server.address() as { port: number }).port;
    const { node, lines } = await bridgedNode(specs(`mqtt://${LOOPBACK}:${port}`, ['# out 1']));
    cleanups.push(() => node.stop());
    const c = await connectClient(node.port);
    cleanups.push(() => disconnect(c));
    await subscribe(c, 'local', 1);
    await publish(c, 'local', 'still here', { qos: 1 });
    await c.waitFor((m) => m.payload === 'still here', 'local delivery while the bridge fails');
    const reasons = await until(
      'three failures logged',
      () => {
        const r = lines.filter((l) => l.msg === 'bridge down' && l.bridge === 'up').map((l) => String(l.reason));
        return r.length >= 3 ? r : null;
      },
      20_000,
    );
    assert.match(reasons[0] as string, /refused the CONNECT: code 0x05/);
    assert.match(reasons[1] as string, /not MQTT/);
    assert.match(reasons[2] as string, /closed the connection/);
    // The backoff grows: the logged delays of failures in a row do not shrink below half the last.
    const delays = lines.filter((l) => l.msg === 'bridge down').map((l) => Number(l.retryInMs));
    assert.ok(
      delays.every((d) => d >= 250 && d <= 30_000),
      String(delays),
    );
    assert.equal(node.bridgeStatus()[0]?.outbox, 1, 'the message waits in the outbox');
  });

  it('a remote that accepts the connection and never answers CONNECT is given up after the connect timeout and retried', async () => {
    let accepted = 0;
    const held: Socket[] = [];
    const server: Server = createServer((s) => {
      accepted++;
      held.push(s);
      s.on('error', () => {});
    });
    await new Promise<void>((resolve) => server.listen(0, LOOPBACK, () => resolve()));
    cleanups.push(
      () =>
        new Promise<void>((resolve) => {
          for (const s of held) s.destroy();
          server.close(() => resolve());
        }),
    );
    const port = (server.address() as { port: number }).port;
    const { node, lines } = await bridgedNode(specs(`mqtt://${LOOPBACK}:${port}`, ['# out 1']));
    cleanups.push(() => node.stop());
    const c = await connectClient(node.port);
    cleanups.push(() => disconnect(c));
    await subscribe(c, 'local', 1);
    await publish(c, 'local', 'meanwhile', { qos: 1 });
    await c.waitFor((m) => m.payload === 'meanwhile', 'local delivery while the remote hangs');
    const down = await until('the hang given up', () => lines.find((l) => l.msg === 'bridge down'), BRIDGE_CONNECT_TIMEOUT_MS + 5_000);
    assert.equal(down.bridge, 'up');
    assert.match(String(down.reason), /no CONNACK within 10000 ms/);
    await until('a second attempt', () => accepted >= 2, BRIDGE_BACKOFF_FIRST_MS + 5_000);
  });

  it('a full outbox refuses QoS 1/2 (MQTT 5 0x97, 3.1.1 a close) and drops QoS 0; /health and /metrics count it per bridge', async () => {
    // Nothing listens on the remote's port: every message waits in the outbox.
    const deadPort = await freePort();
    const conf = join(dir, 'full.yaml');
    writeFileSync(conf, `bridge: ["up=mqtt://${LOOPBACK}:${deadPort}"]\nbridges:\n  up:\n    topic: ["out/# out 1"]\n`);
    const broker = await BrokerProcess.start(['--health-port', '0', '--config', conf, '--bridge-outbox-messages', '2']);
    cleanups.push(async () => {
      await broker.stop();
    });
    const healthPort = (await broker.waitForLog((l) => l.msg === 'health listening')).port as number;
    const v5 = await RawClient.open(broker.port, 5);
    cleanups.push(async () => v5.destroy());
    v5.send(connectPacket({ level: 5, clientId: 'v5' }));
    await v5.waitFor('connack');
    const publishQos = (c: RawClient, pid: number, qos: 0 | 1 | 2, topic = 'out/x', retain = false): void =>
      c.send({
        type: 'publish',
        dup: false,
        qos,
        retain,
        topic,
        payload: Buffer.from(String(pid)),
        props: {},
        ...(qos > 0 ? { pid } : {}),
      });
    publishQos(v5, 1, 1);
    publishQos(v5, 2, 1);
    assert.equal((await v5.waitFor('puback', (p) => p.pid === 2)).code, 0x10, 'accepted: no matching subscribers');
    publishQos(v5, 3, 1);
    assert.equal((await v5.waitFor('puback', (p) => p.pid === 3)).code, 0x97);
    publishQos(v5, 4, 2);
    assert.equal((await v5.waitFor('pubrec', (p) => p.pid === 4)).code, 0x97);
    publishQos(v5, 5, 1, 'local/only');
    assert.equal((await v5.waitFor('puback', (p) => p.pid === 5)).code, 0x10, 'a topic no rule forwards is not refused');
    publishQos(v5, 0, 0, 'out/retained', true);
    const v4 = await RawClient.open(broker.port, 4);
    cleanups.push(async () => v4.destroy());
    v4.send(connectPacket({ clientId: 'v4' }));
    await v4.waitFor('connack');
    publishQos(v4, 1, 1);
    await v4.waitClosed();
    assert.equal(
      v4.packets.some((p) => p.type === 'puback'),
      false,
    );
    const health = await until('/health counting the refusals', async () => {
      const r = await httpGet(healthPort, '/health');
      const b = (JSON.parse(r.text) as { bridges?: Record<string, unknown>[] }).bridges?.[0];
      return b !== undefined && b.refused === 3 && b.dropped === 1 ? b : null;
    });
    assert.equal(health.name, 'up');
    assert.equal(health.outbox, 2);
    assert.notEqual(health.state, 'up');
    assert.match(String(health.lastError), /ECONNREFUSED|closed/);
    const m = parseMetrics((await httpGet(healthPort, '/metrics')).text);
    assert.equal(m.get('raftmq_bridge_outbox_messages{bridge="up"}'), 2);
    assert.equal(m.get('raftmq_bridge_refused_total{bridge="up"}'), 3);
    assert.equal(m.get('raftmq_bridge_dropped_total{bridge="up"}'), 1);
    assert.equal(m.get('raftmq_bridge_up{bridge="up"}'), 0);
    assert.equal(m.get('raftmq_bridge_forwarded_total{bridge="up"}'), 0);
  });

  it('drops a message whose expiry passes in the outbox while the remote is down, counts it, and forwards the rest with the expiry left', async () => {
    const remote = await Mosquitto.start();
    cleanups.push(() => remote.dispose());
    const conf = join(dir, 'expiry.yaml');
    writeFileSync(conf, `bridge: ["up=${remote.url}"]\nbridges:\n  up:\n    protocol-version: 5\n    topic: ["exp/# out 1"]\n`);
    const broker = await BrokerProcess.start(['--health-port', '0', '--config', conf]);
    cleanups.push(async () => {
      await broker.stop();
    });
    const healthPort = (await broker.waitForLog((l) => l.msg === 'health listening')).port as number;
    const bridge = async (): Promise<Record<string, unknown>> => {
      const r = await httpGet(healthPort, '/health');
      return (JSON.parse(r.text) as { bridges: Record<string, unknown>[] }).bridges[0] as Record<string, unknown>;
    };
    // A persistent MQTT 5 subscriber at the remote: its session outlives the remote's stop.
    const sub = await connectClient(remote.port, {
      protocolVersion: 5,
      clientId: 'expiry-checker',
      clean: false,
      properties: { sessionExpiryInterval: 3600 },
      reconnectPeriod: 200,
    });
    cleanups.push(() => disconnect(sub));
    await subscribe(sub, 'exp/#', 1);
    await until('the bridge is up', async () => (await bridge()).state === 'up');
    await remote.stop();
    await until('the bridge is down', async () => (await bridge()).state !== 'up');
    const pub = await connectClient(broker.port, { protocolVersion: 5 });
    cleanups.push(() => disconnect(pub));
    await publish(pub, 'exp/short', '1', { qos: 1, properties: { messageExpiryInterval: 1 } });
    await publish(pub, 'exp/never', '2', { qos: 1 });
    await publish(pub, 'exp/long', '3', { qos: 1, properties: { messageExpiryInterval: 100 } });
    const acked = Date.now();
    const expired = await until('the short one expired in the outbox', async () => {
      const b = await bridge();
      return b.expired === 1 ? b : null;
    });
    assert.equal(expired.outbox, 2);
    // The long one waits at least 2 s more (its entry's time is before its PUBACK), so it has at
    // most 98 s left when it is forwarded.
    await sleep(Math.max(0, acked + 2000 - Date.now()));
    await remote.run();
    await sub.waitFor((m) => m.payload === '3', 'the long-lived message at the remote', 60_000);
    // Forwarded in log order, so the expired one, had it gone out, would have come first.
    assert.deepEqual(
      sub.messages.map((m) => [m.topic, m.payload]),
      [
        ['exp/never', '2'],
        ['exp/long', '3'],
      ],
    );
    assert.equal(sub.messages[0]?.packet.properties?.messageExpiryInterval, undefined);
    const left = Number(sub.messages[1]?.packet.properties?.messageExpiryInterval);
    assert.ok(left >= 1 && left <= 98, `expiry left ${left}`);
    await until('an empty outbox', async () => (await bridge()).outbox === 0);
    const m = parseMetrics((await httpGet(healthPort, '/metrics')).text);
    assert.equal(m.get('raftmq_bridge_expired_total{bridge="up"}'), 1);
    assert.equal(m.get('raftmq_bridge_dropped_total{bridge="up"}'), 0);
    assert.equal(m.get('raftmq_bridge_forwarded_total{bridge="up"}'), 2);
  });

  it('a bad bridge configuration stops the start with exit status 2, naming it', () => {
    const conf = join(dir, 'bad.yaml');
    writeFileSync(conf, 'bridges:\n  up:\n    address: mqtt://127.0.0.1:1\n    topic: ["a/#/b out 1"]\n');
    const r = spawnSync(process.execPath, [CLI, '--port', '0', '--config', conf], { encoding: 'utf8', timeout: 20_000 });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /bridges\.up\.topic "a\/#\/b out 1"/);
    const r2 = spawnSync(process.execPath, [CLI, '--port', '0', '--bridge', 'up=http://h:1'], { encoding: 'utf8', timeout: 20_000 });
    assert.equal(r2.status, 2);
    assert.match(r2.stderr, /--bridge up=http:\/\/h:1: .*scheme http is not supported/);
  });
});
