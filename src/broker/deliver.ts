import { Buffer } from 'node:buffer';
import type { EventKind } from '../events.js';
import type { Effect, Settings } from './commands.js';
import { Fifo } from './fifo.js';
import { publishPacketSize } from './packet-size.js';
import { type Delivery, type Inflight, PID_MAX, type Queued, type Session } from './session.js';

// Outbound delivery to one session: inflight window, packet ids, queue admission, message expiry
// and packet size. Every decision that consumes replicated resources is made here, in apply, so
// every leader re-sends the same packet ids (docs/design.md "Order of dependent steps").

/** Where apply puts the effects of one entry. null: the caller drops them (a node that does not
 * serve), so apply builds none; every decision and every change to the state is the same either
 * way, only the effect objects are left out. */
export type Effects = Effect[] | null;

export function event(out: Effects, kind: EventKind, detail?: Record<string, string | number | boolean>): void {
  if (out === null) return;
  out.push(detail === undefined ? { t: 'event', kind } : { t: 'event', kind, detail });
}

/** Unacknowledged outbound QoS 1/2 allowed: the broker's bound, and v5 the client's Receive
 * Maximum [MQTT-3.3.4-9]. */
export function inflightLimit(s: Session, settings: Settings): number {
  return Math.min(settings.maxInflight, s.receiveMax);
}

/** An expired message is never sent [MQTT-3.3.2-5]. */
export function isExpired(d: Delivery, now: number): boolean {
  return d.expiresAt !== null && now >= d.expiresAt;
}

/** Remaining Message Expiry Interval in whole seconds, rounded up so that an unexpired message
 * never goes out with 0 [MQTT-3.3.2-6]. */
function remainingS(d: Delivery, now: number): number | undefined {
  return d.expiresAt === null ? undefined : Math.floor((d.expiresAt - now + 999) / 1000);
}

/** Larger than the client's Maximum Packet Size [MQTT-3.1.2-25] or the broker's own limit. */
function tooLarge(s: Session, d: Delivery, settings: Settings, now: number): boolean {
  const limit = s.maxPacketSize > 0 ? Math.min(s.maxPacketSize, settings.maxPacketSize) : settings.maxPacketSize;
  const subIds = s.protocol === 5 ? d.subIds : null;
  return publishPacketSize(s.protocol, d.msg, d.qos, remainingS(d, now), subIds) > limit;
}

function sendPublish(s: Session, d: Delivery, pid: number | undefined, dup: boolean, now: number, out: Effects): void {
  if (out === null || s.conn === null) return;
  const packet: Extract<Effect, { t: 'send' }>['packet'] = { type: 'publish', qos: d.qos, retain: d.retain, dup, msg: d.msg };
  if (pid !== undefined) packet.pid = pid;
  const expiryS = remainingS(d, now);
  if (expiryS !== undefined) packet.expiryS = expiryS;
  if (d.subIds !== null && d.subIds.length > 0 && s.protocol === 5) packet.subIds = d.subIds;
  out.push({ t: 'send', conn: s.conn, packet });
}

// Fence (docs/design.md "Force-start"). A forced epoch's state is its file's: the client may still hold
// an inbound QoS 2 id X from a later flow of the old epoch (PUBREC sent, PUBREL never came). A
// receiver that delivers on PUBLISH and holds the id until PUBREL ([MQTT-4.3.3], Method B) would
// take a new PUBLISH X for that flow's duplicate and drop it. So after a serve-start of a higher
// epoch generation, the first use of each id sends PUBREL X first: a receiver answers any PUBREL
// with PUBCOMP and releases X (§4.3.3, the receiver's rules). This never harms: within one lineage
// the client holds X only while the broker has X in flight, so a PUBREL for a free X releases only
// a stale flow. A QoS 2 PUBLISH waits for the PUBCOMP, to be committed: after a reconnect the
// broker cannot tell whether the client took PUBREL and PUBLISH (then a second PUBREL would make
// the PUBLISH's DUP a new message) or neither (then the PUBLISH without PUBREL would be dropped).
// A QoS 1 PUBLISH goes right after the PUBREL, and again after it on every resend: a client never
// holds an id in QoS 2 state while the broker has it in flight at QoS 1, so that PUBREL is safe.
// Which ids: every id the scan passes in the next 65535 positions (fenceLeft), plus fenceOwed. An
// id in flight when the fence opens is fenced by its own flow if QoS 2 (its PUBREL comes before it
// is completed); a QoS 1 id is owed. An id whose fence is released unanswered is owed again.

/** Set in assignPid's result when the id must be fenced; above every packet id. */
const PID_FENCED = 0x1_0000;

/** Opens the fence over every id of `s` (a serve-start of a higher epoch generation). O(inflight). */
export function openFence(s: Session): void {
  s.fenceLeft = PID_MAX;
  for (const f of s.inflight) if (f.qos === 1) owe(s, f.pid);
}

function owe(s: Session, pid: number): void {
  s.fenceOwed ??= new Set();
  s.fenceOwed.add(pid);
}

/** The next packet id not in use, counting 1..65535 and wrapping, with PID_FENCED set when it is
 * fenced. Returns 0 only when all are in use, which inflightLimit (<= 65535) rules out. */
function assignPid(s: Session): number {
  for (let i = 0; i < PID_MAX; i++) {
    const pid = s.nextPid;
    s.nextPid = pid === PID_MAX ? 1 : pid + 1;
    const inRound = s.fenceLeft > 0;
    if (inRound) s.fenceLeft--;
    if (s.pidsInUse?.has(pid) === true) continue;
    if (s.fenceOwed === null) return inRound ? pid | PID_FENCED : pid;
    const owed = s.fenceOwed.delete(pid);
    if (s.fenceOwed.size === 0) s.fenceOwed = null;
    return inRound || owed ? pid | PID_FENCED : pid;
  }
  return 0;
}

/** Puts a QoS 1/2 delivery in flight and sends it; false on a broken pid invariant. The record
 * is built field by field, once: a spread copy costs a generic clone on the hot path. */
function startInflight(s: Session, d: Delivery, now: number, out: Effects): boolean {
  const assigned = assignPid(s);
  if (assigned === 0) return false;
  const pid = assigned & PID_MAX;
  const fenced = assigned !== pid;
  const item: Inflight = {
    msg: d.msg,
    qos: d.qos,
    retain: d.retain,
    subIds: d.subIds,
    expiresAt: d.expiresAt,
    share: d.share,
    pid,
    state: fenced ? 'fence' : 'publish',
  };
  s.inflight.push(item);
  s.pidsInUse ??= new Set();
  s.pidsInUse.add(pid);
  if (fenced) sendPubrel(s, pid, out);
  if (!fenced || d.qos === 1) sendPublish(s, d, pid, false, now, out);
  return true;
}

function sendPubrel(s: Session, pid: number, out: Effects): void {
  if (out !== null && s.conn !== null) out.push({ t: 'send', conn: s.conn, packet: { type: 'pubrel', pid } });
}

export function queueSize(d: Delivery): number {
  return Buffer.byteLength(d.msg.topic, 'utf8') + d.msg.payload.length;
}

/** True when deliver() would send or queue the message rather than drop it (too large for the
 * session, or its queue full): a shared subscription passes such a message to another member. */
export function canTake(s: Session, d: Delivery, settings: Settings, now: number): boolean {
  if (tooLarge(s, d, settings, now)) return false;
  if (d.qos === 0 || (s.conn !== null && s.queue.length === 0 && s.inflight.length < inflightLimit(s, settings))) return true;
  return s.queue.length < settings.maxQueuedMessages && s.queueBytes + queueSize(d) <= settings.maxQueuedBytes;
}

/** Delivers one message to one session; returns false on a broken invariant. */
export function deliver(s: Session, d: Delivery, settings: Settings, now: number, out: Effects): boolean {
  if (isExpired(d, now)) return true;
  if (tooLarge(s, d, settings, now)) {
    // Guarded here and below, not only in event(): the detail is built before the call.
    if (out !== null) event(out, 'too-large', { clientId: s.clientId, topic: d.msg.topic });
    return true;
  }
  if (d.qos === 0) {
    // QoS 0 is never queued for an offline session.
    sendPublish(s, d, undefined, false, now, out);
    return true;
  }
  if (s.conn !== null && s.queue.length === 0 && s.inflight.length < inflightLimit(s, settings)) {
    return startInflight(s, d, now, out);
  }
  const size = queueSize(d);
  if (s.queue.length < settings.maxQueuedMessages && s.queueBytes + size <= settings.maxQueuedBytes) {
    const item: Queued = { msg: d.msg, qos: d.qos, retain: d.retain, subIds: d.subIds, expiresAt: d.expiresAt, share: d.share, size };
    s.queue.push(item);
    s.queueBytes += size;
  } else if (out !== null) {
    event(out, 'queue-full', { clientId: s.clientId });
  }
  return true;
}

/** Moves queued messages into free inflight slots, dropping expired and oversize ones. */
export function fillInflight(s: Session, settings: Settings, now: number, out: Effects): boolean {
  const limit = inflightLimit(s, settings);
  while (s.conn !== null && s.inflight.length < limit) {
    const item = s.queue.shift();
    if (item === undefined) break;
    s.queueBytes -= item.size;
    if (isExpired(item, now)) {
      if (out !== null) event(out, 'expired', { clientId: s.clientId });
      continue;
    }
    if (tooLarge(s, item, settings, now)) {
      if (out !== null) event(out, 'too-large', { clientId: s.clientId, topic: item.msg.topic });
      continue;
    }
    if (!startInflight(s, item, now, out)) return false;
  }
  return true;
}

/** On resume: every unacknowledged PUBLISH again with DUP and its packet id, and every pending
 * PUBREL, in their original order [MQTT-4.4.0-1]; an expired unacknowledged PUBLISH is dropped. */
export function resendInflight(s: Session, settings: Settings, now: number, out: Effects): void {
  const kept: Inflight[] = [];
  for (const item of s.inflight) {
    if (item.state === 'pubrel') {
      sendPubrel(s, item.pid, out);
      kept.push(item);
    } else if (isExpired(item, now) || tooLarge(s, item, settings, now)) {
      // A client that reconnects with a smaller Maximum Packet Size cannot take it either.
      event(out, isExpired(item, now) ? 'expired' : 'too-large', { clientId: s.clientId, pid: item.pid });
      release(s, item);
    } else if (item.state === 'fence') {
      // The fence again, since the client may not have had it; a QoS 2 PUBLISH still waits.
      sendPubrel(s, item.pid, out);
      if (item.qos === 1) sendPublish(s, item, item.pid, true, now, out);
      kept.push(item);
    } else {
      sendPublish(s, item, item.pid, true, now, out);
      kept.push(item);
    }
  }
  s.inflight = kept;
}

/** Position of pid in the inflight window, -1 if absent; a loop rather than findIndex, which
 * would take a closure per ack. */
function inflightIndex(inflight: readonly Inflight[], pid: number): number {
  for (let i = 0; i < inflight.length; i++) if ((inflight[i] as Inflight).pid === pid) return i;
  return -1;
}

/** Frees the id of an item that leaves the window unacknowledged; one whose fence was not yet
 * answered is owed the fence at its next use. */
function release(s: Session, item: Inflight): void {
  s.pidsInUse?.delete(item.pid);
  if (item.state === 'fence') owe(s, item.pid);
}

/** Delivery progress from the subscriber (§4.3.2, §4.3.3). Returns false for an unknown pid or a
 * step that does not fit the entry's state. `now` times a QoS 2 PUBLISH sent once its fence is
 * answered. */
export function applyAck(s: Session, pid: number, kind: 'puback' | 'pubrec' | 'pubcomp', now: number, out: Effects): boolean {
  const i = inflightIndex(s.inflight, pid);
  if (i < 0) return false;
  const item = s.inflight[i] as Inflight;
  switch (kind) {
    case 'puback':
      if (item.qos !== 1) return false;
      break;
    case 'pubrec':
      // A PUBREC for a fenced QoS 2 id answers a PUBLISH the broker has not sent: a stale flow's.
      if (item.qos !== 2 || item.state === 'fence') return false;
      // A repeated PUBREC while awaiting PUBCOMP is answered with the PUBREL again.
      item.state = 'pubrel';
      sendPubrel(s, pid, out);
      return true;
    case 'pubcomp':
      if (item.state === 'fence') {
        // The fence is answered: the client holds nothing under pid; the flow itself begins.
        item.state = 'publish';
        if (item.qos === 2) sendPublish(s, item, pid, false, now, out);
        return true;
      }
      if (item.qos !== 2 || item.state !== 'pubrel') return false;
      break;
    default: {
      const _: never = kind;
      return _;
    }
  }
  // Acks mostly come in send order: shift() drops the head without the array splice() returns.
  if (i === 0) s.inflight.shift();
  else s.inflight.splice(i, 1);
  s.pidsInUse?.delete(pid);
  return true;
}

const givenBy = (d: Delivery, share: string | null): boolean => d.share !== null && (share === null || d.share === share);

/** Removes and returns, in the order held, what shared subscriptions (`share`, or any when null)
 * gave to this session and it has not acknowledged: its queue, and with `sent` its PUBLISHes
 * awaiting PUBACK/PUBREC (or their fence) too. A PUBREL awaiting PUBCOMP stays: that message was received. */
export function takeShared(s: Session, share: string | null, sent: boolean): Delivery[] {
  const taken: Delivery[] = [];
  if (sent && s.inflight.some((f) => f.state !== 'pubrel' && givenBy(f, share))) {
    const kept: Inflight[] = [];
    for (const f of s.inflight) {
      if (f.state === 'pubrel' || !givenBy(f, share)) kept.push(f);
      else {
        taken.push(f);
        release(s, f);
      }
    }
    s.inflight = kept;
  }
  const queued = s.queue.toArray();
  if (!queued.some((q) => givenBy(q, share))) return taken;
  s.queue = new Fifo();
  s.queueBytes = 0;
  for (const q of queued) {
    if (givenBy(q, share)) taken.push(q);
    else {
      s.queue.push(q);
      s.queueBytes += q.size;
    }
  }
  return taken;
}
