// Routes between shards (docs/scale-out.md "Routes"), the pure part: the placement rules, which send
// a message whose topic names a client id to the shard that owns that id with no route entry, and
// the route table, built from the route bucket's entries, which says which other shards subscribed
// to a topic. The bucket itself (JetStream KV) is src/scale/route-bucket.ts; this module also holds
// the encoding of its keys and values, so that everything read from NATS is checked here.
import { Buffer } from 'node:buffer';
import { filterCovers, topicMatches } from '../broker/acl.js';
import { filtersOverlap } from '../broker/bridge-rules.js';
import { TopicTrie } from '../broker/topic-trie.js';
import type { QoS } from '../protocol/packets.js';
import { parseSharedFilter, validateTopicFilter } from '../protocol/topic.js';
import { type Placement, SHARD_NAME } from './placement.js';

// ---- placement rules ----

/** The level of a rule's pattern that holds a client id. */
export const CLIENT_LEVEL = '{client}';
/** Rules a deployment may give: each topic is checked against every rule. */
export const ROUTE_RULES_MAX = 64;

export interface RouteRule {
  /** As configured, for messages. */
  readonly pattern: string;
  /** The pattern with `+` at the client level: the topics the rule decides. */
  readonly filter: string;
  readonly levels: readonly string[];
  /** Index of the client level. */
  readonly clientLevel: number;
}

/** Why `pattern` cannot be a rule, or null. A rule is a topic filter with exactly one level that
 * is `{client}`; other levels are literal, `+` or a last `#`. `{` and `}` appear nowhere else, so
 * a misspelt `{clientid}` is refused rather than taken as a literal level. */
export function routeRuleProblem(pattern: string): string | null {
  if (pattern.startsWith('$share/')) return 'a shared subscription is not a topic pattern';
  const levels = pattern.split('/');
  const client = levels.filter((l) => l === CLIENT_LEVEL).length;
  if (client !== 1) return `needs exactly one level ${CLIENT_LEVEL} (found ${client})`;
  if (levels.some((l) => l !== CLIENT_LEVEL && (l.includes('{') || l.includes('}')))) {
    return `{ and } only in the level ${CLIENT_LEVEL}`;
  }
  const problem = validateTopicFilter(levels.map((l) => (l === CLIENT_LEVEL ? '+' : l)).join('/'));
  return problem === null ? null : `not a topic filter: ${problem}`;
}

/** The rule of `pattern`; throws RangeError naming the pattern when routeRuleProblem refuses it. */
export function parseRouteRule(pattern: string): RouteRule {
  const problem = routeRuleProblem(pattern);
  if (problem !== null) throw new RangeError(`route rule ${JSON.stringify(pattern)}: ${problem}`);
  const levels = pattern.split('/');
  const clientLevel = levels.indexOf(CLIENT_LEVEL);
  return { pattern, levels, clientLevel, filter: levels.map((l) => (l === CLIENT_LEVEL ? '+' : l)).join('/') };
}

/**
 * The placement rules of a deployment. A topic that a rule matches is sent to the shard owning
 * the client id in its client level, whatever subscribes where; a subscription that only such
 * topics can match, with that client id owned by its own shard, therefore needs no route entry.
 * No two rules may match a common topic: otherwise one topic would name two client ids.
 */
export class RouteRules {
  readonly rules: readonly RouteRule[];

  /** Throws RangeError naming the rule (or both rules) at fault. */
  constructor(
    patterns: readonly string[],
    private readonly placement: Placement,
  ) {
    if (patterns.length > ROUTE_RULES_MAX) throw new RangeError(`at most ${ROUTE_RULES_MAX} route rules (got ${patterns.length})`);
    const rules = patterns.map(parseRouteRule);
    for (let i = 0; i < rules.length; i++) {
      for (let j = 0; j < i; j++) {
        const a = rules[j] as RouteRule;
        const b = rules[i] as RouteRule;
        if (filtersOverlap(a.filter, b.filter)) {
          throw new RangeError(`route rules ${JSON.stringify(a.pattern)} and ${JSON.stringify(b.pattern)} match common topics`);
        }
      }
    }
    this.rules = rules;
  }

  /** The shard a rule sends `topic` to, or null when no rule decides it (then only the route
   * table does). An empty client level decides nothing: no client has the empty id. */
  ownerOf(topic: string): string | null {
    for (const r of this.rules) {
      if (!topicMatches(r.filter, topic)) continue;
      const id = topic.split('/')[r.clientLevel] as string;
      return id === '' ? null : this.placement.owner(id);
    }
    return null;
  }

  /** Whether a subscription to `filter` (`$share/G/F` counts as F) on `shard` receives every
   * message it matches through the rules alone, so it needs no route entry: some rule covers it
   * with its client level a literal id that `shard` owns. */
  coveredOn(filter: string, shard: string): boolean {
    const bare = parseSharedFilter(filter)?.filter ?? filter;
    const levels = bare.split('/');
    for (const r of this.rules) {
      const id = levels[r.clientLevel];
      if (id === undefined || id === '' || id === '+' || id === '#') continue;
      const literal = r.levels.map((l, i) => (i === r.clientLevel ? id : l)).join('/');
      // Covered by the rule itself too: a `$` first level is one the rule, like `+`, does not
      // match (so `$d/cmd` is no client's under `{client}/cmd`).
      if (filterCovers(literal, bare) && filterCovers(r.filter, bare)) return this.placement.owner(id) === shard;
    }
    return false;
  }
}

// ---- the route table ----

/** Who wrote a route, in the order of its shard's log: a deposed leader's stamp is older than its
 * successor's. `epoch` orders the logs of one shard (the Raft epoch generation; a single node must
 * give one that grows across its restarts, since its log index starts again at 1). */
export interface RouteStamp {
  readonly epoch: number;
  readonly term: number;
  readonly index: number;
}

/** Negative when a is older than b, 0 when equal, positive when newer. */
export function compareStamps(a: RouteStamp, b: RouteStamp): number {
  return a.epoch - b.epoch || a.term - b.term || a.index - b.index;
}

/** A route: `shard` has subscriptions to `filter` (with `$share/GROUP/` when shared). */
export interface Route {
  readonly shard: string;
  /** As subscribed: `$share/GROUP/F` for a shared subscription. */
  readonly filter: string;
  /** The highest QoS granted to the shard's subscriptions to the filter. */
  readonly qos: QoS;
  readonly stamp: RouteStamp;
}

/** A route as the table hands it out. */
export interface RouteEntry extends Route {
  /** The topic filter, without `$share/GROUP/`. */
  readonly topicFilter: string;
  /** The shared group, or null for a plain subscription. */
  readonly group: string | null;
}

/**
 * The routes of the other shards, for matching published topics. One entry per (shard, filter as
 * subscribed); this shard's own routes are not kept, since its own subscriptions are matched by
 * the broker itself.
 */
export class RouteTable {
  private readonly trie = new TopicTrie<RouteEntry>();

  constructor(readonly self: string) {}

  get size(): number {
    return this.trie.size;
  }

  /** Sets (replacing) the route of (route.shard, route.filter); ignored for this shard's own. */
  set(route: Route): void {
    if (route.shard === this.self) return;
    const { topicFilter, group } = splitFilter(route.filter);
    this.trie.add(topicFilter, entryKey(route.shard, group), { ...route, topicFilter, group });
  }

  /** Removes the route of (shard, filter); whether there was one. */
  delete(shard: string, filter: string): boolean {
    const { topicFilter, group } = splitFilter(filter);
    return this.trie.remove(topicFilter, entryKey(shard, group)) !== undefined;
  }

  get(shard: string, filter: string): RouteEntry | undefined {
    const { topicFilter, group } = splitFilter(filter);
    return this.trie.get(topicFilter, entryKey(shard, group));
  }

  /** The other shards' routes whose filter matches `topic`, in an order that follows from the
   * set of routes alone (the trie's). */
  match(topic: string): RouteEntry[] {
    const out: RouteEntry[] = [];
    this.trie.match(topic, (_key, entry) => {
      out.push(entry);
    });
    return out;
  }
}

function splitFilter(filter: string): { topicFilter: string; group: string | null } {
  const shared = parseSharedFilter(filter);
  return shared === null ? { topicFilter: filter, group: null } : { topicFilter: shared.filter, group: shared.group };
}

/** Within one topic filter: the shard, and `/GROUP` for a shared group (neither a shard name nor a
 * group holds `/`, so the key is one-to-one). */
const entryKey = (shard: string, group: string | null): string => (group === null ? shard : `${shard}/${group}`);

// ---- the route bucket's keys and values ----

/** Filter bytes a route key holds at most: the key goes into the subject of a NATS publish, whose
 * whole control line nats-server limits to 4096 bytes by default; base64 makes 2048 bytes 2731
 * characters, which leaves room for the bucket's prefix and a reply subject. */
export const ROUTE_FILTER_BYTES_MAX = 2048;
/** Bytes of a route value at most; a longer one is refused before it is parsed. */
export const ROUTE_VALUE_BYTES_MAX = 256;
const BASE64URL = /^[A-Za-z0-9_-]+$/;

/** The bucket key of (shard, filter): `SHARD.BASE64URL(filter)`. NATS keys allow only letters,
 * digits and `-/_=.` (the dot separating tokens), and a filter holds `/`, `+`, `#`, `$` and any
 * Unicode, so the filter is base64url-encoded (no padding): reversible, and within the alphabet.
 * The shard is plain, so one shard's keys are the subjects `SHARD.>`. Throws RangeError for a
 * filter longer than ROUTE_FILTER_BYTES_MAX bytes. */
export function routeKey(shard: string, filter: string): string {
  const bytes = Buffer.from(filter, 'utf8');
  if (bytes.length > ROUTE_FILTER_BYTES_MAX) {
    throw new RangeError(`filter of ${bytes.length} bytes: a route holds at most ${ROUTE_FILTER_BYTES_MAX}`);
  }
  return `${shard}.${bytes.toString('base64url')}`;
}

export type RouteKeyResult = { ok: true; shard: string; filter: string } | { ok: false; reason: string };

/** The (shard, filter) of a bucket key, checked: the shard in the placement's list, the filter a
 * valid topic filter (shared or not) that encodes back to the same key. */
export function parseRouteKey(key: string, placement: Placement): RouteKeyResult {
  const dot = key.indexOf('.');
  if (dot < 0) return { ok: false, reason: 'not SHARD.FILTER' };
  const shard = key.slice(0, dot);
  const encoded = key.slice(dot + 1);
  if (!SHARD_NAME.test(shard)) return { ok: false, reason: 'not a shard name' };
  if (!placement.shards.includes(shard)) return { ok: false, reason: `unknown shard ${shard}` };
  if (!BASE64URL.test(encoded)) return { ok: false, reason: 'filter is not base64url' };
  const bytes = Buffer.from(encoded, 'base64url');
  if (bytes.length > ROUTE_FILTER_BYTES_MAX) return { ok: false, reason: 'filter too long' };
  const filter = new TextDecoder('utf-8', { fatal: false }).decode(bytes);
  // Canonical only: a non-UTF-8 filter, or a second spelling of one, would not encode back.
  if (Buffer.from(filter, 'utf8').toString('base64url') !== encoded)
    return { ok: false, reason: 'filter is not canonical UTF-8 base64url' };
  const problem = validateTopicFilter(filter);
  if (problem !== null) return { ok: false, reason: `bad filter: ${problem}` };
  return { ok: true, shard, filter };
}

/** A route's value: present (with its QoS) or removed (a tombstone keeps the stamp, so an older
 * write cannot bring a removed route back). */
export type RouteValue =
  | { readonly removed: false; readonly qos: QoS; readonly stamp: RouteStamp }
  | { readonly removed: true; readonly stamp: RouteStamp };

/** JSON: `{"v":1,"qos":Q,"stamp":[E,T,I]}` or `{"v":1,"removed":true,"stamp":[E,T,I]}`. */
export function encodeRouteValue(v: RouteValue): Uint8Array {
  const stamp = [v.stamp.epoch, v.stamp.term, v.stamp.index];
  return Buffer.from(JSON.stringify(v.removed ? { v: 1, removed: true, stamp } : { v: 1, qos: v.qos, stamp }), 'utf8');
}

export type RouteValueResult = { ok: true; value: RouteValue } | { ok: false; reason: string };

/** The value of a route, checked field by field; anything else is refused with a reason. */
export function decodeRouteValue(bytes: Uint8Array): RouteValueResult {
  if (bytes.length > ROUTE_VALUE_BYTES_MAX) return { ok: false, reason: `value of ${bytes.length} bytes` };
  let o: unknown;
  try {
    o = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch {
    return { ok: false, reason: 'value is not JSON' };
  }
  if (typeof o !== 'object' || o === null || Array.isArray(o)) return { ok: false, reason: 'value is not an object' };
  const r = o as Record<string, unknown>;
  if (r.v !== 1) return { ok: false, reason: 'unknown value version' };
  const s = r.stamp;
  if (!Array.isArray(s) || s.length !== 3 || !s.every((n) => Number.isSafeInteger(n) && (n as number) >= 0)) {
    return { ok: false, reason: 'stamp is not [epoch, term, index] of non-negative integers' };
  }
  const stamp: RouteStamp = { epoch: s[0] as number, term: s[1] as number, index: s[2] as number };
  const keys = Object.keys(r).sort().join(',');
  if (r.removed === true) {
    if (keys !== 'removed,stamp,v') return { ok: false, reason: 'unexpected fields' };
    return { ok: true, value: { removed: true, stamp } };
  }
  if (keys !== 'qos,stamp,v') return { ok: false, reason: 'unexpected fields' };
  if (r.qos !== 0 && r.qos !== 1 && r.qos !== 2) return { ok: false, reason: 'qos is not 0, 1 or 2' };
  return { ok: true, value: { removed: false, qos: r.qos, stamp } };
}
