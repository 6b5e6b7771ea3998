import { validateTopicFilter, validateTopicName } from '../protocol/topic.js';
import { OUTBOX_PID_MAX } from './bridge-outbox.js';
import { BRIDGE_NAME } from './bridge-rules.js';
import {
  ACKS_PER_COMMAND_MAX,
  BRIDGE_PUBRECS_MAX,
  type Command,
  type Message,
  type MessageProps,
  PUBLISHES_PER_COMMAND_MAX,
  REFUSED_NONE,
  type SubscriptionRequest,
  type Will,
} from './commands.js';
import { connPeriod } from './session.js';
import { completeSettings } from './settings.js';
import { SHARD_NAME, SHARDS_MAX } from './shard-name.js';

// Shape checks of commands before apply acts on them. Commands are validated by the proposer, so a
// command that fails here is a bug or corruption elsewhere: apply turns it into a no-op and an
// event instead of throwing on every replica (docs/design.md "Apply judges each command").

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isInt = (v: unknown, min: number, max: number): v is number => typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max;
const isStr = (v: unknown): v is string => typeof v === 'string';
/** A shard outbox's log identity: `TIME-INDEX` (src/broker/shard-outbox.ts), or what a receiver may take. */
export const SHARD_LOG = /^[0-9A-Za-z-]{1,64}$/;
const isBool = (v: unknown): v is boolean => typeof v === 'boolean';
const isQos = (v: unknown): v is 0 | 1 | 2 => v === 0 || v === 1 || v === 2;
const isBytes = (v: unknown): v is Uint8Array => v instanceof Uint8Array;
const U32 = 0xffff_ffff;

function isProps(p: unknown): p is MessageProps {
  if (p === undefined || p === null) return true;
  if (!isObj(p)) return false;
  if (p.payloadFormat !== undefined && p.payloadFormat !== 0 && p.payloadFormat !== 1) return false;
  if (p.expiryS !== undefined && !isInt(p.expiryS, 0, U32)) return false;
  if (p.contentType !== undefined && !isStr(p.contentType)) return false;
  if (p.responseTopic !== undefined && !isStr(p.responseTopic)) return false;
  if (p.correlationData !== undefined && !isBytes(p.correlationData)) return false;
  if (p.userProps === undefined) return true;
  return Array.isArray(p.userProps) && p.userProps.every((kv) => Array.isArray(kv) && kv.length === 2 && isStr(kv[0]) && isStr(kv[1]));
}

function publishProblem(c: Record<string, unknown>): string | null {
  if (!isConn(c.conn) || !isMessage(c.msg)) return 'bad publish';
  if (c.quotaExceeded !== undefined && (c.quotaExceeded !== true || c.msg.qos !== 2)) return 'bad publish quotaExceeded';
  if (c.fwd !== undefined && (c.msg.qos !== 1 || !isShardList(c.fwd))) return 'bad publish fwd';
  if (c.msg.qos === 0) return c.pid === undefined ? null : 'pid on a QoS 0 publish';
  return isPid(c.pid) ? null : 'bad publish pid';
}

export function isMessage(m: unknown): m is Message {
  return (
    isObj(m) &&
    isStr(m.topic) &&
    validateTopicName(m.topic) === null &&
    isBytes(m.payload) &&
    isQos(m.qos) &&
    isBool(m.retain) &&
    isProps(m.props)
  );
}

function isWill(w: unknown): w is Will | null {
  return w === null || (isObj(w) && isMessage(w.msg) && isInt(w.delayS, 0, U32));
}

function isSubRequest(r: unknown): r is SubscriptionRequest {
  return (
    isObj(r) && isStr(r.filter) && validateTopicFilter(r.filter) === null && isQos(r.qos) && isBool(r.nl) && isBool(r.rap) && isQos(r.rh)
  );
}

const isConn = (c: unknown): c is string => isStr(c) && connPeriod(c) !== null;
const isPid = (p: unknown): p is number => isInt(p, 1, 65_535);
/** The codes a connection decided itself for a packet whose other `decided` filters apply
 * answers: one slot per filter of the packet, REFUSED_NONE exactly `decided` times, a failure
 * code (0x80 and above) elsewhere. */
const isRefused = (r: unknown, decided: number): boolean => {
  if (!Array.isArray(r)) return false;
  let open = 0;
  for (const c of r) {
    if (c === REFUSED_NONE) open++;
    else if (!isInt(c, 0x80, 0xff)) return false;
  }
  return open === decided;
};
const isAckKind = (k: unknown): boolean => k === 'puback' || k === 'pubrec' || k === 'pubcomp';

/** Null when the command's shape is valid, else a short reason. */
export function commandProblem(cmd: unknown): string | null {
  if (!isObj(cmd)) return 'not an object';
  const c = cmd as Record<string, unknown> & { t: Command['t'] };
  switch (c.t) {
    case 'serve-start':
      return isInt(c.node, 0, U32) &&
        completeSettings(c.settings) !== null &&
        (c.configHash === undefined || isStr(c.configHash)) &&
        (c.generation === undefined || isInt(c.generation, 0, U32))
        ? null
        : 'bad serve-start';
    case 'settings':
      return completeSettings(c.settings) !== null && (c.configHash === undefined || isStr(c.configHash)) ? null : 'bad settings';
    case 'connect':
      return isConn(c.conn) &&
        (c.clientId === null || (isStr(c.clientId) && c.clientId.length > 0)) &&
        (c.assignedId === undefined || (c.clientId === null && isStr(c.assignedId) && c.assignedId.length > 0)) &&
        (c.protocol === 3 || c.protocol === 4 || c.protocol === 5) &&
        isBool(c.clean) &&
        isInt(c.expiryS, 0, U32) &&
        isWill(c.will) &&
        (c.username === null || isStr(c.username)) &&
        isInt(c.receiveMax, 1, 65_535) &&
        isInt(c.maxPacketSize, 0, U32) &&
        isBool(c.problemInfo)
        ? null
        : 'bad connect';
    case 'disconnect':
      return isConn(c.conn) && isInt(c.reason, 0, 255) && isBool(c.publishWill) && (c.expiryS === undefined || isInt(c.expiryS, 0, U32))
        ? null
        : 'bad disconnect';
    case 'subscribe':
      return isConn(c.conn) &&
        isPid(c.pid) &&
        Array.isArray(c.subs) &&
        c.subs.length > 0 &&
        c.subs.every(isSubRequest) &&
        (c.subId === undefined || isInt(c.subId, 1, 268_435_455)) &&
        (c.refused === undefined || isRefused(c.refused, c.subs.length))
        ? null
        : 'bad subscribe';
    case 'unsubscribe':
      return isConn(c.conn) &&
        isPid(c.pid) &&
        Array.isArray(c.filters) &&
        c.filters.length > 0 &&
        c.filters.every((f) => isStr(f) && validateTopicFilter(f) === null) &&
        (c.refused === undefined || isRefused(c.refused, c.filters.length))
        ? null
        : 'bad unsubscribe';
    case 'publish':
      return publishProblem(c);
    case 'publishes': {
      if (!isConn(c.conn) || !Array.isArray(c.pubs) || c.pubs.length < 2 || c.pubs.length > PUBLISHES_PER_COMMAND_MAX)
        return 'bad publishes';
      for (const p of c.pubs as unknown[]) {
        if (!isObj(p) || (p.t !== 'publish' && p.t !== 'pubrel') || p.conn !== c.conn) return 'bad publishes item';
        if (p.t === 'pubrel') {
          if (!isPid(p.pid)) return 'publishes item: bad pubrel';
          continue;
        }
        const problem = publishProblem(p);
        if (problem !== null) return `publishes item: ${problem}`;
      }
      return null;
    }
    case 'pubrel':
      return isConn(c.conn) && isPid(c.pid) ? null : 'bad pubrel';
    case 'ack':
      return isConn(c.conn) && isPid(c.pid) && isAckKind(c.kind) ? null : 'bad ack';
    case 'acks':
      if (!isConn(c.conn) || !Array.isArray(c.acks) || c.acks.length === 0 || c.acks.length > ACKS_PER_COMMAND_MAX) return 'bad acks';
      for (const a of c.acks as unknown[]) {
        if (typeof a !== 'object' || a === null) return 'bad acks item';
        const { pid, kind } = a as { pid?: unknown; kind?: unknown };
        if (!isPid(pid) || !isAckKind(kind)) return 'bad acks item';
      }
      return null;
    case 'tick':
      return null;
    case 'check':
      return isInt(c.atIndex, 0, Number.MAX_SAFE_INTEGER) && isStr(c.digest) ? null : 'bad check';
    case 'bridge-position':
      return isStr(c.bridge) && BRIDGE_NAME.test(c.bridge) && isInt(c.below, 1, Number.MAX_SAFE_INTEGER) ? null : 'bad bridge-position';
    case 'bridge-pubrec': {
      if (!isStr(c.bridge) || !BRIDGE_NAME.test(c.bridge) || !isConn(c.conn) || !Array.isArray(c.recs)) return 'bad bridge-pubrec';
      if (c.recs.length === 0 || c.recs.length > BRIDGE_PUBRECS_MAX) return 'bad bridge-pubrec';
      for (const r of c.recs as unknown[]) {
        if (!Array.isArray(r) || r.length !== 2 || !isInt(r[0], 1, Number.MAX_SAFE_INTEGER) || !isInt(r[1], 1, OUTBOX_PID_MAX))
          return 'bad bridge-pubrec item';
      }
      return null;
    }
    case 'bridge-in': {
      if (!isStr(c.bridge) || !BRIDGE_NAME.test(c.bridge) || !isConn(c.conn) || !isMessage(c.msg)) return 'bad bridge-in';
      // The remote's QoS 2 flow (docs/bridges.md "QoS 2 from the remote"), at any QoS here.
      if (c.q2 !== undefined) return c.q2 === true && isPid(c.pid) ? null : 'bad bridge-in QoS 2';
      if (c.msg.qos === 2) return 'bad bridge-in: QoS 2 without the remote flow';
      // Otherwise QoS 0 comes only retained.
      if (c.msg.qos === 0) return c.pid === undefined && c.msg.retain ? null : 'bad bridge-in QoS 0';
      return isPid(c.pid) ? null : 'bad bridge-in pid';
    }
    case 'bridge-in-rel':
      return isStr(c.bridge) && BRIDGE_NAME.test(c.bridge) && isConn(c.conn) && isPid(c.pid) ? null : 'bad bridge-in-rel';
    case 'bridge-in-reset':
      return isStr(c.bridge) && BRIDGE_NAME.test(c.bridge) ? null : 'bad bridge-in-reset';
    case 'shard-in':
      return isConn(c.conn) &&
        isPid(c.handle) &&
        isStr(c.origin) &&
        SHARD_NAME.test(c.origin) &&
        isStr(c.log) &&
        SHARD_LOG.test(c.log) &&
        isInt(c.seq, 1, Number.MAX_SAFE_INTEGER) &&
        isMessage(c.msg) &&
        c.msg.qos === 1 &&
        !c.msg.retain
        ? null
        : 'bad shard-in';
    case 'shard-position':
      return isStr(c.dest) && SHARD_NAME.test(c.dest) && isInt(c.below, 1, Number.MAX_SAFE_INTEGER) ? null : 'bad shard-position';
    default:
      return 'unknown command type';
  }
}

/** Shards a publish is forwarded to: 1 to SHARDS_MAX names, sorted, each once. */
function isShardList(v: unknown): boolean {
  if (!Array.isArray(v) || v.length === 0 || v.length > SHARDS_MAX) return false;
  for (let i = 0; i < v.length; i++) {
    const n: unknown = v[i];
    if (!isStr(n) || !SHARD_NAME.test(n)) return false;
    if (i > 0 && !((v[i - 1] as string) < n)) return false;
  }
  return true;
}
