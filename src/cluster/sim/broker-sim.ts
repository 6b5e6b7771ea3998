// The broker over the raft simulator (DESIGN.md "Testing layers" 2): each simulated node applies
// committed entries to a real Broker; simulated MQTT clients propose commands to whichever node
// serves; MQTT-level invariants are checked across raft's fault classes:
// - equal digests at equal applied index on every node;
// - no acknowledged publish lost: every message whose PUBACK or PUBREC a serving leader's apply
//   sent to the publisher is, at the end, either received by the subscriber or routed to it by the
//   state of every node holding the whole log (a reconnect of its session drains it);
// - no QoS 2 duplicate: the subscriber's application sees each QoS 2 message at most once.
// The serving rule is RaftLog's: leader, its own serve-start (proposed once its cluster time
// follows the clocks) applied in its term, an entry of its term applied last, and a lease.
import { Broker } from '../../broker/broker.js';
import type { Command, Effect, OutPacket, Settings } from '../../broker/commands.js';
import type { LogEntry } from '../../../raft/core/messages.js';
import { Violation } from '../../../raft/sim/checker.js';
import { type Fault, runSeed, type SimApp, type SimNodeView, type SimResult } from '../../../raft/sim/sim.js';
import { decodeCommand, encodeCommand } from '../../log/command-codec.js';

export const simSettings: Settings = {
  maxQueuedMessages: 1_000,
  maxQueuedBytes: 1 << 20,
  maxInflight: 4,
  maxQos: 2,
  retainAvailable: true,
  maxPacketSize: 1 << 20,
  willGraceS: 30,
  maxSubscriptions: 0,
  acl: null,
};

/** Messages the publisher sends per run (pids 1..N, so no pid is reused). */
const MESSAGES_MAX = 60;
/** Rounds of the end-of-run drain of the subscriber's session; each settles up to maxInflight. */
const DRAIN_ROUNDS_MAX = 1_000;
const SUB = 'sub';
const PUB = 'pub';
const TOPIC = 't/x';

interface Client {
  readonly id: string;
  /** Node and period of the current connection; 0: none. */
  node: number;
  period: number;
  conn: string;
  connected: boolean;
  /** Commands decided by packets received, proposed at the next chance on this connection. */
  outbox: Command[];
}

interface NodeState {
  broker: Broker;
  lastTerm: number;
  /** The serving period (index of its own serve-start) and its term; 0: none. */
  period: number;
  servingTerm: number;
  /** Term in which this node proposed serve-start (once per term). */
  startProposedTerm: number;
  seq: number;
}

const decoder = new TextDecoder();

/** A deliberately broken broker, to show the invariants catch it: 'ack-on-propose' treats a
 * publish as acknowledged when it is proposed, not when its entry committed. */
export type BrokerMutant = 'ack-on-propose';

export class BrokerSimApp implements SimApp {
  private readonly mutant: BrokerMutant | null;
  private readonly nodes = new Map<number, NodeState>();
  private readonly digests = new Map<number, string>();
  private readonly sub: Client = newClient(SUB);
  private readonly pub: Client = newClient(PUB);
  /** Publisher: next message number; pids waiting for PUBACK/PUBREC, and for PUBCOMP. */
  private sent = 0;
  private readonly unacked = new Map<number, { qos: 1 | 2 }>();
  private readonly released = new Set<number>();
  /** Payloads whose PUBACK or PUBREC the publisher received. */
  readonly acked = new Set<string>();
  /** Subscriber: QoS 2 pids received and not yet released; what its application got, by count. */
  private readonly inbound = new Set<number>();
  readonly received = new Map<string, number>();
  /** The subscriber got its SUBACK. */
  private subscribed = false;
  /** Payloads published at QoS 2. */
  private readonly qos2 = new Set<string>();

  constructor(mutant: BrokerMutant | null = null) {
    this.mutant = mutant;
  }

  started(node: number): void {
    this.nodes.set(node, { broker: new Broker(), lastTerm: 0, period: 0, servingTerm: 0, startProposedTerm: 0, seq: 0 });
  }

  proposals(leader: number, view: SimNodeView): Uint8Array[] {
    const n = this.node(leader);
    if (!this.serving(n, view)) {
      if (view.role !== 'leader' || !view.clusterTimeReady || n.startProposedTerm === view.term) return [];
      n.startProposedTerm = view.term;
      return [encodeCommand({ t: 'serve-start', node: leader, settings: simSettings })];
    }
    const cmds: Command[] = [];
    for (const c of [this.sub, this.pub]) this.drive(c, leader, n, cmds);
    return cmds.map(encodeCommand);
  }

  applied(node: number, entries: readonly LogEntry[], view: SimNodeView): void {
    const n = this.node(node);
    const out: Effect[] = [];
    for (const e of entries) {
      n.lastTerm = e.term;
      if (e.data === null) continue;
      let cmd: Command;
      try {
        cmd = decodeCommand(e.data);
      } catch {
        continue; // the simulator's liveness marker
      }
      out.length = 0;
      n.broker.apply({ index: e.index, time: e.time, cmd }, out);
      if (cmd.t === 'serve-start' && cmd.node === node && e.term === view.term && view.role === 'leader') {
        n.period = e.index;
        n.servingTerm = e.term;
      }
      if (this.serving(n, view)) this.execute(node, n, out);
    }
    if (n.broker.failed !== null) throw new Violation('broker invariant', `node ${node}: ${n.broker.failed}`);
    this.checkDigest(node, n.broker);
  }

  /** Fault `snapshot` compacts with the broker's own snapshot, as RaftLog does. */
  snapshot(node: number): Iterable<Uint8Array> {
    return this.node(node).broker.snapshot();
  }

  /** An installed snapshot replaces the node's broker; its digest must equal every other node's
   * at the same applied index, like any replica's. */
  restore(node: number, chunks: readonly Uint8Array[]): void {
    const n = this.node(node);
    n.broker.restore(chunks);
    this.checkDigest(node, n.broker);
  }

  end(): void {
    let max = 0;
    for (const n of this.nodes.values()) max = Math.max(max, n.broker.appliedIndex);
    for (const [id, n] of this.nodes) if (n.broker.appliedIndex === max) this.drain(id, n.broker);
  }

  // ---- clients ----

  /** Connects a client to the serving leader if it is not on it, else proposes what it owes. */
  private drive(c: Client, leader: number, n: NodeState, cmds: Command[]): void {
    if (c.node !== leader || c.period !== n.period) {
      c.node = leader;
      c.period = n.period;
      c.conn = `${n.period}.${++n.seq}`;
      c.connected = false;
      c.outbox = [];
      cmds.push(connectCmd(c.conn, c.id));
      return;
    }
    if (!c.connected) return;
    for (const cmd of c.outbox) cmds.push(cmd);
    c.outbox = [];
    // Publishing starts once the subscription is acknowledged: before it nothing routes anywhere.
    if (c === this.pub && this.subscribed && this.unacked.size + this.released.size === 0 && this.sent < MESSAGES_MAX) {
      const pid = ++this.sent;
      const qos = pid % 2 === 0 ? 2 : 1;
      this.unacked.set(pid, { qos });
      if (qos === 2) this.qos2.add(payloadOf(pid));
      if (this.mutant === 'ack-on-propose') this.acked.add(payloadOf(pid));
      cmds.push(publishCmd(c.conn, pid, qos));
    }
  }

  private execute(node: number, n: NodeState, out: readonly Effect[]): void {
    for (const e of out) {
      if (e.t === 'event') continue;
      const c = [this.sub, this.pub].find((x) => x.node === node && x.period === n.period && x.conn === e.conn);
      if (c === undefined) continue;
      if (e.t === 'close') {
        c.node = 0;
        continue;
      }
      if (c === this.sub) this.subReceives(c, e.packet);
      else this.pubReceives(c, e.packet);
    }
  }

  private subReceives(c: Client, p: OutPacket): void {
    switch (p.type) {
      case 'connack':
        c.connected = true;
        if (!p.sessionPresent) c.outbox.push({ t: 'subscribe', conn: c.conn, pid: 1, subs: [{ filter: 't/#', qos: 2, nl: false, rap: false, rh: 0 }] });
        return;
      case 'publish': {
        const pid = p.pid ?? 0;
        const text = decoder.decode(p.msg.payload);
        if (p.qos === 2) {
          // QoS 2 receiver [MQTT-4.3.3]: a pid seen and not yet released is the same message.
          if (!this.inbound.has(pid)) this.deliverToApp(text);
          this.inbound.add(pid);
          c.outbox.push({ t: 'ack', conn: c.conn, pid, kind: 'pubrec' });
        } else {
          this.deliverToApp(text);
          if (p.qos === 1) c.outbox.push({ t: 'ack', conn: c.conn, pid, kind: 'puback' });
        }
        return;
      }
      case 'suback':
        this.subscribed = true;
        return;
      case 'pubrel':
        this.inbound.delete(p.pid);
        c.outbox.push({ t: 'ack', conn: c.conn, pid: p.pid, kind: 'pubcomp' });
        return;
      default:
        return;
    }
  }

  private pubReceives(c: Client, p: OutPacket): void {
    switch (p.type) {
      case 'connack':
        c.connected = true;
        // [MQTT-4.4.0-1]: unacknowledged PUBLISH and PUBREL packets are re-sent on reconnect.
        for (const [pid, u] of this.unacked) c.outbox.push(publishCmd(c.conn, pid, u.qos));
        for (const pid of this.released) c.outbox.push({ t: 'pubrel', conn: c.conn, pid });
        return;
      case 'puback':
      case 'pubrec':
        if (!this.unacked.delete(p.pid)) return;
        this.acked.add(payloadOf(p.pid));
        if (p.type === 'pubrec') {
          this.released.add(p.pid);
          c.outbox.push({ t: 'pubrel', conn: c.conn, pid: p.pid });
        }
        return;
      case 'pubcomp':
        this.released.delete(p.pid);
        return;
      default:
        return;
    }
  }

  private deliverToApp(text: string): void {
    const count = (this.received.get(text) ?? 0) + 1;
    this.received.set(text, count);
    if (count > 1 && this.qos2.has(text)) throw new Violation('qos2 duplicate', `subscriber got QoS 2 message ${text} ${count} times`);
  }

  // ---- invariants ----

  private checkDigest(node: number, broker: Broker): void {
    const index = broker.appliedIndex;
    const digest = broker.digest();
    const seen = this.digests.get(index);
    if (seen === undefined) this.digests.set(index, digest);
    else if (seen !== digest) throw new Violation('state digest', `node ${node} differs at applied index ${index}`);
  }

  /** The subscriber's session reconnects on this node's final state and is settled to the end:
   * every acknowledged message must have reached the subscriber or come out now, QoS 2 once. */
  private drain(node: number, broker: Broker): void {
    let index = broker.appliedIndex;
    const time = broker.appliedTime;
    const out: Effect[] = [];
    const apply = (cmd: Command): void => {
      out.length = 0;
      broker.apply({ index: ++index, time, cmd }, out);
    };
    apply({ t: 'serve-start', node, settings: simSettings });
    const conn = `${index}.1`;
    apply(connectCmd(conn, SUB));
    const inbound = new Set(this.inbound);
    const got = new Map(this.received);
    for (let round = 0; round < DRAIN_ROUNDS_MAX; round++) {
      const acks: Command[] = [];
      for (const e of out) {
        if (e.t !== 'send' || e.conn !== conn) continue;
        const p = e.packet;
        if (p.type === 'publish' && p.pid !== undefined) {
          const text = decoder.decode(p.msg.payload);
          if (p.qos === 1 || !inbound.has(p.pid)) {
            got.set(text, (got.get(text) ?? 0) + 1);
            if (p.qos === 2 && (got.get(text) ?? 0) > 1) {
              throw new Violation('qos2 duplicate', `node ${node}'s state would deliver QoS 2 message ${text} again`);
            }
          }
          if (p.qos === 2) inbound.add(p.pid);
          acks.push({ t: 'ack', conn, pid: p.pid, kind: p.qos === 2 ? 'pubrec' : 'puback' });
        } else if (p.type === 'pubrel') {
          inbound.delete(p.pid);
          acks.push({ t: 'ack', conn, pid: p.pid, kind: 'pubcomp' });
        }
      }
      if (acks.length === 0) break;
      const effects: Effect[] = [];
      for (const a of acks) {
        apply(a);
        effects.push(...out);
      }
      out.length = 0;
      out.push(...effects);
    }
    for (const text of this.acked) {
      if (!got.has(text)) throw new Violation('acknowledged publish lost', `node ${node}'s state does not route acknowledged ${text}`);
    }
  }

  private node(id: number): NodeState {
    const n = this.nodes.get(id);
    if (n === undefined) throw new Violation('broker sim', `node ${id} was never started`);
    return n;
  }

  private serving(n: NodeState, view: SimNodeView): boolean {
    return n.period !== 0 && view.role === 'leader' && view.term === n.servingTerm && n.lastTerm === n.servingTerm && view.hasLease;
  }
}

function newClient(id: string): Client {
  return { id, node: 0, period: 0, conn: '', connected: false, outbox: [] };
}

function payloadOf(pid: number): string {
  return `m${pid}`;
}

function connectCmd(conn: string, clientId: string): Command {
  return {
    t: 'connect',
    conn,
    clientId,
    protocol: 4,
    clean: false,
    expiryS: 0xffff_ffff,
    will: null,
    username: null,
    receiveMax: 65_535,
    maxPacketSize: 0,
    problemInfo: true,
  };
}

function publishCmd(conn: string, pid: number, qos: 1 | 2): Command {
  return { t: 'publish', conn, pid, msg: { topic: TOPIC, payload: new TextEncoder().encode(payloadOf(pid)), qos, retain: false } };
}

/** One seed of the broker over the raft simulator, with the given raft faults. */
export function runBrokerSeed(seed: number, faults: ReadonlySet<Fault>, stats?: BrokerSimStats, mutant: BrokerMutant | null = null): SimResult {
  return runSeed({
    seed,
    faults,
    app: () => {
      const app = new BrokerSimApp(mutant);
      if (stats !== undefined) stats.last = app;
      return app;
    },
  });
}

/** The app of the latest run, so tests can check that the workload did something. */
export interface BrokerSimStats {
  last: BrokerSimApp | null;
}
