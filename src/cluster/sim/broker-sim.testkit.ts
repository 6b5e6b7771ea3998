// The broker over the raft simulator (docs/architecture.md "Testing layers"): each simulated node applies
// committed entries to a real Broker; simulated MQTT clients propose commands to whichever node
// serves; MQTT-level invariants are checked across raft's fault classes and its force-start
// scenarios. Every check is keyed by epoch (SimNodeView.epoch, `generation.id`), since a forced
// epoch's log is the forced file's log followed by new entries and need not match what the old
// epoch committed at the same index.
//
// Within one epoch:
// - equal digests at equal applied index on every node of the epoch;
// - no acknowledged publish lost: every message whose PUBACK or PUBREC a serving leader of the
//   epoch sent is, at the end, either received by the subscriber or routed to it by the state of
//   every node of the final epoch holding its whole log (a reconnect of its session drains it);
// - no QoS 2 duplicate: the subscriber's application sees each QoS 2 message at most once from the
//   nodes of one epoch (the end-of-run drain included).
// Across a force-start (docs/design.md "Force-start": it keeps exactly what its file holds; anything
// acknowledged later is lost and QoS 2 flows in progress may be duplicated):
// - the new epoch's broker state starts from the forced file's log: the forcing node, which starts
//   from a fresh Broker (its process restarted), reaches at the index its previous process had
//   applied the very digest that process had there; a node that switches epochs drops its Broker
//   and applies the new epoch's log from index 1 (or its snapshot), as RaftLog's reset() does;
// - acknowledged publishes that were in the forced file (their acknowledging entry, by index and
//   term, is in the file's log or under its snapshot) are still delivered: they stay in the
//   new epoch's "no acknowledged publish lost" set; the rest may be lost, and are counted;
// - serving periods of different epochs never overlap: once a node of an epoch has sent anything
//   to a client, no node of an epoch that served earlier, or of an epoch of no newer generation,
//   ever sends anything again (so the old epoch acknowledges nothing once the new one serves);
// - what does not hold across epochs, by design: equal digests at an index (each epoch has its own
//   log) and QoS 2 exactly once (a flow whose end the file lacks is run again);
// - no QoS 2 message dropped for a stale packet id ('stale qos2 pid'): the subscriber keeps its QoS 2
//   receive state from the old epoch, as a real client does, and drops a QoS 2 PUBLISH whose id it
//   still holds [MQTT-4.3.3]; a forced epoch whose file lacks that flow may use the id again for
//   another message, so it fences every id (PUBREL first, src/broker/deliver.ts "Fence"). Before the
//   fence this lost a message the new epoch acknowledged (bootstrap-two-fresh-one-member with the
//   partition fault, seed 13; with drop, dup and reorder, seed 7010); the 'no-fence' mutant still
//   does. Within one epoch the same reuse fails the seed ('qos2 pid reuse').
// The serving rule is RaftLog's own (serving-rule.ts): leader, its own serve-start (proposed once its
// cluster time follows the clocks) applied in its term, an entry of its term applied last, a lease
// and a sound broker.

import type { LogEntry } from '../../../raft/core/messages.js';
import { Violation } from '../../../raft/sim/checker.js';
import { type Fault, runSeed, type Scenario, type SimApp, type SimNodeView, type SimResult } from '../../../raft/sim/sim.js';
import { Broker } from '../../broker/broker.js';
import { testSettings } from '../../broker/broker-harness.testkit.js';
import type { Command, Effect, OutPacket, Settings } from '../../broker/commands.js';
import { decodeCommand, encodeCommand } from '../../log/command-codec.js';
import { servingHolds } from '../serving-rule.js';

/** The tests' settings with a queue bound of its own. */
export const simSettings: Settings = { ...testSettings, maxQueuedMessages: 1_000 };

/** Messages the publisher sends per run (pids 1..N, so no pid is reused). */
const MESSAGES_MAX = 60;
/** Rounds of the end-of-run drain of the subscriber's session; each settles up to maxInflight. */
const DRAIN_ROUNDS_MAX = 1_000;
const SUB = 'sub';
const PUB = 'pub';
const TOPIC = 't/x';

interface Client {
  readonly id: string;
  /** The node process and serving period of the current connection; null: none. A new process
   * (a restart, a switch of epoch) is a new connection even at an equal period index. */
  server: NodeState | null;
  period: number;
  conn: string;
  connected: boolean;
  /** Commands decided by packets received, proposed at the next chance on this connection. */
  outbox: Command[];
}

interface NodeState {
  broker: Broker;
  /** The epoch this process is in: the one it started in, until it forces the next. */
  epoch: string;
  /** The process this one replaced on the same node (only while this one has not forced). */
  prev: NodeState | null;
  /** A forced epoch must reach this digest at this applied index (what `prev` had applied). */
  expect: { index: number; digest: string; from: string } | null;
  lastTerm: number;
  /** The serving period (index of its own serve-start) and its term; 0: none. */
  period: number;
  servingTerm: number;
  /** Term in which this node proposed serve-start (once per term). */
  startProposedTerm: number;
  seq: number;
}

interface Inbound {
  readonly text: string;
  readonly epoch: string;
}

/** The entry whose apply sent a PUBACK or PUBREC: within a lineage of epochs, index and term name
 * one entry (a forced epoch keeps the file's entries and appends in higher terms). */
interface AckTag {
  readonly index: number;
  readonly term: number;
}

const decoder = new TextDecoder();

/** A deliberately broken broker, to show the invariants catch it: 'ack-on-propose' treats a
 * publish as acknowledged when it is proposed, not when its entry committed; 'keep-state-on-reset'
 * keeps a node's Broker when it switches to a newer epoch, which then re-delivers its log from
 * index 1 (RaftLog's reset() drops it); 'clean-after-force' starts the subscriber's session afresh
 * in a forced epoch (a clean-start takeover through the log), so the acknowledged messages its file
 * held for it are dropped; 'no-fence' proposes serve-start without the epoch generation, so a
 * forced epoch never fences the packet ids its subscribers may still hold. */
export type BrokerMutant = 'ack-on-propose' | 'keep-state-on-reset' | 'clean-after-force' | 'no-fence';

export class BrokerSimApp implements SimApp {
  private readonly mutant: BrokerMutant | null;
  private readonly nodes = new Map<number, NodeState>();
  /** Per epoch, the digest at each applied index. */
  private readonly digests = new Map<string, Map<number, string>>();
  private readonly sub: Client = newClient(SUB);
  private readonly pub: Client = newClient(PUB);
  /** Publisher: next message number; pids waiting for PUBACK/PUBREC, and for PUBCOMP. */
  private sent = 0;
  private readonly unacked = new Map<number, { qos: 1 | 2 }>();
  private readonly released = new Set<number>();
  /** Payloads whose PUBACK or PUBREC the publisher received, in any epoch. */
  readonly acked = new Set<string>();
  /** Per epoch, the acknowledged payloads it must deliver: acknowledged by its own serving leaders,
   * or carried over in its forced file. */
  private readonly mustDeliver = new Map<string, Map<string, AckTag>>();
  /** Subscriber: QoS 2 pids received and not yet released (with what the sim knows and a client
   * does not: the payload and the epoch that sent it); what its application got, by count, from
   * any epoch and per epoch. */
  private readonly inbound = new Map<number, Inbound>();
  readonly received = new Map<string, number>();
  private readonly receivedIn = new Map<string, Map<string, number>>();
  /** The subscriber got its SUBACK. */
  private subscribed = false;
  /** Payloads published at QoS 2. */
  private readonly qos2 = new Set<string>();
  /** The epoch whose node sent something to a client last, and every epoch that ever did. */
  private servingEpoch = '';
  private readonly servedEpochs = new Set<string>();
  /** Epochs made by a force-start. */
  private readonly forced = new Set<string>();
  /** Figures of the run: epochs made by a force-start, publishes acknowledged in an epoch after the
   * first, acknowledged payloads carried into a forced epoch, and acknowledged payloads that the
   * final epoch neither delivered nor holds (lost by a force-start, as the design allows). */
  forcedEpochs = 0;
  /** PUBRELs that released a packet id the subscriber held for a flow of an older epoch (a forced
   * epoch's fence, or the flow's own PUBREL when the forced file holds it too). */
  staleReleases = 0;
  laterEpochAcks = 0;
  carriedAcks = 0;
  lostByForce = 0;

  constructor(mutant: BrokerMutant | null = null) {
    this.mutant = mutant;
  }

  started(node: number, view: SimNodeView): void {
    const prev = this.nodes.get(node) ?? null;
    if (prev !== null) prev.prev = null;
    const switched = prev !== null && generationOf(view.epoch) > 0 && generationOf(prev.epoch) > 0 && view.epoch !== prev.epoch;
    const broker = switched && this.mutant === 'keep-state-on-reset' ? prev.broker : new Broker();
    this.nodes.set(node, {
      broker,
      epoch: view.epoch,
      prev,
      expect: null,
      lastTerm: 0,
      period: 0,
      servingTerm: 0,
      startProposedTerm: 0,
      seq: 0,
    });
  }

  proposals(leader: number, view: SimNodeView): Uint8Array[] {
    const n = this.node(leader);
    // A forced leader proposes once it applied the file in its new epoch.
    if (view.epoch !== n.epoch) return [];
    if (!this.serving(n, view)) {
      if (view.role !== 'leader' || !view.clusterTimeReady || n.startProposedTerm === view.term) return [];
      n.startProposedTerm = view.term;
      const cmd: Command = { t: 'serve-start', node: leader, settings: simSettings };
      if (this.mutant !== 'no-fence') cmd.generation = generationOf(view.epoch);
      return [encodeCommand(cmd)];
    }
    const cmds: Command[] = [];
    for (const c of [this.sub, this.pub]) this.drive(c, n, cmds);
    return cmds.map(encodeCommand);
  }

  applied(node: number, entries: readonly LogEntry[], view: SimNodeView): void {
    const n = this.node(node);
    if (view.epoch !== n.epoch) this.enterEpoch(node, n, view.epoch, entries);
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
      // As BrokerNode: a node that does not serve builds no effects (its own serve-start may make
      // it serve, so that entry builds them), and every node must still reach the same digests.
      const build = this.serving(n, view) || cmd.t === 'serve-start';
      out.length = 0;
      n.broker.apply({ index: e.index, time: e.time, cmd }, build ? out : null);
      if (n.expect?.index === n.broker.appliedIndex) this.checkKept(node, n);
      if (cmd.t === 'serve-start' && cmd.node === node && e.term === view.term && view.role === 'leader') {
        n.period = e.index;
        n.servingTerm = e.term;
      }
      if (build && this.serving(n, view)) this.execute(node, n, out, e);
    }
    if (n.broker.failed !== null) throw new Violation('broker invariant', `node ${node}: ${n.broker.failed}`);
    if (n.expect !== null) {
      throw new Violation(
        'forced file',
        `node ${node}'s forced epoch ${n.epoch} lacks index ${n.expect.index}, which it had applied in epoch ${n.expect.from}`,
      );
    }
    this.checkDigest(node, n);
  }

  /** Fault `snapshot` compacts with the broker's own snapshot, as RaftLog does. */
  snapshot(node: number): Iterable<Uint8Array> {
    return this.node(node).broker.snapshot();
  }

  /** An installed snapshot replaces the node's broker; its digest must equal every other node's
   * of its epoch at the same applied index, like any replica's. */
  restore(node: number, chunks: readonly Uint8Array[]): void {
    const n = this.node(node);
    n.broker.restore(chunks);
    this.checkDigest(node, n);
  }

  /** The subscriber's session is drained on the final epoch's most advanced nodes: the epoch most
   * nodes ended in (the newest on a tie), as the simulator's raft checks take it. */
  end(): void {
    const epoch = this.finalEpoch();
    if (epoch === null) return;
    let max = 0;
    for (const n of this.nodes.values()) if (n.epoch === epoch) max = Math.max(max, n.broker.appliedIndex);
    const must = this.mustDeliver.get(epoch) ?? new Map<string, AckTag>();
    for (const [id, n] of this.nodes) if (n.epoch === epoch && n.broker.appliedIndex === max) this.drain(id, n.broker, epoch, must);
    for (const text of this.acked) if (!must.has(text) && !this.received.has(text)) this.lostByForce++;
  }

  // ---- epochs ----

  /** Only a force-start moves a process from one real epoch to another (a switch starts a new
   * process, and so does every restart): `entries` is then the forced file's log after its
   * snapshot, which `broker` already restored. A fresh or amnesiac process joins its first epoch. */
  private enterEpoch(node: number, n: NodeState, epoch: string, entries: readonly LogEntry[]): void {
    const from = n.epoch;
    n.epoch = epoch;
    if (generationOf(from) === 0) return;
    this.forcedEpochs++;
    this.forced.add(epoch);
    const inFile = new Set<string>();
    for (const e of entries) inFile.add(`${e.index}.${e.term}`);
    const carried = new Map<string, AckTag>();
    for (const [text, tag] of this.mustDeliver.get(from) ?? []) {
      if (tag.index <= n.broker.appliedIndex || inFile.has(`${tag.index}.${tag.term}`)) carried.set(text, tag);
    }
    this.mustDeliver.set(epoch, carried);
    this.carriedAcks += carried.size;
    const p = n.prev;
    n.prev = null;
    if (p === null || p.epoch !== from || p.broker.appliedIndex === 0) return;
    n.expect = { index: p.broker.appliedIndex, digest: p.broker.digest(), from };
    if (n.broker.appliedIndex === n.expect.index) this.checkKept(node, n);
  }

  /** The forced epoch's state, where the node's previous process stopped applying, is that
   * process's state: everything it had applied of the old epoch is in its file. */
  private checkKept(node: number, n: NodeState): void {
    const x = n.expect;
    if (x === null) return;
    n.expect = null;
    if (n.broker.digest() !== x.digest) {
      throw new Violation(
        'forced file',
        `node ${node}'s forced epoch ${n.epoch} differs at ${x.index} from what it applied in epoch ${x.from}`,
      );
    }
  }

  /** A node of `n.epoch` is about to send to clients: no other epoch serves after it, and it never
   * serves after a newer one did. */
  private noteServing(node: number, n: NodeState): void {
    if (n.epoch === this.servingEpoch) return;
    if (this.servedEpochs.has(n.epoch) || generationOf(n.epoch) <= generationOf(this.servingEpoch)) {
      throw new Violation('old epoch acknowledges', `node ${node} of epoch ${n.epoch} serves after epoch ${this.servingEpoch} served`);
    }
    this.servedEpochs.add(n.epoch);
    this.servingEpoch = n.epoch;
  }

  private finalEpoch(): string | null {
    const count = new Map<string, number>();
    for (const n of this.nodes.values()) if (generationOf(n.epoch) > 0) count.set(n.epoch, (count.get(n.epoch) ?? 0) + 1);
    let best: string | null = null;
    for (const [epoch, k] of count) {
      const b = best === null ? 0 : (count.get(best) ?? 0);
      if (best === null || k > b || (k === b && generationOf(epoch) > generationOf(best))) best = epoch;
    }
    return best;
  }

  // ---- clients ----

  /** Connects a client to the serving leader if it is not on it, else proposes what it owes. */
  private drive(c: Client, n: NodeState, cmds: Command[]): void {
    if (c.server !== n || c.period !== n.period) {
      c.server = n;
      c.period = n.period;
      c.conn = `${n.period}.${++n.seq}`;
      c.connected = false;
      c.outbox = [];
      const clean = this.mutant === 'clean-after-force' && c === this.sub && this.forced.has(n.epoch);
      cmds.push(connectCmd(c.conn, c.id, clean));
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
      if (this.mutant === 'ack-on-propose') this.ack(payloadOf(pid), n.epoch, { index: Number.MAX_SAFE_INTEGER, term: 0 });
      cmds.push(publishCmd(c.conn, pid, qos));
    }
  }

  /** Effects of applying `entry` on a serving node, delivered to the clients connected to it. */
  private execute(node: number, n: NodeState, out: readonly Effect[], entry: LogEntry): void {
    for (const e of out) {
      if (e.t === 'event') continue;
      const c = this.clientOn(n, e.conn);
      if (c === null) continue;
      this.noteServing(node, n);
      if (e.t === 'close') {
        c.server = null;
        continue;
      }
      if (c === this.sub) this.subReceives(c, e.packet, n.epoch);
      else this.pubReceives(c, e.packet, n.epoch, entry);
    }
  }

  private clientOn(n: NodeState, conn: string): Client | null {
    for (const c of [this.sub, this.pub]) if (c.server === n && c.period === n.period && c.conn === conn) return c;
    return null;
  }

  private subReceives(c: Client, p: OutPacket, epoch: string): void {
    switch (p.type) {
      case 'connack':
        c.connected = true;
        if (!p.sessionPresent)
          c.outbox.push({ t: 'subscribe', conn: c.conn, pid: 1, subs: [{ filter: 't/#', qos: 2, nl: false, rap: false, rh: 0 }] });
        return;
      case 'publish': {
        const pid = p.pid ?? 0;
        const text = decoder.decode(p.msg.payload);
        if (p.qos === 2) {
          // QoS 2 receiver [MQTT-4.3.3]: a pid seen and not yet released is the same message.
          if (this.holdsPid(this.inbound, pid, text, epoch)) {
            this.checkStale(this.inbound, pid, text, epoch);
          } else {
            this.deliverToApp(text, epoch);
            this.inbound.set(pid, { text, epoch });
          }
          c.outbox.push({ t: 'ack', conn: c.conn, pid, kind: 'pubrec' });
        } else {
          this.deliverToApp(text, epoch);
          if (p.qos === 1) c.outbox.push({ t: 'ack', conn: c.conn, pid, kind: 'puback' });
        }
        return;
      }
      case 'suback':
        this.subscribed = true;
        return;
      case 'pubrel':
        this.noteRelease(this.inbound, p.pid, epoch);
        this.inbound.delete(p.pid);
        c.outbox.push({ t: 'ack', conn: c.conn, pid: p.pid, kind: 'pubcomp' });
        return;
      default:
        return;
    }
  }

  private pubReceives(c: Client, p: OutPacket, epoch: string, entry: LogEntry): void {
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
        this.ack(payloadOf(p.pid), epoch, { index: entry.index, term: entry.term });
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

  private ack(text: string, epoch: string, tag: AckTag): void {
    this.acked.add(text);
    if (generationOf(epoch) > 1) this.laterEpochAcks++;
    let must = this.mustDeliver.get(epoch);
    if (must === undefined) {
      must = new Map();
      this.mustDeliver.set(epoch, must);
    }
    must.set(text, tag);
  }

  /** True when the subscriber, as a real client, takes this QoS 2 publish for the one it already
   * holds under `pid` and does not deliver it. The same pid for another payload is a broker fault
   * within an epoch; across a force-start the new epoch's state may lack the old flow and reuse
   * the pid, and the client then drops a different message. */
  private holdsPid(inbound: ReadonlyMap<number, Inbound>, pid: number, text: string, epoch: string): boolean {
    const held = inbound.get(pid);
    if (held === undefined) return false;
    if (held.text !== text && held.epoch === epoch) {
      throw new Violation('qos2 pid reuse', `epoch ${epoch} sent ${text} with pid ${pid}, which ${held.text} still holds`);
    }
    return true;
  }

  /** A QoS 2 publish dropped as the duplicate of the flow held under its pid is a loss when that
   * flow was an older epoch's and carried another message: a forced epoch fences every id it may
   * reuse (src/broker/deliver.ts "Fence"), so this must never happen. */
  private checkStale(inbound: ReadonlyMap<number, Inbound>, pid: number, text: string, epoch: string): void {
    const held = inbound.get(pid);
    if (held === undefined || held.text === text) return;
    throw new Violation(
      'stale qos2 pid',
      `epoch ${epoch} sent ${text} with pid ${pid}, which ${held.text} of epoch ${held.epoch} still holds: dropped as a duplicate`,
    );
  }

  private noteRelease(inbound: ReadonlyMap<number, Inbound>, pid: number, epoch: string): void {
    const held = inbound.get(pid);
    if (held !== undefined && held.epoch !== epoch) this.staleReleases++;
  }

  private deliverToApp(text: string, epoch: string): void {
    this.received.set(text, (this.received.get(text) ?? 0) + 1);
    let mine = this.receivedIn.get(epoch);
    if (mine === undefined) {
      mine = new Map();
      this.receivedIn.set(epoch, mine);
    }
    const count = (mine.get(text) ?? 0) + 1;
    mine.set(text, count);
    if (count > 1 && this.qos2.has(text))
      throw new Violation('qos2 duplicate', `subscriber got QoS 2 message ${text} ${count} times in epoch ${epoch}`);
  }

  // ---- invariants ----

  private checkDigest(node: number, n: NodeState): void {
    let digests = this.digests.get(n.epoch);
    if (digests === undefined) {
      digests = new Map();
      this.digests.set(n.epoch, digests);
    }
    const index = n.broker.appliedIndex;
    const digest = n.broker.digest();
    const seen = digests.get(index);
    if (seen === undefined) digests.set(index, digest);
    else if (seen !== digest) throw new Violation('state digest', `node ${node} differs at applied index ${index} of epoch ${n.epoch}`);
  }

  /** The subscriber's session reconnects on this node's final state and is settled to the end:
   * every payload the epoch must deliver has reached the subscriber or comes out now, QoS 2 at
   * most once within the epoch. */
  private drain(node: number, broker: Broker, epoch: string, must: ReadonlyMap<string, AckTag>): void {
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
    const inbound = new Map(this.inbound);
    const got = new Map(this.receivedIn.get(epoch));
    for (let round = 0; round < DRAIN_ROUNDS_MAX; round++) {
      const acks: Command[] = [];
      for (const e of out) {
        if (e.t !== 'send' || e.conn !== conn) continue;
        const p = e.packet;
        if (p.type === 'publish' && p.pid !== undefined) {
          const text = decoder.decode(p.msg.payload);
          const held = p.qos === 2 && this.holdsPid(inbound, p.pid, text, epoch);
          if (held) this.checkStale(inbound, p.pid, text, epoch);
          if (!held) {
            got.set(text, (got.get(text) ?? 0) + 1);
            if (p.qos === 2 && (got.get(text) ?? 0) > 1) {
              throw new Violation('qos2 duplicate', `node ${node}'s state would deliver QoS 2 message ${text} again in epoch ${epoch}`);
            }
          }
          if (p.qos === 2 && !held) inbound.set(p.pid, { text, epoch });
          acks.push({ t: 'ack', conn, pid: p.pid, kind: p.qos === 2 ? 'pubrec' : 'puback' });
        } else if (p.type === 'pubrel') {
          this.noteRelease(inbound, p.pid, epoch);
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
    for (const text of must.keys()) {
      if (!got.has(text) && !this.received.has(text)) {
        throw new Violation('acknowledged publish lost', `node ${node}'s state of epoch ${epoch} does not route acknowledged ${text}`);
      }
    }
  }

  private node(id: number): NodeState {
    const n = this.nodes.get(id);
    if (n === undefined) throw new Violation('broker sim', `node ${id} was never started`);
    return n;
  }

  /** RaftLog's rule (serving-rule.ts) over the simulated node's view. */
  private serving(n: NodeState, view: SimNodeView): boolean {
    if (n.period === 0) return false;
    return servingHolds({
      stopped: false,
      role: view.role,
      term: view.term,
      servingTerm: n.servingTerm,
      lastAppliedTerm: n.lastTerm,
      hasLease: view.hasLease,
      failed: n.broker.failed !== null,
    });
  }
}

/** `generation.id` to its generation; 0 for no epoch (fresh or amnesiac, not yet joined). */
function generationOf(epoch: string): number {
  const dot = epoch.indexOf('.');
  return dot <= 0 ? 0 : Number(epoch.slice(0, dot));
}

function newClient(id: string): Client {
  return { id, server: null, period: 0, conn: '', connected: false, outbox: [] };
}

function payloadOf(pid: number): string {
  return `m${pid}`;
}

function connectCmd(conn: string, clientId: string, clean = false): Command {
  return {
    t: 'connect',
    conn,
    clientId,
    protocol: 4,
    clean,
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

/** The raft simulator's scenarios in which a force-started epoch serves. */
export const servingForceStarts: readonly Scenario[] = [
  'force-start-after-two-losses',
  'force-start-concurrent',
  'bootstrap-two-fresh-one-member',
];

export interface BrokerSeedOptions {
  /** Receives the app of the run, so tests can check that the workload did something. */
  readonly stats?: BrokerSimStats;
  readonly mutant?: BrokerMutant;
  /** A raft simulator scenario run with the faults (the force-start ones make epochs that serve). */
  readonly scenario?: Scenario;
}

/** One seed of the broker over the raft simulator, with the given raft faults. */
export function runBrokerSeed(seed: number, faults: ReadonlySet<Fault>, opts: BrokerSeedOptions = {}): SimResult {
  const { stats, mutant, scenario } = opts;
  return runSeed({
    seed,
    faults,
    ...(scenario === undefined ? {} : { scenario }),
    app: () => {
      const app = new BrokerSimApp(mutant ?? null);
      if (stats !== undefined) stats.last = app;
      return app;
    },
  });
}

/** The app of the latest run. */
export interface BrokerSimStats {
  last: BrokerSimApp | null;
}
