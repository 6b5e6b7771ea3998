// A subscriber's acknowledgements read in one turn go to the log as one command: with a real
// socket, a subscriber that answers many QoS 1 deliveries in one write costs one log entry for
// all of them, and the broker goes on as if each had its own (its window refills in order).
import assert from 'node:assert/strict';
import { Buffer } from 'node:buffer';
import { afterEach, describe, it } from 'node:test';
import type { Command } from '../src/broker/commands.js';
import { LocalLog } from '../src/log/local-log.js';
import { encode } from '../src/protocol/encoder.js';
import type { Packet } from '../src/protocol/packets.js';
import { BrokerNode, settingsFrom } from '../src/server/broker-node.js';
import { connectClient, connectPacket, disconnect, nodeOptions, publish, RawClient, WAIT_MS, withTimeout } from './helpers.js';

class RecordingLog extends LocalLog {
  readonly proposed: Command[] = [];
  override propose(cmd: Command): void {
    this.proposed.push(cmd);
    super.propose(cmd);
  }
}

type Publish = Extract<Packet, { type: 'publish' }>;

describe('acks of one read', { timeout: 30_000 }, () => {
  let node: BrokerNode | null = null;
  afterEach(async () => {
    await node?.stop();
    node = null;
  });

  it('are proposed as one acks command, and the window refills in order', async () => {
    const opts = nodeOptions({ maxInflight: 8 });
    const log = new RecordingLog({ node: 1, settings: settingsFrom(opts) });
    node = new BrokerNode(opts, log);
    await withTimeout(node.start(), WAIT_MS, 'node start');
    const sub = await RawClient.open(node.port, 4);
    sub.send(connectPacket({ clientId: 'sub', clean: true }));
    await sub.waitFor('connack');
    sub.send({ type: 'subscribe', pid: 1, subs: [{ filter: 'acks/#', qos: 1, nl: false, rap: false, rh: 0 }], props: {} });
    await sub.waitFor('suback');
    const pub = await connectClient(node.port);
    for (let i = 0; i < 20; i++) await publish(pub, 'acks/x', `m${i}`, { qos: 1 });
    // The window holds 8; the other 12 wait in the queue.
    await sub.waitFor('publish', (p) => (p as Publish).payload.toString() === 'm7');
    const first = sub.packets.filter((p): p is Publish => p.type === 'publish');
    assert.equal(first.length, 8);
    const before = log.proposed.length;
    // All eight PUBACKs in one write, so they arrive in one read.
    sub.sendBytes(Buffer.concat(first.map((p) => encode({ type: 'puback', pid: p.pid as number, code: 0, props: {} }, 4))));
    await sub.waitFor('publish', (p) => (p as Publish).payload.toString() === 'm15');
    const acking = log.proposed.slice(before).filter((c) => c.t === 'ack' || c.t === 'acks');
    assert.deepStrictEqual(acking, [{ t: 'acks', conn: acking[0]?.conn, acks: first.map((p) => ({ pid: p.pid, kind: 'puback' })) }]);
    const all = sub.packets.filter((p): p is Publish => p.type === 'publish').map((p) => p.payload.toString());
    assert.deepStrictEqual(
      all,
      Array.from({ length: 16 }, (_, i) => `m${i}`),
    );
    // A single PUBACK is still the plain ack command.
    const mark = log.proposed.length;
    const next = sub.packets.filter((p): p is Publish => p.type === 'publish')[8] as Publish;
    sub.send({ type: 'puback', pid: next.pid as number, code: 0, props: {} });
    await sub.waitFor('publish', (p) => (p as Publish).payload.toString() === 'm16');
    const single = log.proposed.slice(mark).filter((c) => c.t === 'ack' || c.t === 'acks');
    assert.deepStrictEqual(single, [{ t: 'ack', conn: acking[0]?.conn, pid: next.pid, kind: 'puback' }]);
    await disconnect(pub);
    sub.destroy();
  });
});
