import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { Harness, msg, testSettings } from './broker-harness.testkit.js';
import type { Effect, PublishCommand, PubrelCommand } from './commands.js';

// A `publishes` command (a connection's publishes of one read) must apply exactly as its publishes
// would as entries of their own at the same time: the same state and the same effects, in the same
// order. Packet ids repeat on purpose: a QoS 2 id still held answers PUBREC again without routing,
// a QoS 1 publish under a held QoS 2 id is refused 0x91, a PUBREL releases the id for what follows.

/** A subscriber `sub` (QoS 1 and QoS 2 filters, a small window) and a publisher `pub` (MQTT 5). */
function withClients(h: Harness): void {
  h.connect(h.conn(1), 'sub');
  h.subscribe(h.conn(1), 1, [
    { filter: 'q1/#', qos: 1 },
    { filter: 'q2/#', qos: 2 },
  ]);
  h.connect(h.conn(2), 'pub', { protocol: 5 });
}

const arbPublishes = fc.array(
  fc.record({
    topic: fc.constantFrom('q1/a', 'q2/b', 'none', 'q1/r'),
    qos: fc.constantFrom(0 as const, 1 as const, 2 as const),
    retain: fc.boolean(),
    pid: fc.integer({ min: 1, max: 6 }),
    /** A PUBREL of `pid` instead of a publish. */
    rel: fc.boolean(),
  }),
  { minLength: 2, maxLength: 30 },
);

describe('broker: publishes of one read as one command', { timeout: 30_000 }, () => {
  it('gives the state and effects that the same publishes give as single entries', () => {
    fc.assert(
      fc.property(arbPublishes, (items) => {
        const settings = { ...testSettings, maxInflight: 4 };
        const one = new Harness(settings);
        const each = new Harness(settings);
        withClients(one);
        withClients(each);
        const pubs: (PublishCommand | PubrelCommand)[] = items.map(({ topic, qos, retain, pid, rel }, i) => {
          if (rel) return { t: 'pubrel', conn: one.conn(2), pid };
          const m = msg(topic, `m${i}`, qos, retain);
          return qos === 0 ? { t: 'publish', conn: one.conn(2), msg: m } : { t: 'publish', conn: one.conn(2), pid, msg: m };
        });
        const batched = one.apply({ t: 'publishes', conn: one.conn(2), pubs });
        // Ticks at the same time bring the batched log to the same index as the singles' (the
        // entries of one append share one time).
        for (let i = 1; i < pubs.length; i++) assert.deepStrictEqual(one.apply({ t: 'tick' }), []);
        const singles: Effect[] = [];
        for (const p of pubs) singles.push(...each.apply({ ...p, conn: each.conn(2) }));
        assert.deepStrictEqual(batched, singles);
        assert.equal(one.broker.digest(), each.broker.digest());
      }),
      { numRuns: 300 },
    );
  });

  it('refuses as a no-op a publishes whose items are of another connection or too few', () => {
    const h = new Harness(testSettings);
    withClients(h);
    const p: PublishCommand = { t: 'publish', conn: h.conn(2), pid: 1, msg: msg('q1/a', 'x', 1) };
    for (const pubs of [[p], [p, { ...p, conn: h.conn(1) }]]) {
      const out = h.apply({ t: 'publishes', conn: h.conn(2), pubs });
      assert.ok(
        out.some((e) => e.t === 'event' && e.kind === 'no-op'),
        JSON.stringify(out),
      );
      assert.ok(!out.some((e) => e.t === 'send'));
    }
  });
});
