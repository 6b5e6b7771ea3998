// RaftDriver with state files, in one process over loopback transports: the clean-stop API the
// broker wires (handOver, stop, writeStateFile, shutdown), the membership record, and resuming.
// Waits are bounded; nothing asserts speed.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { LogEntry, Message } from '../raft/core/messages.js';
import { type DriverLogger, RaftDriver } from '../raft/driver/driver.js';
import { DriverError } from '../raft/driver/errors.js';
import { readRecord } from '../raft/driver/state-file.js';
import { Transport } from '../raft/transport/transport.js';
import { LOOPBACK, waitFor } from '../raft/transport/transport-harness.testkit.js';

const E = 200;
const IDS = [1, 2, 3];
const dir = mkdtempSync(join(tmpdir(), 'raftmq-driver-state-'));
const fileOf = (id: number): string => join(dir, `node-${id}.state`);
const quiet: DriverLogger = { info: () => {}, warn: () => {}, error: () => {} };

interface Node {
  driver: RaftDriver;
  transport: Transport<Message>;
  committed: LogEntry[];
  hello: { incarnation: string; epoch: unknown };
}

const live: Node[] = [];
after(async () => {
  await Promise.all(live.map((n) => n.driver.stop()));
  rmSync(dir, { recursive: true, force: true });
});

function makeNode(id: number, o: { stateFile?: string; holdMs?: number } = {}): Node {
  const n = { committed: [] } as unknown as Node;
  n.driver = new RaftDriver({
    id,
    nodes: IDS,
    stateFile: o.stateFile ?? fileOf(id),
    electionTimeoutMs: E,
    ...(o.holdMs === undefined ? {} : { holdMs: o.holdMs }),
    logger: quiet,
    onCommitted: (entries) => n.committed.push(...entries),
    transport: (validate, identity) => {
      n.hello = { incarnation: identity.incarnation, epoch: identity.epoch };
      n.transport = new Transport<Message>({
        nodeId: id,
        incarnation: identity.incarnation,
        clusterId: 'raftmq',
        epoch: identity.epoch,
        listen: { host: LOOPBACK, port: 0 },
        peers: new Map(IDS.map((p) => [p, { host: LOOPBACK, port: 0 }])),
        logger: quiet,
        validate,
      });
      return n.transport;
    },
  });
  live.push(n);
  return n;
}

async function startAll(make: (id: number) => Node = makeNode): Promise<Node[]> {
  const nodes = IDS.map(make);
  for (const n of nodes) await n.driver.start();
  for (const n of nodes) for (const o of nodes) if (o !== n) n.transport.setPeerAddress(o.driver.id, o.transport.address());
  return nodes;
}

async function redundantLeader(nodes: Node[]): Promise<Node> {
  let leader: Node | undefined;
  await waitFor(
    'a leader with three caught-up voters',
    () => {
      leader = nodes.find((n) => n.driver.status().redundant);
      return leader !== undefined;
    },
    60 * E,
  );
  return leader!;
}

const texts = (n: Node): string[] => n.committed.flatMap((e) => (e.data === null ? [] : [new TextDecoder().decode(e.data)]));

describe('RaftDriver with state files', { timeout: 60_000 }, () => {
  test('fresh drivers bootstrap, write their membership record, and resume from their files after shutdown()', async () => {
    const nodes = await startAll();
    for (const n of nodes) assert.equal(n.driver.status().membership, 'fresh');
    const leader = await redundantLeader(nodes);
    for (const n of nodes) {
      assert.equal(readRecord(fileOf(n.driver.id), { clusterId: 'raftmq', nodeId: n.driver.id })?.epoch.generation, 1, 'record of epoch 1');
    }
    const ticket = leader.driver.propose(new TextEncoder().encode('kept'));
    assert.ok(!(ticket instanceof Error));
    await waitFor('the entry to commit everywhere', () => nodes.every((n) => texts(n).includes('kept')), 10_000);

    assert.throws(
      () => leader.driver.writeStateFile(),
      (err: unknown) => err instanceof DriverError && err.code === 'RAFT_DRIVER_STATE',
      'the file is written only after raft traffic stopped',
    );
    assert.equal(await leader.driver.handOver(), true, 'the leader hands over before it stops');
    assert.notEqual(leader.driver.currentRole, 'leader');
    const incarnations = new Map(nodes.map((n) => [n.driver.id, n.driver.status().incarnation]));
    for (const n of nodes) assert.equal(await n.driver.shutdown(), fileOf(n.driver.id));
    for (const id of IDS) assert.ok(existsSync(fileOf(id)));

    const again = await startAll();
    for (const n of again) {
      const s = n.driver.status();
      assert.equal(s.membership, 'member');
      assert.equal(s.incarnation, incarnations.get(n.driver.id));
      assert.equal(n.hello.incarnation, s.incarnation, 'the transport hello carries the member');
      assert.deepEqual(n.hello.epoch, s.epoch, 'and its epoch');
      assert.ok(!existsSync(fileOf(n.driver.id)) && existsSync(`${fileOf(n.driver.id)}.prev`));
    }
    await redundantLeader(again);
    await waitFor('the committed entry to be applied again from the files', () => again.every((n) => texts(n).includes('kept')), 20 * E);
  });

  test('a ticket names the index its entry commits at, also when a configuration change went first', async () => {
    // A follower comes back without its file: the leader's core replaces its member with
    // configuration entries of its own, appended at ticks, while proposals of every turn wait in
    // a held batch (a hold of 20 ms while entries are in flight). Each ticket must still name the
    // index its own entry committed at (the serving period of raftmq is such an index).
    const sub = mkdtempSync(join(dir, 'tickets-'));
    const file = (id: number): string => join(sub, `node-${id}.state`);
    const opts = (id: number) => ({ stateFile: file(id), holdMs: 20 });
    const nodes = await startAll((id) => makeNode(id, opts(id)));
    const leader = await redundantLeader(nodes);
    const follower = nodes.find((n) => n !== leader)!;
    await follower.driver.stop();
    rmSync(file(follower.driver.id), { force: true });
    rmSync(`${file(follower.driver.id)}.prev`, { force: true });
    const back = makeNode(follower.driver.id, opts(follower.driver.id));
    await back.driver.start();
    for (const n of nodes)
      if (n !== follower) {
        back.transport.setPeerAddress(n.driver.id, n.transport.address());
        n.transport.setPeerAddress(back.driver.id, back.transport.address());
      }
    const live = nodes.map((n) => (n === follower ? back : n));

    // Every proposal's ticket is kept as the driver returned it, with the index it named then.
    const kept: { ticket: { readonly index: number; readonly term: number }; named: number; text: string }[] = [];
    const from = leader.driver.status().lastIndex;
    const changed = (): boolean => leader.committed.some((e) => e.config !== undefined && e.index > from);
    const deadline = Date.now() + 120 * E;
    for (let k = 0; k < 20_000 && Date.now() < deadline; k++) {
      const text = `t${k}`;
      const t = leader.driver.propose(new TextEncoder().encode(text));
      if (!(t instanceof Error)) kept.push({ ticket: t, named: t.index, text });
      await new Promise((r) => setImmediate(r));
      // Until the new member is a voter and the leader is redundant again.
      if (k % 50 === 0 && changed() && leader.driver.status().redundant) break;
    }
    await waitFor('every proposal to commit on the leader', () => texts(leader).includes(kept.at(-1)!.text), 10_000);
    const tickets = kept.map((k) => ({ index: k.ticket.index, term: k.ticket.term, named: k.named, text: k.text }));
    const byIndex = new Map(leader.committed.map((e) => [e.index, e]));
    const first = tickets[0]!.index;
    const last = tickets.at(-1)!.index;
    const configs = leader.committed.filter((e) => e.config !== undefined && e.index > first && e.index < last);
    assert.ok(configs.length > 0, 'a configuration change was appended among the proposals');
    const wrong = tickets.filter((t) => {
      const e = byIndex.get(t.index);
      return e === undefined || e.term !== t.term || e.data === null || new TextDecoder().decode(e.data) !== t.text;
    });
    assert.deepEqual(wrong.slice(0, 5), [], `${wrong.length} of ${tickets.length} tickets name another entry's index`);
    const moved = tickets.filter((t) => t.index !== t.named).length;
    console.log(`# ${tickets.length} proposals, ${configs.length} configuration entries among them, ${moved} tickets moved`);
    await Promise.all(live.map((n) => n.driver.stop()));
  });
});
