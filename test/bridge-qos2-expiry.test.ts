// A QoS 2 message that expires in a bridge's outbox (docs/bridges.md "When the remote is down") is
// never published again, but the remote may hold its packet id (it had the PUBLISH, and its PUBREC
// was recorded or not), so the id is released with PUBREL. The broker is the real one, driven entry
// by entry; the link is the real BridgeLink over TCP to a small MQTT 5 remote on loopback that
// answers PUBREC and PUBCOMP. After the expiry has passed in the cluster time, a new connection of
// the bridge sends PUBREL for each expired one (never PUBLISH), PUBCOMP completes them, and the
// message behind them is forwarded.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import type { BridgeRule } from '../src/broker/bridge-rules.js';
import { Harness, msg, testSettings } from '../src/broker/broker-harness.testkit.js';
import type { Settings } from '../src/broker/commands.js';
import { encode } from '../src/protocol/encoder.js';
import { RC } from '../src/protocol/reason-codes.js';
import { BridgeLink } from '../src/server/bridge/bridge-link.js';
import { harnessHost, LoopbackRemote, loopbackSpec } from './support/bridge-link-harness.js';
import { until } from './support/wait.js';

const WAIT_MS = 10_000;
const RULES: BridgeRule[] = [{ bridge: 'up', pattern: 'q2/#', direction: 'out', qos: 2, localPrefix: '', remotePrefix: '' }];
const SETTINGS: Settings = { ...testSettings, bridgeRules: RULES };

/** An MQTT 5 remote: CONNACK, PUBREC for a QoS 2 PUBLISH, PUBCOMP for a PUBREL; `seen` lists what
 * came, as `publish <topic> <pid>` or `pubrel <pid>`. */
function qos2Remote(seen: string[]): LoopbackRemote {
  return new LoopbackRemote((s, p) => {
    if (p.type === 'connect') {
      s.write(encode({ type: 'connack', sessionPresent: true, code: 0, props: {} }, 5));
    } else if (p.type === 'publish' && p.pid !== undefined) {
      seen.push(`publish ${p.topic} ${p.pid}`);
      s.write(encode({ type: 'pubrec', pid: p.pid, code: RC.SUCCESS, props: {} }, 5));
    } else if (p.type === 'pubrel') {
      seen.push(`pubrel ${p.pid}`);
      s.write(encode({ type: 'pubcomp', pid: p.pid, code: RC.SUCCESS, props: {} }, 5));
    }
    return true;
  });
}

describe('bridge: QoS 2 messages past their expiry', { timeout: 30_000 }, () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it('get a PUBREL each on the next connection, no PUBLISH, and the message behind them goes', async () => {
    const seen: string[] = [];
    const remote = qos2Remote(seen);
    const port = await remote.listen();
    cleanups.push(() => remote.close());

    const h = new Harness(SETTINGS);
    h.connect(h.conn(1), 'pub', { protocol: 5, clean: true, expiryS: 0 });
    h.publish(h.conn(1), { ...msg('q2/a', 'a', 2), props: { expiryS: 1 } }, 1);
    const first = h.index;
    h.publish(h.conn(1), { ...msg('q2/z', 'z', 2), props: { expiryS: 1 } }, 2);
    h.publish(h.conn(1), msg('q2/b', 'b', 2), 3);
    // An earlier serving node sent 'a' and the remote answered PUBREC, recorded by this entry; it
    // may have sent 'z' too, with no record of an answer.
    h.apply({ t: 'bridge-pubrec', bridge: 'up', conn: h.conn(9), recs: [[first, 1]] });
    // Their expiry passes in the cluster time.
    h.apply({ t: 'tick' }, 5_000);
    assert.deepEqual(
      (h.broker.bridgeOutbox('up')?.items.toArray() ?? []).map((it) => [it.topic, it.pid, it.rec]),
      [
        ['q2/a', 1, true],
        ['q2/z', 2, true],
        ['q2/b', 3, false],
      ],
      'the expired QoS 2 messages stay as releases',
    );

    const { host, setLink } = harnessHost(h, RULES);
    const l = new BridgeLink(loopbackSpec('up', port, RULES, false), host);
    setLink(l);
    cleanups.push(() => l.stop());
    l.start();
    await until('the bridge connected', () => l.state === 'up', WAIT_MS);
    l.pump();
    await until('the outbox emptied', () => h.broker.bridgeOutbox('up')?.items.length === 0, WAIT_MS);
    // Neither expired message is published again; each id is released; 'b' goes as usual.
    assert.deepEqual(seen, ['pubrel 1', 'pubrel 2', 'publish q2/b 3', 'pubrel 3']);
    assert.equal(h.broker.verify(), null);
  });
});
