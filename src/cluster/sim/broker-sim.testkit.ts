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
//   nodes of one epoch (the end-of-run drain included);
// - two servers: once any client received anything from a serving period of some term, no client
//   receives from a period of a lower term (docs/design.md "One server at a time", as the clients
//   see it). A QoS 0 pair stays connected to the node it connected to until that node ends the
//   period, as clients with a long keep-alive do, and its QoS 0 messages are routed at the node's
//   every tick with no log entry (Broker.routeQos0), so a leader that serves when it must not is
//   heard: fault leader-pause stops a leader until another serves, and on resume it ticks before it
//   hears of the new term. Serving-rule mutants ('no-lease', 'no-applied-term', 'no-leader') judge
//   on facts with one condition left out;
// - expired delivered: an expiring message (1 s) reaches the subscriber before it expires, with a
//   remaining interval within its own; an acknowledged one that is neither delivered nor routed at
//   the end has expired by then;
// - will after disconnect / will not published: the will client's wills are never published for a
//   connection its normal DISCONNECT ended, and the will of its last connection, after which it
//   stays away, is published once the grace (1 s) has passed;
// - queue limit: a slow session subscribes to larger messages and stays away; at the end it holds
//   exactly what admission under the bytes bound keeps, judged from the log by a model of the rule
//   (docs/design.md "Queues are bounded by admission"), not by the broker's own code.
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
import type { MutantRun } from '../../../raft/sim/mutants.js';
import { type Fault, runSeed, type Scenario, type SimApp, type SimNodeView, type SimResult } from '../../../raft/sim/sim.js';
import { Broker } from '../../broker/broker.js';
import { testSettings } from '../../broker/broker-harness.testkit.js';
import type { Command, Effect, Message, OutPacket, Settings, Will } from '../../broker/commands.js';
import { decodeCommand, encodeCommand } from '../../log/command-codec.js';
import { type ServingFacts, servingHolds } from '../serving-rule.js';

/** The tests' settings with queue bounds of their own: the messages bound is never reached; the
 * bytes bound holds 5 of the large messages only the slow session takes (the others are a few
 * bytes each, 60 at most). Wills of connections a failover ended wait 1 s (10E). */
export const simSettings: Settings = { ...testSettings, maxQueuedMessages: 1_000, maxQueuedBytes: 5 * 103, willGraceS: 1 };

/** Messages the publisher sends per run (pids 1..N, so no pid is reused). */
const MESSAGES_MAX = 60;
/** Rounds of the end-of-run drain of the subscriber's session; each settles up to maxInflight. */
const DRAIN_ROUNDS_MAX = 1_000;
const SUB = 'sub';
const PUB = 'pub';
const TOPIC = 't/x';
/** One message in LARGE_EVERY (pids 1, 5, 9, ...: QoS 1, so every re-send is routed again) goes
 * to LARGE_TOPIC with a LARGE_BYTES payload, for the slow session only (the subscriber's filter is
 * t/#), which subscribes once and stays away; of the others, every EXPIRING_EVERY-th pid goes to
 * EXPIRING_TOPIC with a Message Expiry Interval of EXPIRY_S. */
const EXPIRING_EVERY = 3;
const EXPIRY_S = 1;
const EXPIRING_TOPIC = 't/e';
const LARGE_EVERY = 4;
const LARGE_TOPIC = 'b/x';
const LARGE_BYTES = 100;
const SLOW = 'slow';
/** The will client connects WILL_ROUNDS times, each with a will of its own; it ends every
 * connection but the last with a normal DISCONNECT, and after the last it stays away. */
const WILL = 'will';
const WILL_ROUNDS = 6;
const WILL_TOPIC = 't/w';
/** The QoS 0 pair, which stays on the node it connected to (see BrokerSimApp.tick). */
const QSUB = 'qsub';
const QPUB = 'qpub';
const QTOPIC = 'q/x';

interface Client {
  readonly id: string;
  /** Stays connected to its node until the node ends the connection (its serving period ends, or
   * its process goes), as a client with a long keep-alive does; the others follow the leader. */
  readonly sticky: boolean;
  /** The node process and serving period of the current connection; null: none. A new process
   * (a restart, a switch of epoch) is a new connection even at an equal period index. */
  server: NodeState | null;
  period: number;
  conn: string;
  connected: boolean;
  /** Commands decided by packets received, proposed at the next chance on this connection. */
  outbox: Command[];
  /** Connections made so far; the slow and will clients stop making them at some point. */
  connects: number;
  /** Makes no more connections. */
  done: boolean;
}

interface NodeState {
  readonly id: number;
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
  /** What this process's log says of the will client: its connection, that connection's will, and
   * whether the connection still stands (no serve-start since it connected). */
  willConn: string;
  willText: string;
  willLive: boolean;
  /** The slow session's queue as admission builds it from this process's log: its connection
   * (live as above), then, from its subscribe on, the large messages that fit the bytes bound, in
   * order, until the first that does not; null when this process cannot know (a snapshot). */
  slowConn: string;
  slowLive: boolean;
  slowSubscribed: boolean;
  slowQueue: { texts: string[]; bytes: number; full: boolean } | null;
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
const encoder = new TextEncoder();

/** A deliberately broken broker, to show the invariants catch it: 'ack-on-propose' treats a
 * publish as acknowledged when it is proposed, not when its entry committed; 'keep-state-on-reset'
 * keeps a node's Broker when it switches to a newer epoch, which then re-delivers its log from
 * index 1 (RaftLog's reset() drops it); 'clean-after-force' starts the subscriber's session afresh
 * in a forced epoch (a clean-start takeover through the log), so the acknowledged messages its file
 * held for it are dropped; 'no-fence' proposes serve-start without the epoch generation, so a
 * forced epoch never fences the packet ids its subscribers may still hold. */
export type BrokerMutant = 'ack-on-propose' | 'keep-state-on-reset' | 'clean-after-force' | 'no-fence' | WorkloadMutant | ServingRuleMutant;

/** Bugs of the layer that turns packets into commands or settings: 'will-on-normal-disconnect'
 * proposes a client's normal DISCONNECT as one that publishes the will; 'drop-will' proposes a
 * CONNECT without the will it carries (the will client's last); 'drop-expiry' proposes a
 * publish without its Message Expiry Interval; 'queue-bound-ignored' serves with four times the
 * bytes bound the cluster is given. */
export type WorkloadMutant = 'will-on-normal-disconnect' | 'drop-will' | 'drop-expiry' | 'queue-bound-ignored';

/** The serving rule (serving-rule.ts) with one condition left out, as the simulated nodes judge it:
 * 'no-lease' serves without a lease, 'no-applied-term' whatever term it applied last, 'no-leader'
 * in any role. The facts are changed, not the rule, so the shipped rule stays as it is. */
export type ServingRuleMutant = 'no-lease' | 'no-applied-term' | 'no-leader';

/** Every planted bug of the broker simulator, in the order the mutant report runs them. */
export const brokerMutants: readonly BrokerMutant[] = [
  'ack-on-propose',
  'keep-state-on-reset',
  'clean-after-force',
  'no-fence',
  'will-on-normal-disconnect',
  'drop-will',
  'drop-expiry',
  'queue-bound-ignored',
  'no-lease',
  'no-applied-term',
  'no-leader',
];

export class BrokerSimApp implements SimApp {
  private readonly mutant: BrokerMutant | null;
  private readonly nodes = new Map<number, NodeState>();
  /** Per epoch, the digest at each applied index. */
  private readonly digests = new Map<string, Map<number, string>>();
  private readonly sub: Client = newClient(SUB, false);
  private readonly pub: Client = newClient(PUB, false);
  private readonly qsub: Client = newClient(QSUB, true);
  private readonly qpub: Client = newClient(QPUB, true);
  private readonly slow: Client = newClient(SLOW, false);
  private readonly will: Client = newClient(WILL, false);
  private readonly clients: readonly Client[] = [this.sub, this.pub, this.qsub, this.qpub, this.slow, this.will];
  /** The model of the log at each snapshot taken, by `epoch@index`. */
  private readonly models = new Map<string, LogModel>();
  /** Per epoch, the wills whose connection a normal DISCONNECT ended (applied while it stood). */
  private readonly noWill = new Map<string, Set<string>>();
  /** Connections whose client sent a normal DISCONNECT. */
  private readonly normalBye = new Set<string>();
  /** The will of the will client's last connection, once it got its CONNACK ('' before). */
  private lastWill = '';
  private lastWillConn = '';
  /** Per payload, the first and the latest entry time at which it was published (a re-send is
   * published again, and a QoS 2 one is not routed again), and its expiry (s). */
  private readonly publishedAt = new Map<string, { first: number; time: number; expiryS: number }>();
  /** Figures of the run: expiring messages delivered, and found expired at the end; wills
   * published; slow-session queues checked and the messages they held. */
  expiringDelivered = 0;
  expiredAtEnd = 0;
  willsPublished = 0;
  slowChecked = 0;
  slowHeld = 0;
  /** QoS 0 messages sent by the sticky publisher, and received by the sticky subscriber. */
  private qos0Sent = 0;
  qos0Received = 0;
  /** Per epoch, the highest serving term from which any client received anything, with who sent it
   * and when (true ms): serving periods of one epoch follow each other by term. */
  private readonly lastSender = new Map<string, { term: number; node: number; at: number; what: string }>();
  /** Times the planted bug changed what the run did: a serving-rule mutant judged otherwise than
   * the rule, or another mutant took its branch where it matters. 0 at the end of a run: the
   * situation that could expose it never arose, so no checker could have caught it. */
  mutantActs = 0;
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
    const keep = switched && this.mutant === 'keep-state-on-reset';
    if (keep) this.mutantActs++;
    const broker = keep ? prev.broker : new Broker();
    this.nodes.set(node, {
      id: node,
      broker,
      epoch: view.epoch,
      prev,
      expect: null,
      lastTerm: 0,
      period: 0,
      servingTerm: 0,
      startProposedTerm: 0,
      seq: 0,
      willConn: '',
      willText: '',
      willLive: false,
      slowConn: '',
      slowLive: false,
      slowSubscribed: false,
      slowQueue: { texts: [], bytes: 0, full: false },
    });
  }

  proposals(leader: number, view: SimNodeView): Uint8Array[] {
    const n = this.node(leader);
    // A forced leader proposes once it applied the file in its new epoch.
    if (view.epoch !== n.epoch) return [];
    if (!this.judge(n, view)) {
      if (view.role !== 'leader' || !view.clusterTimeReady || n.startProposedTerm === view.term) return [];
      n.startProposedTerm = view.term;
      const ignored = this.mutant === 'queue-bound-ignored';
      if (ignored) this.mutantActs++;
      const settings = ignored ? { ...simSettings, maxQueuedBytes: 4 * simSettings.maxQueuedBytes } : simSettings;
      const cmd: Command = { t: 'serve-start', node: leader, settings };
      if (this.mutant !== 'no-fence') cmd.generation = generationOf(view.epoch);
      else if (generationOf(view.epoch) > 1) this.mutantActs++;
      return [encodeCommand(cmd)];
    }
    const cmds: Command[] = [];
    for (const c of this.clients) this.drive(c, n, cmds);
    return cmds.map(encodeCommand);
  }

  /** The node's current serving period has sent something to a client. */
  serves(node: number): boolean {
    const n = this.nodes.get(node);
    if (n === undefined || n.period === 0) return false;
    const last = this.lastSender.get(n.epoch);
    return last !== undefined && last.node === node && last.term === n.servingTerm;
  }

  /** The node's timers fired: it judges the serving rule (RaftLog polls it), and while it serves
   * the sticky publisher's QoS 0 message is routed at once, with no log entry, to the sticky
   * subscriber if it is connected there. That is how a node that serves when it must not is seen
   * by a client: a leader paused while both stay connected serves them on resume. */
  tick(node: number, view: SimNodeView): void {
    const n = this.nodes.get(node);
    if (n === undefined || view.epoch !== n.epoch || !this.judge(n, view)) return;
    const q = this.qpub;
    if (!this.on(q, n) || !q.connected) return;
    const out: Effect[] = [];
    const payload = encoder.encode(`q${++this.qos0Sent}`);
    n.broker.routeQos0(q.conn, { topic: QTOPIC, payload, qos: 0, retain: false }, out);
    for (const e of out) {
      if (e.t !== 'send') continue;
      const c = this.clientOn(n, e.conn);
      if (c === null) continue;
      this.noteServing(node, n, view, e.packet.type);
      if (c === this.qsub && e.packet.type === 'publish') this.qos0Received++;
    }
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
      this.model(n, cmd, e);
      const build = this.judge(n, view) || cmd.t === 'serve-start';
      out.length = 0;
      n.broker.apply({ index: e.index, time: e.time, cmd }, build ? out : null);
      if (n.expect?.index === n.broker.appliedIndex) this.checkKept(node, n);
      if (cmd.t === 'serve-start' && cmd.node === node && e.term === view.term && view.role === 'leader') {
        n.period = e.index;
        n.servingTerm = e.term;
      }
      if (build && this.judge(n, view)) this.execute(node, n, out, e, view);
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

  /** What the log says, as this process applies it, of the will client's connections, of the slow
   * session's queue (the admission rule of docs/design.md "Queues are bounded by admission", judged
   * independently of the broker) and of each payload's latest publish time and expiry. */
  private model(n: NodeState, cmd: Command, e: LogEntry): void {
    switch (cmd.t) {
      case 'serve-start':
        // Every connection of an older period ends here.
        n.willLive = false;
        n.slowLive = false;
        return;
      case 'connect':
        if (cmd.clientId === WILL) {
          n.willConn = cmd.conn;
          n.willLive = true;
          n.willText = cmd.will === null ? '' : textOf(cmd.will.msg.payload);
        } else if (cmd.clientId === SLOW) {
          n.slowConn = cmd.conn;
          n.slowLive = true;
        }
        return;
      case 'disconnect':
        // The client's normal DISCONNECT, whatever the command says of the will.
        if (cmd.conn === n.willConn && n.willLive && this.normalBye.has(cmd.conn) && n.willText !== '')
          setOf(this.noWill, n.epoch).add(n.willText);
        if (cmd.conn === n.willConn) n.willLive = false;
        if (cmd.conn === n.slowConn) n.slowLive = false;
        return;
      case 'subscribe':
        if (cmd.conn === n.slowConn && n.slowLive) n.slowSubscribed = true;
        return;
      case 'publishes':
        for (const p of cmd.pubs) this.model(n, p, e);
        return;
      case 'publish': {
        const text = textOf(cmd.msg.payload);
        const last = this.publishedAt.get(text);
        // The expiry the publisher gave it, whatever the command carries.
        const expiryS = cmd.msg.topic === EXPIRING_TOPIC ? EXPIRY_S : 0;
        if (last === undefined) this.publishedAt.set(text, { first: e.time, time: e.time, expiryS });
        else if (last.time < e.time) last.time = e.time;
        const q = n.slowQueue;
        if (cmd.msg.topic !== LARGE_TOPIC || !n.slowSubscribed || q === null) return;
        // Online, it would have taken some into its inflight window: the model no longer applies.
        if (n.slowLive) n.slowQueue = null;
        else if (!q.full) {
          const size = LARGE_TOPIC.length + cmd.msg.payload.length;
          if (q.texts.length < simSettings.maxQueuedMessages && q.bytes + size <= simSettings.maxQueuedBytes) {
            q.texts.push(text);
            q.bytes += size;
          } else q.full = true;
        }
        return;
      }
      default:
        return;
    }
  }

  /** Fault `snapshot` compacts with the broker's own snapshot, as RaftLog does. The model of the
   * log (see model()) at that index is kept beside it, for whichever node restores it. */
  snapshot(node: number): Iterable<Uint8Array> {
    const n = this.node(node);
    this.models.set(`${n.epoch}@${n.broker.appliedIndex}`, copyModel(n));
    return n.broker.snapshot();
  }

  /** An installed snapshot replaces the node's broker; its digest must equal every other node's
   * of its epoch at the same applied index, like any replica's. */
  restore(node: number, chunks: readonly Uint8Array[]): void {
    const n = this.node(node);
    n.broker.restore(chunks);
    const m = this.models.get(`${n.epoch}@${n.broker.appliedIndex}`);
    Object.assign(
      n,
      m ?? { willConn: '', willText: '', willLive: false, slowConn: '', slowLive: false, slowSubscribed: false, slowQueue: null },
    );
    if (m !== undefined) n.slowQueue = m.slowQueue === null ? null : { ...m.slowQueue, texts: [...m.slowQueue.texts] };
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
    for (const [id, n] of this.nodes) {
      if (n.epoch !== epoch || n.broker.appliedIndex !== max) continue;
      this.drain(id, n, epoch, must);
      if (n.slowSubscribed && n.slowQueue !== null) this.drainSlow(id, n.broker, n.slowQueue.texts);
    }
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
   * serves after a newer one did; within the epoch, no client receives from a serving period of a
   * lower term once any client received from one of a higher term ('two servers': docs/design.md
   * "One server at a time", seen from the clients). */
  private noteServing(node: number, n: NodeState, view: SimNodeView, what: string): void {
    const last = this.lastSender.get(n.epoch);
    if (last !== undefined && n.servingTerm < last.term) {
      throw new Violation(
        'two servers',
        `node ${node} of epoch ${n.epoch} sent ${what} to a client at ${view.now.toFixed(1)} ms in its period of term ${n.servingTerm}, ` +
          `after node ${last.node} had sent ${last.what} in term ${last.term} at ${last.at.toFixed(1)} ms`,
      );
    }
    if (last === undefined || n.servingTerm > last.term) this.lastSender.set(n.epoch, { term: n.servingTerm, node, at: view.now, what });
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

  /** The client is connected to this node's current process and serving period. */
  private on(c: Client, n: NodeState): boolean {
    return c.server === n && c.period === n.period && n.period !== 0;
  }

  /** The client's connection still stands: its node's process and serving period are the ones it
   * connected to. */
  private open(c: Client): boolean {
    const s = c.server;
    return s !== null && this.nodes.get(s.id) === s && this.on(c, s);
  }

  /** Connects a client to the serving leader if it is not on it, else proposes what it owes. A
   * sticky client whose connection stands elsewhere stays there. */
  private drive(c: Client, n: NodeState, cmds: Command[]): void {
    if (c.sticky && c.server !== n && this.open(c)) return;
    if (c.server !== n || c.period !== n.period) {
      // The slow session and the will client wait for the subscription, so that what they cause
      // is routed to it; each makes a bounded number of connections.
      if (c.done || ((c === this.slow || c === this.will) && !this.subscribed)) return;
      c.server = n;
      c.period = n.period;
      c.conn = `${n.period}.${++n.seq}`;
      c.connected = false;
      c.outbox = [];
      const clean = this.mutant === 'clean-after-force' && c === this.sub && this.forced.has(n.epoch);
      if (clean) this.mutantActs++;
      c.connects++;
      let will: Will | null = null;
      if (c === this.will) {
        will = { msg: { topic: WILL_TOPIC, payload: encoder.encode(`w${c.connects}`), qos: 1, retain: false }, delayS: 0 };
        c.done = c.connects >= WILL_ROUNDS;
        if (c.done && this.mutant === 'drop-will') {
          this.mutantActs++;
          will = null;
        }
      }
      if (c === this.slow) c.done = true;
      cmds.push(connectCmd(c.conn, c.id, clean, c === this.sub || c.sticky ? 4 : 5, will));
      return;
    }
    if (!c.connected) return;
    for (const cmd of c.outbox) cmds.push(cmd);
    // A client that sent DISCONNECT has no connection any more.
    if (c.outbox.some((cmd) => cmd.t === 'disconnect')) c.server = null;
    c.outbox = [];
    // Publishing starts once the subscription is acknowledged: before it nothing routes anywhere.
    if (c === this.pub && this.subscribed && this.unacked.size + this.released.size === 0 && this.sent < MESSAGES_MAX) {
      const pid = ++this.sent;
      const qos = pid % 2 === 0 ? 2 : 1;
      this.unacked.set(pid, { qos });
      if (qos === 2 && topicOf(pid) !== LARGE_TOPIC) this.qos2.add(payloadOf(pid));
      if (this.mutant === 'ack-on-propose') {
        this.mutantActs++;
        this.ack(payloadOf(pid), n.epoch, { index: Number.MAX_SAFE_INTEGER, term: 0 });
      }
      cmds.push(this.publish(c.conn, pid, qos));
    }
  }

  /** Effects of applying `entry` on a serving node, delivered to the clients connected to it. */
  private execute(node: number, n: NodeState, out: readonly Effect[], entry: LogEntry, view: SimNodeView): void {
    for (const e of out) {
      if (e.t === 'event') continue;
      const c = this.clientOn(n, e.conn);
      if (c === null) continue;
      this.noteServing(node, n, view, e.t === 'close' ? 'close' : e.packet.type);
      if (e.t === 'close') {
        c.server = null;
        continue;
      }
      if (c === this.sub) this.subReceives(c, e.packet, n.epoch, entry.time);
      else if (c === this.pub) this.pubReceives(c, e.packet, n.epoch, entry);
      else if (c === this.slow || c === this.will) this.onceReceives(c, e.packet);
      else this.stickyReceives(c, e.packet);
    }
  }

  private clientOn(n: NodeState, conn: string): Client | null {
    for (const c of this.clients) if (c.server === n && c.period === n.period && c.conn === conn) return c;
    return null;
  }

  /** The slow session subscribes to the large messages and leaves at once, with a normal
   * DISCONNECT in the same batch, so that it is never online while they are routed. The will
   * client ends each connection but its last with a normal DISCONNECT. */
  private onceReceives(c: Client, p: OutPacket): void {
    if (p.type !== 'connack') return;
    c.connected = true;
    const wrong = this.mutant === 'will-on-normal-disconnect' && c === this.will;
    if (wrong) this.mutantActs++;
    const bye: Command = { t: 'disconnect', conn: c.conn, reason: 0, publishWill: wrong };
    this.normalBye.add(c.conn);
    if (c === this.slow && !p.sessionPresent) {
      c.outbox.push({ t: 'subscribe', conn: c.conn, pid: 1, subs: [{ filter: 'b/#', qos: 1, nl: false, rap: false, rh: 0 }] }, bye);
    } else if (c === this.will) {
      if (c.done) {
        this.lastWill = `w${c.connects}`;
        this.lastWillConn = c.conn;
      } else c.outbox.push(bye);
    }
  }

  /** The QoS 0 pair: the subscriber subscribes when its session is new; both just stay. */
  private stickyReceives(c: Client, p: OutPacket): void {
    if (p.type === 'connack') {
      c.connected = true;
      if (c === this.qsub && !p.sessionPresent)
        c.outbox.push({ t: 'subscribe', conn: c.conn, pid: 1, subs: [{ filter: 'q/#', qos: 0, nl: false, rap: false, rh: 0 }] });
    } else if (p.type === 'publish' && c === this.qsub) {
      this.qos0Received++;
    }
  }

  private subReceives(c: Client, p: OutPacket, epoch: string, time: number): void {
    switch (p.type) {
      case 'connack':
        c.connected = true;
        if (!p.sessionPresent)
          c.outbox.push({ t: 'subscribe', conn: c.conn, pid: 1, subs: [{ filter: 't/#', qos: 2, nl: false, rap: false, rh: 0 }] });
        return;
      case 'publish': {
        const pid = p.pid ?? 0;
        const text = textOf(p.msg.payload);
        this.checkDelivery(text, epoch, time, p.expiryS);
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
        for (const [pid, u] of this.unacked) c.outbox.push(this.publish(c.conn, pid, u.qos));
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

  private publish(conn: string, pid: number, qos: 1 | 2): Command {
    const cmd = publishCmd(conn, pid, qos);
    if (this.mutant === 'drop-expiry' && cmd.t === 'publish' && cmd.msg.props !== undefined) {
      this.mutantActs++;
      delete cmd.msg.props;
    }
    return cmd;
  }

  private ack(text: string, epoch: string, tag: AckTag): void {
    // The large messages are the slow session's only; its check is drainSlow's.
    if (text.startsWith('m') && topicOf(Number(text.slice(1))) === LARGE_TOPIC) return;
    this.acked.add(text);
    if (generationOf(epoch) > 1) this.laterEpochAcks++;
    let must = this.mustDeliver.get(epoch);
    if (must === undefined) {
      must = new Map();
      this.mustDeliver.set(epoch, must);
    }
    must.set(text, tag);
  }

  /** A delivery to the subscriber at entry time `time`: an expiring message goes out before it
   * expires, with a remaining interval of at least 1 s and at most its own [MQTT-3.3.2-5, -6],
   * judged from the latest entry that published it; and no will goes out whose connection a normal
   * DISCONNECT ended [MQTT-3.1.2-10]. */
  private checkDelivery(text: string, epoch: string, time: number, remainingS: number | undefined): void {
    const pub = this.publishedAt.get(text);
    if (pub !== undefined && pub.expiryS > 0) {
      this.expiringDelivered++;
      if (time >= pub.time + pub.expiryS * 1000) {
        throw new Violation('expired delivered', `${text}, published at ${pub.time} with ${pub.expiryS} s to live, delivered at ${time}`);
      }
      if (remainingS === undefined || remainingS < 1 || remainingS > pub.expiryS) {
        throw new Violation('expired delivered', `${text} delivered with a remaining expiry of ${remainingS} s of ${pub.expiryS}`);
      }
    }
    if (!text.startsWith('w')) return;
    if (this.noWill.get(epoch)?.has(text) === true) {
      throw new Violation(
        'will after disconnect',
        `epoch ${epoch} published will ${text}, whose connection ended with a normal DISCONNECT`,
      );
    }
    this.willsPublished++;
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
   * most once within the epoch, unless it expired by now. Then time passes the will grace: the
   * will of the will client's last connection, which this state holds and no DISCONNECT deleted,
   * has been published by then [MQTT-3.1.3-9]. */
  private drain(node: number, n: NodeState, epoch: string, must: ReadonlyMap<string, AckTag>): void {
    const broker = n.broker;
    let index = broker.appliedIndex;
    let time = broker.appliedTime;
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
    const settle = (): void => {
      for (let round = 0; round < DRAIN_ROUNDS_MAX; round++) {
        const acks: Command[] = [];
        for (const e of out) {
          if (e.t !== 'send' || e.conn !== conn) continue;
          const p = e.packet;
          if (p.type === 'publish' && p.pid !== undefined) {
            const text = textOf(p.msg.payload);
            this.checkDelivery(text, epoch, time, p.expiryS);
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
    };
    settle();
    for (const text of must.keys()) {
      if (got.has(text) || this.received.has(text)) continue;
      const pub = this.publishedAt.get(text);
      if (pub !== undefined && pub.expiryS > 0 && time >= pub.first + pub.expiryS * 1000) {
        this.expiredAtEnd++;
        continue;
      }
      throw new Violation('acknowledged publish lost', `node ${node}'s state of epoch ${epoch} does not route acknowledged ${text}`);
    }
    const will = this.lastWill;
    if (will === '' || n.willConn !== this.lastWillConn || this.noWill.get(epoch)?.has(will) === true || !this.subscribed) return;
    time += (simSettings.willGraceS + 1) * 1000;
    apply({ t: 'tick' });
    settle();
    if (!got.has(will) && !this.received.has(will)) {
      throw new Violation(
        'will not published',
        `node ${node}'s state of epoch ${epoch} never publishes will ${will} of a connection that ended`,
      );
    }
  }

  /** The slow session reconnects on this node's final state: what comes out is exactly the queue
   * that admission built from the log (`expected`), in order; nothing beyond the bytes bound was
   * kept, and nothing within it dropped. */
  private drainSlow(node: number, broker: Broker, expected: readonly string[]): void {
    let index = broker.appliedIndex;
    const time = broker.appliedTime;
    const out: Effect[] = [];
    broker.apply({ index: ++index, time, cmd: { t: 'serve-start', node, settings: simSettings } }, out);
    const conn = `${index}.1`;
    out.length = 0;
    broker.apply({ index: ++index, time, cmd: connectCmd(conn, SLOW, false, 5) }, out);
    const got: string[] = [];
    for (let round = 0; round < DRAIN_ROUNDS_MAX; round++) {
      const acks: Command[] = [];
      for (const e of out) {
        if (e.t !== 'send' || e.conn !== conn || e.packet.type !== 'publish' || e.packet.pid === undefined) continue;
        got.push(textOf(e.packet.msg.payload));
        acks.push({ t: 'ack', conn, pid: e.packet.pid, kind: 'puback' });
      }
      if (acks.length === 0) break;
      out.length = 0;
      for (const a of acks) broker.apply({ index: ++index, time, cmd: a }, out);
    }
    this.slowChecked++;
    this.slowHeld += got.length;
    if (got.join(',') !== expected.join(',')) {
      throw new Violation(
        'queue limit',
        `node ${node}'s slow session holds [${got.join(',')}], admission by the bytes bound keeps [${expected.join(',')}]`,
      );
    }
  }

  private node(id: number): NodeState {
    const n = this.nodes.get(id);
    if (n === undefined) throw new Violation('broker sim', `node ${id} was never started`);
    return n;
  }

  /** RaftLog's rule (serving-rule.ts) over the simulated node's view, judged at a moment that acts
   * on it. As RaftLog's endServing(), a period whose rule failed is over for good: the node closes
   * its clients' connections, and a later period needs a serve-start of its own, which it may
   * propose again in the same term. */
  private judge(n: NodeState, view: SimNodeView): boolean {
    if (n.period === 0) return false;
    if (this.serving(n, view)) return true;
    n.period = 0;
    n.servingTerm = 0;
    n.startProposedTerm = 0;
    return false;
  }

  private serving(n: NodeState, view: SimNodeView): boolean {
    const facts: ServingFacts = {
      stopped: false,
      role: view.role,
      term: view.term,
      servingTerm: n.servingTerm,
      lastAppliedTerm: n.lastTerm,
      hasLease: view.hasLease,
      failed: n.broker.failed !== null,
    };
    const holds = servingHolds(facts);
    const broken = this.mutant === null ? null : brokenFacts(this.mutant, facts);
    if (broken === null) return holds;
    const mutantHolds = servingHolds(broken);
    if (mutantHolds !== holds) this.mutantActs++;
    return mutantHolds;
  }
}

/** `generation.id` to its generation; 0 for no epoch (fresh or amnesiac, not yet joined). */
function generationOf(epoch: string): number {
  const dot = epoch.indexOf('.');
  return dot <= 0 ? 0 : Number(epoch.slice(0, dot));
}

/** The facts a serving-rule mutant judges on, or null for a mutant of something else. */
function brokenFacts(mutant: BrokerMutant, f: ServingFacts): ServingFacts | null {
  switch (mutant) {
    case 'no-lease':
      return { ...f, hasLease: true };
    case 'no-applied-term':
      return { ...f, lastAppliedTerm: f.servingTerm };
    case 'no-leader':
      return { ...f, role: 'leader' };
    default:
      return null;
  }
}

function newClient(id: string, sticky: boolean): Client {
  return { id, sticky, server: null, period: 0, conn: '', connected: false, outbox: [], connects: 0, done: false };
}

type LogModel = Pick<NodeState, 'willConn' | 'willText' | 'willLive' | 'slowConn' | 'slowLive' | 'slowSubscribed' | 'slowQueue'>;

function copyModel(n: NodeState): LogModel {
  const q = n.slowQueue;
  return {
    willConn: n.willConn,
    willText: n.willText,
    willLive: n.willLive,
    slowConn: n.slowConn,
    slowLive: n.slowLive,
    slowSubscribed: n.slowSubscribed,
    slowQueue: q === null ? null : { ...q, texts: [...q.texts] },
  };
}

function setOf<K, V>(m: Map<K, Set<V>>, k: K): Set<V> {
  let set = m.get(k);
  if (set === undefined) {
    set = new Set();
    m.set(k, set);
  }
  return set;
}

function payloadOf(pid: number): string {
  return `m${pid}`;
}

/** The name a payload carries: a large payload is its name, '|' and filler. */
function textOf(payload: Uint8Array): string {
  const text = decoder.decode(payload);
  const bar = text.indexOf('|');
  return bar < 0 ? text : text.slice(0, bar);
}

function topicOf(pid: number): string {
  if (pid % LARGE_EVERY === 1) return LARGE_TOPIC;
  return pid % EXPIRING_EVERY === 0 ? EXPIRING_TOPIC : TOPIC;
}

function connectCmd(conn: string, clientId: string, clean = false, protocol: 4 | 5 = 4, will: Will | null = null): Command {
  return {
    t: 'connect',
    conn,
    clientId,
    protocol,
    clean,
    expiryS: 0xffff_ffff,
    will,
    username: null,
    receiveMax: 65_535,
    maxPacketSize: 0,
    problemInfo: true,
  };
}

function publishCmd(conn: string, pid: number, qos: 1 | 2): Command {
  const topic = topicOf(pid);
  const name = payloadOf(pid);
  const payload = encoder.encode(topic === LARGE_TOPIC ? `${name}|`.padEnd(LARGE_BYTES, 'x') : name);
  const msg: Message = { topic, payload, qos, retain: false };
  if (topic === EXPIRING_TOPIC) msg.props = { expiryS: EXPIRY_S };
  return { t: 'publish', conn, pid, msg };
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

/** One seed of a planted bug of the broker simulator, for the mutant report (raft/sim/mutants.ts):
 * the result, and whether the bug acted at all in that run. */
export function runBrokerMutant(mutant: BrokerMutant, seed: number, faults: ReadonlySet<Fault>): MutantRun {
  const stats: BrokerSimStats = { last: null };
  const result = runBrokerSeed(seed, faults, { stats, mutant });
  return { result, exposed: (stats.last?.mutantActs ?? 0) > 0 };
}
