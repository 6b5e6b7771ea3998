// The ranking of state files for a force-start (docs/design.md "Force-start", docs/design.md "Beyond the model"): epoch
// generation, then last log term, then last index; what each file lacks relative to the best; the
// command and the move-aside of an older FILE when the best is FILE.prev.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { StateFile } from '../../raft/driver/state-file.js';
import {
  type Candidate,
  compareCandidates,
  dataDirState,
  lacksOf,
  lastOf,
  planForceStart,
  rank,
  renderText,
  report,
  shellQuote,
} from './newest-state.js';

interface Shape {
  node?: number;
  clusterUid?: string;
  generation?: number;
  epochId?: string;
  /** Terms of the log entries after the snapshot, in order. */
  terms: readonly number[];
  snapshot?: { index: number; term: number };
  commit?: number;
  clusterTime?: number;
}

function fileOf(s: Shape): StateFile {
  const base = s.snapshot?.index ?? 0;
  const terms = [s.snapshot?.term ?? 0, ...s.terms];
  return {
    clusterId: 'raftmq',
    clusterUid: s.clusterUid ?? '',
    epoch: { generation: s.generation ?? 1, id: s.epochId ?? 'e1' },
    member: { node: s.node ?? 1, inc: 'i' },
    term: Math.max(...terms, 1),
    vote: 0,
    voteInc: '',
    configuration: null,
    snapshot: s.snapshot === undefined ? null : { ...s.snapshot, time: 0, config: null, chunks: [new Uint8Array(1)], bytes: 1 },
    log: s.terms.map((term, k) => ({ index: base + k + 1, term, time: 0, data: null })),
    commitIndex: s.commit ?? base,
    clusterTime: s.clusterTime ?? 0,
    fileId: 'f',
  };
}

function candidate(path: string, s: Shape, prev = false, fileExists = true): Candidate {
  return { path: prev ? `${path}.prev` : path, stateFile: path, prev, consumed: prev, fileExists, file: fileOf(s) };
}

const pathsOf = (cs: readonly Candidate[]): string[] => rank(cs).map((r) => r.path);

describe('newest-state ranking', { timeout: 30_000 }, () => {
  it('puts a newer epoch first even when an older epoch holds a longer log of higher terms', () => {
    const old = candidate('/a', { generation: 1, terms: [1, 5, 5, 5, 5] });
    const forced = candidate('/b', { generation: 2, epochId: 'e2', terms: [1] });
    assert.deepEqual(pathsOf([old, forced]), ['/b', '/a']);
    assert.deepEqual(rank([old, forced])[1]!.lacks, { kind: 'other-epoch' });
  });

  it('within an epoch, a higher last term beats a longer log (§5.4.1 up-to-date)', () => {
    const longer = candidate('/a', { terms: [1, 2, 2, 2, 2] });
    const newerTerm = candidate('/b', { terms: [1, 2, 3] });
    const ranked = rank([longer, newerTerm]);
    assert.deepEqual(
      ranked.map((r) => r.path),
      ['/b', '/a'],
    );
    assert.deepEqual(ranked[1]!.lacks, { kind: 'behind', entries: 1, notInBest: 3 }, 'agrees up to index 2; 3..5 were overwritten');
  });

  it('takes the last index from the snapshot when the log after it is empty, and counts compacted entries as held', () => {
    const compacted = candidate('/a', { terms: [], snapshot: { index: 40, term: 3 } });
    const full = candidate('/b', { terms: [...Array(40).fill(3), 3, 3] });
    assert.deepEqual(lastOf(compacted.file), { index: 40, term: 3 });
    const ranked = rank([compacted, full]);
    assert.deepEqual(
      ranked.map((r) => [r.path, r.lastIndex]),
      [
        ['/b', 42],
        ['/a', 40],
      ],
    );
    assert.deepEqual(ranked[1]!.lacks, { kind: 'behind', entries: 2, notInBest: 0 });
    const stale = candidate('/c', { terms: [3], snapshot: { index: 10, term: 1 } });
    const withOldTerms = candidate('/d', { terms: [...Array(10).fill(1), ...Array(32).fill(3)] });
    assert.deepEqual(lacksOf(withOldTerms.file, stale.file), { kind: 'behind', entries: 31, notInBest: 0 }, 'agrees up to index 11');
    const tail = candidate('/e', { terms: [2], snapshot: { index: 10, term: 1 } });
    assert.deepEqual(
      lacksOf(withOldTerms.file, tail.file),
      { kind: 'behind', entries: 32, notInBest: 1 },
      'its entry 11 of term 2 was overwritten',
    );
    const compactedBest = candidate('/f', { terms: [3, 3], snapshot: { index: 20, term: 3 } });
    const lagging = candidate('/g', { terms: Array(15).fill(1) });
    assert.deepEqual(
      lacksOf(compactedBest.file, lagging.file),
      { kind: 'behind', entries: 7, notInBest: 0 },
      'below the snapshot: agreeing',
    );
  });

  it('an equal generation with another epoch id is another epoch, however close its log', () => {
    const a = candidate('/a', { generation: 2, epochId: 'x', terms: [1, 1] });
    const b = candidate('/b', { generation: 2, epochId: 'y', terms: [1] });
    assert.deepEqual(rank([a, b])[1]!.lacks, { kind: 'other-epoch' });
  });

  it('leaves out the files of another cluster identity, and every identity-bearing file when none is held by more nodes', () => {
    const own1 = candidate('/1', { node: 1, clusterUid: 'aa', terms: [1] });
    const own3 = candidate('/3', { node: 3, clusterUid: 'aa', terms: [1] });
    // Node 2's file is another cluster's, with a newer epoch and a longer log: it would rank first.
    const copied = candidate('/2', { node: 2, clusterUid: 'bb', generation: 5, epochId: 'x', terms: [1, 1, 1] });
    const r = report('raftmq', [own1, copied, own3], []);
    assert.deepEqual(
      r.ranking.map((x) => x.path),
      ['/1', '/3'],
    );
    assert.deepEqual(
      r.unusable.map((u) => [u.path, u.code]),
      [['/2', 'RAFT_STATE_FILE_FOREIGN']],
    );
    assert.equal(r.forceStart?.node, 1);
    const old = candidate('/4', { node: 2, terms: [1, 1] });
    const even = report('raftmq', [own1, copied, old], []);
    assert.deepEqual(
      even.ranking.map((x) => x.path),
      ['/4'],
      'one node each: neither identity is used; a file without one still is',
    );
    assert.deepEqual(even.unusable.map((u) => u.path).sort(), ['/1', '/2']);
  });

  it('prefers FILE to an equal FILE.prev, so nothing needs moving aside', () => {
    const file = candidate('/n1', { terms: [1, 1] });
    const prev = candidate('/n1', { terms: [1, 1] }, true);
    assert.deepEqual(pathsOf([prev, file]), ['/n1', '/n1.prev']);
    assert.deepEqual(rank([prev, file])[1]!.lacks, { kind: 'behind', entries: 0, notInBest: 0 });
  });
});

describe('newest-state force-start plan', { timeout: 30_000 }, () => {
  it('names FILE in the command when the best is FILE.prev, and moves an existing, older FILE aside first', () => {
    const plan = planForceStart(candidate('/var/lib/raftmq/state', { node: 2, terms: [1] }, true, true));
    assert.equal(plan.node, 2);
    assert.equal(plan.from, '/var/lib/raftmq/state.prev');
    assert.equal(plan.moveAside, '/var/lib/raftmq/state');
    assert.equal(plan.command, "raftmq <node 2's usual flags> --state-file /var/lib/raftmq/state --cluster-force-start");
    assert.equal(planForceStart(candidate('/s', { terms: [1] }, true, false)).moveAside, null, 'no FILE: the force-start reads .prev');
    assert.equal(planForceStart(candidate('/s', { terms: [1] })).moveAside, null);
  });

  it('quotes a path a shell would split or expand', () => {
    assert.equal(shellQuote('/plain/path-1.state'), '/plain/path-1.state');
    assert.equal(shellQuote("/my dir/it's"), `'/my dir/it'\\''s'`);
    assert.equal(shellQuote('/x/$HOME'), "'/x/$HOME'");
  });

  it('prints the ranking, the lacks, the procedure and the unusable files without their control characters', () => {
    const r = report(
      'raftmq',
      [
        candidate('/n1', { node: 1, terms: [1, 1, 1] }),
        candidate('/n2', { node: 2, terms: [1] }),
        candidate('/n3', { node: 3, generation: 0, terms: [] }),
      ],
      [{ path: '/n4', code: 'RAFT_STATE_FILE_CORRUPT', reason: 'raft state file is corrupt: /n4: bad\u001b[31m' }],
    );
    const text = renderText(r);
    assert.match(text, /2 entries behind/);
    assert.match(text, /other epoch/);
    assert.match(text, /--state-file \/n1 --cluster-force-start/);
    assert.match(text, /SIGTERM/);
    assert.match(text, /amnesiac/);
    assert.ok(text.includes('/n4: bad?[31m') && !text.includes('\u001b'), text);
    assert.equal(renderText(report('raftmq', [], r.unusable)).includes('No usable state file'), true);
    const farFuture = renderText(report('raftmq', [candidate('/n9', { terms: [1], clusterTime: Number.MAX_SAFE_INTEGER })], []));
    assert.ok(farFuture.includes(String(Number.MAX_SAFE_INTEGER)), 'a time past what a Date holds prints as the number');
  });
});

describe('newest-state on a data directory', { timeout: 30_000 }, () => {
  const state = {
    term: 3,
    vote: 2,
    voteInc: 'v',
    entries: [
      { index: 5, term: 2, time: 50, data: null },
      { index: 6, term: 3, time: 60, data: null },
    ],
    baseConfig: null,
    snapshot: { index: 4, term: 2, time: 40, config: null, chunks: [new Uint8Array(1)], bytes: 1 },
  };
  const dir = (path: string, node: number, s = state): Candidate => ({
    path,
    stateFile: `${path}.state`,
    prev: false,
    consumed: false,
    fileExists: true,
    dataDir: path,
    fromDataDir: true,
    file: dataDirState({
      clusterId: 'raftmq',
      nodeId: node,
      incarnation: 'm',
      record: { epoch: { generation: 1, id: 'e1' }, clusterUid: '' },
      state: s,
    }),
  });

  it("takes the record's epoch, the member and the last entry's time; it keeps no commit index", () => {
    const f = dir('/d1', 2).file;
    assert.deepEqual(
      [f.epoch, f.member, f.term, lastOf(f), f.clusterTime],
      [{ generation: 1, id: 'e1' }, { node: 2, inc: 'm' }, 3, { index: 6, term: 3 }, 60],
    );
    const onlySnapshot = dataDirState({
      clusterId: 'raftmq',
      nodeId: 1,
      incarnation: 'm',
      record: { epoch: { generation: 1, id: 'e1' }, clusterUid: '' },
      state: { ...state, entries: [] },
    });
    assert.deepEqual([lastOf(onlySnapshot), onlySnapshot.clusterTime], [{ index: 4, term: 2 }, 40]);
    const r = rank([dir('/d1', 1), candidate('/n2', { node: 2, terms: [1, 1] })]);
    assert.deepEqual(
      r.map((x) => [x.path, x.fromDataDir, x.commitIndex]),
      [
        ['/d1', true, null],
        ['/n2', false, 0],
      ],
    );
  });

  it('forces from the directory with --data-dir, moving nothing aside, and prints it as a data directory', () => {
    const plan = planForceStart(dir('/var/lib/raftmq/raft', 3));
    assert.equal(
      plan.command,
      "raftmq <node 3's usual flags> --state-file /var/lib/raftmq/raft.state --data-dir /var/lib/raftmq/raft --cluster-force-start",
    );
    assert.equal(plan.moveAside, null);
    const text = renderText(report('raftmq', [dir('/d1', 1)], []));
    assert.match(text, /1 usable states \(state files and data directories\)/);
    assert.match(text, /from node 1's data directory \/d1:/);
    assert.match(text, /no \(data dir\)/);
    assert.match(text, / {2}- {6}/, 'no commit index');
  });
});

// ---- properties ----

const arbShape: fc.Arbitrary<Shape> = fc
  .record({
    generation: fc.integer({ min: 1, max: 3 }),
    epochId: fc.constantFrom('a', 'b'),
    steps: fc.array(fc.integer({ min: 0, max: 1 }), { maxLength: 8 }),
    snap: fc.option(fc.record({ index: fc.integer({ min: 1, max: 5 }), term: fc.integer({ min: 1, max: 2 }) }), { nil: undefined }),
    clusterTime: fc.integer({ min: 0, max: 3 }),
  })
  .map(({ generation, epochId, steps, snap, clusterTime }) => {
    let term = snap?.term ?? 1;
    const terms = steps.map((s) => (term += s));
    return { generation, epochId, terms, snapshot: snap, commit: snap?.index ?? 0, clusterTime };
  });

const arbCandidates: fc.Arbitrary<Candidate[]> = fc
  .array(fc.tuple(arbShape, fc.boolean()), { minLength: 1, maxLength: 6 })
  .map((xs) => xs.map(([s, prev], k) => candidate(`/n${k}`, s, prev)));

const sign = (n: number): number => (n > 0 ? 1 : n < 0 ? -1 : 0);
const key = (c: Candidate): number[] => {
  const l = lastOf(c.file);
  return [c.file.epoch.generation, l.term, l.index];
};

describe('newest-state ranking properties', { timeout: 60_000 }, () => {
  it('the comparison is a total order: antisymmetric, transitive, zero only for the same path', () => {
    fc.assert(
      fc.property(arbCandidates, (cs) => {
        for (const a of cs) {
          for (const b of cs) {
            assert.equal(sign(compareCandidates(a, b)) + sign(compareCandidates(b, a)), 0);
            assert.equal(compareCandidates(a, b) === 0, a.path === b.path);
            for (const c of cs) {
              if (compareCandidates(a, b) <= 0 && compareCandidates(b, c) <= 0) assert.ok(compareCandidates(a, c) <= 0);
            }
          }
        }
      }),
    );
  });

  it('the ranking does not depend on the order the files were given, and is ordered by the three keys', () => {
    fc.assert(
      fc.property(
        arbCandidates.chain((cs) => fc.tuple(fc.constant(cs), fc.shuffledSubarray(cs, { minLength: cs.length, maxLength: cs.length }))),
        ([cs, shuffled]) => {
          assert.deepEqual(pathsOf(shuffled), pathsOf(cs));
          const byPath = new Map(cs.map((c) => [c.path, c]));
          const keys = rank(cs).map((r) => key(byPath.get(r.path)!));
          for (let k = 1; k < keys.length; k++) {
            const [p, q] = [keys[k - 1]!, keys[k]!];
            assert.ok(p[0]! > q[0]! || (p[0] === q[0] && (p[1]! > q[1]! || (p[1] === q[1] && p[2]! >= q[2]!))), `${p} before ${q}`);
          }
        },
      ),
    );
  });

  it('what a file lacks is never negative, and a prefix of the best log lacks exactly the difference in last index', () => {
    fc.assert(
      fc.property(arbShape, fc.nat(), (best, cut) => {
        const b = fileOf(best);
        for (const r of rank([
          candidate('/b', best),
          candidate('/o', { ...best, terms: best.terms.slice(0, cut % (best.terms.length + 1)) }),
        ])) {
          if (r.lacks.kind !== 'behind') continue;
          assert.ok(r.lacks.entries >= 0 && r.lacks.notInBest >= 0);
          assert.equal(r.lacks.entries, lastOf(b).index - r.lastIndex);
          assert.equal(r.lacks.notInBest, 0);
        }
      }),
    );
  });
});
