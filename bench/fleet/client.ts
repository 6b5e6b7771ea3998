// A minimal MQTT client for the load workers: mqtt-packet's generate and parser over a plain
// node:net or node:tls socket, callbacks rather than promises on the hot path, and the
// acknowledgements of one read written back in one write. Independent of raftmq's own code.
import { connect as netConnect, type Socket } from 'node:net';
import { createSecureContext, type SecureContext, connect as tlsConnect } from 'node:tls';
import mqttPacket from 'mqtt-packet';

export type Packet = mqttPacket.Packet;
export type Version = 4 | 5;

export interface Endpoint {
  host: string;
  port: number;
  tls: boolean;
}

export interface ConnectSpec {
  clientId: string;
  version: Version;
  /** 3.1.1 clean session / MQTT 5 clean start. */
  clean: boolean;
  keepaliveS: number;
  /** MQTT 5 Session Expiry Interval in seconds; 0: none (the session ends with the connection). */
  sessionExpiryS: number;
}

export type ConnectFailure = 'refused' | 'closed' | 'timeout' | 'rc';

export type ConnectResult =
  | { ok: true; conn: Conn; sessionPresent: boolean; receiveMaximum: number }
  | { ok: false; why: ConnectFailure; detail: string; reference?: string };

export const nowMs = (): number => performance.now();

/** One TLS context per CA for the whole worker: building one per connection (what passing `ca`
 * to tls.connect does) costs more client CPU than the handshake itself. */
const contexts = new Map<string, SecureContext>();
function contextFor(ca: string): SecureContext {
  let c = contexts.get(ca);
  if (c === undefined) {
    c = createSecureContext({ ca });
    contexts.set(ca, c);
  }
  return c;
}

export class Conn {
  lastRxMs = nowMs();
  lastTxMs = nowMs();
  closed = false;
  onPacket: (p: Packet) => void = () => {};
  onClose: () => void = () => {};
  private readonly opts: { protocolVersion: Version };
  private nextPid = 1;
  private acks: Buffer[] = [];
  private inRead = false;

  constructor(
    readonly socket: Socket,
    readonly version: Version,
  ) {
    this.opts = { protocolVersion: version };
    const parser = mqttPacket.parser(this.opts);
    parser.on('packet', (p: Packet) => this.onPacket(p));
    parser.on('error', (err: Error) => socket.destroy(err));
    socket.on('data', (b: Buffer) => {
      this.lastRxMs = nowMs();
      this.inRead = true;
      parser.parse(b);
      this.inRead = false;
      this.flushAcks();
    });
    socket.on('error', () => {
      // 'close' follows; the connect path reads the code from its own listener
    });
    socket.on('close', () => {
      this.closed = true;
      this.onClose();
    });
  }

  send(p: Packet): void {
    if (this.closed) return;
    this.lastTxMs = nowMs();
    this.socket.write(mqttPacket.generate(p, this.opts));
  }

  /** PUBACK for a QoS 1 delivery; written with the others of the same read. */
  ack(messageId: number): void {
    this.acks.push(mqttPacket.generate({ cmd: 'puback', messageId }, this.opts));
    if (!this.inRead) this.flushAcks();
  }

  private flushAcks(): void {
    if (this.acks.length === 0) return;
    const b = this.acks.length === 1 ? (this.acks[0] as Buffer) : Buffer.concat(this.acks);
    this.acks = [];
    if (this.closed) return;
    this.lastTxMs = nowMs();
    this.socket.write(b);
  }

  packetId(): number {
    const id = this.nextPid;
    this.nextPid = id === 65_535 ? 1 : id + 1;
    return id;
  }

  /** DISCONNECT, then half-close: the broker closes its side. */
  disconnect(): void {
    if (this.closed) return;
    this.send({ cmd: 'disconnect' });
    this.socket.end();
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** Opens a socket, sends CONNECT and resolves on CONNACK, refusal, close or timeout. */
export function connectMqtt(ep: Endpoint, spec: ConnectSpec, timeoutMs: number, ca: string | null): Promise<ConnectResult> {
  return new Promise((resolve) => {
    const socket = ep.tls
      ? tlsConnect({ host: ep.host, port: ep.port, ...(ca === null ? {} : { secureContext: contextFor(ca) }) })
      : netConnect({ host: ep.host, port: ep.port });
    socket.setNoDelay(true);
    const conn = new Conn(socket, spec.version);
    let done = false;
    let code = '';
    const finish = (r: ConnectResult): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve(r);
    };
    const timer = setTimeout(() => {
      finish({ ok: false, why: 'timeout', detail: `no CONNACK in ${timeoutMs} ms` });
      socket.destroy();
    }, timeoutMs);
    socket.on('error', (err: NodeJS.ErrnoException) => {
      code = err.code ?? err.message;
    });
    conn.onClose = () => finish({ ok: false, why: code === 'ECONNREFUSED' ? 'refused' : 'closed', detail: code || 'closed' });
    conn.onPacket = (p) => {
      if (p.cmd !== 'connack') return;
      const rc = (spec.version === 5 ? p.reasonCode : p.returnCode) ?? 0;
      if (rc !== 0) {
        const reference = p.properties?.serverReference;
        finish({ ok: false, why: 'rc', detail: `CONNACK ${rc}`, ...(reference === undefined ? {} : { reference }) });
        socket.destroy();
        return;
      }
      finish({ ok: true, conn, sessionPresent: p.sessionPresent, receiveMaximum: p.properties?.receiveMaximum ?? 65_535 });
    };
    socket.once(ep.tls ? 'secureConnect' : 'connect', () => {
      conn.send({
        cmd: 'connect',
        protocolId: 'MQTT',
        protocolVersion: spec.version,
        clientId: spec.clientId,
        clean: spec.clean,
        keepalive: spec.keepaliveS,
        ...(spec.version === 5 && spec.sessionExpiryS > 0 ? { properties: { sessionExpiryInterval: spec.sessionExpiryS } } : {}),
      });
    });
  });
}
