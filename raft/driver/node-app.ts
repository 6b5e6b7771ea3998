// A raft node as a small program: a RaftDriver over the TCP transport, and a line protocol on a
// client port for tests and the benchmark. Commands, one per line (replies are one line each):
//   propose TEXT        -> "ok INDEX" once committed; "err lost INDEX" if another entry took the
//                          index; "err RAFT_NOT_LEADER LEADER" (0: unknown); "err CODE" otherwise
//   status              -> the driver's status as JSON
//   peer ID HOST:PORT   -> "ok": learn a peer's address (tests start every node on port 0)
//   entries FROM COUNT  -> JSON [[index, term, text or null], ...] of applied entries
// With --state-file the node starts fresh, amnesiac or resumed from its file (docs/design.md "State
// file"), and SIGTERM hands over, stops raft traffic, then writes the file (stop()).
// Proposal replies come in commit order; a client pipelining proposals gets them in its own order.
import { createServer, type Server, type Socket } from 'node:net';
import type { LogEntry, Message } from '../core/messages.js';
import { Transport } from '../transport/transport.js';
import { type DriverIdentity, type DriverLogger, type ProposeTicket, RaftDriver } from './driver.js';
import type { DriverError } from './errors.js';
import type { NodeArgs } from './node-args.js';
import { hostPort } from './node-args.js';
import { raftWireCodec } from './wire-codec.js';

/** Exit codes of the node program besides 0 (clean stop) and 2 (bad arguments). */
export const EXIT_CORE_FAILED = 70;
export const EXIT_FORCE_START_FAILED = 75;
/** A refused state file, record or PID lock; the message names the file. */
export const EXIT_STATE_FILE_REFUSED = 78;

/** A line longer than this closes the client connection (bytes). */
export const CLIENT_LINE_BYTES_MAX = 64 * 1024;
/** Applied entries kept for `entries`; older ones are forgotten. */
export const APPLIED_KEPT_MAX = 100_000;

/** A proposal waiting for its entry to commit. The ticket is the driver's own object: its index may
 * move to a later one before the batch reaches the core (ProposeTicket), so it is read when entries
 * commit, not when the proposal is made. */
interface Waiter {
  readonly ticket: ProposeTicket;
  readonly socket: Socket;
}

export class NodeApp {
  private readonly args: NodeArgs;
  readonly driver: RaftDriver;
  private readonly server: Server;
  private transport: Transport<Message> | undefined;
  private readonly clients = new Set<Socket>();
  private waiters: Waiter[] = [];
  /** Applied entries from index `appliedBase` on. */
  private applied: Array<[number, number, string | null]> = [];
  private paused = false;
  private readonly decoder = new TextDecoder();
  private readonly encoder = new TextEncoder();

  /** Called once when the node must exit: a failed core or a failed force-start. */
  onExit: (code: number, err: Error) => void = () => {};

  constructor(args: NodeArgs, logger: DriverLogger) {
    this.args = args;
    const transportFor = (validate: (m: unknown) => m is Message, identity: DriverIdentity): Transport<Message> => {
      this.transport = new Transport<Message>({
        nodeId: args.id,
        incarnation: identity.incarnation,
        clusterId: args.clusterId,
        epoch: identity.epoch,
        clusterUid: identity.clusterUid,
        listen: args.listen,
        peers: args.peers,
        secret: args.secret,
        logger,
        validate,
        codec: raftWireCodec(),
      });
      return this.transport;
    };
    const ids = [...args.peers.keys()];
    const identity =
      args.stateFile === undefined
        ? { voters: ids }
        : {
            nodes: ids,
            stateFile: args.stateFile,
            forceStart: args.forceStart,
            ...(args.forceStartTimeoutMs === undefined ? {} : { forceStartTimeoutMs: args.forceStartTimeoutMs }),
          };
    this.driver = new RaftDriver({
      id: args.id,
      ...identity,
      clusterId: args.clusterId,
      electionTimeoutMs: args.electionTimeoutMs,
      transport: transportFor,
      logger,
      onCommitted: (entries) => this.onCommitted(entries),
      onReset: () => this.onReset(),
      onFatal: (err) => this.exit(EXIT_CORE_FAILED, err),
      onForceStartFailed: (err: DriverError) => this.exit(EXIT_FORCE_START_FAILED, err),
    });
    this.driver.on('drain', () => this.resumeClients());
    this.server = createServer((socket) => this.onClient(socket));
    if (args.secret === undefined) logger.warn({}, 'no cluster secret: peer links are not authenticated');
  }

  async start(): Promise<{ raftPort: number; clientPort: number }> {
    await this.driver.start();
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen({ host: this.args.client.host, port: this.args.client.port }, () => resolve());
    });
    const raftPort = this.args.listen.port === 0 ? this.boundRaftPort() : this.args.listen.port;
    const address = this.server.address();
    const clientPort = typeof address === 'object' && address !== null ? address.port : 0;
    return { raftPort, clientPort };
  }

  /** The clean stop: clients go first (this node stops serving), then the driver hands over,
   * stops raft traffic and writes the state file. Returns the file written, if any. */
  async stop(): Promise<string | null> {
    for (const c of this.clients) c.destroy();
    const closed = new Promise<void>((r) => this.server.close(() => r()));
    const written = await this.driver.shutdown().catch(async () => {
      await this.driver.stop();
      return null;
    });
    await closed;
    return written;
  }

  private exiting = false;

  private exit(code: number, err: Error): void {
    if (this.exiting) return;
    this.exiting = true;
    for (const c of this.clients) c.destroy();
    this.server.close();
    void this.driver.stop().then(() => this.onExit(code, err));
  }

  private boundRaftPort(): number {
    return this.transport?.address().port ?? 0;
  }

  // ---- committed entries ----

  /** The node switched to a newer epoch: what it applied of the old one is gone, and so is every
   * proposal it was waiting on. */
  private onReset(): void {
    this.applied = [];
    for (const w of this.waiters) reply(w.socket, `err lost ${w.ticket.index}`);
    this.waiters = [];
  }

  private onCommitted(entries: readonly LogEntry[]): void {
    for (const e of entries) {
      this.applied.push([e.index, e.term, e.data === null ? null : this.decoder.decode(e.data)]);
    }
    // A waiter is answered by the committed entry at its index, or lost once an entry of a later term
    // commits: the log's terms never decrease along it, so its entry cannot commit after that one.
    const last = entries.at(-1);
    if (last !== undefined && this.waiters.length > 0) {
      const termAt = new Map(entries.map((e) => [e.index, e.term]));
      this.waiters = this.waiters.filter((w) => {
        const { index, term } = w.ticket;
        const t = termAt.get(index);
        if (t !== undefined) reply(w.socket, t === term ? `ok ${index}` : `err lost ${index}`);
        else if (term < last.term || index <= last.index) reply(w.socket, `err lost ${index}`);
        else return true;
        return false;
      });
    }
    if (this.applied.length > APPLIED_KEPT_MAX) this.applied = this.applied.slice(this.applied.length - APPLIED_KEPT_MAX / 2);
  }

  // ---- client line protocol ----

  private onClient(socket: Socket): void {
    this.clients.add(socket);
    let buffered = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      buffered += chunk;
      let nl = buffered.indexOf('\n');
      while (nl >= 0) {
        this.onLine(socket, buffered.slice(0, nl).replace(/\r$/, ''));
        buffered = buffered.slice(nl + 1);
        nl = buffered.indexOf('\n');
      }
      if (buffered.length > CLIENT_LINE_BYTES_MAX) {
        reply(socket, 'err line-too-long');
        socket.end();
      }
    });
    socket.on('error', () => socket.destroy());
    socket.on('close', () => this.clients.delete(socket));
    if (this.paused) socket.pause();
  }

  private onLine(socket: Socket, line: string): void {
    const space = line.indexOf(' ');
    const verb = space < 0 ? line : line.slice(0, space);
    const rest = space < 0 ? '' : line.slice(space + 1);
    switch (verb) {
      case 'propose':
        this.propose(socket, rest);
        return;
      case 'status':
        reply(socket, JSON.stringify(this.driver.status()));
        return;
      case 'peer':
        this.learnPeer(socket, rest);
        return;
      case 'entries':
        this.listEntries(socket, rest);
        return;
      default:
        reply(socket, 'err bad-command');
    }
  }

  private propose(socket: Socket, text: string): void {
    const r = this.driver.propose(this.encoder.encode(text));
    if (r instanceof Error) {
      reply(socket, r.code === 'RAFT_NOT_LEADER' ? `err ${r.code} ${this.driver.leader}` : `err ${r.code}`);
      return;
    }
    this.waiters.push({ ticket: r, socket });
    if (!this.driver.accepting) this.pauseClients();
  }

  private learnPeer(socket: Socket, rest: string): void {
    const [idText, address] = rest.split(' ');
    const id = Number(idText);
    try {
      if (address === undefined || !this.args.peers.has(id) || id === this.args.id) throw new Error(`unknown peer ${idText}`);
      this.transport?.setPeerAddress(id, hostPort(address, 'peer'));
      reply(socket, 'ok');
    } catch (err) {
      reply(socket, `err bad-peer ${(err as Error).message}`);
    }
  }

  private listEntries(socket: Socket, rest: string): void {
    const [fromText, countText] = rest.split(' ');
    const from = Number(fromText);
    const count = Math.min(Number(countText ?? '1000'), 10_000);
    if (!Number.isSafeInteger(from) || !Number.isSafeInteger(count) || count < 0) {
      reply(socket, 'err bad-range');
      return;
    }
    const base = this.applied.length === 0 ? 1 : this.applied[0]![0];
    const lo = Math.max(0, from - base);
    reply(socket, JSON.stringify(this.applied.slice(lo, lo + count)));
  }

  /** Back-pressure: stop reading proposals while the uncommitted tail is over its bound. */
  private pauseClients(): void {
    this.paused = true;
    for (const c of this.clients) c.pause();
  }

  private resumeClients(): void {
    this.paused = false;
    for (const c of this.clients) c.resume();
  }
}

function reply(socket: Socket, line: string): void {
  if (!socket.destroyed) socket.write(`${line}\n`);
}
