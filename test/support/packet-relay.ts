// A TCP relay between raftmq and a remote broker that reads the MQTT packets going each way, so a
// test can see a bridge's flow (PUBLISH, PUBREC, PUBREL, PUBCOMP) and step into it: drop a packet,
// close the connection at one, or hold what raftmq sends until released.
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import { LOOPBACK } from './net.js';

/** MQTT control packet types by number. */
export const PACKET = { PUBLISH: 3, PUBACK: 4, PUBREC: 5, PUBREL: 6, PUBCOMP: 7 } as const;

export interface Frame {
  readonly type: number;
  readonly flags: number;
  readonly body: Buffer;
  /** The whole packet as it came. */
  readonly raw: Buffer;
}

/** Unparsed bytes kept per connection and direction; beyond it the connection is closed (a bound on memory). */
const BUFFER_MAX = 4 << 20;

/** Splits whole MQTT packets off the front of `buf`; the rest is an incomplete packet. */
export function frames(buf: Buffer): { packets: Frame[]; rest: Buffer } {
  const packets: Frame[] = [];
  let off = 0;
  while (buf.length - off >= 2) {
    let len = 0;
    let mul = 1;
    let i = off + 1;
    let complete = false;
    // The remaining length: at most 4 bytes of 7 bits.
    while (i < buf.length && i < off + 5) {
      const b = buf[i++] as number;
      len += (b & 0x7f) * mul;
      mul *= 128;
      if ((b & 0x80) === 0) {
        complete = true;
        break;
      }
    }
    if (!complete || buf.length - i < len) break;
    const first = buf[off] as number;
    packets.push({ type: first >> 4, flags: first & 0x0f, body: buf.subarray(i, i + len), raw: buf.subarray(off, i + len) });
    off = i + len;
  }
  return { packets, rest: buf.subarray(off) };
}

/** The packet id of a PUBACK, PUBREC, PUBREL or PUBCOMP. */
export const ackPid = (f: Frame): number => f.body.readUInt16BE(0);

/** The QoS, packet id (0 at QoS 0), DUP flag and payload of an MQTT 3.1.1 PUBLISH. */
export function publishOf(f: Frame): { qos: number; pid: number; dup: boolean; topic: string; payload: string } {
  const qos = (f.flags >> 1) & 3;
  const topicLen = f.body.readUInt16BE(0);
  const topic = f.body.subarray(2, 2 + topicLen).toString();
  const pid = qos === 0 ? 0 : f.body.readUInt16BE(2 + topicLen);
  const payload = f.body.subarray(2 + topicLen + (qos === 0 ? 0 : 2)).toString();
  return { qos, pid, dup: (f.flags & 8) !== 0, topic, payload };
}

/** What a hook does with a packet: pass it on, drop it, or close the connection instead. */
export type Verdict = 'pass' | 'drop' | 'close';

/** A hook's verdict that closes the connection the first time each named event is seen and lets
 * it pass after: `once.close('pubrec 7')`. */
export class CloseOnce {
  private readonly seen = new Set<string>();

  close(what: string): Verdict {
    if (this.seen.has(what)) return 'pass';
    this.seen.add(what);
    return 'close';
  }

  /** How many events have closed a connection. */
  get count(): number {
    return this.seen.size;
  }
}

export interface RelayHooks {
  /** A packet from raftmq to the remote; `conn` numbers the connection from 1, in accept order. */
  up?: (f: Frame, conn: number) => Verdict;
  /** A packet from the remote to raftmq. */
  down?: (f: Frame, conn: number) => Verdict;
}

export class PacketRelay {
  private readonly server: Server;
  private readonly open = new Set<Socket>();
  /** Packets from raftmq held while `held`, per connection, in order. */
  private readonly waiting = new Map<Socket, Buffer[]>();
  /** The relay's connection to the remote for each connection from raftmq. */
  private readonly targets = new Map<Socket, Socket>();
  private held = false;
  /** Connections raftmq opened through the relay. */
  connections = 0;

  constructor(target: number, hooks: RelayHooks = {}) {
    this.server = createServer((s) => {
      const conn = ++this.connections;
      s.on('error', () => {});
      const t = tcpConnect(target, LOOPBACK);
      t.on('error', () => s.destroy());
      s.on('close', () => t.destroy());
      t.on('close', () => s.destroy());
      this.open.add(s);
      this.targets.set(s, t);
      s.on('close', () => {
        this.open.delete(s);
        this.waiting.delete(s);
        this.targets.delete(s);
      });
      const pipe = (from: Socket, to: Socket, hook: RelayHooks['up'], upward: boolean): void => {
        let rest: Buffer = Buffer.alloc(0);
        from.on('data', (chunk: Buffer) => {
          if (rest.length + chunk.length > BUFFER_MAX) {
            s.destroy();
            return;
          }
          const r = frames(Buffer.concat([rest, chunk]));
          rest = Buffer.from(r.rest);
          for (const f of r.packets) {
            const v = hook === undefined ? 'pass' : hook(f, conn);
            if (v === 'close') {
              s.destroy();
              return;
            }
            if (v === 'drop') continue;
            const raw = Buffer.from(f.raw);
            if (!upward || !this.held) {
              to.write(raw);
              continue;
            }
            const q = this.waiting.get(s);
            if (q === undefined) this.waiting.set(s, [raw]);
            else q.push(raw);
          }
        });
      };
      pipe(s, t, hooks.up, true);
      pipe(t, s, hooks.down, false);
    });
  }

  async listen(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, LOOPBACK, () => resolve()));
    return (this.server.address() as { port: number }).port;
  }

  /** Holds what raftmq sends from now on, on open connections and new ones. */
  hold(): void {
    this.held = true;
  }

  /** Sends on what was held, in order, and passes everything on again. */
  release(): void {
    this.held = false;
    for (const [s, bufs] of this.waiting) {
      const t = this.targets.get(s);
      if (t !== undefined) for (const b of bufs) t.write(b);
    }
    this.waiting.clear();
  }

  /** Drops what was held, unsent, and passes everything on again. */
  discard(): void {
    this.held = false;
    this.waiting.clear();
  }

  close(): Promise<void> {
    for (const s of this.open) s.destroy();
    return new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
