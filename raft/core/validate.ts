import { RaftError } from '../errors.js';
import { membershipKinds } from './membership.js';
import type { LogEntry, Message } from './messages.js';
import { messageTypes } from './messages.js';
import { snapshotChunkBytesMaxDefault, snapshotChunksMax } from './snapshot.js';

/** What a node needs to judge a message from outside. */
export interface ValidationContext {
  readonly self: number;
  /** Every configured node id (--cluster-peers), this node's included: voters and learners. */
  readonly nodes: readonly number[];
  readonly entriesPerAppendMax: number;
  /** Default snapshotChunkBytesMaxDefault. */
  readonly snapshotChunkBytesMax?: number;
}

/** Incarnations, epoch ids and cluster ids are short random or configured strings. */
const idLengthMax = 128;
const isId = (v: unknown): v is string => typeof v === 'string' && v.length <= idLengthMax;

/** A field as a refusal shows it: a string or number as it is, anything else by its type (String()
 * throws a TypeError on a decoded map with a toString key that is not a function). */
const shown = (v: unknown): string => (typeof v === 'string' || typeof v === 'number' ? String(v) : `of type ${typeof v}`);

const isIndex = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isBool = (v: unknown): v is boolean => typeof v === 'boolean';
/** Clock readings (monotonic or wall ms) may be fractional. */
const isClock = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;

/** Every field of a message from the network is untrusted: a bad one is refused with a specific
 * error and changes nothing, so one broken peer cannot trip an assertion here. */
export function validateMessage(m: unknown, ctx: ValidationContext): RaftError | null {
  if (typeof m !== 'object' || m === null) return bad('not an object');
  const r = m as Record<string, unknown>;
  if (!messageTypes.includes(r.type as Message['type'])) return bad(`unknown type ${shown(r.type)}`);
  if (!isIndex(r.from) || !isIndex(r.to) || !isIndex(r.term)) return bad('from, to and term must be integers');
  if (!isId(r.cluster) || !isIndex(r.epoch) || !isId(r.epochId) || !isId(r.fromInc) || !isId(r.toInc)) {
    return bad('cluster, epoch and incarnations must be short strings and an integer');
  }
  if (r.to !== ctx.self) return new RaftError('RAFT_UNKNOWN_PEER', `addressed to ${r.to}, this is ${ctx.self}`);
  if (r.from === ctx.self || !ctx.nodes.includes(r.from)) {
    return new RaftError('RAFT_UNKNOWN_PEER', `sender ${r.from} is not a peer`);
  }
  return validateBody(r as unknown as Message, ctx);
}

function validateBody(m: Message, ctx: ValidationContext): RaftError | null {
  switch (m.type) {
    case 'pre-vote-request':
      return isIndex(m.lastIndex) && isIndex(m.lastTerm) && m.lastTerm <= m.term ? null : bad('lastIndex/lastTerm');
    case 'vote-request':
      if (!isBool(m.transfer) || !isClock(m.sentAt)) return bad('vote-request transfer/sentAt');
      return isIndex(m.lastIndex) && isIndex(m.lastTerm) && m.lastTerm <= m.term ? null : bad('lastIndex/lastTerm');
    case 'pre-vote-response':
      return isBool(m.granted) ? null : bad('granted must be a boolean');
    case 'vote-response':
      return isBool(m.granted) && isClock(m.sentAt) && isClock(m.wall) ? null : bad('vote-response fields');
    case 'append':
      return validateAppend(m, ctx);
    case 'append-response':
      return isBool(m.success) && isIndex(m.index) && isIndex(m.hint) && isClock(m.sentAt) ? null : bad('append-response fields');
    case 'heartbeat':
      return isIndex(m.commit) && isClock(m.sentAt) ? null : bad('heartbeat fields');
    case 'heartbeat-response':
      return isClock(m.sentAt) && isClock(m.wall) ? null : bad('heartbeat-response fields');
    case 'timeout-now':
      return null;
    case 'snapshot':
      return validateSnapshot(m, ctx);
    case 'snapshot-response':
      return isIndex(m.index) && isIndex(m.received) && isIndex(m.match) && isClock(m.sentAt) ? null : bad('snapshot-response fields');
    case 'announce':
      return validateAnnounce(m, ctx);
    default: {
      const _: never = m;
      return bad(`unknown message ${String(_)}`);
    }
  }
}

function validateAnnounce(m: Message & { type: 'announce' }, ctx: ValidationContext): RaftError | null {
  if (!membershipKinds.includes(m.membership) || !isId(m.peers) || !isBool(m.voter) || !isBool(m.stuck)) return bad('announce fields');
  const leaderOk = isIndex(m.leader) && (m.leader === 0 || ctx.nodes.includes(m.leader));
  if (!leaderOk || !isIndex(m.committedVoters) || m.committedVoters > ctx.nodes.length) return bad('announce leader/committedVoters');
  return isIndex(m.lastIndex) && isIndex(m.lastTerm) && m.lastTerm <= m.term ? null : bad('announce lastIndex/lastTerm');
}

function validateAppend(m: Message & { type: 'append' }, ctx: ValidationContext): RaftError | null {
  if (!isIndex(m.prevIndex) || !isIndex(m.prevTerm) || !isIndex(m.commit)) return bad('append indexes');
  if (m.prevTerm > m.term || (m.prevIndex === 0 && m.prevTerm !== 0)) return bad('append prevTerm');
  if (!isClock(m.sentAt)) return bad('append sentAt');
  if (!Array.isArray(m.entries) || m.entries.length > ctx.entriesPerAppendMax) return bad('append entries');
  let term = m.prevTerm;
  let time = 0;
  for (let k = 0; k < m.entries.length; k++) {
    const e = m.entries[k] as LogEntry | undefined;
    if (typeof e !== 'object' || e === null) return bad('entry not an object');
    if (e.index !== m.prevIndex + 1 + k) return bad(`entry index ${shown(e.index)} out of sequence`);
    if (!isIndex(e.term) || e.term < term || e.term > m.term) return bad(`entry ${e.index} term`);
    if (e.data !== null && !(e.data instanceof Uint8Array)) return bad(`entry ${e.index} data`);
    if (!isIndex(e.time) || e.time < time) return bad(`entry ${e.index} time`);
    if (e.config !== undefined && (e.data !== null || !validConfig(e.config, ctx))) return bad(`entry ${e.index} configuration`);
    term = e.term;
    time = e.time;
  }
  return null;
}

function validateSnapshot(m: Message & { type: 'snapshot' }, ctx: ValidationContext): RaftError | null {
  if (!isIndex(m.index) || m.index < 1 || !isIndex(m.lastTerm) || m.lastTerm < 1 || m.lastTerm > m.term)
    return bad('snapshot index/lastTerm');
  if (!isIndex(m.time) || !isClock(m.sentAt)) return bad('snapshot time/sentAt');
  if (!isIndex(m.chunks) || m.chunks < 1 || m.chunks > snapshotChunksMax || !isIndex(m.seq) || m.seq >= m.chunks)
    return bad('snapshot seq/chunks');
  const chunkMax = ctx.snapshotChunkBytesMax ?? snapshotChunkBytesMaxDefault;
  if (!(m.data instanceof Uint8Array) || m.data.length > chunkMax) return bad(`snapshot chunk data (at most ${chunkMax} bytes)`);
  if (m.config !== null && !validConfig(m.config, ctx)) return bad('snapshot configuration');
  return null;
}

/** One to all configured node ids, each at most once, with an incarnation. */
function validConfig(config: unknown, ctx: ValidationContext): boolean {
  if (!Array.isArray(config) || config.length === 0 || config.length > ctx.nodes.length) return false;
  const seen = new Set<number>();
  for (const m of config as unknown[]) {
    if (typeof m !== 'object' || m === null) return false;
    const { node, inc } = m as Record<string, unknown>;
    if (!isIndex(node) || !ctx.nodes.includes(node) || seen.has(node) || !isId(inc)) return false;
    seen.add(node);
  }
  return true;
}

function bad(detail: string): RaftError {
  return new RaftError('RAFT_BAD_MESSAGE', detail);
}
