// The real BridgeLink over TCP to a small MQTT 5 remote on loopback, with the real broker driven
// entry by entry as a log would (test/bridge-cursor.test.ts, test/bridge-qos2-expiry.test.ts).
import { createServer, type Server, type Socket } from 'node:net';
import pino from 'pino';
import type { BridgeRule } from '../../src/broker/bridge-rules.js';
import type { Harness } from '../../src/broker/broker-harness.testkit.js';
import type { Command } from '../../src/broker/commands.js';
import { Decoder } from '../../src/protocol/decoder.js';
import type { Packet } from '../../src/protocol/packets.js';
import { BRIDGE_MAX_INFLIGHT_DEFAULT, type BridgeSpec } from '../../src/server/bridge/bridge-config.js';
import type { BridgeHost, BridgeLink } from '../../src/server/bridge/bridge-link.js';
import { LOOPBACK } from './net.js';

/** A remote broker on loopback: `answer` gets each packet decoded from a connection and writes what
 * it answers; returning false stops reading that connection. */
export class LoopbackRemote {
  private readonly server: Server;
  private readonly open = new Set<Socket>();

  constructor(answer: (s: Socket, p: Packet) => boolean | undefined) {
    this.server = createServer((s) => {
      this.open.add(s);
      s.on('close', () => this.open.delete(s));
      s.on('error', () => {});
      const d = new Decoder({ maxPacketSize: 1 << 20 });
      let reading = true;
      s.on('data', (chunk: Buffer) => {
        if (!reading) return;
        const r = d.feed(chunk);
        for (const p of r.packets) {
          if (answer(s, p) === false) {
            reading = false;
            return;
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

/** An MQTT 5 bridge to the remote on `port`, without TLS or credentials. */
export function loopbackSpec(name: string, port: number, rules: BridgeRule[], cleanStart: boolean): BridgeSpec {
  return {
    name,
    addresses: [{ url: `mqtt://${LOOPBACK}:${port}`, tls: false, ws: false, host: LOOPBACK, port, path: '' }],
    clientId: `raftmq-bridge-${name}`,
    username: null,
    password: null,
    protocol: 5,
    keepaliveS: 60,
    downAlertS: 60,
    cleanStart,
    maxInflight: BRIDGE_MAX_INFLIGHT_DEFAULT,
    maxInflightQos2: BRIDGE_MAX_INFLIGHT_DEFAULT,
    tryPrivate: false,
    tlsCa: null,
    tlsCert: null,
    tlsKey: null,
    files: [],
    rules,
  };
}

/** A serving node's part for the link: what the link proposes is applied as the next entries (each
 * command first shown to `check`), the effects for the link's connection go to it, and the link is
 * pumped again, as after a commit. `link` is set once the link is made. */
export function harnessHost(
  h: Harness,
  rules: BridgeRule[],
  opts: { now?: () => number; check?: (cmd: Command) => void } = {},
): { host: BridgeHost; conn: string; setLink: (l: BridgeLink) => void } {
  const conn = h.conn(1000);
  const proposed: Command[] = [];
  let link: BridgeLink | null = null;
  const commit = (): void => {
    for (const cmd of proposed.splice(0)) {
      opts.check?.(cmd);
      for (const e of h.apply(cmd)) if (e.t === 'send' && e.conn === conn) link?.onEffect(e.conn, e.packet);
    }
    link?.pump();
  };
  const host: BridgeHost = {
    outbox: (name) => h.broker.bridgeOutbox(name),
    rules: () => rules,
    mayWrite: () => true,
    now: opts.now ?? (() => h.time),
    propose: (cmd) => {
      proposed.push(cmd);
      setImmediate(commit);
    },
    event: () => {},
    logger: pino({ level: 'silent' }),
    maxPacketSize: 1 << 20,
    newConnId: () => conn,
    routeIn: () => {},
  };
  return {
    host,
    conn,
    setLink: (l) => {
      link = l;
    },
  };
}
