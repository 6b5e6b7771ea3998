// Helpers for transport tests over real loopback sockets: transports wired to each other after
// binding port 0, a logger that records, a raw peer that speaks the wire format by hand, and a
// bounded wait. Every wait has a deadline, so a broken transport fails a test instead of hanging it.
import { connect, type Socket } from 'node:net';
import { Packr } from 'msgpackr';
import type { LinkCloseCode } from './errors.js';
import { encodeFrame, FrameReader } from './frame.js';
import { type PeerAddress, Transport, type TransportLogger, type TransportOptions } from './transport.js';

export interface TestMsg {
  n: number;
  text?: string;
}

export function isTestMsg(m: unknown): m is TestMsg {
  return typeof m === 'object' && m !== null && Number.isSafeInteger((m as { n?: unknown }).n);
}

export interface LogLine {
  level: 'info' | 'warn';
  fields: Record<string, unknown>;
  msg: string;
}

export class RecordingLogger implements TransportLogger {
  readonly lines: LogLine[] = [];
  info(fields: Record<string, unknown>, msg: string): void {
    this.lines.push({ level: 'info', fields, msg });
  }
  warn(fields: Record<string, unknown>, msg: string): void {
    this.lines.push({ level: 'warn', fields, msg });
  }
  closedWith(code: LinkCloseCode): boolean {
    return this.lines.some((l) => l.fields.code === code);
  }
}

export interface Node {
  id: number;
  transport: Transport<TestMsg>;
  logger: RecordingLogger;
  inbox: Array<{ from: number; msg: TestMsg }>;
}

export type NodeOptions = Partial<Omit<TransportOptions<TestMsg>, 'nodeId' | 'peers' | 'logger' | 'validate'>> & {
  peers?: Map<number, PeerAddress>;
};

export const LOOPBACK = '127.0.0.1';

/** A transport for node `id` of cluster `ids`, with peer ports not known yet unless given. */
export function makeNode(id: number, ids: number[], opts: NodeOptions = {}): Node {
  const logger = new RecordingLogger();
  const peers = opts.peers ?? new Map(ids.map((p) => [p, { host: LOOPBACK, port: 0 }]));
  const transport = new Transport<TestMsg>({
    nodeId: id,
    incarnation: `inc-${id}`,
    clusterId: 'test',
    epoch: { generation: 1, id: 'e1' },
    listen: { host: LOOPBACK, port: 0 },
    random: () => 0.5,
    handshakeTimeoutMs: 2_000,
    ...opts,
    peers,
    logger,
    validate: isTestMsg,
  });
  const node: Node = { id, transport, logger, inbox: [] };
  transport.onMessage((from, msg) => node.inbox.push({ from, msg }));
  return node;
}

/** Starts every node, then tells each the others' bound addresses. */
export async function wire(nodes: Node[]): Promise<void> {
  for (const n of nodes) await n.transport.start();
  for (const n of nodes) {
    for (const m of nodes) if (m !== n) n.transport.setPeerAddress(m.id, m.transport.address());
  }
}

export async function stopAll(nodes: Node[]): Promise<void> {
  await Promise.all(nodes.map((n) => n.transport.stop()));
}

export async function waitFor(what: string, cond: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Waits long enough for anything in flight on loopback to have arrived. */
export function settle(ms = 200): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

const packr = new Packr({ useRecords: false, mapsAsObjects: true });

export function frameOf(value: unknown): Buffer {
  return encodeFrame(packr.pack(value));
}

/** A hand-driven peer connection: writes raw bytes, reads frames, reports when the other side closes. */
export class RawPeer {
  readonly socket: Socket;
  readonly frames: unknown[] = [];
  closed = false;
  private readonly reader = new FrameReader();

  constructor(port: number) {
    this.socket = connect({ host: LOOPBACK, port });
    this.socket.setNoDelay(true);
    this.socket.on('data', (chunk) => {
      this.reader.push(chunk);
      for (let r = this.reader.next(); r.t === 'frame'; r = this.reader.next()) this.frames.push(packr.unpack(r.body));
    });
    this.socket.on('error', () => {});
    this.socket.on('close', () => {
      this.closed = true;
    });
  }

  static hello(nodeId: number, clusterId = 'test'): unknown {
    return { t: 'hello', clusterId, epoch: { generation: 1, id: 'e1' }, nodeId, incarnation: `raw-${nodeId}` };
  }

  write(bytes: Uint8Array): void {
    this.socket.write(bytes);
  }

  /** Writes each byte on its own, yielding to the event loop in between so they travel apart. */
  async writeByteByByte(bytes: Uint8Array): Promise<void> {
    for (const b of bytes) {
      this.socket.write(new Uint8Array([b]));
      await new Promise((r) => setImmediate(r));
    }
  }

  async waitClosed(timeoutMs = 3_000): Promise<void> {
    await waitFor('the transport to close the raw connection', () => this.closed, timeoutMs);
  }

  destroy(): void {
    this.socket.destroy();
  }
}
