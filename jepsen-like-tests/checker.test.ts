// The checkers find what they are for: a lost acknowledged publish, a QoS 2 duplicate, a lost
// session, overlapping leases, a write beyond a lease, a restarted node writing inside its killed
// predecessor's lease; and stay quiet on a clean history, on QoS 1 duplicates, on publishes never
// acknowledged, on a renewal reported after its lease ended, and on a successor serving after a
// cleanly stopped leader's serve-end.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  type AuditRecord,
  type AuditSource,
  checkAll,
  checkLeaseOverlap,
  checkTwoServersSeen,
  checkWrites,
  leaseCut,
  leaseIntervals,
  parseAudit,
  type Violation,
} from './checker.js';
import type { History } from './workload.js';

function history(): History {
  return {
    publishes: [
      { client: 'p1', payload: 'p1:1', qos: 1, sentMono: 100, ackMono: 110 },
      { client: 'p2', payload: 'p2:1', qos: 2, sentMono: 100, ackMono: 120 },
      { client: 'p2', payload: 'p2:2', qos: 2, sentMono: 130, ackMono: null },
    ],
    receipts: [
      { client: 's1', payload: 'p1:1', qos: 1, dup: false, mono: 111 },
      { client: 's1', payload: 'p2:1', qos: 2, dup: false, mono: 121 },
    ],
    connacks: [{ client: 's1', node: 1, mono: 10, sessionPresent: false }],
    subscribedAt: new Map([['s1', 50]]),
    errors: [],
    stickyReceipts: [],
    cleanClients: new Set(),
  };
}

const lease = (node: number, mono: number, leaseEnd: number, term = 1): AuditRecord => ({ evt: 'lease', mono, leaseEnd, node, term });
const write = (node: number, mono: number, leaseEnd: number | null): AuditRecord => ({
  evt: 'puback',
  mono,
  leaseEnd,
  node,
  term: 1,
  clientId: 'c',
  pid: 1,
});
const serveEnd = (node: number, mono: number, leaseEnd: number): AuditRecord => ({ evt: 'serve-end', mono, leaseEnd, node, term: 1 });
const kinds = (v: Violation[]) => v.map((x) => x.kind);
const jsonl = (records: AuditRecord[]): string => records.map((r) => `${JSON.stringify(r)}\n`).join('');
const source = (node: number, run: number, records: AuditRecord[], termMono: number | null = null): AuditSource => ({
  node,
  run,
  text: jsonl(records),
  termMono,
});

describe('jepsen checkers', { timeout: 10_000 }, () => {
  it('pass a clean history with QoS 1 duplicates and an unacknowledged publish never delivered', () => {
    const h = history();
    h.receipts.push({ client: 's1', payload: 'p1:1', qos: 1, dup: true, mono: 140 });
    const r = checkAll(h, [source(1, 0, [lease(1, 0, 1000), write(1, 5, 1000)])]);
    assert.deepEqual(r.violations, []);
    assert.equal(r.counts.qos1Duplicates, 1);
    assert.equal(r.counts.expectedDeliveries, 2);
    assert.equal(r.counts.unacknowledged, 1);
  });

  it('report an acknowledged publish a subscriber never got, and a QoS 2 message delivered twice', () => {
    const h = history();
    h.receipts.splice(0, 1);
    h.receipts.push({ client: 's1', payload: 'p2:1', qos: 2, dup: true, mono: 150 });
    const r = checkAll(h, []);
    assert.deepEqual(kinds(r.violations).sort(), ['lost', 'qos2-duplicate']);
    assert.equal(r.counts.lost, 1);
  });

  it('report a persistent session that comes back without session present', () => {
    const h = history();
    h.connacks.push({ client: 's1', node: 2, mono: 200, sessionPresent: false });
    assert.deepEqual(kinds(checkAll(h, []).violations), ['session-lost']);
  });

  it('report leases of two nodes that intersect, and not leases that follow each other', () => {
    const v: Violation[] = [];
    checkLeaseOverlap(leaseIntervals([lease(1, 0, 100), lease(2, 101, 300), lease(1, 301, 400)]), v);
    assert.deepEqual(v, []);
    checkLeaseOverlap(leaseIntervals([lease(1, 0, 100), lease(2, 90, 300)]), v);
    assert.deepEqual(kinds(v), ['lease-overlap']);
  });

  it('ignore a renewal reported after its lease ended (a node waking from a pause)', () => {
    assert.deepEqual(leaseIntervals([lease(1, 500, 400)]), []);
  });

  it('report writes without a lease, after it, or inside another node’s lease', () => {
    const intervals = leaseIntervals([lease(1, 0, 100), lease(2, 200, 300)]);
    const v: Violation[] = [];
    checkWrites([write(1, 50, 100), write(1, 60, null), write(1, 150, 100), write(1, 250, 1000)], intervals, v);
    assert.equal(v.length, 3);
    assert.deepEqual(
      v.map((x) => (x.kind === 'write-outside-lease' ? x.record.mono : -1)),
      [60, 150, 250],
    );
  });

  it('count a torn last line of a killed node’s audit log instead of failing', () => {
    const r = parseAudit(`${JSON.stringify(lease(1, 0, 100))}\n{"evt":"pub`);
    assert.equal(r.records.length, 1);
    assert.equal(r.unparsable, 1);
  });

  it('report a restarted node that writes inside the lease of its killed predecessor, and not one that waits it out', () => {
    // Node 2's first process led and was killed with its lease running to 500; node 2 run 1 is the
    // process started again. Elections wait out a dead leader's lease like a live one's.
    const killed = source(2, 0, [lease(2, 0, 500), write(2, 10, 500)]);
    const early = checkAll(history(), [killed, source(2, 1, [lease(2, 400, 900), write(2, 450, 900)])]);
    assert.deepEqual(kinds(early.violations).sort(), ['lease-overlap', 'write-outside-lease']);
    const late = checkAll(history(), [killed, source(2, 1, [lease(2, 600, 900), write(2, 650, 900)])]);
    assert.deepEqual(late.violations, []);
    assert.deepEqual(Object.keys(late.audit).sort(), ['2.0', '2.1']);
  });

  it("cut a cleanly stopped leader's lease at its serve-end, so only a successor serving before it is reported", () => {
    // SIGTERM at 100: node 1 ends serving at 105, then hands over, giving up a lease that ran to 400.
    const stopped = [lease(1, 0, 300), serveEnd(1, 105, 300), lease(1, 120, 400)];
    assert.equal(leaseCut(stopped, 100), 105);
    assert.equal(leaseCut([lease(1, 0, 300)], 100), 100, 'not serving: cut at the SIGTERM');
    assert.equal(leaseCut(stopped, null), null, 'killed or never stopped: not cut');
    const after = checkAll(history(), [source(1, 0, stopped, 100), source(2, 0, [lease(2, 110, 600), write(2, 115, 600)])]);
    assert.deepEqual(after.violations, []);
    const before = checkAll(history(), [source(1, 0, stopped, 100), source(2, 0, [lease(2, 90, 600), write(2, 95, 600)])]);
    assert.deepEqual(kinds(before.violations).sort(), ['lease-overlap', 'write-outside-lease']);
    const killed = checkAll(history(), [source(1, 0, stopped, null), source(2, 0, [lease(2, 110, 600), write(2, 115, 600)])]);
    assert.ok(kinds(killed.violations).includes('lease-overlap'), 'a lease that was not given up stands to its end');
  });

  it("cut a stopped leader's lease where it recorded giving it up at the handover, later than its serve-end", () => {
    const released: AuditRecord = { evt: 'lease-released', mono: 130, leaseEnd: null, node: 1, term: 1 };
    const stopped = [lease(1, 0, 300), serveEnd(1, 105, 300), lease(1, 120, 400), released];
    assert.equal(leaseCut(stopped, 100), 130);
    const successorAfter = checkAll(history(), [source(1, 0, stopped, 100), source(2, 0, [lease(2, 140, 600), write(2, 145, 600)])]);
    assert.deepEqual(successorAfter.violations, []);
    const successorInside = checkAll(history(), [source(1, 0, stopped, 100), source(2, 0, [lease(2, 110, 600), write(2, 115, 600)])]);
    assert.ok(kinds(successorInside.violations).includes('lease-overlap'), 'a successor leased before the release is reported');
  });
  it('two servers seen by a client: a QoS 0 receipt from node 1 more than the slack after node 2 gave a CONNACK', () => {
    const h = history();
    h.connacks.push({ client: 'sticky-sub', node: 1, mono: 1_000, sessionPresent: false });
    h.connacks.push({ client: 's1', node: 2, mono: 3_000, sessionPresent: true });
    h.stickyReceipts.push({ payload: 'sticky:1', node: 1, mono: 2_000 }, { payload: 'sticky:2', node: 1, mono: 3_400 });
    const quiet: Violation[] = [];
    checkTwoServersSeen(h, 500, quiet);
    assert.deepEqual(quiet, [], 'before node 2 served, and within the slack after');
    h.stickyReceipts.push({ payload: 'sticky:3', node: 1, mono: 3_600 });
    const out: Violation[] = [];
    checkTwoServersSeen(h, 500, out);
    assert.deepEqual(out, [
      { kind: 'two-servers-seen', payload: 'sticky:3', node: 1, receiptMono: 3_600, otherNode: 2, connackMono: 3_000 },
    ]);
  });

  it('two servers seen: quiet when the receipt node served again since (a CONNACK of its own), and for receipts of no node', () => {
    const h = history();
    h.connacks.push({ client: 's1', node: 2, mono: 3_000, sessionPresent: true });
    h.connacks.push({ client: 'sticky-sub', node: 1, mono: 5_000, sessionPresent: false });
    h.stickyReceipts.push({ payload: 'sticky:1', node: 1, mono: 6_000 }, { payload: 'sticky:2', node: 0, mono: 6_000 });
    const out: Violation[] = [];
    checkTwoServersSeen(h, 500, out);
    assert.deepEqual(out, []);
  });

  it('a clean-session client reconnecting without a session is no lost session', () => {
    const h = history();
    h.cleanClients.add('sticky-sub');
    h.connacks.push(
      { client: 'sticky-sub', node: 1, mono: 20, sessionPresent: false },
      { client: 'sticky-sub', node: 2, mono: 30, sessionPresent: false },
    );
    assert.deepEqual(kinds(checkAll(h, []).violations), []);
    h.cleanClients.clear();
    assert.deepEqual(kinds(checkAll(h, []).violations), ['session-lost']);
  });
});
