// A QoS 2 message whose PUBREC the remote sent (recorded by a committed `bridge-pubrec`) does not
// expire in the outbox (docs/bridges.md "When the remote is down"): the remote holds its packet id
// until PUBREL. The broker is the real one, driven entry by entry; the link is the real BridgeLink
// over TCP to a small MQTT 5 remote on loopback that answers PUBREC and PUBCOMP. After the
// message's expiry has passed in the cluster time, a new connection of the bridge sends PUBREL for
// it (never PUBLISH), PUBCOMP completes it, and the message behind it is forwarded.
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import type { BridgeRule } from '../src/broker/bridge-rules.js';
import { Harness, msg, testSettings } from '../src/broker/broker-harness.testkit.js';
import type { Command, Settings } from '../src/broker/commands.js';
import { Decoder } from '../src/protocol/decoder.js';
import { encode } from '../src/protocol/encoder.js';
import { RC } from '../src/protocol/reason-codes.js';
import { BRIDGE_MAX_INFLIGHT_DEFAULT, type BridgeSpec } from '../src/server/bridge/bridge-config.js';
import { type BridgeHost, BridgeLink } from '../src/server/bridge/bridge-link.js';
import { LOOPBACK } from './support/net.js';
import { until } from './support/wait.js';

const WAIT_MS = 10_000;
const RULES: BridgeRule[] = [{ bridge: 'up', pattern: 'q2/#', direction: 'out', qos: 2, localPrefix: '', remotePrefix: '' }];
const SETTINGS: Settings = { ...testSettings, bridgeRules: RULES };

/** An MQTT 5 remote: CONNACK, PUBREC for a QoS 2 PUBLISH, PUBCOMP for a PUBREL; `seen` lists what
 * came, as `publish <topic> <pid>` or `pubrel <pid>`. */
class Qos2Remote {
  readonly seen: string[] = [];
  private readonly server: Server;
  private readonly open = new Set<Socket>();

  constructor() {
    this.server = createServer((s) => {
      this.open.add(s);
      s.on('close', () => this.open.delete(s));
      s.on('error', () => {});
      const d = new Decoder({ maxPacketSize: 1 << 20 });
      s.on('data', (chunk: Buffer) => {
        const r = d.feed(chunk);
        for (const p of r.packets) {
          if (p.type === 'connect') {
            s.write(encode({ type: 'connack', sessionPresent: true, code: 0, props: {} }, 5));
          } else if (p.type === 'publish' && p.pid !== undefined) {
            this.seen.push(`publish ${p.topic} ${p.pid}`);
            s.write(encode({ type: 'pubrec', pid: p.pid, code: RC.SUCCESS, props: {} }, 5));
          } else if (p.type === 'pubrel') {
            this.seen.push(`pubrel ${p.pid}`);
            s.write(encode({ type: 'pubcomp', pid: p.pid, code: RC.SUCCESS, props: {} }, 5));
          }
        }
        if (r.error !== null) s.destroy();
      });
    });
  }

  async listen(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, LOOPBACK, () => resolve()));
    return (this.server.address() as { port: number }).port;
  }

  close(): Promise<void> {
    for (const s of this.open) s.destroy();
    return new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

describe('bridge: a recorded QoS 2 message past its expiry', { timeout: 30_000 }, () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it('stays in the outbox, gets its PUBREL on the next connection, and the message behind it goes', async () => {
    const remote = new Qos2Remote();
    const port = await remote.listen();
    cleanups.push(() => remote.close());

    const h = new Harness(SETTINGS);
    h.connect(h.conn(1), 'pub', { protocol: 5, clean: true, expiryS: 0 });
    h.publish(h.conn(1), { ...msg('q2/a', 'a', 2), props: { expiryS: 1 } }, 1);
    const first = h.index;
    h.publish(h.conn(1), msg('q2/b', 'b', 2), 2);
    // An earlier serving node sent 'a' and the remote answered PUBREC, recorded by this entry.
    h.apply({ t: 'bridge-pubrec', bridge: 'up', conn: h.conn(9), recs: [[first, 1]] });
    // Its expiry passes in the cluster time.
    h.apply({ t: 'tick' }, 5_000);
    assert.deepEqual(
      (h.broker.bridgeOutbox('up')?.items.toArray() ?? []).map((it) => [it.topic, it.pid, it.rec]),
      [
        ['q2/a', 1, true],
        ['q2/b', 2, false],
      ],
      'the recorded message stays past its expiry',
    );

    const proposed: Command[] = [];
    const linkConn = h.conn(50);
    let link: BridgeLink | null = null;
    const commit = (): void => {
      // Each entry's effects for the bridge's connection go to the link, as a serving node routes
      // them (the PUBREL a committed bridge-pubrec answers).
      for (const cmd of proposed.splice(0)) {
        for (const e of h.apply(cmd)) if (e.t === 'send' && e.conn === linkConn) link?.onEffect(e.conn, e.packet);
      }
      link?.pump();
    };
    const host: BridgeHost = {
      outbox: (name) => h.broker.bridgeOutbox(name),
      rules: () => RULES,
      mayWrite: () => true,
      now: () => h.time,
      propose: (cmd) => {
        proposed.push(cmd);
        setImmediate(commit);
      },
      event: () => {},
      logger: pino({ level: 'silent' }),
      maxPacketSize: 1 << 20,
      newConnId: () => linkConn,
      routeIn: () => {},
    };
    const spec: BridgeSpec = {
      name: 'up',
      addresses: [{ url: `mqtt://${LOOPBACK}:${port}`, tls: false, ws: false, host: LOOPBACK, port, path: '' }],
      clientId: 'raftmq-bridge-up',
      username: null,
      password: null,
      protocol: 5,
      keepaliveS: 60,
      downAlertS: 60,
      cleanStart: false,
      maxInflight: BRIDGE_MAX_INFLIGHT_DEFAULT,
      maxInflightQos2: BRIDGE_MAX_INFLIGHT_DEFAULT,
      tryPrivate: false,
      tlsCa: null,
      tlsCert: null,
      tlsKey: null,
      files: [],
      rules: RULES,
    };
    const l = new BridgeLink(spec, host);
    link = l;
    cleanups.push(() => l.stop());
    l.start();
    await until('the bridge connected', () => l.state === 'up', WAIT_MS);
    l.pump();
    await until('the outbox emptied', () => h.broker.bridgeOutbox('up')?.items.length === 0, WAIT_MS);
    assert.deepEqual(remote.seen, ['pubrel 1', 'publish q2/b 2', 'pubrel 2']);
    assert.equal(h.broker.verify(), null);
  });
});
