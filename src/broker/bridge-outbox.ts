// A bridge's outbox in the replicated state (docs/bridges.md "The promise"): copies of the
// committed messages its outbound rules forward, in log order, until a `bridge-position` command
// records that the remote has completed them. Held in the state rather than read back from the log,
// so log compaction never waits for a remote that is down; bounded by the settings
// bridgeOutboxMessages and bridgeOutboxBytes, and part of every snapshot.
//
// A message with an MQTT 5 Message Expiry Interval expires in the outbox at the cluster time it was
// copied in plus its interval (docs/bridges.md "When the remote is down"): apply removes it at the
// first entry whose time reaches that, as it ends sessions and wills (docs/design.md "Deadlines live
// in the state"), so every replica drops the same messages at the same entry.
//
// A QoS 2 item gets its packet id here, in apply (docs/bridges.md "QoS 2 to the remote"), so every
// replica knows the id the remote holds it under, and a `bridge-pubrec` command records that the
// remote answered PUBREC for it before the serving node sends PUBREL: a later serving node sends
// PUBREL for a recorded item and PUBLISH (DUP, the same id) for the others, and the remote, keeping
// the bridge's session, delivers each once.
//
// The other way (docs/bridges.md "QoS 2 from the remote"), the outbox object also holds the bridge's
// inbound session: the packet ids of the remote's QoS 2 messages published here whose PUBREL has
// not come yet, so a PUBLISH the remote sends again under such an id, to this leader or a later one,
// is answered with PUBREC and not published twice.
import type { Message, QoS } from './commands.js';
import { Fifo } from './fifo.js';
import { MinHeap } from './min-heap.js';

export interface OutboxItem {
  /** Log index of the entry that published the message. One entry may put several messages into
   * the outbox (a tick firing several wills), so the index does not name an item alone. */
  readonly index: number;
  /** Its place in this outbox, numbered as pushed: increasing in log order and unique within the
   * outbox object. The serving node's send cursor counts in it, so it never skips the rest of an
   * entry. Derived, not replicated: a restored outbox numbers its items again from 0. */
  readonly seq: number;
  /** The remote topic (prefix remapped). */
  readonly topic: string;
  /** The QoS it is forwarded at: min(the message's, the rule's). */
  readonly qos: QoS;
  /** QoS 2: its packet id at the remote, from 1 to OUTBOX_PID_MAX, assigned in apply in log order;
   * 0 for QoS 0 and 1 (the serving node numbers those itself, above OUTBOX_PID_MAX). */
  readonly pid: number;
  /** QoS 2: a committed `bridge-pubrec` recorded the remote's PUBREC for it, so PUBREL, never
   * PUBLISH, is what goes to the remote for it from then on. Replaced, not mutated, when set. */
  readonly rec: boolean;
  /** The message as published; shared with every local delivery of it. */
  readonly msg: Message;
  /** Cluster ms at which its Message Expiry Interval passes; null: it does not expire. */
  readonly expiresAt: number | null;
}

/** A message as apply copies it into the outbox (and a snapshot holds it), before it is numbered. */
export type OutboxMessage = Omit<OutboxItem, 'seq'>;

/** An outbox as a snapshot holds it: name, position, items in log order, the next QoS 2 packet id,
 * and the remote's QoS 2 ids held (ascending). */
export type OutboxImage = [name: string, position: number, items: OutboxMessage[], nextPid: number, inIds: number[]];

/** QoS 2 packet ids of an outbox run from 1 to this and wrap; the serving node's QoS 1 and SUBSCRIBE
 * ids lie above it, so the two never meet at the remote. Two items with one id are at least this
 * many items apart, and the serving node sends no item this far or farther behind the outbox's
 * first one, so the remote never holds one id for two messages of ours. */
export const OUTBOX_PID_MAX = 0x7fff;

export interface BridgeOutbox {
  readonly name: string;
  /** Every message of this bridge below this log index was completed at the remote. */
  position: number;
  items: Fifo<OutboxItem>;
  /** Topic and payload bytes of `items`. */
  bytes: number;
  /** The seq of the next item pushed. */
  nextSeq: number;
  /** The packet id the next QoS 2 item gets (replicated). */
  nextPid: number;
  /** The remote's QoS 2 packet ids whose message was published here and whose PUBREL has not been
   * applied yet (replicated; at most the 65,535 ids there are). */
  inIds: Set<number>;
  /** Derived, rebuilt on restore: the items that expire, soonest first. An item the position has
   * passed stays until popped or pruned (lazy deletion, as the broker's deadline heap does). */
  expiring: ExpiryHeap;
}

/** The payload of a release: an expired QoS 2 item kept only for its PUBREL (expireOutbox). */
const EMPTY = new Uint8Array(0);

/** What an item counts against bridgeOutboxBytes. */
export const outboxItemSize = (it: { topic: string; msg: Message }): number => it.topic.length + it.msg.payload.length;

export function newOutbox(name: string, position: number, nextPid = 1, inIds: Iterable<number> = []): BridgeOutbox {
  return { name, position, items: new Fifo(), bytes: 0, nextSeq: 0, nextPid, inIds: new Set(inIds), expiring: new ExpiryHeap() };
}

/** The packet id for the next QoS 2 item of `o`, in apply. */
export function takeOutboxPid(o: BridgeOutbox): number {
  const pid = o.nextPid;
  o.nextPid = pid === OUTBOX_PID_MAX ? 1 : pid + 1;
  return pid;
}

/** Records the remote's PUBREC for the QoS 2 item of log index `index` with packet id `pid`, if it
 * is still in the outbox: false when it is not (completed and passed by the position, or expired). */
export function recordPubrec(o: BridgeOutbox, index: number, pid: number): boolean {
  for (let i = firstAtOrAbove(o, index); i < o.items.length; i++) {
    const it = o.items.at(i) as OutboxItem;
    if (it.index !== index) return false;
    if (it.qos !== 2 || it.pid !== pid) continue;
    if (!it.rec) o.items.set(i, { ...it, rec: true });
    return true;
  }
  return false;
}

/** Appends a message (in log order), numbers it and counts it. */
export function pushOutbox(o: BridgeOutbox, m: OutboxMessage): void {
  const it: OutboxItem = { ...m, seq: o.nextSeq++ };
  o.items.push(it);
  o.bytes += outboxItemSize(it);
  if (it.expiresAt === null) return;
  o.expiring.push(it);
  // Items the position passed stay in the heap until their time; rebuild when they dominate it, so
  // a remote that keeps up does not leave the heap growing with long expiry intervals.
  if (o.expiring.length > 2 * o.items.length + 64) {
    o.expiring.clear();
    for (const x of o.items.toArray()) if (x.expiresAt !== null) o.expiring.push(x);
  }
}

/** The earliest time an item of the outbox expires; undefined: none does. */
export function nextExpiry(o: BridgeOutbox): number | undefined {
  for (;;) {
    const top = o.expiring.peek();
    if (top === undefined) return undefined;
    if (top.index >= o.position) return top.expiresAt as number;
    o.expiring.pop();
  }
}

/** Takes the items whose expiry is at or before `now` [MQTT-3.3.2-5] out of forwarding and returns
 * them in log order. O(1) per item when they expire in log order (one interval for a topic), one
 * pass over the outbox otherwise. A QoS 0 or 1 item is removed. A QoS 2 item is not forwarded
 * again but keeps its place as a release (recorded, without its payload): the remote may hold its
 * packet id (it had the PUBLISH and answered PUBREC, recorded or not), and removed without a
 * PUBREL the id would stay held there, and a later message of ours under it be taken for a copy.
 * The serving node sends it PUBREL, never PUBLISH, and PUBCOMP removes it like any completed item
 * (a remote that never had it answers PUBCOMP too). One already recorded becomes a release too,
 * without being counted: the remote has it. */
export function expireOutbox(o: BridgeOutbox, now: number): OutboxItem[] {
  // By seq: an item recorded by a PUBREC is a new object in `items`, while the heap holds the one pushed.
  const due = new Set<number>();
  for (;;) {
    const top = o.expiring.peek();
    if (top === undefined || (top.expiresAt as number) > now) break;
    o.expiring.pop();
    // Below the position: already removed as completed.
    if (top.index >= o.position) due.add(top.seq);
  }
  if (due.size === 0) return [];
  const expired: OutboxItem[] = [];
  for (;;) {
    const head = o.items.peek();
    if (head === undefined || !due.has(head.seq) || head.qos === 2) break;
    o.items.shift();
    o.bytes -= outboxItemSize(head);
    expired.push(head);
  }
  if (expired.length < due.size) {
    const keep = new Fifo<OutboxItem>();
    for (const it of o.items.toArray()) {
      if (!due.has(it.seq)) keep.push(it);
      else if (it.qos !== 2) {
        o.bytes -= outboxItemSize(it);
        expired.push(it);
      } else {
        // Recorded or not, only its PUBREL goes from now on, and it expires no more.
        const release: OutboxItem = { ...it, rec: true, expiresAt: null, msg: { ...it.msg, payload: EMPTY } };
        o.bytes += outboxItemSize(release) - outboxItemSize(it);
        keep.push(release);
        // A recorded one was delivered to the remote: not counted as expired.
        if (!it.rec) expired.push(it);
      }
    }
    o.items = keep;
  }
  return expired;
}

/** Removes the items below `below` and moves the position there. */
export function advanceOutbox(o: BridgeOutbox, below: number): number {
  let removed = 0;
  for (;;) {
    const head = o.items.peek();
    if (head === undefined || head.index >= below) break;
    o.items.shift();
    o.bytes -= outboxItemSize(head);
    removed++;
  }
  o.position = below;
  return removed;
}

/** The offset in `o.items` of the first item at or above log index `index` (items are in log order). */
export function firstAtOrAbove(o: Readonly<BridgeOutbox>, index: number): number {
  let lo = 0;
  let hi = o.items.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((o.items.at(mid) as OutboxItem).index < index) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The offset in `o.items` of the first item whose seq is at or above `seq`. */
export function firstAtOrAboveSeq(o: Readonly<BridgeOutbox>, seq: number): number {
  let lo = 0;
  let hi = o.items.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((o.items.at(mid) as OutboxItem).seq < seq) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

const earlier = (a: OutboxItem, b: OutboxItem): boolean => (a.expiresAt as number) < (b.expiresAt as number);

/** The outbox's items that expire, soonest first. */
export class ExpiryHeap extends MinHeap<OutboxItem> {
  constructor() {
    super(earlier);
  }
}
