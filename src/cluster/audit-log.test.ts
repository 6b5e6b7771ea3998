// The audit stream: one JSON line per record with the fields checkers rely on, host-monotonic
// times comparable across processes, written in batches, bounded with counted drops.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { describe, it } from 'node:test';
import { CONFIG_ERROR } from '../errors.js';
import { AuditLog, hostMonotonicMs, perfToHost } from './audit-log.js';

const dir = mkdtempSync(join(tmpdir(), 'raftmq-audit-'));
let seq = 0;

function leaseFor(term: number, untilPerf: number) {
  return { currentTerm: term, leaseUntil: () => untilPerf };
}

function records(file: string): Record<string, unknown>[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe('audit log', { timeout: 10_000 }, () => {
  it('records acks, deliveries and renewals with evt, mono, term, leaseEnd, node, clientId and pid', async () => {
    const file = join(dir, `a${++seq}.jsonl`);
    const leaseEnd = performance.now() + 400;
    const audit = new AuditLog({ file, node: 2, lease: leaseFor(7, leaseEnd) });
    const before = hostMonotonicMs();
    audit.leaseRenewed(leaseEnd, 7);
    audit.packet({ type: 'connack', sessionPresent: true, code: 0 }, 'sub-1');
    audit.packet({ type: 'puback', pid: 12, code: 0 }, 'pub-1');
    const msg = { topic: 't', payload: new Uint8Array([1]), qos: 2 as const, retain: false };
    audit.packet({ type: 'publish', pid: 5, qos: 2, retain: false, dup: true, msg }, 'sub-1');
    await audit.close();
    const after = hostMonotonicMs();
    const r = records(file);
    assert.deepEqual(
      r.map((x) => [x.evt, x.node, x.term, x.clientId ?? null, x.pid ?? null]),
      [
        ['lease', 2, 7, null, null],
        ['connack', 2, 7, 'sub-1', null],
        ['puback', 2, 7, 'pub-1', 12],
        ['publish', 2, 7, 'sub-1', 5],
      ],
    );
    for (const x of r) {
      assert.ok((x.mono as number) >= before && (x.mono as number) <= after, `mono ${x.mono} within [${before}, ${after}]`);
      assert.ok(Math.abs((x.leaseEnd as number) - perfToHost(leaseEnd)) < 1e-6);
    }
    assert.equal(r[3]?.dup, true);
    assert.equal(r[3]?.qos, 2);
  });

  it('puts leaseEnd null on records made without a lease, such as the lease given up at a handover', async () => {
    const file = join(dir, `a${++seq}.jsonl`);
    const audit = new AuditLog({ file, node: 1, lease: leaseFor(3, 0) });
    audit.packet({ type: 'suback', pid: 1, codes: [1] }, 'c');
    audit.leaseReleased();
    await audit.close();
    const r = records(file);
    assert.equal(r[0]?.leaseEnd, null);
    assert.deepEqual([r[1]?.evt, r[1]?.term, r[1]?.leaseEnd], ['lease-released', 3, null]);
  });

  it('drops records beyond its buffer, counts them, and says so in the stream', async () => {
    const file = join(dir, `a${++seq}.jsonl`);
    const audit = new AuditLog({ file, node: 1, lease: leaseFor(1, 0), bufferedRecordsMax: 10 });
    for (let pid = 1; pid <= 25; pid++) audit.packet({ type: 'puback', pid, code: 0 }, 'c');
    await audit.close();
    const r = records(file);
    assert.equal(audit.dropped, 15);
    assert.deepEqual(
      r.filter((x) => x.evt === 'puback').map((x) => x.pid),
      [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
    );
    assert.deepEqual(
      r.filter((x) => x.evt === 'audit-dropped').map((x) => x.count),
      [15],
    );
  });

  it('writes without being closed, and appends to an existing file', async () => {
    const file = join(dir, `a${++seq}.jsonl`);
    const first = new AuditLog({ file, node: 1, lease: leaseFor(1, 0) });
    first.packet({ type: 'puback', pid: 1, code: 0 }, 'c');
    await first.close();
    const audit = new AuditLog({ file, node: 1, lease: leaseFor(1, 0) });
    for (let pid = 2; pid <= 4; pid++) audit.packet({ type: 'puback', pid, code: 0 }, 'c');
    // Bounded wait for the asynchronous write: 200 polls of 10 ms.
    for (let i = 0; i < 200 && records(file).length < 4; i++) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(
      records(file).map((x) => x.pid),
      [1, 2, 3, 4],
    );
    await audit.close();
  });

  it('refuses a file it cannot open, naming the flag', () => {
    assert.throws(
      () => new AuditLog({ file: join(dir, 'missing-dir', 'a.jsonl'), node: 1, lease: leaseFor(1, 0) }),
      (err: Error & { code?: string }) => err.code === CONFIG_ERROR.UNWRITABLE_FILE && /--audit-log/.test(err.message),
    );
  });
});
