// The bench's several load generators (--loadgens): how a fan-in is split and its results merged.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { argsFor, mergeResults, splittable } from '../bench/loadgens.js';

const FANIN = ['-s', 'fanin', '-q', '1', '-P', '8', '-N', '1', '-S', '64'];

describe('bench load generators', () => {
  it('splits only a fan-in whose publishers the count divides', () => {
    assert.equal(splittable(FANIN, 2), true);
    assert.equal(splittable(FANIN, 8), true);
    assert.equal(splittable(FANIN, 3), false);
    assert.equal(splittable(FANIN, 1), false);
    assert.equal(splittable(['-s', 'fanout', '-P', '1', '-N', '100'], 2), false);
    assert.equal(splittable(['-s', 'idle', '-C', '10000'], 2), false);
  });

  it('gives each process its share of publishers and rate, a topic prefix and a label', () => {
    const a = argsFor([...FANIN, '-r', '5000'], 1, 4, 'latency-q1/raftmq');
    assert.equal(a[a.indexOf('-P') + 1], '2');
    assert.equal(a[a.indexOf('-r') + 1], '1250');
    assert.equal(a[a.indexOf('-x') + 1], 'bench1');
    assert.equal(a[a.indexOf('-l') + 1], 'latency-q1/raftmq#1');
    const closed = argsFor(FANIN, 0, 2, 'fanin-q1/mosquitto');
    assert.equal(closed.includes('-r'), false);
    assert.equal(closed[closed.indexOf('-P') + 1], '4');
  });

  it('sums counts, keeps the highest percentile and CPU, and fails if any process failed', () => {
    const line = (over: Record<string, unknown>) => ({
      label: 'x#0',
      publishers: 4,
      subscribers: 1,
      sent: 100,
      delivered: 100,
      delivered_per_s: 50,
      lost: 0,
      duration_s: 2,
      lat_p50_us: 100,
      lat_p99_us: 900,
      lg_cpu_pct: 30,
      host_other_pct: 40,
      ok: true,
      error: '',
      ...over,
    });
    const m = mergeResults([
      line({}),
      line({ label: 'x#1', sent: 120, lost: 3, lat_p99_us: 1500, lg_cpu_pct: 35, ok: false, error: 'lost conns' }),
    ]);
    assert.equal(m.sent, 220);
    assert.equal(m.delivered_per_s, 100);
    assert.equal(m.lost, 3);
    assert.equal(m.publishers, 8);
    assert.equal(m.subscribers, 2);
    assert.equal(m.lat_p99_us, 1500);
    assert.equal(m.lat_p50_us, 100);
    assert.equal(m.lg_cpu_pct, 35);
    assert.equal(m.duration_s, 2);
    assert.equal(m.ok, false);
    assert.equal(m.error, 'lost conns');
    // The first process counted the second as "other".
    assert.equal(m.host_other_pct, 5);
    assert.equal(m.label, 'x');
    assert.equal((m.loadgens as unknown[]).length, 2);
  });

  it('passes one process through unchanged', () => {
    const one = { sent: 1, ok: true };
    assert.equal(mergeResults([one]), one);
  });
});
