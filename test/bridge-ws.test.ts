// Bridges over WebSocket (docs/bridges.md "Configuration"): Aedes, a broker we did not write, as the
// remote behind a ws WebSocketServer on a free loopback port, plain (ws://) and with TLS (wss://,
// certificates made by openssl at test time); an MQTT.js client on Aedes's TCP port checks what
// arrives. Remotes that answer the upgrade wrongly are plain ws servers of the test.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createNetServer, type Server as NetServer } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Aedes } from 'aedes';
import pino from 'pino';
import { createWebSocketStream, WebSocketServer } from 'ws';
import { type BridgeSpec, bridgeSpecs } from '../src/server/bridge/bridge-config.js';
import type { BrokerNode } from '../src/server/broker-node.js';
import { connectClient, disconnect, publish, startNode, subscribe, type TestClient } from './helpers.js';
import { LOOPBACK } from './support/net.js';
import { until } from './support/wait.js';
import { makePki, type Pki } from './tls-certs.js';

interface Line {
  level: number;
  msg: string;
  [k: string]: unknown;
}

/** Aedes with a TCP listener (for the checking client) and a WebSocket listener on /mqtt. */
interface Remote {
  tcpPort: number;
  wsPort: number;
  close(): Promise<void>;
}

function listen(server: HttpServer | NetServer): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, LOOPBACK, () => {
      const a = server.address();
      resolve(typeof a === 'object' && a !== null ? a.port : 0);
    });
  });
}

async function aedesRemote(tls: { cert: string; key: string } | null): Promise<Remote> {
  const aedes = await Aedes.createBroker();
  const tcp = createNetServer(aedes.handle);
  const http = tls === null ? createHttpServer() : createHttpsServer({ cert: readFileSync(tls.cert), key: readFileSync(tls.key) });
  const wss = new WebSocketServer({ server: http, path: '/mqtt' });
  wss.on('connection', (ws) => aedes.handle(createWebSocketStream(ws)));
  const tcpPort = await listen(tcp);
  const wsPort = await listen(http);
  return {
    tcpPort,
    wsPort,
    close: async () => {
      for (const c of wss.clients) c.terminate();
      await new Promise((r) => wss.close(r));
      await new Promise((r) => http.close(r));
      await new Promise((r) => tcp.close(r));
      await new Promise((r) => aedes.close(() => r(undefined)));
    },
  };
}

/** A node with one bridge `name` to `url`; its log lines are kept. */
async function bridged(name: string, url: string, topics: string[], more: Record<string, unknown> = {}) {
  const specs: BridgeSpec[] = bridgeSpecs({ bridge: [`${name}=${url}`], bridges: { [name]: { topic: topics, ...more } } });
  const lines: Line[] = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as Line) });
  const node = await startNode({ logger, bridges: specs, bridgeRules: specs.flatMap((b) => b.rules) });
  return { node, lines };
}

const up = (node: BrokerNode): boolean => node.bridgeStatus().every((b) => b.state === 'up');

describe('bridges over WebSocket, to Aedes', { timeout: 120_000 }, () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  let pki: Pki;
  let server: { cert: string; key: string };
  before(() => {
    pki = makePki('bridge-ws');
    server = pki.issue('remote', { cn: 'remote', san: `IP:${LOOPBACK}`, server: true });
  });
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  /** An Aedes remote and a client on its TCP port subscribed to `filter` (QoS 1). */
  async function checkedRemote(
    tls: { cert: string; key: string } | null,
    filter: string,
  ): Promise<{ remote: Remote; checker: TestClient }> {
    const remote = await aedesRemote(tls);
    cleanups.push(() => remote.close());
    const checker = await connectClient(remote.tcpPort);
    cleanups.push(() => disconnect(checker));
    await subscribe(checker, filter, 1);
    return { remote, checker };
  }

  /** Publishes `n` QoS 1 messages on the local node and waits until `checker` has each; returns
   * the first arrivals in order. */
  async function forward(node: BrokerNode, checker: TestClient, topic: string, remoteTopic: string, n: number): Promise<number[]> {
    const pub = await connectClient(node.port);
    cleanups.push(() => disconnect(pub));
    for (let i = 0; i < n; i++) await publish(pub, topic, String(i), { qos: 1 });
    const got = (): number[] => checker.messages.filter((m) => m.topic === remoteTopic).map((m) => Number(m.payload));
    await until(`${n} messages at the remote`, () => new Set(got()).size === n);
    const arrived = got();
    return arrived.filter((x, i) => arrived.indexOf(x) === i);
  }

  it('forwards QoS 1 out and takes QoS 1 in over ws://, with the local prefix remapped', async () => {
    const { remote, checker } = await checkedRemote(null, 'cloud/#');
    const { node, lines } = await bridged('edge', `ws://${LOOPBACK}:${remote.wsPort}/mqtt`, ['# out 1 site/ cloud/', 'cmd/# in 1']);
    cleanups.push(() => node.stop());
    await until('the bridge is up', () => up(node));
    assert.ok(lines.some((l) => l.msg === 'bridge connected' && l.address === `ws://${LOOPBACK}:${remote.wsPort}/mqtt`));

    const N = 50;
    assert.deepEqual(await forward(node, checker, 'site/t', 'cloud/t', N), [...Array(N).keys()], 'first arrivals in publish order');
    assert.ok(
      checker.messages.filter((m) => m.topic === 'cloud/t').every((m) => m.packet.qos === 1),
      'at QoS 1',
    );
    await until('all completed', () => node.bridgeStatus()[0]?.forwarded === N && node.bridgeStatus()[0]?.outbox === 0);

    // Inbound: what Aedes has on cmd/# comes in, acknowledged to Aedes after the local commit.
    const local = await connectClient(node.port);
    cleanups.push(() => disconnect(local));
    await subscribe(local, 'cmd/#', 1);
    for (let i = 0; i < 10; i++) await publish(checker, 'cmd/go', `c${i}`, { qos: 1 });
    await until('ten commands in', () => new Set(local.messages.filter((m) => m.topic === 'cmd/go').map((m) => m.payload)).size === 10);
  });

  it('connects over wss:// trusting its tls-ca, and refuses a remote whose certificate that CA did not sign', async () => {
    const { remote, checker } = await checkedRemote(server, 'secure/#');
    const url = `wss://${LOOPBACK}:${remote.wsPort}/mqtt`;
    const { node } = await bridged('tls', url, ['# out 1 s/ secure/'], { 'tls-ca': pki.caCert });
    cleanups.push(() => node.stop());
    await until('the bridge is up', () => up(node));
    assert.deepEqual(await forward(node, checker, 's/x', 'secure/x', 20), [...Array(20).keys()]);

    const other = makePki('bridge-ws-other');
    const distrust = await bridged('distrust', url, ['d/# out 1'], { 'tls-ca': other.caCert });
    cleanups.push(() => distrust.node.stop());
    const down = await until(
      'a refused attempt',
      () => distrust.lines.find((l) => l.msg === 'bridge down' && l.bridge === 'distrust'),
      20_000,
    );
    assert.equal(down.level, 40);
    assert.match(String(down.reason), /certificate/i);
    assert.equal(up(distrust.node), false);
  });

  it('a remote that answers the upgrade wrongly or sends a text frame: bridge down with the reason, local traffic goes on', async () => {
    // One plain ws server per misbehaviour, all on one HTTP server: /none answers without a
    // subprotocol, /text accepts mqtt and sends a text frame; any other path gets 400 from ws.
    const http = createHttpServer();
    const none = new WebSocketServer({ noServer: true, handleProtocols: () => false });
    const text = new WebSocketServer({ noServer: true, handleProtocols: () => 'mqtt' });
    text.on('connection', (ws) => ws.send('not MQTT'));
    http.on('upgrade', (req, socket, head) => {
      const to = req.url === '/none' ? none : req.url === '/text' ? text : null;
      if (to === null) {
        socket.end('HTTP/1.1 400 Bad Request\r\n\r\n');
        return;
      }
      to.handleUpgrade(req, socket, head, (ws) => to.emit('connection', ws, req));
    });
    const port = await listen(http);
    cleanups.push(async () => {
      for (const s of [none, text]) for (const c of s.clients) c.terminate();
      await new Promise((r) => http.close(r));
    });
    const cases: [string, RegExp][] = [
      ['/elsewhere', /Unexpected server response: 400/],
      ['/none', /no subprotocol/i],
      ['/text', /text frame/],
    ];
    for (const [path, why] of cases) {
      const name = `bad${path.replace('/', '-')}`;
      const { node, lines } = await bridged(name, `ws://${LOOPBACK}:${port}${path}`, ['b/# out 1']);
      cleanups.push(() => node.stop());
      const down = await until(`${path}: a failed attempt`, () => lines.find((l) => l.msg === 'bridge down'), 20_000);
      assert.match(String(down.reason), why, path);
      assert.ok(Number(down.retryInMs) >= 250, `${path}: backs off`);
      const c = await connectClient(node.port);
      cleanups.push(() => disconnect(c));
      await subscribe(c, 'b/x', 1);
      await publish(c, 'b/x', 'local', { qos: 1 });
      await c.waitFor((m) => m.payload === 'local', `${path}: local delivery goes on`);
      assert.equal(node.bridgeStatus()[0]?.outbox, 1, `${path}: what it would forward waits in the outbox`);
    }
  });
});
