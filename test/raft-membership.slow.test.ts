// Three raft node programs with state files (docs/design.md "Fresh, amnesiac, bootstrap",
// docs/design.md "State file", docs/design.md "Force-start"), one story in order: bootstrap from fresh; a follower killed and restarted
// without its memory is replaced; a clean stop of all three resumes the committed log; two memory
// losses leave nobody serving; a force-start of the survivor brings the cluster back. Waits are
// bounded and fail naming what they waited for; nothing asserts speed.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { DriverStatus } from '../raft/driver/driver.js';
import { agreedLeader, linkAll, RaftNodeProcess, stopNodes } from './raft-node-process.js';
import { until } from './support/wait.js';

const E = 300;
const IDS = [1, 2, 3];
const WAIT_MS = 60 * E;
const dir = mkdtempSync(join(tmpdir(), 'raftmq-membership-'));
const fileOf = (id: number): string => join(dir, `node-${id}.state`);

async function start(id: number, extra: readonly string[] = []): Promise<RaftNodeProcess> {
  return RaftNodeProcess.start(id, IDS, E, 10_000, ['--state-file', fileOf(id), ...extra]);
}

/** A leader that every node follows, whose configuration lists all three node ids, each caught up. */
async function redundantLeader(nodes: readonly RaftNodeProcess[]): Promise<RaftNodeProcess> {
  return until(
    'a leader with three caught-up voters',
    async () => {
      const leader = await agreedLeader(nodes);
      if (leader === undefined || !(await leader.status()).redundant) return undefined;
      return leader;
    },
    WAIT_MS,
  );
}

async function propose(leader: RaftNodeProcess, texts: readonly string[]): Promise<void> {
  const replies = await leader.requestMany(texts.map((t) => `propose ${t}`));
  for (const [k, r] of replies.entries()) assert.match(r, /^ok \d+$/, `proposal ${texts[k]}`);
}

async function texts(node: RaftNodeProcess): Promise<string[]> {
  return (await node.entries()).flatMap(([, , text]) => (text === null ? [] : [text]));
}

async function waitTexts(node: RaftNodeProcess, want: readonly string[]): Promise<void> {
  await until(
    `node ${node.id} to apply ${want.length} entries`,
    async () => {
      const got = await texts(node);
      return want.every((t) => got.includes(t)) ? true : undefined;
    },
    WAIT_MS,
  );
}

async function sigterm(node: RaftNodeProcess): Promise<void> {
  node.signal('SIGTERM');
  await until('a clean exit', async () => (node.alive ? undefined : true), WAIT_MS);
  assert.equal(node.proc.exitCode, 0, node.stderr);
}

describe('raft node programs with state files', { timeout: 300_000 }, () => {
  const nodes = new Map<number, RaftNodeProcess>();
  const all = (): RaftNodeProcess[] => [...nodes.values()];
  const written: string[] = [];
  after(async () => {
    await stopNodes(all());
    rmSync(dir, { recursive: true, force: true });
  });

  test('three fresh nodes bootstrap one epoch and commit', async () => {
    for (const id of IDS) nodes.set(id, await start(id));
    await linkAll(all());
    for (const n of all()) assert.equal((await n.status()).membership, 'fresh');
    const leader = await redundantLeader(all());
    await propose(leader, ['a1', 'a2', 'a3']);
    written.push('a1', 'a2', 'a3');
    for (const n of all()) assert.equal((await n.status()).epoch.generation, 1);
  });

  test('a follower killed with kill -9 comes back amnesiac, is replaced by its new member, and catches up as a voter', async () => {
    const leader = await redundantLeader(all());
    const victim = all().find((n) => n !== leader)!;
    const oldMember = `${victim.id}.${(await victim.status()).incarnation}`;
    await victim.kill();
    const back = await start(victim.id);
    nodes.set(victim.id, back);
    await linkAll(all());
    const s = await back.status();
    assert.equal(s.membership, 'amnesiac');
    const newMember = `${victim.id}.${s.incarnation}`;
    assert.notEqual(newMember, oldMember);
    const now = await redundantLeader(all());
    const voters = (await now.status()).voters;
    assert.ok(voters.includes(newMember) && !voters.includes(oldMember), `configuration ${voters.join(',')}`);
    await propose(now, ['b1']);
    written.push('b1');
    await waitTexts(back, written);
  });

  test('SIGTERM to all three writes their state files; restarted from them, each is the same member and the committed log is intact', async () => {
    const before = new Map<number, string>();
    for (const n of all()) before.set(n.id, (await n.status()).incarnation);
    for (const n of all()) await sigterm(n);
    for (const id of IDS) assert.ok(existsSync(fileOf(id)), `node ${id} wrote ${fileOf(id)}`);
    for (const id of IDS) nodes.set(id, await start(id));
    await linkAll(all());
    for (const n of all()) {
      const s = await n.status();
      assert.equal(s.membership, 'member');
      assert.equal(s.incarnation, before.get(n.id));
      assert.ok(!existsSync(fileOf(n.id)), 'the file was consumed');
    }
    const leader = await redundantLeader(all());
    await propose(leader, ['c1']);
    written.push('c1');
    for (const n of all()) await waitTexts(n, written);
  });

  test('two nodes lose their memory: nobody serves, and every node reports needsForceStart', async () => {
    const leader = await redundantLeader(all());
    const survivor = leader.id;
    for (const n of all()) if (n.id !== survivor) await n.kill();
    for (const id of IDS) if (id !== survivor) nodes.set(id, await start(id));
    await linkAll(all());
    const statuses = await until(
      'every node to report needsForceStart',
      async () => {
        const s: DriverStatus[] = await Promise.all(all().map((n) => n.status()));
        return s.every((x) => x.needsForceStart) ? s : undefined;
      },
      WAIT_MS,
    );
    assert.ok(statuses.every((s) => s.role !== 'leader' || !s.hasLease));
    for (const n of all()) assert.match(await n.request('propose nobody'), /^err RAFT_NOT_LEADER/);
  });

  test('the survivor, stopped and force-started from its state file, makes a new epoch that the others join; it serves with the old log', async () => {
    const survivor = (await Promise.all(all().map(async (n) => ({ n, s: await n.status() })))).find((x) => x.s.voter)!.n;
    await sigterm(survivor);
    assert.ok(existsSync(fileOf(survivor.id)), 'a node that does not serve still writes its state file');
    const forced = await start(survivor.id, ['--cluster-force-start', '--force-start-timeout-ms', String(60 * E)]);
    nodes.set(survivor.id, forced);
    await linkAll(all());
    const leader = await redundantLeader(all());
    assert.equal(leader.id, survivor.id);
    for (const n of all()) assert.equal((await n.status()).epoch.generation, 2);
    await propose(leader, ['d1']);
    written.push('d1');
    for (const n of all()) await waitTexts(n, written);
  });
});
