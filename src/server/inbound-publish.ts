// A PUBLISH read from a client, from the packet to its `publish` command, its QoS 0 route or its
// refusal: Topic Alias resolution (§3.3.2.3.4), the QoS and retain the node offers, the v5
// Receive Maximum count, the payload format, --max-publish-rate, low storage, the broker's own
// $SYS topics, and the authorization hook. This is the broker's hot path (docs/architecture.md
// "The path of a QoS 1 publish"), so it allocates nothing per message but the message, its
// command and, for a reply that must wait, its LocalAction.
//
// Plain functions over the Connection's fields (connection.ts), as connect-phase.ts is.
import { performance } from 'node:perf_hooks';
import type { Message, PublishCommand } from '../broker/commands.js';
import type { PublishPacket } from '../protocol/packets.js';
import { RC } from '../protocol/reason-codes.js';
import { validateTopicName } from '../protocol/topic.js';
import type { Authorization } from './auth/hook-authorizer.js';
import type { Connection } from './connection.js';
import { isSysTopic, messageFromPublish, payloadFormatValid, publishRequest } from './inbound.js';
import { TokenBucket } from './limits.js';
import { openInboundFlow } from './receive-maximum.js';

const EMPTY_PAYLOAD = new Uint8Array(0);

export function onPublish(conn: Connection, p: PublishPacket): void {
  const traffic = conn.host.traffic;
  traffic.publishIn[p.qos]++;
  traffic.publishInBytes[p.qos] += p.payload.length;
  const topic = resolveTopic(conn, p);
  if (topic === null) return;
  const l = conn.host.limits;
  if (p.qos > l.maxQos) {
    conn.fail(RC.QOS_NOT_SUPPORTED, 'qos-not-supported', `QoS ${p.qos}`);
    return;
  }
  if (p.retain && !l.retainAvailable) {
    conn.fail(RC.RETAIN_NOT_SUPPORTED, 'retain-not-supported', 'retain');
    return;
  }
  if (p.qos > 0 && conn.level === 5 && !openInboundFlow(conn, p.pid as number, l.receiveMaximum)) {
    conn.fail(RC.RECEIVE_MAXIMUM_EXCEEDED, 'receive-maximum', `${conn.inbound?.size ?? 0} unacknowledged`);
    return;
  }
  if (conn.level === 5 && !payloadFormatValid(p)) {
    refusePayload(conn, p);
    return;
  }
  // After the alias is resolved, so that a refused PUBLISH still sets its alias (§3.3.2.3.4).
  if (!withinPublishRate(conn, p, topic)) return;
  if (conn.host.storageGate.low && !storedWhileLow(conn, p, topic)) return;
  if (isSysTopic(topic)) {
    refuseSys(conn, p);
    return;
  }
  const authz = conn.host.authorizer;
  if (authz?.decidesPublish === true) {
    const verdict = authz.publish(publishRequest(conn.clientId ?? conn.assignedId(), conn.username, topic, p, false));
    conn.onVerdict(verdict, (a) => afterPublishAuthorized(conn, p, topic, a));
    return;
  }
  acceptPublish(conn, p, topic);
}

/** A PUBLISH the hook refused is answered as an ACL denial is: the hook's code on a v5 PUBACK or
 * PUBREC, nothing for QoS 0, and a 3.1.1 QoS 1/2 acknowledged and dropped, as 3.1.1 has no
 * negative acknowledgement. A hook that failed decided nothing: the connection closes (v5:
 * DISCONNECT 0x80) with nothing acknowledged, so the client sends the message again. */
function afterPublishAuthorized(conn: Connection, p: PublishPacket, topic: string, a: Authorization): void {
  if (a.ok) acceptPublish(conn, p, topic);
  else if (a.failed) conn.beginClose(RC.UNSPECIFIED_ERROR);
  else if (p.qos === 1) conn.reply({ k: 'send', packet: { type: 'puback', pid: p.pid as number, code: a.reason } });
  else if (p.qos === 2) conn.reply({ k: 'send', packet: { type: 'pubrec', pid: p.pid as number, code: a.reason } });
}

function acceptPublish(conn: Connection, p: PublishPacket, topic: string): void {
  const traffic = conn.host.traffic;
  const msg = messageFromPublish(p, topic);
  if (conn.host.tracer.on) conn.host.tracer.read(conn.id, conn.clientId, msg, p.pid ?? 0);
  // A retained QoS 0 PUBLISH goes through the log without a packet id to find it by: not probed.
  if (--traffic.probeCountdown <= 0 && (p.qos > 0 || !p.retain)) {
    conn.host.probePublish(conn.id, p.qos === 0 ? msg : null, p.pid ?? 0, conn.lastRxMs);
  }
  if (p.qos === 0 && !p.retain) {
    // The common case routes at once without allocating a queued action.
    if (!conn.busy) {
      conn.host.routeQos0(conn.id, msg);
      return;
    }
    conn.reply({ k: 'route', msg });
    return;
  }
  const cmd: PublishCommand = { t: 'publish', conn: conn.id, msg };
  if (p.qos > 0) cmd.pid = p.pid as number;
  conn.proposePublish(cmd);
}

/** --max-publish-rate is the publisher's own quota (docs/design.md "Queues are bounded by admission":
 * 0x97 answers the publisher's own quotas). A PUBLISH over it is not routed: QoS 0 is dropped,
 * QoS 1/2 are answered 0x97 [§3.4.2.1, §3.5.2.1]. Excess beyond the rate itself again (sending
 * at more than twice the rate) is abuse: DISCONNECT 0x96. A 3.1.1 PUBACK cannot refuse, and a
 * plain one would claim a delivery that did not happen, so a 3.1.1 QoS 1/2 PUBLISH over the rate
 * closes the connection: the client keeps the message and sends it again after reconnecting. */
function withinPublishRate(conn: Connection, p: PublishPacket, topic: string): boolean {
  const rate = conn.host.limits.publishRate;
  if (rate <= 0) return true;
  const now = performance.now();
  conn.publishBucket ??= new TokenBucket(rate, rate, now);
  if (conn.publishBucket.take(now)) return true;
  conn.host.event('limit-publish-rate', { ...conn.who(), qos: p.qos });
  conn.excessBucket ??= new TokenBucket(rate, rate, now);
  if (!conn.excessBucket.take(now) || (conn.level !== 5 && p.qos > 0)) {
    conn.fail(RC.MESSAGE_RATE_TOO_HIGH, 'publish-rate', `over ${rate} PUBLISH/s`);
    return false;
  }
  if (p.qos === 1) conn.reply({ k: 'send', packet: { type: 'puback', pid: p.pid as number, code: RC.QUOTA_EXCEEDED } });
  else if (p.qos === 2 && !p.dup) conn.reply({ k: 'send', packet: { type: 'pubrec', pid: p.pid as number, code: RC.QUOTA_EXCEEDED } });
  else if (p.qos === 2) {
    // A retry may carry an id apply still holds (received before, PUBREC lost): only apply can
    // tell, so the refusal goes through the log, without the payload.
    const msg: Message = { topic, payload: EMPTY_PAYLOAD, qos: 2, retain: false };
    conn.propose({ t: 'publish', conn: conn.id, pid: p.pid as number, msg, quotaExceeded: true });
  }
  return false;
}

/** The data directory is low on space (docs/operations.md "Disk trouble"): what would be stored is
 * refused as a quota, the way --max-publish-rate refuses it: QoS 1/2 answered 0x97 (a QoS 2 retry
 * through the log, as only apply knows whether it holds the id), a retained QoS 0 dropped, and a
 * 3.1.1 QoS 1/2 closes the connection, since its PUBACK cannot refuse: the client keeps the
 * message and sends it again. A plain QoS 0 is routed, as it is never stored. */
function storedWhileLow(conn: Connection, p: PublishPacket, topic: string): boolean {
  if (p.qos === 0 && !p.retain) return true;
  conn.host.event('limit-storage-low', { ...conn.who(), qos: p.qos });
  if (p.qos > 0 && conn.level !== 5) conn.fail(RC.QUOTA_EXCEEDED, 'storage-low', '3.1.1 QoS 1/2 PUBLISH while storage is low');
  else if (p.qos === 1) conn.reply({ k: 'send', packet: { type: 'puback', pid: p.pid as number, code: RC.QUOTA_EXCEEDED } });
  else if (p.qos === 2 && !p.dup) conn.reply({ k: 'send', packet: { type: 'pubrec', pid: p.pid as number, code: RC.QUOTA_EXCEEDED } });
  else if (p.qos === 2) {
    const msg: Message = { topic, payload: EMPTY_PAYLOAD, qos: 2, retain: false };
    conn.propose({ t: 'publish', conn: conn.id, pid: p.pid as number, msg, quotaExceeded: true });
  }
  return false;
}

/** `$SYS/...` is the broker's own: a client's PUBLISH there is refused as an ACL denial is, with
 * 0x87 Not authorized on a v5 PUBACK/PUBREC and no route. Not 0x90 Topic Name invalid: the name
 * is valid MQTT, and 0x90 on a QoS 0 PUBLISH would mean a DISCONNECT, while a refusal keeps the
 * connection. QoS 0 is dropped; a 3.1.1 QoS 1/2 is acknowledged and dropped, as 3.1.1 has no
 * negative acknowledgement. Decided here, so nothing is proposed: no replica ever stores or
 * routes a client's $SYS message, whatever the ACL grants. */
function refuseSys(conn: Connection, p: PublishPacket): void {
  conn.host.event('sys-publish-refused', { conn: conn.id, qos: p.qos });
  if (p.qos === 1) conn.reply({ k: 'send', packet: { type: 'puback', pid: p.pid as number, code: RC.NOT_AUTHORIZED } });
  else if (p.qos === 2) conn.reply({ k: 'send', packet: { type: 'pubrec', pid: p.pid as number, code: RC.NOT_AUTHORIZED } });
}

/** The topic after Topic Alias resolution (§3.3.2.3.4), or null after failing the connection. */
function resolveTopic(conn: Connection, p: PublishPacket): string | null {
  let topic = p.topic;
  const alias = p.props.topicAlias;
  if (alias !== undefined) {
    if (alias === 0 || alias > conn.host.limits.topicAliasMaximum) {
      conn.fail(RC.TOPIC_ALIAS_INVALID, 'topic-alias-invalid', `alias ${alias}`); // [MQTT-3.3.2-8/9]
      return null;
    }
    conn.aliases ??= new Map();
    if (topic === '') {
      const known = conn.aliases.get(alias);
      if (known === undefined) {
        conn.fail(RC.PROTOCOL_ERROR, 'topic-alias-unknown', `alias ${alias}`);
        return null;
      }
      topic = known;
    } else {
      conn.aliases.set(alias, topic);
    }
  }
  const invalid = validateTopicName(topic);
  if (invalid !== null) {
    conn.fail(RC.TOPIC_NAME_INVALID, 'topic-name-invalid', invalid);
    return null;
  }
  if (!conn.topicWithinLimits(topic)) {
    conn.beginClose(RC.TOPIC_NAME_INVALID);
    return null;
  }
  return topic;
}

/** Payload Format Indicator 1 with a payload that is not UTF-8: not routed; QoS 1/2 are answered
 * with 0x99 [MQTT-3.3.2-4 / §3.3.2.3.2], a QoS 0 publish has no answer but DISCONNECT. */
function refusePayload(conn: Connection, p: PublishPacket): void {
  conn.host.event('payload-format-invalid', conn.who());
  if (p.qos === 0) {
    conn.fail(RC.PAYLOAD_FORMAT_INVALID, 'payload-format', 'QoS 0 payload not UTF-8');
    return;
  }
  const type = p.qos === 1 ? 'puback' : 'pubrec';
  conn.reply({ k: 'send', packet: { type, pid: p.pid as number, code: RC.PAYLOAD_FORMAT_INVALID } });
}
