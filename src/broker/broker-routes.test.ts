// What a sharded node reads of the state to write its routes (docs/scale-out.md "The serving node's
// routes"): after any sequence of SUBSCRIBE, UNSUBSCRIBE, connects and disconnects, every filter whose
// highest granted QoS changed (or that appeared or went) is among the filters noted since the last
// take, and subscribedQos and subscribedFilters agree with a model built from the commands alone.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { QoS } from '../protocol/packets.js';
import { Harness } from './broker-harness.testkit.js';

const FILTERS = ['t/#', 't/+', 'x', '$share/g/t/#', '$share/h/t/#', 'a/b/c'];
const CLIENTS = ['c0', 'c1', 'c2'];

type Step =
  | { k: 'sub'; c: number; f: number; qos: QoS }
  | { k: 'unsub'; c: number; f: number }
  | { k: 'drop'; c: number }
  | { k: 'connect'; c: number; clean: boolean };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({
    k: fc.constant('sub' as const),
    c: fc.nat(CLIENTS.length - 1),
    f: fc.nat(FILTERS.length - 1),
    qos: fc.constantFrom<QoS>(0, 1, 2),
  }),
  fc.record({ k: fc.constant('unsub' as const), c: fc.nat(CLIENTS.length - 1), f: fc.nat(FILTERS.length - 1) }),
  fc.record({ k: fc.constant('drop' as const), c: fc.nat(CLIENTS.length - 1) }),
  fc.record({ k: fc.constant('connect' as const), c: fc.nat(CLIENTS.length - 1), clean: fc.boolean() }),
);

/** The highest QoS per filter over the model's sessions. */
function aggregate(model: Map<string, Map<string, QoS>>): Map<string, QoS> {
  const out = new Map<string, QoS>();
  for (const subs of model.values()) {
    for (const [f, q] of subs) if ((out.get(f) ?? -1) < q) out.set(f, q);
  }
  return out;
}

describe('the filters a sharded node writes as routes', () => {
  it('notes every filter whose highest QoS changed, and reports the QoS the model holds', () => {
    fc.assert(
      fc.property(fc.array(step, { maxLength: 60 }), (steps) => {
        const h = new Harness();
        h.broker.trackFilters();
        h.serveStart();
        let seq = 0;
        // The model: per client id, its session's subscriptions (3.1.1: clean sessions end with
        // their connection, others stay).
        const model = new Map<string, Map<string, QoS>>();
        const online = new Map<string, { conn: string; clean: boolean }>();
        for (const c of CLIENTS) {
          const conn = h.conn(++seq);
          h.connect(conn, c, { clean: true });
          online.set(c, { conn, clean: true });
          model.set(c, new Map());
        }
        h.broker.takeTouchedFilters();
        let pid = 1;
        for (const s of steps) {
          const before = aggregate(model);
          const client = CLIENTS[s.c] as string;
          const on = online.get(client);
          if (s.k === 'sub' && on !== undefined) {
            h.subscribe(on.conn, pid++, [{ filter: FILTERS[s.f] as string, qos: s.qos }]);
            model.get(client)?.set(FILTERS[s.f] as string, s.qos);
          } else if (s.k === 'unsub' && on !== undefined) {
            h.apply({ t: 'unsubscribe', conn: on.conn, pid: pid++, filters: [FILTERS[s.f] as string] });
            model.get(client)?.delete(FILTERS[s.f] as string);
          } else if (s.k === 'drop' && on !== undefined) {
            h.apply({ t: 'disconnect', conn: on.conn, reason: 0, publishWill: false });
            online.delete(client);
            if (on.clean) model.set(client, new Map());
          } else if (s.k === 'connect') {
            const conn = h.conn(++seq);
            h.connect(conn, client, { clean: s.clean });
            // A clean connection starts an empty session; so does a takeover of a clean session,
            // which ended with its connection [MQTT-3.1.2-6]; a takeover of a persistent one keeps it.
            if (s.clean || on?.clean === true) model.set(client, new Map());
            online.set(client, { conn, clean: s.clean });
          } else continue;
          const after = aggregate(model);
          const touched = h.broker.takeTouchedFilters();
          for (const f of FILTERS) {
            if (before.get(f) !== after.get(f)) assert.ok(touched.has(f), `${f} changed by ${JSON.stringify(s)} but not noted`);
            assert.equal(h.broker.subscribedQos(f), after.get(f) ?? null, `subscribedQos(${f}) after ${JSON.stringify(s)}`);
          }
          assert.deepEqual(new Map([...h.broker.subscribedFilters()].sort()), new Map([...after].sort()));
        }
      }),
      { numRuns: 200 },
    );
  });

  it('notes nothing while no one tracks', () => {
    const h = new Harness();
    h.serveStart();
    const conn = h.conn(1);
    h.connect(conn, 'c', { clean: true });
    h.subscribe(conn, 1, [{ filter: 't/#', qos: 1 }]);
    assert.equal(h.broker.takeTouchedFilters().size, 0);
    assert.equal(h.broker.subscribedQos('t/#'), 1);
  });
});
