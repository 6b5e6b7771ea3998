// The ACL evaluator and parser against the examples of Mosquitto's mosquitto.conf(5) "acl_file"
// section, and a matrix of users × topics × read/write covering %c, %u, anonymous clients and deny
// precedence.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { aclAllows, aclAllowsSubscribe, filterCovers, parseAcl, topicMatches } from './acl.js';
import type { AclRule } from './commands.js';

function rules(text: string): AclRule[] {
  const r = parseAcl(text);
  if ('problem' in r) throw new Error(`line ${r.problem.line}: ${r.problem.reason}`);
  return r.rules;
}

const anon = (clientId: string) => ({ clientId, username: null });
const user = (username: string, clientId = `c-${username}`) => ({ clientId, username });

describe('ACL: the examples of the Mosquitto manual', { timeout: 10_000 }, () => {
  const manual = rules(
    [
      '# This affects access control for clients with no username.',
      'topic read $SYS/#',
      '',
      '# This only affects clients with username "roger".',
      'user roger',
      'topic foo/bar',
      '',
      '# This affects all clients.',
      'pattern write $SYS/broker/connection/%c/state',
    ].join('\n'),
  );

  it('topic lines before the first user line apply to anonymous clients only', () => {
    assert.equal(aclAllows(manual, anon('a'), 'read', '$SYS/broker/uptime'), true);
    assert.equal(aclAllows(manual, anon('a'), 'write', '$SYS/broker/uptime'), false);
    assert.equal(aclAllows(manual, user('roger'), 'read', '$SYS/broker/uptime'), false);
  });

  it('a topic line without an access word grants read and write to its user', () => {
    assert.equal(aclAllows(manual, user('roger'), 'read', 'foo/bar'), true);
    assert.equal(aclAllows(manual, user('roger'), 'write', 'foo/bar'), true);
    assert.equal(aclAllows(manual, user('fred'), 'write', 'foo/bar'), false);
    assert.equal(aclAllows(manual, anon('a'), 'write', 'foo/bar'), false);
  });

  it('pattern lines apply to every client with %c replaced by its own client id', () => {
    assert.equal(aclAllows(manual, user('roger', 'bridge1'), 'write', '$SYS/broker/connection/bridge1/state'), true);
    assert.equal(aclAllows(manual, anon('bridge2'), 'write', '$SYS/broker/connection/bridge2/state'), true);
    assert.equal(aclAllows(manual, anon('bridge2'), 'write', '$SYS/broker/connection/bridge1/state'), false);
    assert.equal(aclAllows(manual, anon('bridge2'), 'read', '$SYS/broker/connection/bridge3/state'), true, 'anonymous may read $SYS/#');
  });

  it('pattern with %u, as in "pattern write sensor/%u/data", needs a username', () => {
    const acl = rules('pattern write sensor/%u/data');
    assert.equal(aclAllows(acl, user('s1'), 'write', 'sensor/s1/data'), true);
    assert.equal(aclAllows(acl, user('s1'), 'write', 'sensor/s2/data'), false);
    assert.equal(aclAllows(acl, anon('s1'), 'write', 'sensor/s1/data'), false);
    assert.equal(aclAllows(acl, anon('x'), 'write', 'sensor/%u/data'), false, '%u is never matched literally');
  });

  it('deny explicitly takes away what a broader grant gives, whatever the line order', () => {
    const acl = rules(['user roger', 'topic readwrite foo/#', 'topic deny foo/secret'].join('\n'));
    const reversed = rules(['user roger', 'topic deny foo/secret', 'topic readwrite foo/#'].join('\n'));
    for (const a of [acl, reversed]) {
      assert.equal(aclAllows(a, user('roger'), 'write', 'foo/public'), true);
      assert.equal(aclAllows(a, user('roger'), 'write', 'foo/secret'), false);
      assert.equal(aclAllows(a, user('roger'), 'read', 'foo/secret'), false);
    }
  });
});

describe('ACL: matrix of users, topics and access', { timeout: 10_000 }, () => {
  const acl = rules(
    [
      'topic read public/#',
      'topic deny public/internal/#',
      'user alice',
      'topic readwrite alice/#',
      'topic read public/#',
      'topic write inbox/+',
      'user bob',
      'topic read alice/notes',
      'topic deny alice/#',
      'pattern readwrite devices/%c/#',
      'pattern read users/%u/inbox',
      'pattern deny devices/%c/locked',
    ].join('\n'),
  );
  type Row = [who: { clientId: string; username: string | null }, access: 'read' | 'write', topic: string, allowed: boolean];
  const rows: Row[] = [
    [anon('d1'), 'read', 'public/news', true],
    [anon('d1'), 'write', 'public/news', false],
    [anon('d1'), 'read', 'public/internal/x', false],
    [anon('d1'), 'read', 'alice/x', false],
    [anon('d1'), 'write', 'devices/d1/temp', true],
    [anon('d1'), 'read', 'devices/d1/cmd', true],
    [anon('d1'), 'write', 'devices/d2/temp', false],
    [anon('d1'), 'write', 'devices/d1/locked', false],
    [anon('d1'), 'read', 'users/d1/inbox', false],
    [user('alice', 'a1'), 'write', 'alice/notes', true],
    [user('alice', 'a1'), 'read', 'alice/deep/x/y', true],
    [user('alice', 'a1'), 'read', 'public/internal/x', true],
    [user('alice', 'a1'), 'write', 'inbox/bob', true],
    [user('alice', 'a1'), 'read', 'inbox/bob', false],
    [user('alice', 'a1'), 'write', 'inbox/bob/x', false],
    [user('alice', 'a1'), 'read', 'users/alice/inbox', true],
    [user('alice', 'a1'), 'write', 'users/alice/inbox', false],
    [user('alice', 'a1'), 'write', 'devices/a1/x', true],
    [user('bob', 'b1'), 'read', 'alice/notes', false],
    [user('bob', 'b1'), 'read', 'alice/other', false],
    [user('bob', 'b1'), 'read', 'public/news', false],
    [user('bob', 'b1'), 'read', 'users/bob/inbox', true],
    [user('bob', 'b1'), 'read', 'users/alice/inbox', false],
    [user('carol', 'c1'), 'read', 'public/news', false],
    [user('carol', 'c1'), 'write', 'devices/c1/status', true],
    [user('carol', 'dev/+'), 'write', 'devices/dev/+/status', false],
    [user('car#l', 'c2'), 'write', 'devices/c2/status', false],
  ];
  for (const [who, access, topic, allowed] of rows) {
    it(`${who.username ?? 'anonymous'} (${who.clientId}) ${allowed ? 'may' : 'may not'} ${access} ${topic}`, () => {
      assert.equal(aclAllows(acl, who, access, topic), allowed);
    });
  }

  it('without an ACL table everything is allowed', () => {
    assert.equal(aclAllows(null, anon('x'), 'write', 'any/thing'), true);
    assert.equal(aclAllowsSubscribe(null, anon('x'), '#'), true);
  });

  it('an empty ACL file denies everything', () => {
    assert.equal(aclAllows([], user('alice'), 'read', 'a'), false);
  });
});

describe('ACL: subscriptions', { timeout: 10_000 }, () => {
  const acl = rules(['user alice', 'topic read sensors/#', 'topic deny sensors/secret/#', 'pattern read devices/%c/+'].join('\n'));

  it('grants a filter that one read grant covers entirely', () => {
    assert.equal(aclAllowsSubscribe(acl, user('alice', 'a1'), 'sensors/+/temp'), true);
    assert.equal(aclAllowsSubscribe(acl, user('alice', 'a1'), 'sensors/#'), true);
    assert.equal(aclAllowsSubscribe(acl, user('alice', 'a1'), 'devices/a1/+'), true);
  });

  it('refuses a filter wider than every grant, or inside a deny', () => {
    assert.equal(aclAllowsSubscribe(acl, user('alice', 'a1'), '#'), false);
    assert.equal(aclAllowsSubscribe(acl, user('alice', 'a1'), 'devices/+/x'), false);
    assert.equal(aclAllowsSubscribe(acl, user('alice', 'a1'), 'devices/a1/#'), false);
    assert.equal(aclAllowsSubscribe(acl, user('alice', 'a1'), 'sensors/secret/x'), false);
  });

  it('a grant that covers a filter partly covered by a deny is granted; delivery filters the rest', () => {
    assert.equal(aclAllowsSubscribe(acl, user('alice', 'a1'), 'sensors/+/x'), true);
    assert.equal(aclAllows(acl, user('alice', 'a1'), 'read', 'sensors/secret/x'), false);
  });
});

describe('ACL: topic matching', { timeout: 10_000 }, () => {
  it('matches + and # as MQTT does, and keeps $ topics out of leading wildcards', () => {
    assert.equal(topicMatches('a/+/c', 'a/b/c'), true);
    assert.equal(topicMatches('a/+', 'a/b/c'), false);
    assert.equal(topicMatches('a/#', 'a'), true);
    assert.equal(topicMatches('#', '$SYS/x'), false);
    assert.equal(topicMatches('+/x', '$SYS/x'), false);
    assert.equal(topicMatches('$SYS/#', '$SYS/x'), true);
    assert.equal(filterCovers('a/#', 'a/+/c'), true);
    assert.equal(filterCovers('a/+/c', 'a/#'), false);
    assert.equal(filterCovers('#', '$SYS/#'), false);
  });
});

describe('ACL file syntax', { timeout: 10_000 }, () => {
  it('accepts comments, blank lines, CRLF and # inside filters', () => {
    const r = rules('# comment\r\n\r\ntopic read a/#\r\nuser u\r\ntopic b/#\npattern deny c/%c/#\n');
    assert.deepEqual(r, [
      { kind: 'topic', user: null, access: 'read', filter: 'a/#' },
      { kind: 'topic', user: 'u', access: 'readwrite', filter: 'b/#' },
      { kind: 'pattern', user: null, access: 'deny', filter: 'c/%c/#' },
    ]);
  });

  const bad: [string, number][] = [
    ['topic read a\nfrobnicate x', 2],
    ['\n\ntopic sometimes a/b', 3],
    ['user', 1],
    ['topic', 1],
    ['topic read a/#/b', 1],
    ['pattern write a/b+', 1],
    ['  # indented comments are not comments in Mosquitto either', 1],
  ];
  for (const [text, line] of bad) {
    it(`refuses ${JSON.stringify(text)} naming line ${line}`, () => {
      const r = parseAcl(text);
      assert.ok('problem' in r);
      assert.equal(r.problem.line, line);
    });
  }
});
