// Checkers over a run's history and the nodes' audit logs (pure: data in, verdicts out).
//
//   delivery   every acknowledged publish reaches every subscriber subscribed before it was sent
//              (queues are sized so admission never drops); a persistent session that comes back
//              without session present is reported too, since its queue is gone;
//   qos2       no subscriber gets a QoS 2 message twice; QoS 1 duplicates are counted (allowed);
//   serving    lease intervals [renewal mono, leaseEnd] of different processes never intersect, and
//              no ack or delivery write happens outside the writer's lease or inside another
//              process's;
//   two servers, from the clients' side (independent of the audit logs): the sticky subscriber
//              never receives a QoS 0 message (routed without a commit) from node A more than
//              the slack (E) after some client got node B's CONNACK, unless A gave a CONNACK since
//              (it serves again in a period of its own).
// Times are host-monotonic ms (src/cluster/audit-log.ts), the same clock in every process, so the
// records of a node's successive processes (one audit file each) compare with each other and with
// the other nodes'. A process is (node, run): a node id restarted after a kill is a new process
// whose writes must not fall inside its dead predecessor's lease, which elections wait out like any
// other. The one lease that ends early is a clean stop's: on SIGTERM a node stops serving, then gives
// its lease up before it hands leadership over (docs/design.md "Leases and votes", docs/design.md "State file"), so a
// stopped process's lease intervals are cut at its serve-end (at the SIGTERM when it was not serving).
import type { History } from './workload.js';

export interface AuditRecord {
  evt: string;
  /** Set by the checker: which process of the node wrote it (0 first, +1 per restart). */
  run?: number;
  mono: number;
  term?: number;
  leaseEnd?: number | null;
  node: number;
  clientId?: string | null;
  pid?: number | null;
  count?: number;
}

export type Violation =
  | { kind: 'lost'; subscriber: string; payload: string; qos: number; ackMono: number }
  | { kind: 'qos2-duplicate'; subscriber: string; payload: string; times: number }
  | { kind: 'session-lost'; client: string; node: number; mono: number }
  | { kind: 'lease-overlap'; a: LeaseInterval; b: LeaseInterval }
  | { kind: 'write-outside-lease'; record: AuditRecord; why: string }
  | { kind: 'audit-incomplete'; node: number; run: number; dropped: number }
  | { kind: 'two-servers-seen'; payload: string; node: number; receiptMono: number; otherNode: number; connackMono: number };

/** One process's audit file. */
export interface AuditSource {
  node: number;
  /** 0 for the node's first process, +1 per restart. */
  run: number;
  text: string;
  /** Host-monotonic ms at which the harness sent this process SIGTERM; null if it never did. */
  termMono: number | null;
}

export interface LeaseInterval {
  node: number;
  run: number;
  term: number;
  start: number;
  end: number;
}

export interface AuditSummary {
  records: number;
  leaseRenewals: number;
  /** Renewals whose lease had already ended when reported (a node waking from a pause). */
  emptyRenewals: number;
  writes: number;
  unparsable: number;
}

/** Audit summaries are keyed `node.run`. */
export type ProcessKey = `${number}.${number}`;

export function processKey(node: number, run: number): ProcessKey {
  return `${node}.${run}`;
}

export interface CheckResult {
  /** The first VIOLATIONS_LISTED_MAX violations. */
  violations: Violation[];
  /** Every violation, by kind. */
  violationTotals: Record<string, number>;
  counts: {
    published: number;
    acknowledged: number;
    acknowledgedQos1: number;
    acknowledgedQos2: number;
    unacknowledged: number;
    receipts: number;
    expectedDeliveries: number;
    delivered: number;
    lost: number;
    qos1Duplicates: number;
    qos2Duplicates: number;
    /** Receipts of payloads never acknowledged to the publisher (allowed: ack lost in a fault). */
    deliveredUnacknowledged: number;
  };
  audit: Record<ProcessKey, AuditSummary>;
}

/** Violations listed in full beyond which only counts are kept. */
const VIOLATIONS_LISTED_MAX = 500;

/** Parses one node's audit stream; a torn last line (kill -9 mid-write) is counted, not fatal. */
export function parseAudit(text: string): { records: AuditRecord[]; unparsable: number } {
  const records: AuditRecord[] = [];
  let unparsable = 0;
  for (const line of text.split('\n')) {
    if (line === '') continue;
    try {
      const r = JSON.parse(line) as AuditRecord;
      if (typeof r.evt === 'string' && typeof r.mono === 'number' && typeof r.node === 'number') records.push(r);
      else unparsable++;
    } catch {
      unparsable++;
    }
  }
  return { records, unparsable };
}

const WRITE_EVENTS = new Set(['connack', 'suback', 'unsuback', 'puback', 'pubrec', 'pubcomp', 'pubrel', 'publish']);

export function checkHistory(h: History, out: Violation[]): CheckResult['counts'] {
  const acked = h.publishes.filter((p) => p.ackMono !== null);
  const ackedSet = new Set(acked.map((p) => p.payload));
  const byClient = new Map<string, Map<string, number>>();
  let deliveredUnacknowledged = 0;
  for (const r of h.receipts) {
    let m = byClient.get(r.client);
    if (m === undefined) {
      m = new Map();
      byClient.set(r.client, m);
    }
    m.set(r.payload, (m.get(r.payload) ?? 0) + 1);
  }
  const qosOf = new Map(h.publishes.map((p) => [p.payload, p.qos] as const));
  let qos1Duplicates = 0;
  let qos2Duplicates = 0;
  for (const [client, m] of byClient) {
    for (const [payload, times] of m) {
      if (!ackedSet.has(payload)) deliveredUnacknowledged++;
      if (times < 2) continue;
      if (qosOf.get(payload) === 2) {
        qos2Duplicates += times - 1;
        out.push({ kind: 'qos2-duplicate', subscriber: client, payload, times });
      } else {
        qos1Duplicates += times - 1;
      }
    }
  }
  let expected = 0;
  let delivered = 0;
  let lost = 0;
  for (const [sub, at] of h.subscribedAt) {
    const got = byClient.get(sub);
    for (const p of acked) {
      if (p.sentMono < at) continue;
      expected++;
      if (got?.has(p.payload) === true) delivered++;
      else {
        lost++;
        out.push({ kind: 'lost', subscriber: sub, payload: p.payload, qos: p.qos, ackMono: p.ackMono as number });
      }
    }
  }
  const seen = new Set<string>();
  for (const c of h.connacks) {
    if (h.cleanClients.has(c.client)) continue;
    if (seen.has(c.client) && !c.sessionPresent) out.push({ kind: 'session-lost', client: c.client, node: c.node, mono: c.mono });
    seen.add(c.client);
  }
  return {
    published: h.publishes.length,
    acknowledged: acked.length,
    acknowledgedQos1: acked.filter((p) => p.qos === 1).length,
    acknowledgedQos2: acked.filter((p) => p.qos === 2).length,
    unacknowledged: h.publishes.length - acked.length,
    receipts: h.receipts.length,
    expectedDeliveries: expected,
    delivered,
    lost,
    qos1Duplicates,
    qos2Duplicates,
    deliveredUnacknowledged,
  };
}

/** Lease intervals of one process, non-empty only, each cut at `cutMono` if given. */
export function leaseIntervals(records: readonly AuditRecord[], cutMono: number | null = null): LeaseInterval[] {
  const out: LeaseInterval[] = [];
  for (const r of records) {
    if (r.evt !== 'lease' || typeof r.leaseEnd !== 'number') continue;
    const end = cutMono === null ? r.leaseEnd : Math.min(r.leaseEnd, cutMono);
    if (end <= r.mono) continue;
    out.push({ node: r.node, run: r.run ?? 0, term: r.term ?? 0, start: r.mono, end });
  }
  return out;
}

/** Where a cleanly stopped process gave its lease up: its `lease-released` record (written when it
 * hands leadership over), else its first serve-end at or after the SIGTERM, else the SIGTERM itself
 * (it was not serving); null for a process never sent SIGTERM. */
export function leaseCut(records: readonly AuditRecord[], termMono: number | null): number | null {
  if (termMono === null) return null;
  // The process recorded where it gave its lease up (a handover): exact.
  const released = records.find((r) => r.evt === 'lease-released' && r.mono >= termMono);
  if (released !== undefined) return released.mono;
  const end = records.find((r) => r.evt === 'serve-end' && r.mono >= termMono);
  return end === undefined ? termMono : end.mono;
}

const sameProcess = (a: { node: number; run?: number }, b: { node: number; run?: number }): boolean =>
  a.node === b.node && (a.run ?? 0) === (b.run ?? 0);

/** Sweep by start: an interval that starts before another process's latest end intersects it. */
export function checkLeaseOverlap(intervals: readonly LeaseInterval[], out: Violation[]): void {
  const sorted = [...intervals].sort((a, b) => a.start - b.start);
  const latest = new Map<ProcessKey, LeaseInterval>();
  for (const iv of sorted) {
    for (const other of latest.values()) {
      if (!sameProcess(other, iv) && other.end > iv.start) out.push({ kind: 'lease-overlap', a: other, b: iv });
    }
    const key = processKey(iv.node, iv.run);
    const mine = latest.get(key);
    if (mine === undefined || iv.end > mine.end) latest.set(key, iv);
  }
}

/** Each write of one process within its own lease, and inside no other process's lease interval. */
export function checkWrites(records: readonly AuditRecord[], intervals: readonly LeaseInterval[], out: Violation[]): number {
  let writes = 0;
  for (const r of records) {
    if (!WRITE_EVENTS.has(r.evt)) continue;
    writes++;
    if (typeof r.leaseEnd !== 'number') {
      out.push({ kind: 'write-outside-lease', record: r, why: 'no lease held' });
      continue;
    }
    if (r.mono >= r.leaseEnd) {
      out.push({ kind: 'write-outside-lease', record: r, why: `${(r.mono - r.leaseEnd).toFixed(1)} ms after its lease ended` });
      continue;
    }
    const hit = intervals.find((iv) => !sameProcess(iv, r) && iv.start <= r.mono && r.mono < iv.end);
    if (hit !== undefined)
      out.push({ kind: 'write-outside-lease', record: r, why: `inside node ${hit.node} run ${hit.run}'s lease (term ${hit.term})` });
  }
  return writes;
}

/** The client-side two-servers check (see the head of this file), over the sticky subscriber's
 * receipts and every client's CONNACKs, all in host-monotonic ms. */
export function checkTwoServersSeen(h: History, slackMs: number, out: Violation[]): void {
  const connacks = h.connacks.filter((c) => c.node !== 0).sort((a, b) => a.mono - b.mono);
  for (const r of h.stickyReceipts) {
    if (r.node === 0) continue;
    // The latest CONNACK of the receipt's own node before it: a period of its own from then on.
    let ownSince = Number.NEGATIVE_INFINITY;
    for (const c of connacks) {
      if (c.mono > r.mono) break;
      if (c.node === r.node) ownSince = c.mono;
    }
    const other = connacks.find((c) => c.node !== r.node && c.mono > ownSince && c.mono < r.mono - slackMs);
    if (other !== undefined) {
      out.push({
        kind: 'two-servers-seen',
        payload: r.payload,
        node: r.node,
        receiptMono: r.mono,
        otherNode: other.node,
        connackMono: other.mono,
      });
    }
  }
}

export function checkAll(h: History, audits: readonly AuditSource[], o: { slackMs: number } = { slackMs: 500 }): CheckResult {
  const violations: Violation[] = [];
  const counts = checkHistory(h, violations);
  checkTwoServersSeen(h, o.slackMs, violations);
  const audit: Record<ProcessKey, AuditSummary> = {};
  const parsed: AuditRecord[][] = [];
  const intervals: LeaseInterval[] = [];
  for (const src of audits) {
    const { records, unparsable } = parseAudit(src.text);
    for (const r of records) r.run = src.run;
    parsed.push(records);
    const dropped = records.filter((r) => r.evt === 'audit-dropped').reduce((s, r) => s + (r.count ?? 0), 0);
    if (dropped > 0) violations.push({ kind: 'audit-incomplete', node: src.node, run: src.run, dropped });
    for (const iv of leaseIntervals(records, leaseCut(records, src.termMono))) intervals.push(iv);
    audit[processKey(src.node, src.run)] = {
      records: records.length,
      leaseRenewals: records.filter((r) => r.evt === 'lease').length,
      emptyRenewals: records.filter((r) => r.evt === 'lease' && typeof r.leaseEnd === 'number' && r.leaseEnd <= r.mono).length,
      writes: 0,
      unparsable,
    };
  }
  checkLeaseOverlap(intervals, violations);
  audits.forEach((src, i) => {
    const s = audit[processKey(src.node, src.run)]!;
    s.writes = checkWrites(parsed[i]!, intervals, violations);
  });
  return { violations: violations.slice(0, VIOLATIONS_LISTED_MAX), violationTotals: violationCounts(violations), counts, audit };
}

/** Violations by kind, for the summary line (the list may be truncated). */
export function violationCounts(v: readonly Violation[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const x of v) out[x.kind] = (out[x.kind] ?? 0) + 1;
  return out;
}
