import { Packr } from 'msgpackr';
import type { ProtocolLevel, QoS } from '../protocol/packets.js';
import { OUTBOX_PID_MAX, type OutboxImage, type OutboxMessage } from './bridge-outbox.js';
import { BRIDGE_NAME, type BridgeRule, bridgeNames } from './bridge-rules.js';
import type { AclRule, Message, MessageProps, Settings, Will } from './commands.js';
import { queueSize } from './deliver.js';
import { Fifo } from './fifo.js';
import {
  type Delivery,
  type Inflight,
  newSession,
  type PendingWill,
  PID_MAX,
  type RetainedMessage,
  type Session,
  type Subscription,
} from './session.js';
import { completeSettings, SETTING_NAMES, SETTINGS, type SettingName } from './settings.js';
import { SHARD_NAME } from './shard-name.js';
import type { ShardOutboxItem } from './shard-outbox.js';
import { isMessage, SHARD_LOG } from './validate.js';

// The canonical image of the replicated state (docs/design.md "Snapshots"): positional arrays in a fixed
// order, maps as arrays sorted by key, optional fields as null, encoded by msgpackr without record
// structures. Equal states give equal bytes, which is what the digest hashes. Derived indexes (the
// topic trie, conn index, deadline heap, pids in use, queue bytes) are not stored; the broker
// rebuilds them on restore.

const packr = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true });

/** 3: the epoch generation, and per session the packet id fence (deliver.ts "Fence"). 4: the
 * `check` digests left the image (each node computes and compares them locally). 5: settings as
 * [name, value] pairs (src/broker/settings.ts). 6: the bridge outboxes, a twelfth element, and the
 * settings bridgeRules, bridgeOutboxMessages and bridgeOutboxBytes. 7: each outbox item's expiry
 * time, a fifth element. 8: the outboxes of the shards this shard forwards to, a thirteenth
 * element, and the highest sequence applied per origin log, a fourteenth. 9: each outbox's next QoS 2
 * packet id and the remote's QoS 2 ids held, a fourth and fifth element, and each item's packet id
 * and PUBREC record, a sixth and seventh (docs/bridges.md "QoS 2 to the remote" and "QoS 2 from the
 * remote"). Restore reads 4 to 9. */
export const SNAPSHOT_VERSION = 9;
/** The format before QoS 2 packet ids in the outboxes: outboxes of three elements, items of five. */
const SNAPSHOT_VERSION_NO_OUTBOX_PIDS = 8;
/** The format before shard outboxes and high-water marks: twelve elements. */
const SNAPSHOT_VERSION_NO_SHARDS = 7;
/** The format whose outbox items had no expiry time: four elements. */
const SNAPSHOT_VERSION_NO_OUTBOX_EXPIRY = 6;
/** The format before bridge outboxes: eleven elements. */
const SNAPSHOT_VERSION_NO_BRIDGES = 5;
/** The previous format, read for snapshots and state files written before keyed settings. */
const SNAPSHOT_VERSION_KEYLESS = 4;
/** Snapshot chunks are at most this many bytes. */
export const SNAPSHOT_CHUNK_BYTES = 64 * 1024;

export interface StateImage {
  appliedIndex: number;
  appliedTime: number;
  servePeriod: number;
  settings: Settings;
  failed: string | null;
  /** Highest raft epoch generation a serve-start carried. */
  generation: number;
  /** Sorted by client id. */
  sessions: Session[];
  /** Sorted by client id. */
  wills: PendingWill[];
  /** Sorted by topic. */
  retained: [string, RetainedMessage][];
  /** Shared subscription round-robin cursors (share id, last chosen client id), sorted by id. */
  cursors: [string, string][];
  /** Bridge outboxes (name, position, items in log order), sorted by name. */
  bridges: OutboxImage[];
  /** Shard outboxes (dest, log identity, next sequence, position, items in sequence order), sorted
   * by dest. */
  shards: [string, string, number, number, ShardOutboxItem[]][];
  /** Forwarded messages applied here: [origin, log, highest sequence], sorted by origin, then log. */
  highWater: [string, string, number][];
}

export const SNAPSHOT_ERROR = {
  /** The bytes are not a snapshot this version wrote; restore refuses them. */
  CORRUPT: 'ERR_SNAPSHOT_CORRUPT',
  /** A snapshot cursor was read after a newer one replaced it. */
  CANCELLED: 'ERR_SNAPSHOT_CANCELLED',
} as const;
export type SnapshotErrorCode = (typeof SNAPSHOT_ERROR)[keyof typeof SNAPSHOT_ERROR];

export class SnapshotError extends Error {
  readonly code: SnapshotErrorCode;
  constructor(message: string, code: SnapshotErrorCode = SNAPSHOT_ERROR.CORRUPT) {
    super(message);
    this.code = code;
  }
}

/** msgpack of one value, as a part of the image: the image's bytes are the concatenation of its
 * parts' bytes under the array headers that arrayHeader() writes. */
export const packValue = (v: unknown): Uint8Array => packr.pack(v);

/** The msgpack header of an array of n elements (fixarray, array 16, array 32), as msgpackr
 * writes it, so an image streamed part by part is byte-identical to one packed whole. */
export function arrayHeader(n: number): Uint8Array {
  if (n < 16) return Uint8Array.of(0x90 | n);
  if (n <= 0xffff) return Uint8Array.of(0xdc, n >>> 8, n & 0xff);
  return Uint8Array.of(0xdd, n >>> 24, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff);
}

/** Elements of the image's root array. */
export const IMAGE_FIELDS = 14;
/** Elements of the root array of formats 6 and 7. */
const IMAGE_FIELDS_NO_SHARDS = 12;
/** Elements of the root array of formats 4 and 5. */
const IMAGE_FIELDS_NO_BRIDGES = 11;

const orNull = <T>(v: T | undefined): T | null => (v === undefined ? null : v);

function encodeProps(p: MessageProps | undefined): unknown[] | null {
  if (p === undefined || p === null) return null;
  return [
    orNull(p.payloadFormat),
    orNull(p.expiryS),
    orNull(p.contentType),
    orNull(p.responseTopic),
    orNull(p.correlationData),
    orNull(p.userProps),
  ];
}

/** A message as the image holds it (also what a shard forwards over JetStream, src/scale/forward-codec.ts). */
export function encodeMsg(m: Message): unknown[] {
  return [m.topic, m.payload, m.qos, m.retain, encodeProps(m.props)];
}

const encodeDelivery = (d: Delivery): unknown[] => [encodeMsg(d.msg), d.qos, d.retain, d.subIds, d.expiresAt, d.share];

/** Settings as [name, value] pairs in table order (format 5): a setting added later is one more
 * pair, and a snapshot without it restores the setting's initial value (src/broker/settings.ts). */
export function encodeSettings(s: Settings): unknown[] {
  const pairs: unknown[] = new Array(SETTING_NAMES.length);
  for (let i = 0; i < SETTING_NAMES.length; i++) {
    const n = SETTING_NAMES[i] as SettingName;
    pairs[i] = [n, n === 'acl' ? encodeAcl(s.acl) : n === 'bridgeRules' ? encodeRules(s.bridgeRules) : s[n]];
  }
  return pairs;
}

function encodeRules(rules: readonly BridgeRule[]): unknown {
  return rules.map((r) => [r.bridge, r.pattern, r.direction, r.qos, r.localPrefix, r.remotePrefix]);
}

/** One outbox: [name, position, [[index, remote topic, qos, message, expiresAt, pid, rec]...], nextPid, inIds]. */
export const encodeOutbox = ([name, position, items, nextPid, inIds]: OutboxImage): unknown[] => [
  name,
  position,
  items.map((it) => [it.index, it.topic, it.qos, encodeMsg(it.msg), it.expiresAt, it.pid, it.rec]),
  nextPid,
  inIds,
];

/** One shard outbox: [dest, log, next, position, [[seq, index, message]...]]. */
export const encodeShardOutbox = ([dest, log, next, position, items]: [string, string, number, number, ShardOutboxItem[]]): unknown[] => [
  dest,
  log,
  next,
  position,
  items.map((it) => [it.seq, it.index, encodeMsg(it.msg)]),
];

function encodeAcl(acl: Settings['acl']): unknown {
  return acl === null ? null : acl.map((r) => [r.kind, r.user, r.access, r.filter]);
}

export function encodeSession(s: Session): unknown[] {
  const subs = [...(s.subs?.values() ?? [])]
    .sort((a, b) => (a.filter < b.filter ? -1 : a.filter > b.filter ? 1 : 0))
    .map((x) => [x.filter, x.qos, x.nl, x.rap, x.rh, x.subId]);
  return [
    s.clientId,
    s.conn,
    s.protocol,
    s.username,
    s.expiryS,
    s.will === null ? null : [encodeMsg(s.will.msg), s.will.delayS],
    s.receiveMax,
    s.maxPacketSize,
    subs,
    [...(s.inbound ?? [])].sort((a, b) => a - b),
    s.inflight.map((f) => [f.pid, f.state, encodeDelivery(f)]),
    s.queue.toArray().map(encodeDelivery),
    s.nextPid,
    s.expiresAt,
    s.fenceLeft,
    [...(s.fenceOwed ?? [])].sort((a, b) => a - b),
  ];
}

export const encodeWill = (w: PendingWill): unknown[] => [w.clientId, encodeMsg(w.msg), w.at, w.failover];
export const encodeRetained = ([topic, r]: [string, RetainedMessage]): unknown[] => [topic, encodeMsg(r.msg), r.expiresAt];

/** The canonical bytes of the state. */
export function encodeImage(img: StateImage): Uint8Array {
  return packr.pack([
    SNAPSHOT_VERSION,
    img.appliedIndex,
    img.appliedTime,
    img.servePeriod,
    encodeSettings(img.settings),
    img.failed,
    img.generation,
    img.sessions.map(encodeSession),
    img.wills.map(encodeWill),
    img.retained.map(encodeRetained),
    img.cursors,
    img.bridges.map(encodeOutbox),
    img.shards.map(encodeShardOutbox),
    img.highWater,
  ]);
}

// ---- decoding: every field checked, a corrupt snapshot throws SnapshotError ----

function fail(what: string): never {
  throw new SnapshotError(`corrupt snapshot: ${what}`);
}
function arr(v: unknown, what: string, len?: number): unknown[] {
  if (!Array.isArray(v) || (len !== undefined && v.length !== len)) fail(what);
  return v;
}
function int(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v)) fail(what);
  return v;
}
/** A packet id, or the next one to try: 1..65535. Another value left the broker unable to assign
 * one ("no free packet id"), or made it send an id no packet can carry. */
function pid(v: unknown, what: string): number {
  const n = int(v, what);
  if (n < 1 || n > PID_MAX) fail(what);
  return n;
}
function intOrNull(v: unknown, what: string): number | null {
  return v === null ? null : int(v, what);
}
function str(v: unknown, what: string): string {
  if (typeof v !== 'string') fail(what);
  return v;
}
function bool(v: unknown, what: string): boolean {
  if (typeof v !== 'boolean') fail(what);
  return v;
}
function qos(v: unknown, what: string): QoS {
  if (v !== 0 && v !== 1 && v !== 2) fail(what);
  return v;
}
/** A plain Uint8Array view, so restored messages look like applied ones. */
function bytes(v: unknown, what: string): Uint8Array {
  if (!(v instanceof Uint8Array)) fail(what);
  return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
}

function decodeProps(v: unknown): MessageProps | undefined {
  if (v === null) return undefined;
  const [pf, exp, ct, rt, cd, up] = arr(v, 'props', 6);
  const p: MessageProps = {};
  if (pf !== null) p.payloadFormat = int(pf, 'payloadFormat') === 1 ? 1 : 0;
  if (exp !== null) p.expiryS = int(exp, 'expiryS');
  if (ct !== null) p.contentType = str(ct, 'contentType');
  if (rt !== null) p.responseTopic = str(rt, 'responseTopic');
  if (cd !== null) p.correlationData = bytes(cd, 'correlationData');
  if (up !== null)
    p.userProps = arr(up, 'userProps').map((kv) => {
      const [k, val] = arr(kv, 'userProp', 2);
      return [str(k, 'userProp key'), str(val, 'userProp value')];
    });
  return p;
}

/** The message of encodeMsg, every field checked; throws SnapshotError. */
export function decodeMsg(v: unknown): Message {
  const [topic, payload, q, retain, props] = arr(v, 'message', 5);
  const m: Message = { topic: str(topic, 'topic'), payload: bytes(payload, 'payload'), qos: qos(q, 'qos'), retain: bool(retain, 'retain') };
  const p = decodeProps(props);
  if (p !== undefined) m.props = p;
  if (!isMessage(m)) fail('message');
  return m;
}

function decodeDelivery(v: unknown): Delivery {
  const [msg, q, retain, subIds, expiresAt, share] = arr(v, 'delivery', 6);
  return {
    msg: decodeMsg(msg),
    qos: qos(q, 'delivery qos'),
    retain: bool(retain, 'delivery retain'),
    subIds: subIds === null ? null : arr(subIds, 'subIds').map((x) => int(x, 'subId')),
    expiresAt: intOrNull(expiresAt, 'expiresAt'),
    share: share === null ? null : str(share, 'delivery share'),
  };
}

function decodeRules(v: unknown): unknown {
  return arr(v, 'bridgeRules').map((r) => {
    const [bridge, pattern, direction, q, localPrefix, remotePrefix] = arr(r, 'bridge rule', 6);
    return { bridge, pattern, direction, qos: q, localPrefix, remotePrefix };
  });
}

/** The outboxes, checked against the settings and the applied index: one per bridge the rules
 * name, each in log order, nothing beyond the applied index, nothing expired at the applied time.
 * Format 6 kept no expiry time: such an item with a Message Expiry Interval expires that long
 * after the snapshot's time (an interval of 0 at the first entry after it), never sooner than it
 * would have. */
function decodeOutboxes(v: unknown, settings: Settings, appliedIndex: number, appliedTime: number, version: number): OutboxImage[] {
  const withExpiry = version !== SNAPSHOT_VERSION_NO_OUTBOX_EXPIRY;
  const withPids = version === SNAPSHOT_VERSION;
  const names = bridgeNames(settings.bridgeRules).sort();
  const got = arr(v, 'bridges').map((o): OutboxImage => {
    const [name, position, items, next, held] = arr(o, 'outbox', withPids ? 5 : 3);
    const n = str(name, 'outbox name');
    if (!BRIDGE_NAME.test(n)) fail('outbox name');
    const p = int(position, 'outbox position');
    if (p < 0 || p > appliedIndex + 1) fail(`outbox ${n} position`);
    // Before format 9 no QoS 2 flow to a remote began: the ids are assigned here, in log order.
    let nextPid = withPids ? int(next, 'outbox nextPid') : 1;
    if (nextPid < 1 || nextPid > OUTBOX_PID_MAX) fail(`outbox ${n} nextPid`);
    let last = 0;
    const list = arr(items, 'outbox items').map((x): OutboxMessage => {
      const [index, topic, q, msg, exp, pidField, recField] = arr(x, 'outbox item', withPids ? 7 : withExpiry ? 5 : 4);
      const i = int(index, 'outbox item index');
      if (i < last || i < p || i > appliedIndex) fail(`outbox ${n} item index`);
      last = i;
      const t = str(topic, 'outbox item topic');
      if (t.length === 0) fail('outbox item topic');
      const m = decodeMsg(msg);
      const expiryS = m.props?.expiryS;
      let expiresAt: number | null;
      if (withExpiry) {
        expiresAt = intOrNull(exp, 'outbox item expiresAt');
        // Apply removes an item at the first entry its expiry reaches.
        if (expiresAt !== null && expiresAt <= appliedTime) fail(`outbox ${n} item expired`);
      } else expiresAt = expiryS === undefined ? null : appliedTime + Math.max(expiryS * 1000, 1);
      const itemQos = qos(q, 'outbox item qos');
      let pid = 0;
      let rec = false;
      if (withPids) {
        pid = int(pidField, 'outbox item pid');
        rec = bool(recField, 'outbox item rec');
        // A QoS 2 item has an id and may be recorded; another has neither.
        if (itemQos === 2 ? pid < 1 || pid > OUTBOX_PID_MAX : pid !== 0 || rec) fail(`outbox ${n} item pid`);
      } else if (itemQos === 2) {
        pid = nextPid;
        nextPid = pid === OUTBOX_PID_MAX ? 1 : pid + 1;
      }
      return { index: i, topic: t, qos: itemQos, msg: m, expiresAt, pid, rec };
    });
    // The remote's QoS 2 ids held: distinct packet ids, ascending.
    const inIds = withPids ? arr(held, 'outbox inIds').map((x) => int(x, 'outbox inId')) : [];
    if (inIds.some((x, k) => x < 1 || x > 0xffff || (k > 0 && x <= (inIds[k - 1] as number)))) fail(`outbox ${n} inIds`);
    return [n, p, list, nextPid, inIds];
  });
  if (got.length !== names.length || got.some(([n], i) => n !== names[i])) fail('outboxes do not match the bridge rules');
  return got;
}

function decodeAcl(acl: unknown): unknown {
  return acl === null
    ? null
    : arr(acl, 'acl').map((r): AclRule => {
        const [kind, user, access, filter] = arr(r, 'acl rule', 4);
        return { kind, user, access, filter } as AclRule;
      });
}

/** Format 4 wrote the settings positionally, in the table's order of that time. */
const SETTINGS_V4: readonly SettingName[] = [
  'maxQueuedMessages',
  'maxQueuedBytes',
  'maxInflight',
  'maxQos',
  'retainAvailable',
  'maxPacketSize',
  'willGraceS',
  'maxSubscriptions',
  'acl',
];

function decodeSettingsV4(v: unknown): Settings {
  const f = arr(v, 'settings', SETTINGS_V4.length);
  const s: Record<string, unknown> = {};
  SETTINGS_V4.forEach((n, i) => {
    s[n] = n === 'acl' ? decodeAcl(f[i]) : f[i];
  });
  // Settings added after format 4 take their initial values.
  const complete = completeSettings(s);
  if (complete === null) fail('settings');
  return complete;
}

/** [name, value] pairs; each name known and given once; an absent setting takes its initial value. */
function decodeSettings(v: unknown): Settings {
  const given: Record<string, unknown> = {};
  for (const p of arr(v, 'settings')) {
    const [name, value] = arr(p, 'setting', 2);
    if (typeof name !== 'string' || !Object.hasOwn(SETTINGS, name))
      fail(`setting ${typeof name === 'string' ? JSON.stringify(name.slice(0, 64)) : `name of type ${typeof name}`}`);
    if (Object.hasOwn(given, name)) fail(`setting ${name} given twice`);
    given[name] = name === 'acl' ? decodeAcl(value) : name === 'bridgeRules' ? decodeRules(value) : value;
  }
  const s = completeSettings(given);
  if (s === null) fail('settings');
  return s;
}

function decodeSubscription(
  clientId: string,
  v: unknown,
  parseShare: (f: string) => { group: string; filter: string } | null,
): Subscription {
  const [filter, q, nl, rap, rh, subId] = arr(v, 'subscription', 6);
  const f = str(filter, 'filter');
  const shared = parseShare(f);
  const h = qos(rh, 'rh');
  return {
    clientId,
    filter: f,
    topicFilter: shared === null ? f : shared.filter,
    share: shared === null ? null : f,
    qos: qos(q, 'sub qos'),
    nl: bool(nl, 'nl'),
    rap: bool(rap, 'rap'),
    rh: h,
    subId: intOrNull(subId, 'subId'),
  };
}

function decodeSession(v: unknown, parseShare: (f: string) => { group: string; filter: string } | null): Session {
  const f = arr(v, 'session', 16);
  const s = newSession(str(f[0], 'clientId'));
  s.conn = f[1] === null ? null : str(f[1], 'conn');
  const protocol = int(f[2], 'protocol');
  if (protocol !== 3 && protocol !== 4 && protocol !== 5) fail('protocol');
  s.protocol = protocol as ProtocolLevel;
  s.username = f[3] === null ? null : str(f[3], 'username');
  s.expiryS = int(f[4], 'expiryS');
  if (f[5] !== null) {
    const [msg, delayS] = arr(f[5], 'will', 2);
    s.will = { msg: decodeMsg(msg), delayS: int(delayS, 'delayS') } satisfies Will;
  }
  s.receiveMax = int(f[6], 'receiveMax');
  s.maxPacketSize = int(f[7], 'maxPacketSize');
  for (const sub of arr(f[8], 'subs')) {
    const x = decodeSubscription(s.clientId, sub, parseShare);
    s.subs ??= new Map();
    s.subs.set(x.filter, x);
  }
  for (const id of arr(f[9], 'inbound')) {
    s.inbound ??= new Set();
    s.inbound.add(pid(id, 'inbound pid'));
  }
  s.inflight = arr(f[10], 'inflight').map((x): Inflight => {
    const [id, state, d] = arr(x, 'inflight entry', 3);
    if (state !== 'publish' && state !== 'pubrel' && state !== 'fence') fail('inflight state');
    const item: Inflight = { ...decodeDelivery(d), pid: pid(id, 'pid'), state };
    s.pidsInUse ??= new Set();
    s.pidsInUse.add(item.pid);
    return item;
  });
  s.queue = new Fifo();
  for (const x of arr(f[11], 'queue')) {
    const d = decodeDelivery(x);
    const size = queueSize(d);
    s.queue.push({ ...d, size });
    s.queueBytes += size;
  }
  s.nextPid = pid(f[12], 'nextPid');
  s.expiresAt = intOrNull(f[13], 'session expiresAt');
  s.fenceLeft = int(f[14], 'fenceLeft');
  if (s.fenceLeft < 0 || s.fenceLeft > PID_MAX) fail('fenceLeft');
  for (const pid of arr(f[15], 'fenceOwed')) {
    const x = int(pid, 'fenced pid');
    if (x < 1 || x > PID_MAX) fail('fenced pid');
    s.fenceOwed ??= new Set();
    s.fenceOwed.add(x);
  }
  return s;
}

/** Decodes and checks a whole image. `parseShare` is the shared-filter parser (injected so this
 * module stays independent of the protocol layer's choices). */
export function decodeImage(data: Uint8Array, parseShare: (f: string) => { group: string; filter: string } | null): StateImage {
  let value: unknown;
  try {
    value = packr.unpack(data);
  } catch (err) {
    fail(`not msgpack (${(err as Error).message})`);
  }
  const root = arr(value, 'root');
  // Not String(): a decoded map with a toString key that is not a function makes it throw.
  const version = root[0];
  if (
    version !== SNAPSHOT_VERSION &&
    version !== SNAPSHOT_VERSION_NO_OUTBOX_PIDS &&
    version !== SNAPSHOT_VERSION_NO_SHARDS &&
    version !== SNAPSHOT_VERSION_NO_OUTBOX_EXPIRY &&
    version !== SNAPSHOT_VERSION_NO_BRIDGES &&
    version !== SNAPSHOT_VERSION_KEYLESS
  )
    fail(`version ${typeof version === 'number' ? version : `of type ${typeof version}`}`);
  const hasShards = version === SNAPSHOT_VERSION || version === SNAPSHOT_VERSION_NO_OUTBOX_PIDS;
  const hasBridges = hasShards || version === SNAPSHOT_VERSION_NO_SHARDS || version === SNAPSHOT_VERSION_NO_OUTBOX_EXPIRY;
  const f = arr(value, 'root', hasShards ? IMAGE_FIELDS : hasBridges ? IMAGE_FIELDS_NO_SHARDS : IMAGE_FIELDS_NO_BRIDGES);
  const settings = f[0] === SNAPSHOT_VERSION_KEYLESS ? decodeSettingsV4(f[4]) : decodeSettings(f[4]);
  const appliedIndex = int(f[1], 'appliedIndex');
  const appliedTime = int(f[2], 'appliedTime');
  return {
    appliedIndex,
    appliedTime,
    servePeriod: int(f[3], 'servePeriod'),
    settings,
    failed: f[5] === null ? null : str(f[5], 'failed'),
    generation: int(f[6], 'generation'),
    sessions: arr(f[7], 'sessions').map((s) => decodeSession(s, parseShare)),
    wills: arr(f[8], 'wills').map((w): PendingWill => {
      const [clientId, msg, at, failover] = arr(w, 'pending will', 4);
      return {
        clientId: str(clientId, 'will clientId'),
        msg: decodeMsg(msg),
        at: int(at, 'will at'),
        failover: bool(failover, 'failover'),
      };
    }),
    retained: arr(f[9], 'retained').map((r): [string, RetainedMessage] => {
      const [topic, msg, expiresAt] = arr(r, 'retained entry', 3);
      return [str(topic, 'retained topic'), { msg: decodeMsg(msg), expiresAt: intOrNull(expiresAt, 'retained expiresAt') }];
    }),
    cursors: arr(f[10], 'cursors').map((c): [string, string] => {
      const [id, clientId] = arr(c, 'cursor', 2);
      return [str(id, 'cursor id'), str(clientId, 'cursor client')];
    }),
    // Before format 6 there were no bridge rules, so no outboxes.
    bridges: hasBridges ? decodeOutboxes(f[11], settings, appliedIndex, appliedTime, version as number) : [],
    // Before format 8 no shard forwarded.
    shards: hasShards ? decodeShardOutboxes(f[12], appliedIndex) : [],
    highWater: hasShards ? decodeHighWater(f[13]) : [],
  };
}

/** The highest sequences applied per origin log: sorted by origin then log, each once. */
function decodeHighWater(v: unknown): [string, string, number][] {
  let last: [string, string] | null = null;
  return arr(v, 'highWater').map((e): [string, string, number] => {
    const [origin, log, seq] = arr(e, 'highWater entry', 3);
    const o = str(origin, 'highWater origin');
    const l = str(log, 'highWater log');
    if (!SHARD_NAME.test(o) || !SHARD_LOG.test(l)) fail('highWater entry');
    if (last !== null && (o < last[0] || (o === last[0] && l <= last[1]))) fail('highWater order');
    last = [o, l];
    const n = int(seq, 'highWater seq');
    if (n < 1) fail('highWater seq');
    return [o, l, n];
  });
}

/** The shard outboxes: sorted by dest, each once; the items exactly the sequences position to
 * next - 1, in order, none beyond the applied index. */
function decodeShardOutboxes(v: unknown, appliedIndex: number): [string, string, number, number, ShardOutboxItem[]][] {
  let lastDest = '';
  return arr(v, 'shards').map((o): [string, string, number, number, ShardOutboxItem[]] => {
    const [dest, log, next, position, items] = arr(o, 'shard outbox', 5);
    const d = str(dest, 'shard outbox dest');
    if (!SHARD_NAME.test(d) || d <= lastDest) fail('shard outbox dest');
    lastDest = d;
    const l = str(log, 'shard outbox log');
    if (l.length === 0 || l.length > 64) fail(`shard outbox ${d} log`);
    const n = int(next, 'shard outbox next');
    const p = int(position, 'shard outbox position');
    if (p < 1 || p > n) fail(`shard outbox ${d} position`);
    const list = arr(items, 'shard outbox items');
    if (list.length !== n - p) fail(`shard outbox ${d} holds ${list.length} items for sequences ${p} to ${n - 1}`);
    let lastIndex = 0;
    const decoded = list.map((x, k): ShardOutboxItem => {
      const [seq, index, msg] = arr(x, 'shard outbox item', 3);
      if (int(seq, 'shard outbox item seq') !== p + k) fail(`shard outbox ${d} item seq`);
      const i = int(index, 'shard outbox item index');
      if (i < lastIndex || i < 1 || i > appliedIndex) fail(`shard outbox ${d} item index`);
      lastIndex = i;
      const m = decodeMsg(msg);
      if (m.qos !== 1) fail(`shard outbox ${d} item qos`);
      return { seq: p + k, index: i, msg: m };
    });
    return [d, l, n, p, decoded];
  });
}
