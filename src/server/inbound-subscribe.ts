// SUBSCRIBE and UNSUBSCRIBE read from a client, to their commands or to the SUBACK/UNSUBACK the
// connection decides itself: the filters are checked here (syntax, --max-topic-levels and
// --max-topic-length, No Local on a shared subscription, the subscribe authorization hook), and
// the codes decided here travel in the command (`refused`), so nothing waits in the connection
// for apply's answer (docs/design.md "Replies keep arrival order").
//
// Plain functions over the Connection's fields (connection.ts), as connect-phase.ts is.
import { type Command, REFUSED_NONE, type SubscriptionRequest } from '../broker/commands.js';
import type { SubscribePacket, UnsubscribePacket } from '../protocol/packets.js';
import { RC } from '../protocol/reason-codes.js';
import { validateTopicFilter } from '../protocol/topic.js';
import type { Authorization } from './auth/hook-authorizer.js';
import type { Connection } from './connection.js';
import { codesAckBytes } from './outbound.js';

/** Invalid filters get their failure code here; the valid ones are proposed, and the codes
 * decided here travel in the command (`refused`), so apply's SUBACK carries every code in order.
 * A packet with no valid filter is answered locally (behind this connection's unapplied
 * proposals). */
export function onSubscribe(conn: Connection, s: SubscribePacket): void {
  if (!codesAckFits(conn, s.subs.length, 'suback')) return;
  let codes: number[] | null = null;
  const valid: SubscriptionRequest[] = [];
  /** The packet's index of each valid filter. */
  const at: number[] = [];
  for (let i = 0; i < s.subs.length; i++) {
    const sub = s.subs[i] as SubscribePacket['subs'][number];
    if (sub.nl && conn.level === 5 && sub.filter.startsWith('$share/')) {
      // [MQTT-3.8.3-4]: No Local on a shared subscription is a protocol error.
      conn.fail(RC.PROTOCOL_ERROR, 'shared-no-local', sub.filter);
      return;
    }
    if (validateTopicFilter(sub.filter) === null && conn.topicWithinLimits(sub.filter)) {
      valid.push(sub);
      at.push(i);
    } else {
      codes ??= new Array<number>(s.subs.length).fill(REFUSED_NONE);
      codes[i] = RC.TOPIC_FILTER_INVALID;
    }
  }
  const authz = conn.host.authorizer;
  if (valid.length === 0 || authz?.decidesSubscribe !== true) {
    proposeSubscribe(conn, s, valid, codes);
    return;
  }
  const clientId = conn.clientId ?? conn.assignedId();
  const verdicts = valid.map((sub) => authz.subscribe({ clientId, username: conn.username, filter: sub.filter, qos: sub.qos }));
  const decided = (all: readonly Authorization[]): void => {
    const allowed: SubscriptionRequest[] = [];
    for (let k = 0; k < all.length; k++) {
      const a = all[k] as Authorization;
      const sub = valid[k] as SubscriptionRequest;
      if (a.ok) allowed.push(a.qos === sub.qos ? sub : { ...sub, qos: a.qos });
      else {
        // A SUBACK failure code is valid in both versions (3.1.1 sends it as 0x80).
        codes ??= new Array<number>(s.subs.length).fill(REFUSED_NONE);
        codes[at[k] as number] = a.reason;
      }
    }
    proposeSubscribe(conn, s, allowed, codes);
  };
  conn.onVerdict(verdicts.some((v) => v instanceof Promise) ? Promise.all(verdicts) : (verdicts as Authorization[]), decided);
}

/** The filters that remain are proposed; the codes decided here travel in the command. */
function proposeSubscribe(conn: Connection, s: SubscribePacket, subs: SubscriptionRequest[], codes: number[] | null): void {
  if (subs.length === 0) {
    conn.reply({ k: 'send', packet: { type: 'suback', pid: s.pid, codes: codes ?? [] } });
    return;
  }
  const cmd: Command = { t: 'subscribe', conn: conn.id, pid: s.pid, subs };
  if (s.props.subId !== undefined) cmd.subId = s.props.subId;
  if (codes !== null) cmd.refused = codes;
  conn.propose(cmd);
}

/** A SUBACK or UNSUBACK has one reason code per filter, so a client may ask more filters than
 * its own Maximum Packet Size lets it be answered for. That is known before proposing: the
 * connection fails with 0x95 and the subscriptions are not made, rather than made and never
 * acknowledged (writeControl would have to drop the reply). */
function codesAckFits(conn: Connection, codes: number, type: 'suback' | 'unsuback'): boolean {
  if (conn.level !== 5 || conn.clientMaxPacket === 0) return true;
  const bytes = codesAckBytes(codes);
  if (bytes <= conn.clientMaxPacket) return true;
  conn.host.event('packet-too-large-for-client', { conn: conn.id, type, bytes });
  conn.fail(RC.PACKET_TOO_LARGE, `${type}-too-large-for-client`, `${type} of ${bytes} bytes over ${conn.clientMaxPacket}`);
  return false;
}

export function onUnsubscribe(conn: Connection, u: UnsubscribePacket): void {
  if (!codesAckFits(conn, u.filters.length, 'unsuback')) return;
  let codes: number[] | null = null;
  const valid: string[] = [];
  for (let i = 0; i < u.filters.length; i++) {
    const f = u.filters[i] as string;
    if (validateTopicFilter(f) === null) valid.push(f);
    else {
      codes ??= new Array<number>(u.filters.length).fill(REFUSED_NONE);
      codes[i] = RC.TOPIC_FILTER_INVALID;
    }
  }
  if (valid.length === 0) {
    conn.reply({ k: 'send', packet: { type: 'unsuback', pid: u.pid, codes: codes ?? [] } });
    return;
  }
  const cmd: Command = { t: 'unsubscribe', conn: conn.id, pid: u.pid, filters: valid };
  if (codes !== null) cmd.refused = codes;
  conn.propose(cmd);
}
