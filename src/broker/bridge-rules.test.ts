import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  type BridgeRule,
  filtersOverlap,
  inboundForward,
  inboundSubscriptions,
  loopingPair,
  outboundForward,
  parseBridgeRule,
} from './bridge-rules.js';

const rule = (text: string, bridge = 'up'): BridgeRule => {
  const r = parseBridgeRule(bridge, text);
  if (typeof r === 'string') assert.fail(`${text}: ${r}`);
  return r;
};

describe('bridge topic rules', () => {
  it('reads Mosquitto\'s topic line, with its defaults and "" for an empty prefix', () => {
    assert.deepEqual(rule('sensors/#'), {
      bridge: 'up',
      pattern: 'sensors/#',
      direction: 'out',
      qos: 0,
      localPrefix: '',
      remotePrefix: '',
    });
    assert.deepEqual(rule('  t/+  out 1 local/ "" '), {
      bridge: 'up',
      pattern: 't/+',
      direction: 'out',
      qos: 1,
      localPrefix: 'local/',
      remotePrefix: '',
    });
    assert.equal(rule('# both 2 a/ b/').direction, 'both');
  });

  it('refuses a bad pattern, direction, QoS or prefix with the reason', () => {
    assert.match(parseBridgeRule('up', 'a/#/b out 1') as string, /# not alone/);
    assert.match(parseBridgeRule('up', 'a+ out 1') as string, /\+ not alone/);
    assert.match(parseBridgeRule('up', 'a sideways 1') as string, /direction "sideways"/);
    assert.match(parseBridgeRule('up', 'a out 3') as string, /QoS "3"/);
    assert.match(parseBridgeRule('up', 'a out 1 x/') as string, /needs a remote prefix/);
    assert.match(parseBridgeRule('up', 'a out 1 x/+/ y/') as string, /wildcard in a prefix/);
    assert.match(parseBridgeRule('up', '') as string, /empty/);
    assert.match(parseBridgeRule('up', 'a out 1 $share/g/ y/') as string, /shared subscription/);
    assert.match(parseBridgeRule('up', 'a out 1 x/ y/ z') as string, /expected PATTERN/);
    assert.match(parseBridgeRule('bad name', 'a') as string, /bridge name/);
  });

  it('remaps the local prefix to the remote one and forwards at the lower QoS', () => {
    const rules = [rule('sensors/# out 1 site/ cloud/site1/'), rule('alerts out 2 "" ""'), rule('x/# out 1', 'other')];
    assert.deepEqual(
      { ...outboundForward(rules, 'up', 'site/sensors/t1', 2), rule: undefined },
      { rule: undefined, topic: 'cloud/site1/sensors/t1', qos: 1 },
    );
    assert.equal(outboundForward(rules, 'up', 'site/sensors', 0)?.topic, 'cloud/site1/sensors');
    assert.equal(outboundForward(rules, 'up', 'alerts', 2)?.qos, 2);
    assert.equal(outboundForward(rules, 'up', 'alerts', 0)?.qos, 0);
    assert.equal(outboundForward(rules, 'up', 'sensors/t1', 1), null, 'without the local prefix');
    assert.equal(outboundForward(rules, 'up', 'x/1', 1), null, "another bridge's rule");
    assert.equal(outboundForward(rules, 'other', 'x/1', 1)?.topic, 'x/1');
    assert.equal(outboundForward([rule('# in 1')], 'up', 'a', 1), null, 'an inbound rule forwards nothing out');
    assert.equal(outboundForward([rule('# out 1')], 'up', '$SYS/x', 1), null, '# does not match $ topics');
  });

  it('remaps an inbound message from the remote prefix to the local one, at the lower QoS', () => {
    const rules = [rule('cmd/# in 1 dev/ cloud/dev/'), rule('all/# both 0'), rule('out/# out 1')];
    const f = inboundForward(rules, 'up', 'cloud/dev/cmd/reboot', 2);
    assert.ok(typeof f === 'object');
    assert.deepEqual([f.topic, f.qos], ['dev/cmd/reboot', 1]);
    const g = inboundForward(rules, 'up', 'all/x', 1);
    assert.ok(typeof g === 'object');
    assert.deepEqual([g.topic, g.qos], ['all/x', 0]);
    assert.equal(inboundForward(rules, 'up', 'out/x', 1), 'no-rule', 'an outbound rule brings nothing in');
    assert.equal(inboundForward(rules, 'up', 'dev/cmd/x', 1), 'no-rule', 'without the remote prefix');
    assert.equal(inboundForward(rules, 'other', 'all/x', 1), 'no-rule', "another bridge's rule");
    // The local topic would be over the 65535 bytes a topic name may have.
    const long = `cloud/dev/cmd/${'x'.repeat(65_525)}`;
    assert.equal(inboundForward([rule(`cmd/# in 1 ${'y'.repeat(20)}/ cloud/dev/`)], 'up', long, 1), 'bad-topic');
  });

  it('subscribes once per remote filter, at the highest QoS of the rules naming it', () => {
    const rules = [rule('a/# in 1'), rule('a/# both 2'), rule('b in 0 x/ y/'), rule('c out 1'), rule('d in 1', 'other')];
    assert.deepEqual(inboundSubscriptions(rules, 'up'), [
      { filter: 'a/#', qos: 2 },
      { filter: 'y/b', qos: 0 },
    ]);
  });

  it('tells whether two filters match a common topic', () => {
    const yes: [string, string][] = [
      ['a/#', 'a'],
      ['a/+/c', 'a/b/+'],
      ['#', 'x/y'],
      ['+/b', 'a/+'],
      ['a/b', 'a/b'],
      ['$SYS/#', '$SYS/x'],
    ];
    const no: [string, string][] = [
      ['a/b', 'a/c'],
      ['a/+', 'a'],
      ['a/+/c', 'a/b'],
      ['#', '$SYS/x'],
      ['+/x', '$SYS/x'],
    ];
    for (const [a, b] of yes) assert.ok(filtersOverlap(a, b) && filtersOverlap(b, a), `${a} ${b}`);
    for (const [a, b] of no) assert.ok(!filtersOverlap(a, b) && !filtersOverlap(b, a), `${a} ${b}`);
  });

  it('finds an outbound and an inbound rule that would loop, and not rules that stay apart', () => {
    const out = rule('data/# out 1 "" remote/');
    // Brings remote/... back as local ..., which the outbound rule forwards again.
    const back = rule('# in 1 "" remote/');
    assert.deepEqual(loopingPair([out, back]), [out, back]);
    // Comes back under a local topic no outbound rule matches: no loop.
    assert.equal(loopingPair([out, rule('remote/# in 1 inbox/ ""')]), null);
    // Different remote topics: no loop.
    assert.equal(loopingPair([out, rule('other/# in 1 "" ""')]), null);
    // A both rule alone is not a loop, and rules of two bridges do not pair.
    assert.equal(loopingPair([rule('# both 1')]), null);
    assert.equal(loopingPair([out, rule('remote/# in 1 "" ""', 'other')]), null);
  });
});
