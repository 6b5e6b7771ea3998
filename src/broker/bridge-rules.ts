// Bridge topic rules (docs/bridges.md "Topic rules"): which committed messages a bridge forwards to
// its remote broker, at which QoS and under which topic. The rules are a replicated setting, so
// every replica copies the same messages into the same bridge outboxes; the rest of a bridge (its
// addresses, credentials, certificates) is node-local configuration (src/server/bridge).
//
// A rule is Mosquitto's `topic PATTERN DIRECTION QOS LOCAL-PREFIX REMOTE-PREFIX`: the local filter
// is LOCAL-PREFIX + PATTERN, the remote one REMOTE-PREFIX + PATTERN, and a forwarded message's
// topic has LOCAL-PREFIX replaced by REMOTE-PREFIX.
import type { QoS } from '../protocol/packets.js';
import { validateTopicFilter, validateTopicName } from '../protocol/topic.js';
import { topicMatches } from './acl.js';

export type BridgeDirection = 'out' | 'in' | 'both';

export interface BridgeRule {
  /** The bridge's name (--bridge NAME=URL). */
  bridge: string;
  pattern: string;
  direction: BridgeDirection;
  /** The highest QoS the rule forwards at: a message goes out at min(its QoS, this). */
  qos: QoS;
  localPrefix: string;
  remotePrefix: string;
}

/** Letters, digits, `-` and `_`: a name goes into log lines, metrics labels and $SYS topics. */
export const BRIDGE_NAME = /^[A-Za-z0-9_-]{1,64}$/;

const DIRECTIONS: readonly string[] = ['out', 'in', 'both'];

/** The local filter of a rule. */
export const localFilter = (r: BridgeRule): string => r.localPrefix + r.pattern;
/** The remote filter of a rule. */
export const remoteFilter = (r: BridgeRule): string => r.remotePrefix + r.pattern;
export const isOutbound = (r: BridgeRule): boolean => r.direction === 'out' || r.direction === 'both';
export const isInbound = (r: BridgeRule): boolean => r.direction === 'in' || r.direction === 'both';

/** A rule as written in the configuration, for messages. */
export function ruleText(r: BridgeRule): string {
  const q = (s: string): string => (s === '' ? '""' : s);
  return `${r.pattern} ${r.direction} ${r.qos} ${q(r.localPrefix)} ${q(r.remotePrefix)}`;
}

/** A prefix: no wildcard, no U+0000; may be empty. */
function prefixProblem(p: string): string | null {
  if (p.includes('+') || p.includes('#')) return 'wildcard in a prefix';
  if (p.includes('\u0000')) return 'U+0000 in a prefix';
  return null;
}

/** Parses `PATTERN [DIRECTION [QOS [LOCAL-PREFIX REMOTE-PREFIX]]]` (whitespace separated; `""` is
 * an empty prefix); defaults out, 0, "" "" as in Mosquitto. Returns the rule or a reason. */
export function parseBridgeRule(bridge: string, text: string): BridgeRule | string {
  const words = text.trim().split(/\s+/);
  if (words.length === 0 || words[0] === '') return 'empty topic rule';
  if (words.length > 5) return 'expected PATTERN [out|in|both [QOS [LOCAL-PREFIX REMOTE-PREFIX]]]';
  if (words.length === 4) return 'a local prefix needs a remote prefix (write "" for none)';
  const unquote = (w: string): string => (w === '""' ? '' : w);
  const [pattern = '', direction = 'out', qosWord = '0', local = '""', remote = '""'] = words;
  if (!DIRECTIONS.includes(direction)) return `direction ${JSON.stringify(direction)}: expected out, in or both`;
  if (qosWord !== '0' && qosWord !== '1' && qosWord !== '2') return `QoS ${JSON.stringify(qosWord)}: expected 0, 1 or 2`;
  const rule: BridgeRule = {
    bridge,
    pattern,
    direction: direction as BridgeDirection,
    qos: Number(qosWord) as QoS,
    localPrefix: unquote(local),
    remotePrefix: unquote(remote),
  };
  return ruleProblem(rule) ?? rule;
}

/** Null when the rule's filters and prefixes are usable, else a reason. */
export function ruleProblem(r: BridgeRule): string | null {
  if (!BRIDGE_NAME.test(r.bridge)) return `bridge name ${JSON.stringify(r.bridge)}: letters, digits, - and _ only`;
  if (r.pattern === '""' || r.pattern === '') return 'empty pattern';
  for (const p of [r.localPrefix, r.remotePrefix]) {
    const problem = prefixProblem(p);
    if (problem !== null) return problem;
  }
  for (const f of [localFilter(r), remoteFilter(r)]) {
    if (f.startsWith('$share/')) return `filter ${JSON.stringify(f)}: a shared subscription`;
    const problem = validateTopicFilter(f);
    if (problem !== null) return `filter ${JSON.stringify(f)}: ${problem}`;
  }
  return null;
}

/** Whether some topic name matches both filters (neither a shared subscription). */
export function filtersOverlap(a: string, b: string): boolean {
  const x = a.split('/');
  const y = b.split('/');
  for (let i = 0; ; i++) {
    const p = x[i];
    const q = y[i];
    if (p === '#' || q === '#') {
      // `a/#` matches `a` too; a topic starting with $ is matched only by a literal first level.
      return i > 0 || !isDollar(p === '#' ? q : p);
    }
    if (p === undefined || q === undefined) return p === undefined && q === undefined;
    if (p === '+' || q === '+') {
      if (i === 0 && isDollar(p === '+' ? q : p)) return false;
      continue;
    }
    if (p !== q) return false;
  }
}

const isDollar = (level: string | undefined): boolean => level?.startsWith('$') === true;

/** The first pair of rules of one bridge that would send a message around in a loop: an outbound
 * rule and another inbound rule whose remote filters overlap (what goes out may come back in) and
 * whose local filters overlap (what comes back in would go out again). */
export function loopingPair(rules: readonly BridgeRule[]): [BridgeRule, BridgeRule] | null {
  for (const o of rules) {
    if (!isOutbound(o)) continue;
    for (const i of rules) {
      // A `both` rule is not its own loop: the bridge's own subscription does not get back what
      // the same connection published (MQTT 5 No Local, Mosquitto's bridge bit for 3.1.1).
      if (i === o || !isInbound(i) || i.bridge !== o.bridge) continue;
      if (filtersOverlap(remoteFilter(o), remoteFilter(i)) && filtersOverlap(localFilter(o), localFilter(i))) return [o, i];
    }
  }
  return null;
}

/** What an outbound rule makes of a local message: the remote topic and the QoS to send at. */
export interface Forward {
  rule: BridgeRule;
  topic: string;
  qos: QoS;
}

/** The first outbound rule of `bridge` in `rules` that matches `topic`, and what it forwards; null
 * when none does (or the remapped topic is not a valid topic name). */
export function outboundForward(rules: readonly BridgeRule[], bridge: string, topic: string, qos: QoS): Forward | null {
  for (let i = 0; i < rules.length; i++) {
    const r = rules[i] as BridgeRule;
    if (r.bridge !== bridge || !isOutbound(r)) continue;
    if (!topic.startsWith(r.localPrefix) || !topicMatches(localFilter(r), topic)) continue;
    const remote = r.remotePrefix + topic.slice(r.localPrefix.length);
    if (validateTopicName(remote) !== null) continue;
    return { rule: r, topic: remote, qos: (qos < r.qos ? qos : r.qos) as QoS };
  }
  return null;
}

/** What an inbound rule makes of a message from the remote: the local topic and the QoS to publish
 * at; 'no-rule' when no inbound rule of the bridge matches the remote topic (the remote sent what
 * the bridge did not subscribe to), 'bad-topic' when the first that matches remaps it to a topic
 * name that is not valid here. */
export function inboundForward(rules: readonly BridgeRule[], bridge: string, topic: string, qos: QoS): Forward | 'no-rule' | 'bad-topic' {
  for (let i = 0; i < rules.length; i++) {
    const r = rules[i] as BridgeRule;
    if (r.bridge !== bridge || !isInbound(r)) continue;
    if (!topic.startsWith(r.remotePrefix) || !topicMatches(remoteFilter(r), topic)) continue;
    const local = r.localPrefix + topic.slice(r.remotePrefix.length);
    if (validateTopicName(local) !== null) return 'bad-topic';
    return { rule: r, topic: local, qos: (qos < r.qos ? qos : r.qos) as QoS };
  }
  return 'no-rule';
}

/** The remote filters a bridge subscribes to, once each, at the highest QoS of the inbound rules
 * that name it, in rule order. */
export function inboundSubscriptions(rules: readonly BridgeRule[], bridge: string): { filter: string; qos: QoS }[] {
  const subs: { filter: string; qos: QoS }[] = [];
  for (const r of rules) {
    if (r.bridge !== bridge || !isInbound(r)) continue;
    const qos = r.qos;
    const filter = remoteFilter(r);
    const had = subs.find((x) => x.filter === filter);
    if (had === undefined) subs.push({ filter, qos });
    else if (qos > had.qos) had.qos = qos;
  }
  return subs;
}

/** The bridge names the rules name, in order of first appearance. */
export function bridgeNames(rules: readonly BridgeRule[]): string[] {
  const names: string[] = [];
  for (const r of rules) if (!names.includes(r.bridge)) names.push(r.bridge);
  return names;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Whether `v` is a valid decoded rule (from a command or a snapshot). */
export function isBridgeRule(v: unknown): v is BridgeRule {
  if (!isObj(v)) return false;
  if (typeof v.bridge !== 'string' || typeof v.pattern !== 'string' || typeof v.direction !== 'string') return false;
  if (!DIRECTIONS.includes(v.direction) || (v.qos !== 0 && v.qos !== 1 && v.qos !== 2)) return false;
  if (typeof v.localPrefix !== 'string' || typeof v.remotePrefix !== 'string') return false;
  return ruleProblem(v as unknown as BridgeRule) === null;
}
