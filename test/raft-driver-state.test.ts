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

function makeNode(id: number): Node {
  const n = { committed: [] } as unknown as Node;
  n.driver = new RaftDriver({
    id,
    nodes: IDS,
    stateFile: fileOf(id),
    electionTimeoutMs: E,
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

async function startAll(): Promise<Node[]> {
  const nodes = IDS.map(makeNode);
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
});
