import type { ProtocolLevel, QoS } from '../protocol/packets.js';
import type { ConnId, Message, Will } from './commands.js';
import { Fifo } from './fifo.js';

// The replicated records of the broker state and their invariants. Fields marked "derived" are
// rebuilt from the others on restore and are not part of the snapshot.

/** A subscription as the session holds it; the same object is the value in the topic trie. */
export interface Subscription {
  clientId: string;
  /** The filter as the client sent it, `$share/{group}/` prefix included: the session's key. */
  filter: string;
  /** The filter matched against topics (without the share prefix). */
  topicFilter: string;
  /** Shared subscription id (`$share/{group}/{filter}`, the same as `filter`) or null. */
  share: string | null;
  qos: QoS;
  nl: boolean;
  rap: boolean;
  rh: 0 | 1 | 2;
  subId: number | null;
}

/** One message on its way to one session. */
export interface Delivery {
  msg: Message;
  /** Delivered QoS: min(message QoS, granted QoS). */
  qos: QoS;
  /** Retain flag of the outgoing PUBLISH. */
  retain: boolean;
  subIds: number[] | null;
  /** Message expiry deadline (cluster ms) or null. */
  expiresAt: number | null;
  /** The shared subscription (its `$share/...` filter) that chose this session, or null: if the
   * session ends before the message is acknowledged, another member gets it (§4.8.2). */
  share: string | null;
}

/** Sent and not yet completed: state 'publish' awaits PUBACK/PUBREC, 'pubrel' awaits PUBCOMP.
 * 'fence': the client may still hold this id from a flow of an older epoch, so a PUBREL went
 * first and its PUBCOMP is awaited; a QoS 2 PUBLISH waits for it, a QoS 1 PUBLISH went right after
 * the PUBREL (see deliver.ts "Fence"). */
export interface Inflight extends Delivery {
  pid: number;
  state: 'publish' | 'pubrel' | 'fence';
}

export interface Queued extends Delivery {
  /** Topic plus payload bytes, the unit of the queue's byte bound. */
  size: number;
}

export interface Session {
  clientId: string;
  /** The connection holding the session; null while offline. */
  conn: ConnId | null;
  protocol: ProtocolLevel;
  username: string | null;
  /** Session Expiry Interval in seconds; 0xFFFFFFFF never expires. */
  expiryS: number;
  /** The will of the current connection; null while offline (moved to pending wills or dropped). */
  will: Will | null;
  receiveMax: number;
  /** Client's Maximum Packet Size in bytes; 0: none. */
  maxPacketSize: number;
  /** By filter as sent. Null until the first subscription: an empty Map costs about 330 bytes,
   * and most sessions of a large fleet of devices hold few containers in use. */
  subs: Map<string, Subscription> | null;
  /** Inbound QoS 2 packet ids: PUBREC sent, PUBREL not yet received. Null until the first. */
  inbound: Set<number> | null;
  /** Outbound QoS 1/2 in send order; pids unique. */
  inflight: Inflight[];
  queue: Fifo<Queued>;
  /** Derived: sum of queue sizes. */
  queueBytes: number;
  /** Next candidate outbound packet id, 1..65535. */
  nextPid: number;
  /** Fence after a force-start: positions of the packet id scan, from nextPid on, whose free id is
   * fenced when taken; 0..65535, 0 when no fence is open. */
  fenceLeft: number;
  /** Ids fenced when next taken, outside the scan's round: QoS 1 ids in flight when the fence
   * opened, and ids released before their fence completed. Null when none. */
  fenceOwed: Set<number> | null;
  /** Derived: pids of `inflight`. Null until the first outbound QoS 1/2 message. */
  pidsInUse: Set<number> | null;
  /** Session expiry deadline (cluster ms) while offline; null: online or never. */
  expiresAt: number | null;
  /** Local, not replicated: the epoch of the open snapshot cursor that has yet to encode this
   * session (its copy-on-write mark); 0 when none has. */
  snapshotMark: number;
}

/** A will waiting for its delay, keyed by client id. A will of a failover-ended connection
 * outlives its session and is dropped when the client connects again (docs/design.md "Failover"). */
export interface PendingWill {
  clientId: string;
  msg: Message;
  /** Cluster ms. */
  at: number;
  failover: boolean;
}

export interface RetainedMessage {
  msg: Message;
  expiresAt: number | null;
}

export const EXPIRY_NEVER = 0xffff_ffff;
export const PID_MAX = 65_535;

export function newSession(clientId: string): Session {
  return {
    clientId,
    conn: null,
    protocol: 4,
    username: null,
    expiryS: 0,
    will: null,
    receiveMax: PID_MAX,
    maxPacketSize: 0,
    subs: null,
    inbound: null,
    inflight: [],
    queue: new Fifo(),
    queueBytes: 0,
    nextPid: 1,
    fenceLeft: 0,
    fenceOwed: null,
    pidsInUse: null,
    expiresAt: null,
    snapshotMark: 0,
  };
}

/** A copy of what the snapshot encodes of `s`, unchanged by later mutations of `s`: containers
 * are copied and inflight records too (apply changes their state); messages, subscriptions and
 * wills are shared, since apply replaces them and never mutates them. Derived fields are left
 * empty. */
export function sessionPreimage(s: Session): Session {
  const inflight = new Array<Inflight>(s.inflight.length);
  for (let i = 0; i < inflight.length; i++) {
    const f = s.inflight[i] as Inflight;
    inflight[i] = {
      msg: f.msg,
      qos: f.qos,
      retain: f.retain,
      subIds: f.subIds,
      expiresAt: f.expiresAt,
      share: f.share,
      pid: f.pid,
      state: f.state,
    };
  }
  return {
    clientId: s.clientId,
    conn: s.conn,
    protocol: s.protocol,
    username: s.username,
    expiryS: s.expiryS,
    will: s.will,
    receiveMax: s.receiveMax,
    maxPacketSize: s.maxPacketSize,
    subs: s.subs === null ? null : new Map(s.subs),
    inbound: s.inbound === null ? null : new Set(s.inbound),
    inflight,
    queue: s.queue.copy(),
    queueBytes: s.queueBytes,
    nextPid: s.nextPid,
    fenceLeft: s.fenceLeft,
    fenceOwed: s.fenceOwed === null ? null : new Set(s.fenceOwed),
    pidsInUse: null,
    expiresAt: s.expiresAt,
    snapshotMark: 0,
  };
}

/** The client id apply gives a connection that sent an empty one [MQTT-3.1.3-6]: one per
 * connection, known before its CONNECT is proposed, so that the connection can size its CONNACK. */
export function assignedClientId(conn: string): string {
  return `auto-${conn}`;
}

/** Digits of each part of a ConnId at most: 15 keep the period a safe integer. */
const CONN_PART_DIGITS_MAX = 15;
const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;

/** The serve period of a ConnId (`${period}.${seq}`, each 1 to 15 ASCII digits), or null when
 * malformed. Scanned by hand: validation runs it on every applied command, and a regular
 * expression match there was 1.8 % of the broker's time under fan-in QoS 1. */
export function connPeriod(conn: string): number | null {
  const dot = conn.indexOf('.');
  if (dot < 1 || dot > CONN_PART_DIGITS_MAX) return null;
  const seqDigits = conn.length - dot - 1;
  if (seqDigits < 1 || seqDigits > CONN_PART_DIGITS_MAX) return null;
  let period = 0;
  for (let i = 0; i < conn.length; i++) {
    if (i === dot) continue;
    const c = conn.charCodeAt(i);
    if (c < DIGIT_0 || c > DIGIT_9) return null;
    if (i < dot) period = period * 10 + (c - DIGIT_0);
  }
  return period;
}
