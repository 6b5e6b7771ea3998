import type { AclRule } from './commands.js';

// Access control in Mosquitto's acl_file model (mosquitto.conf(5), "acl_file"), as a pure
// evaluator over the plain rule table that Settings carries, so that every replica decides
// delivery the same way (docs/design.md "Settings").
//
// The rules, as Mosquitto applies them:
// - `topic` lines before the first `user` line belong to anonymous clients (no username); after a
//   `user NAME` line they belong to clients whose CONNECT username is NAME.
// - `pattern` lines belong to every client, with %c replaced by the client id and %u by the
//   username; a pattern with %u does not apply to a client without a username.
// - The client's own `topic` lines are consulted first, then the `pattern` lines. Within each list a
//   matching `deny` wins over any grant; the first list that grants the access decides.
// - A client whose client id or username contains `+` or `#` gets nothing from patterns (it could
//   otherwise widen its own place in the hierarchy).
// - No matching line: denied.
// - A rule whose first level is a wildcard never matches a topic starting with `$` [MQTT-4.7.2-1].
//
// The parser lives here too (it is a pure function of the file's text); reading the file is I/O
// and lives in src/server/auth/acl-file.ts.

export type AclAccess = 'read' | 'write';

/** The rule table split into the lists the evaluator walks. Built once per table and cached by
 * identity: Settings values are never mutated, so the cache is as deterministic as the table. */
interface CompiledAcl {
  anonymous: RuleList;
  byUser: Map<string, RuleList>;
  patterns: RuleList;
}

interface RuleList {
  deny: string[];
  read: string[];
  write: string[];
}

const emptyList = (): RuleList => ({ deny: [], read: [], write: [] });
const compiled = new WeakMap<readonly AclRule[], CompiledAcl>();

function compile(rules: readonly AclRule[]): CompiledAcl {
  let c = compiled.get(rules);
  if (c !== undefined) return c;
  c = { anonymous: emptyList(), byUser: new Map(), patterns: emptyList() };
  for (const r of rules) {
    let list: RuleList;
    if (r.kind === 'pattern') list = c.patterns;
    else if (r.user === null) list = c.anonymous;
    else {
      list = c.byUser.get(r.user) ?? emptyList();
      c.byUser.set(r.user, list);
    }
    addRule(list, r);
  }
  compiled.set(rules, c);
  return c;
}

function addRule(list: RuleList, r: AclRule): void {
  switch (r.access) {
    case 'deny':
      list.deny.push(r.filter);
      return;
    case 'read':
      list.read.push(r.filter);
      return;
    case 'write':
      list.write.push(r.filter);
      return;
    case 'readwrite':
      list.read.push(r.filter);
      list.write.push(r.filter);
      return;
    default: {
      const _: never = r.access;
      void _;
    }
  }
}

/** Who asks: the session's client id and CONNECT username. */
export interface AclSubject {
  clientId: string;
  username: string | null;
}

type Matcher = (ruleFilter: string, topicOrFilter: string) => boolean;

/** May `who` publish to (write) or receive from (read) the topic name `topic`? A null table
 * (no --acl-file) allows everything. */
export function aclAllows(acl: readonly AclRule[] | null, who: AclSubject, access: AclAccess, topic: string): boolean {
  if (acl === null) return true;
  return decide(compile(acl), who, access, topic, topicMatches);
}

/** May `who` subscribe to `filter`? Granted when one read grant covers every topic the filter
 * can match and no deny covers it; topics a grant only partly covers are filtered on delivery by
 * aclAllows. The filter is the one matched against topics (without a `$share/{group}/` prefix). */
export function aclAllowsSubscribe(acl: readonly AclRule[] | null, who: AclSubject, filter: string): boolean {
  if (acl === null) return true;
  return decide(compile(acl), who, 'read', filter, filterCovers);
}

function decide(c: CompiledAcl, who: AclSubject, access: AclAccess, topic: string, match: Matcher): boolean {
  const own = who.username === null ? c.anonymous : c.byUser.get(who.username);
  if (own !== undefined) {
    const verdict = walk(own, access, topic, match, null);
    if (verdict !== null) return verdict;
  }
  const p = c.patterns;
  if (p.deny.length + p.read.length + p.write.length === 0) return false;
  if (hasWildcard(who.clientId) || (who.username !== null && hasWildcard(who.username))) return false;
  return walk(p, access, topic, match, who) ?? false;
}

/** true: granted; false: denied by a deny line; null: this list says nothing. `who` is set for
 * pattern lists, whose filters are substituted first. */
function walk(list: RuleList, access: AclAccess, topic: string, match: Matcher, who: AclSubject | null): boolean | null {
  for (const f of list.deny) {
    const filter = who === null ? f : substitute(f, who);
    if (filter !== null && match(filter, topic)) return false;
  }
  const grants = access === 'read' ? list.read : list.write;
  for (const f of grants) {
    const filter = who === null ? f : substitute(f, who);
    if (filter !== null && match(filter, topic)) return true;
  }
  return null;
}

const hasWildcard = (s: string): boolean => s.includes('+') || s.includes('#');

/** %c → client id, %u → username; null when the pattern needs a username the client lacks. */
function substitute(pattern: string, who: AclSubject): string | null {
  if (!pattern.includes('%')) return pattern;
  if (pattern.includes('%u') && who.username === null) return null;
  let out = pattern.replaceAll('%c', who.clientId);
  if (who.username !== null) out = out.replaceAll('%u', who.username);
  return out;
}

/** Does the filter match the topic name? `+` one level, `#` the rest including the parent
 * [MQTT-4.7.1-2], and no wildcard first level for `$` topics [MQTT-4.7.2-1]. */
export function topicMatches(filter: string, topic: string): boolean {
  if (topic.startsWith('$') && !filter.startsWith('$')) return false;
  const f = filter.split('/');
  const t = topic.split('/');
  for (let i = 0; i < f.length; i++) {
    const level = f[i];
    if (level === '#') return i === f.length - 1;
    if (i >= t.length) return false;
    if (level !== '+' && level !== t[i]) return false;
  }
  return f.length === t.length;
}

/** Does `outer` match every topic that `inner` can match? */
export function filterCovers(outer: string, inner: string): boolean {
  if (inner.startsWith('$') && !outer.startsWith('$')) return false;
  const o = outer.split('/');
  const n = inner.split('/');
  for (let i = 0; i < o.length; i++) {
    const level = o[i];
    if (level === '#') return true;
    if (i >= n.length) return false;
    const inLevel = n[i];
    if (inLevel === '#') return false;
    if (level === '+') continue;
    if (inLevel === '+' || level !== inLevel) return false;
  }
  return o.length === n.length;
}

// ---- the file format ----

/** A line of an ACL file that cannot be used: 1-based line number and why. */
export interface AclParseProblem {
  line: number;
  reason: string;
}

const ACCESS: Record<string, AclRule['access']> = { read: 'read', write: 'write', readwrite: 'readwrite', deny: 'deny' };

/**
 * Parses Mosquitto's acl_file syntax: `#` comment lines, blank lines, `user NAME`,
 * `topic [read|write|readwrite|deny] FILTER`, `pattern [read|write|readwrite|deny] FILTER`. The
 * access word is optional (readwrite); the filter is the rest of the line, so it may contain `#`
 * and spaces. Returns the rules in file order, or the first problem.
 */
export function parseAcl(text: string): { rules: AclRule[] } | { problem: AclParseProblem } {
  const rules: AclRule[] = [];
  let user: string | null = null;
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const raw = (lines[i] as string).replace(/\s+$/, '');
    if (raw.startsWith('#')) continue;
    const line = raw.replace(/^ +/, '');
    if (line.length === 0) continue;
    const sp = line.indexOf(' ');
    const keyword = sp < 0 ? line : line.slice(0, sp);
    const rest = sp < 0 ? '' : line.slice(sp + 1).trim();
    if (keyword === 'user') {
      if (rest.length === 0) return { problem: { line: i + 1, reason: 'user line without a username' } };
      user = rest;
      continue;
    }
    if (keyword !== 'topic' && keyword !== 'pattern') {
      return { problem: { line: i + 1, reason: `unknown keyword "${keyword}" (expected user, topic or pattern)` } };
    }
    const rule = parseRule(keyword, rest, user);
    if (typeof rule === 'string') return { problem: { line: i + 1, reason: rule } };
    rules.push(rule);
  }
  return { rules };
}

function parseRule(kind: 'topic' | 'pattern', rest: string, user: string | null): AclRule | string {
  if (rest.length === 0) return `${kind} line without a topic`;
  const sp = rest.indexOf(' ');
  const first = sp < 0 ? rest : rest.slice(0, sp);
  let access: AclRule['access'] = 'readwrite';
  let filter = rest;
  if (sp >= 0) {
    const a = ACCESS[first];
    if (a === undefined) return `invalid access "${first}" (expected read, write, readwrite or deny)`;
    access = a;
    filter = rest.slice(sp + 1).trim();
  }
  const problem = filterProblem(filter);
  if (problem !== null) return `invalid topic filter "${filter}": ${problem}`;
  return { kind, user: kind === 'pattern' ? null : user, access, filter };
}

/** The checks of a subscription filter: `#` alone and last, `+` alone in its level, no U+0000. */
function filterProblem(filter: string): string | null {
  if (filter.length === 0) return 'empty';
  if (filter.includes('\u0000')) return 'U+0000';
  const levels = filter.split('/');
  for (let i = 0; i < levels.length; i++) {
    const level = levels[i] as string;
    if (level.includes('#') && (level !== '#' || i !== levels.length - 1)) return '# not alone as the last level';
    if (level.includes('+') && level !== '+') return '+ not alone in its level';
  }
  return null;
}
