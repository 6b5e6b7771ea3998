// The CONNECT phase of a Connection: from the CONNECT packet to the `connect` command, or to the
// refusing CONNACK. Shard placement, node admission, the checks of the CONNECT itself, the
// authenticator (a promise makes the connection wait), MQTT 5 enhanced authentication (AUTH
// exchanges, re-authentication included; the rules are in auth-exchange.ts), the authorization
// of the will, and the CONNACK sized against the client's Maximum Packet Size before anything is
// proposed. The successful CONNACK itself comes from apply.
//
// Plain functions over the connection's own fields, so that a connection carries no helper object
// for a phase it left long ago; the Connection class (connection.ts) owns the socket and the phase.
import { performance } from 'node:perf_hooks';
import type { OutPacket } from '../broker/commands.js';
import { assignedClientId } from '../broker/session.js';
import { encode } from '../protocol/encoder.js';
import type { AuthPacket, ConnectPacket } from '../protocol/packets.js';
import { RC } from '../protocol/reason-codes.js';
import { validateTopicName } from '../protocol/topic.js';
import type { Authorization } from './auth/hook-authorizer.js';
import { type AuthAction, EnhancedAuthState, type FailedLogin } from './auth-exchange.js';
import type { AuthResult } from './authenticator.js';
import type { Connection } from './connection.js';
import { sendOut, writeControl } from './connection-output.js';
import { connectExpiryS, isSysTopic, publishRequest, RECEIVE_MAX_DEFAULT, willFromConnect } from './inbound.js';
import { keepAliveWheel } from './keepalive-wheel.js';
import { NO_DISCONNECT, toWire } from './outbound.js';
import type { Referral, ShardGate } from './shard-gate.js';
import { OutboundAliases } from './topic-alias-out.js';

/** Keep-alive is enforced at one and a half times the interval [MQTT-3.1.2-24]. */
const KEEPALIVE_FACTOR_PER_S_MS = 1_500;

export function onConnect(conn: Connection, connect: ConnectPacket): void {
  conn.level = connect.level;
  // [MQTT-3.1.2-24] holds for every packet from now on, a refusing CONNACK and AUTH included.
  if (connect.level === 5) conn.clientMaxPacket = connect.props.maxPacketSize ?? 0;
  conn.clientId = connect.clientId === '' ? null : connect.clientId;
  // --shard: a client of another shard is sent there before anything else is looked at.
  const gate = conn.host.shardGate;
  if (gate !== null && !placedHere(conn, gate, connect)) return;
  const limited = conn.host.admitConnect(conn.transport.remoteAddress, conn, connect);
  if (limited === RC.CONNECTION_RATE_EXCEEDED && connect.level !== 5) {
    conn.closeNow(NO_DISCONNECT); // 3.1.1 has no return code for a rate: closed without CONNACK.
    return;
  }
  // A verified client certificate names the user; its identity replaces any username sent.
  const certId = conn.transport.certIdentity;
  const c = certId === null ? connect : { ...connect, username: certId };
  const refusal = limited ?? connectRefusal(conn, c);
  if (refusal !== null) {
    refuseConnect(conn, refusal);
    return;
  }
  if (c.level === 5 && c.props.authMethod !== undefined) {
    beginEnhanced(conn, c);
    return;
  }
  let verdict: AuthResult | Promise<AuthResult>;
  try {
    verdict = conn.host.authenticator.authenticate(c, conn.transport.remoteAddress, conn.transport);
  } catch (err) {
    conn.host.protocolError('authenticator', { ...conn.who(), error: String(err) }, 'authenticator threw');
    verdict = { ok: false, reason: RC.UNSPECIFIED_ERROR };
  }
  if (!(verdict instanceof Promise)) {
    afterAuth(conn, c, verdict);
    return;
  }
  conn.phase = 'authenticating';
  conn.socket.pause();
  verdict.then(
    (r) => afterAuthAsync(conn, c, r),
    (err: unknown) => {
      conn.host.protocolError('authenticator', { ...conn.who(), error: String(err) }, 'authenticator failed');
      afterAuthAsync(conn, c, { ok: false, reason: RC.UNSPECIFIED_ERROR });
    },
  );
}

/** Whether this shard serves the CONNECT: its client id belongs here, or it sent none and is
 * assigned one that does. Otherwise it is refused: MQTT 5 with 0x9C Use another server and the
 * owner's address as Server Reference when configured, 3.1.1 with return code 3 Server
 * unavailable (docs/scale-out.md "Refusal at the wrong shard"). */
function placedHere(conn: Connection, gate: ShardGate, c: ConnectPacket): boolean {
  if (c.clientId === '') {
    conn.assigned = gate.assign(assignedClientId(conn.id));
    if (conn.assigned !== null) return true;
    conn.host.event('shard-assign-failed', { conn: conn.id });
    refuseConnect(conn, RC.SERVER_UNAVAILABLE);
    return false;
  }
  const to = gate.referral(c.clientId);
  if (to === null) return true;
  conn.host.event('connect-wrong-shard', { ...conn.who(), shard: to.shard, reference: to.reference });
  refuseConnect(conn, RC.USE_ANOTHER_SERVER, to);
  return false;
}

/** The MQTT 5 reason code for refusing this CONNECT before proposing it, or null. */
function connectRefusal(conn: Connection, c: ConnectPacket): number | null {
  const l = conn.host.limits;
  // 3.1.1 [MQTT-3.1.3-8]: a persistent session needs a client id to find it again. MQTT 5 drops
  // that rule: an empty id is assigned one whatever Clean Start says [MQTT-3.1.3-6].
  if (c.clientId === '' && !c.clean && c.level !== 5) return RC.CLIENT_IDENTIFIER_NOT_VALID;
  // --tls-require-client-id-match: a device may only claim the session of its own certificate.
  if (conn.transport.clientIdMustMatchIdentity && c.clientId !== conn.transport.certIdentity) return RC.CLIENT_IDENTIFIER_NOT_VALID;
  // 3.1.1 cannot tell the client a shorter keep-alive; like Mosquitto, refuse the identifier.
  if (c.level !== 5 && c.keepAlive > l.maxKeepalive) return RC.CLIENT_IDENTIFIER_NOT_VALID;
  if (c.will !== null) {
    if (c.will.qos > l.maxQos) return RC.QOS_NOT_SUPPORTED; // [MQTT-3.2.2-12]
    if (c.will.retain && !l.retainAvailable) return RC.RETAIN_NOT_SUPPORTED; // [MQTT-3.2.2-13]
    if (validateTopicName(c.will.topic) !== null || !conn.topicWithinLimits(c.will.topic)) return RC.TOPIC_NAME_INVALID;
    // The broker's own topics: refused as an ACL denial of the will is, 0x87 (3.1.1: 5).
    if (isSysTopic(c.will.topic)) {
      conn.host.event('sys-publish-refused', { conn: conn.id, will: true });
      return RC.NOT_AUTHORIZED;
    }
  }
  return null;
}

function refuseConnect(conn: Connection, reason: number, to: Referral | null = null): void {
  conn.host.event('connect-refused', { ...conn.who(), reason });
  const connack: OutPacket = { type: 'connack', sessionPresent: false, code: reason };
  if (to !== null) {
    connack.reasonString = to.reason;
    if (to.reference !== null) connack.serverReference = to.reference;
  }
  sendOut(conn, connack);
  conn.closeNow(NO_DISCONNECT);
}

function afterAuthAsync(conn: Connection, c: ConnectPacket, r: AuthResult): void {
  if (conn.phase !== 'authenticating') return;
  conn.phase = 'awaiting-connect';
  conn.resumeAfter(() => afterAuth(conn, c, r));
}

function afterAuth(conn: Connection, c: ConnectPacket, r: AuthResult, user: string | null = c.username): void {
  if (!r.ok) {
    refuseConnect(conn, r.reason);
    return;
  }
  const authz = conn.host.authorizer;
  if (c.will !== null && authz?.decidesPublish === true) {
    const clientId = c.clientId === '' ? conn.assignedId() : c.clientId;
    const verdict = authz.publish(publishRequest(clientId, user, c.will.topic, c.will, true));
    conn.onVerdict(verdict, (a) => afterWillAuthorized(conn, c, a, user));
    return;
  }
  proposeConnect(conn, c, user);
}

/** A will the hook refused refuses the CONNECT with its code, as an ACL denial of the will does
 * (3.1.1: the nearest return code); a hook that failed, with 0x88, as `authenticate` does. */
function afterWillAuthorized(conn: Connection, c: ConnectPacket, a: Authorization, user: string | null): void {
  if (a.ok) proposeConnect(conn, c, user);
  else refuseConnect(conn, a.failed ? RC.SERVER_UNAVAILABLE : a.reason);
}

function proposeConnect(conn: Connection, c: ConnectPacket, user: string | null): void {
  if (c.level === 5) takeClientLimits(conn, c);
  const keepAliveS = keepAliveFor(conn, c);
  const unanswerable = c.level === 5 ? connackRefusal(conn, c) : null;
  if (unanswerable !== null) {
    refuseConnect(conn, unanswerable);
    return;
  }
  conn.phase = 'connecting';
  conn.username = user;
  conn.connectExpiry = connectExpiryS(c);
  conn.keepAliveMs = keepAliveS * KEEPALIVE_FACTOR_PER_S_MS;
  conn.clearTimer();
  if (conn.keepAliveMs > 0) keepAliveWheel.schedule(conn, performance.now() + conn.keepAliveMs);
  conn.connectProposed = true;
  conn.propose({
    t: 'connect',
    conn: conn.id,
    clientId: c.clientId === '' ? null : c.clientId,
    // Only a shard's own choice is carried; the usual one apply derives from conn, as before.
    ...(conn.assigned === null || conn.assigned === assignedClientId(conn.id) ? {} : { assignedId: conn.assigned }),
    protocol: c.level,
    // An assigned id names a new session: Clean Start 0 must not resume one a client that chose
    // the same name may hold.
    clean: c.clean || c.clientId === '',
    expiryS: conn.connectExpiry,
    will: willFromConnect(c),
    username: user,
    receiveMax: c.props.receiveMax ?? RECEIVE_MAX_DEFAULT,
    maxPacketSize: c.props.maxPacketSize ?? 0,
    problemInfo: c.props.requestProblemInfo !== 0,
  });
}

/** What the v5 client asked of the server's output (§3.1.2.11): problem information, response
 * information, outbound aliases, its Maximum Packet Size. */
function takeClientLimits(conn: Connection, c: ConnectPacket): void {
  const p = c.props;
  if (p.requestProblemInfo === 0) conn.limits.noProblemInfo = true;
  if (p.requestResponseInfo === 1) conn.limits.responseInfoFor = c.clientId;
  const aliasMax = Math.min(p.topicAliasMax ?? 0, conn.host.limits.topicAliasMaximum);
  if (aliasMax > 0) conn.aliasesOut = new OutboundAliases(aliasMax);
}

/** The successful CONNACK apply will send is known here but for Session Present, which does not
 * change its size; it must be encodable and within the client's Maximum Packet Size
 * [MQTT-3.1.2-24]. Checked before the CONNECT is proposed: a CONNACK found too large only when
 * it is sent would leave a session the client was never told of. Response Information is
 * optional (§3.2.2.3.15), so it goes first; a CONNACK that does not fit without it refuses the
 * CONNECT with 0x95 (a reply to it would exceed a maximum packet size). Returns the refusal's
 * reason code, or null when the CONNACK fits. */
function connackRefusal(conn: Connection, c: ConnectPacket): number | null {
  const assigned = c.clientId === '' ? conn.assignedId() : undefined;
  if (connackFits(conn, assigned)) return null;
  if (conn.limits.responseInfoFor !== undefined) {
    conn.limits.responseInfoFor = undefined;
    conn.host.event('response-info-omitted', { conn: conn.id });
    if (connackFits(conn, assigned)) return null;
  }
  conn.host.event('connack-too-large-for-client', { conn: conn.id, maxPacketSize: conn.clientMaxPacket });
  return RC.PACKET_TOO_LARGE;
}

function connackFits(conn: Connection, assigned: string | undefined): boolean {
  const connack: OutPacket = { type: 'connack', sessionPresent: true, code: RC.SUCCESS };
  if (assigned !== undefined) connack.assignedClientId = assigned;
  let bytes: number;
  try {
    bytes = encode(toWire(connack, 5, conn.limits), 5).length;
  } catch (err) {
    // A property over its wire limit (a string or binary value over 65535 bytes).
    if (err instanceof RangeError) return false;
    throw err;
  }
  return conn.clientMaxPacket === 0 || bytes <= conn.clientMaxPacket;
}

// ---- enhanced authentication (§4.12; rules in auth-exchange.ts) ----

function beginEnhanced(conn: Connection, c: ConnectPacket): void {
  // An address in its failed-login backoff is refused without an exchange, as a password is.
  const blocked = conn.host.authenticator.loginThrottle?.blocked(conn.transport.remoteAddress, null) ?? 0;
  if (blocked > 0) {
    refuseAfter(conn, RC.BAD_USER_NAME_OR_PASSWORD, blocked);
    return;
  }
  const { state, action } = EnhancedAuthState.begin(c, conn.host.enhancedAuth);
  conn.enhanced = state;
  onAuthAction(conn, action, c);
}

/** Refuses the CONNECT after `delayMs` of the failed-login backoff; nothing is read meanwhile. */
function refuseAfter(conn: Connection, reason: number, delayMs: number): void {
  if (delayMs <= 0) {
    refuseConnect(conn, reason);
    return;
  }
  conn.phase = 'authenticating';
  conn.socket.pause();
  setTimeout(refuseDue, delayMs, conn, reason);
}

/** The backoff of a refusal has passed (through the shared callback). */
function refuseDue(conn: Connection, reason: number): void {
  if (conn.phase === 'authenticating') refuseConnect(conn, reason);
}

export function onAuth(conn: Connection, p: AuthPacket): void {
  if (conn.enhanced === null) {
    // No Authentication Method was agreed, so AUTH is out of place [MQTT-4.12.0-1].
    conn.fail(RC.PROTOCOL_ERROR, 'auth-unexpected', 'AUTH without an authentication method');
    return;
  }
  if (conn.phase === 'connecting') {
    // Authenticated, CONNACK not yet out: the client must wait for it [MQTT-3.1.2-30].
    conn.fail(RC.PROTOCOL_ERROR, 'auth-before-connack', 'AUTH before CONNACK');
    return;
  }
  onAuthAction(conn, conn.enhanced.onAuth(p, conn.phase === 'connected'), conn.pendingConnect);
}

export function onAuthAction(conn: Connection, a: AuthAction, c?: ConnectPacket): void {
  switch (a.k) {
    case 'send':
      if (conn.phase === 'awaiting-connect') {
        conn.phase = 'auth-exchange';
        conn.pendingConnect = c;
      }
      writeControl(conn, { type: 'auth', code: a.code, props: { authMethod: conn.enhanced?.method.name, authData: a.data } });
      return;
    case 'authenticated': {
      const connect = c as ConnectPacket;
      conn.pendingConnect = undefined;
      const throttle = conn.host.authenticator.loginThrottle;
      const blocked = throttle?.blocked(conn.transport.remoteAddress, a.user) ?? 0;
      if (blocked > 0) {
        // The user is in its backoff: refused whatever the proof, so guessing gains nothing.
        refuseAfter(conn, RC.BAD_USER_NAME_OR_PASSWORD, blocked);
        return;
      }
      throttle?.succeeded(conn.transport.remoteAddress, a.user);
      conn.phase = 'awaiting-connect';
      conn.limits.auth = { method: connect.props.authMethod as string, data: a.data };
      conn.host.event('enhanced-auth-ok', { ...conn.who(), method: conn.limits.auth.method });
      afterAuth(conn, connect, { ok: true }, a.user);
      return;
    }
    case 'refuse':
      if (a.login === undefined) {
        conn.host.protocolError('enhanced-auth', { ...conn.who(), reason: a.reason }, a.why);
        refuseConnect(conn, a.reason);
        return;
      }
      refuseAfter(conn, a.reason, failedLogin(conn, a.login, a.why));
      return;
    case 'disconnect':
      if (a.login !== undefined) failedLogin(conn, a.login, a.why);
      conn.fail(a.reason, 'reauth', a.why);
      return;
    default: {
      const _: never = a;
      void _;
    }
  }
}

/** Counts a login the method refused toward the failed-login backoff; returns the delay before
 * the refusal goes out (0 without a backoff). */
function failedLogin(conn: Connection, login: FailedLogin, why: string): number {
  const throttle = conn.host.authenticator.loginThrottle;
  if (throttle !== undefined) return throttle.failed(conn.transport.remoteAddress, login.user);
  conn.host.event('auth-failed', { ...conn.who(), username: login.user ?? '', reason: why });
  return 0;
}

/** The keep-alive in seconds this connection runs with. 0 means disabled, as the client asked
 * [MQTT-3.1.2-10 / §3.1.2.10]; a v5 client asking more than maxKeepalive is told the maximum with
 * Server Keep Alive [MQTT-3.2.2-21]. */
function keepAliveFor(conn: Connection, c: ConnectPacket): number {
  const max = conn.host.limits.maxKeepalive;
  if (c.level === 5 && c.keepAlive > max) {
    conn.limits.serverKeepAlive = max;
    return max;
  }
  return c.keepAlive;
}
