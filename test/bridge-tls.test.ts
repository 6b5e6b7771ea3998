// A bridge to a remote over mqtts:// with a client certificate (docs/bridges.md "Configuration"):
// a CA, a server certificate for Debian's Mosquitto and client certificates made by openssl at
// test time (test/tls-certs.ts); Mosquitto listens with TLS and `require_certificate true`, and a
// plain listener on which an MQTT.js client checks what arrives.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { CONFIG_ERROR, ConfigError } from '../src/errors.js';
import { type BridgeSpec, bridgeSpecs } from '../src/server/bridge/bridge-config.js';
import type { BrokerNode } from '../src/server/broker-node.js';
import { connectClient, disconnect, publish, startNode, subscribe, type TestClient } from './helpers.js';
import { Mosquitto } from './support/mosquitto.js';
import { freePort, LOOPBACK } from './support/net.js';
import { until } from './support/wait.js';
import { makePki, type Pki } from './tls-certs.js';

interface Line {
  level: number;
  msg: string;
  [k: string]: unknown;
}

describe('a bridge over TLS with a client certificate', { timeout: 120_000 }, () => {
  const cleanups: (() => Promise<void>)[] = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  let pki: Pki;
  let client: { cert: string; key: string };
  let remote: Mosquitto;
  let tlsPort: number;
  /** A TLS listener whose certificate names another host. */
  let misnamedPort: number;
  let checker: TestClient;

  before(async () => {
    pki = makePki('bridge');
    const server = pki.issue('remote', { cn: 'remote', san: `IP:${LOOPBACK}`, server: true });
    client = pki.issue('bridge', { cn: 'raftmq-bridge' });
    const misnamed = pki.issue('misnamed', { cn: 'elsewhere', san: 'DNS:elsewhere.example', server: true });
    tlsPort = await freePort();
    misnamedPort = await freePort();
    remote = await Mosquitto.start([
      `listener ${tlsPort} ${LOOPBACK}`,
      `cafile ${pki.caCert}`,
      `certfile ${server.cert}`,
      `keyfile ${server.key}`,
      'require_certificate true',
      `listener ${misnamedPort} ${LOOPBACK}`,
      `cafile ${pki.caCert}`,
      `certfile ${misnamed.cert}`,
      `keyfile ${misnamed.key}`,
      'require_certificate true',
    ]);
    cleanups.push(() => remote.dispose());
    checker = await connectClient(remote.port);
    cleanups.push(() => disconnect(checker));
    await subscribe(checker, 'tls/#', 1);
  });

  /** A node bridged to the remote's TLS listener with `tls` settings; its log lines are kept. */
  async function bridged(name: string, tls: Record<string, string>, port = tlsPort): Promise<{ node: BrokerNode; lines: Line[] }> {
    const specs: BridgeSpec[] = bridgeSpecs({
      bridge: [`${name}=mqtts://${LOOPBACK}:${port}`],
      bridges: { [name]: { topic: [`# out 1 ${name}/ tls/${name}/`], ...tls } },
    });
    const lines: Line[] = [];
    const logger = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as Line) });
    const node = await startNode({ logger, bridges: specs, bridgeRules: specs.flatMap((b) => b.rules) });
    cleanups.push(() => node.stop());
    return { node, lines };
  }

  it('connects over mqtts with its certificate and forwards QoS 1', async () => {
    const { node } = await bridged('good', { 'tls-ca': pki.caCert, 'tls-cert': client.cert, 'tls-key': client.key });
    await until('the bridge is up', () => node.bridgeStatus()[0]?.state === 'up');
    const pub = await connectClient(node.port);
    cleanups.push(() => disconnect(pub));
    const N = 20;
    for (let i = 0; i < N; i++) await publish(pub, 'good/x', String(i), { qos: 1 });
    const got = (): TestClient['messages'] => checker.messages.filter((m) => m.topic === 'tls/good/x');
    await until('every message at the remote', () => new Set(got().map((m) => m.payload)).size === N);
    const arrived = got().map((m) => Number(m.payload));
    assert.deepEqual(
      arrived.filter((n, i) => arrived.indexOf(n) === i),
      Array.from({ length: N }, (_, i) => i),
      'first arrivals in publish order',
    );
    assert.ok(
      got().every((m) => m.packet.qos === 1),
      'forwarded at QoS 1',
    );
    await until('all completed', () => node.bridgeStatus()[0]?.forwarded === N && node.bridgeStatus()[0]?.outbox === 0);
  });

  it('without a client certificate it is refused by the remote, logs the bridge and the reason, backs off; local traffic goes on', async () => {
    const { node, lines } = await bridged('anon', { 'tls-ca': pki.caCert });
    const downs = (): Line[] => lines.filter((l) => l.msg === 'bridge down' && l.bridge === 'anon');
    await until('two refused attempts', () => downs().length >= 2, 30_000);
    const first = downs()[0] as Line;
    assert.equal(first.level, 40, 'a warning');
    assert.equal(first.address, `mqtts://${LOOPBACK}:${tlsPort}`);
    // The remote ends the handshake with an alert: TLS 1.3 "certificate required", TLS 1.2 "handshake failure".
    assert.match(String(first.reason), /alert (certificate required|handshake failure)/);
    assert.ok(Number(first.retryInMs) >= 250, `backs off (${String(first.retryInMs)} ms)`);
    const status = node.bridgeStatus()[0];
    assert.notEqual(status?.state, 'up');
    assert.equal(typeof status?.lastError, 'string');
    assert.equal(
      lines.some((l) => l.msg === 'bridge connected' || l.msg === 'bridge up'),
      false,
    );
    const c = await connectClient(node.port);
    cleanups.push(() => disconnect(c));
    await subscribe(c, 'local', 1);
    await publish(c, 'local', 'still here', { qos: 1 });
    await c.waitFor((m) => m.payload === 'still here', 'local delivery while the bridge is refused');
    await publish(c, 'anon/x', 'waits', { qos: 1 });
    assert.equal(node.bridgeStatus()[0]?.outbox, 1, 'what it would forward waits in the outbox');
    assert.equal(
      checker.messages.some((m) => m.topic.startsWith('tls/anon/')),
      false,
    );
  });

  it('does not connect to a remote whose certificate its tls-ca does not trust', async () => {
    const other = makePki('other');
    const { node, lines } = await bridged('distrust', { 'tls-ca': other.caCert, 'tls-cert': client.cert, 'tls-key': client.key });
    const down = await until('a refused attempt', () => lines.find((l) => l.msg === 'bridge down' && l.bridge === 'distrust'), 20_000);
    assert.match(String(down.reason), /certificate/i);
    assert.notEqual(node.bridgeStatus()[0]?.state, 'up');
  });

  it('does not connect to a remote whose certificate names another host', async () => {
    const { node, lines } = await bridged(
      'misnamed',
      { 'tls-ca': pki.caCert, 'tls-cert': client.cert, 'tls-key': client.key },
      misnamedPort,
    );
    const down = await until('a refused attempt', () => lines.find((l) => l.msg === 'bridge down' && l.bridge === 'misnamed'), 20_000);
    assert.match(String(down.reason), /does not match certificate's altnames/);
    assert.notEqual(node.bridgeStatus()[0]?.state, 'up');
  });

  it('refuses at load a client certificate whose key is another one, naming both keys and files', () => {
    const another = pki.issue('another', { cn: 'another' });
    let refused: unknown;
    try {
      bridgeSpecs({
        bridge: [`mixed=mqtts://${LOOPBACK}:${tlsPort}`],
        bridges: { mixed: { topic: ['# out 1'], 'tls-ca': pki.caCert, 'tls-cert': client.cert, 'tls-key': another.key } },
      });
    } catch (err) {
      refused = err;
    }
    assert.ok(refused instanceof ConfigError);
    assert.equal(refused.code, CONFIG_ERROR.BAD_TLS);
    assert.ok(refused.message.includes(`bridges.mixed.tls-cert ${client.cert}, bridges.mixed.tls-key ${another.key}: `), refused.message);
    assert.match(refused.message, /key values mismatch/);
  });
});
