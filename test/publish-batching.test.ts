// A publisher's PUBLISH packets read in one turn go to the log as one `publishes` command: with a
// real socket, a publisher that sends several QoS 1/2 messages in one write costs one log entry for
// all of them, and the broker goes on as if each had its own: every message is routed and answered
// with its own reason code, in the order read, a QoS 0 message among them included.
import assert from 'node:assert/strict';
import { Buffer } from 'node:buffer';
import { afterEach, describe, it } from 'node:test';
import type { Command } from '../src/broker/commands.js';
import { LocalLog } from '../src/log/local-log.js';
import { encode } from '../src/protocol/encoder.js';
import type { PubAckPacket, PublishPacket } from '../src/protocol/packets.js';
import { RC } from '../src/protocol/reason-codes.js';
import { BrokerNode, settingsFrom } from '../src/server/broker-node.js';
import { connectPacket, nodeOptions, RawClient, WAIT_MS, withTimeout } from './helpers.js';

class RecordingLog extends LocalLog {
  readonly proposed: Command[] = [];
  override propose(cmd: Command): void {
    this.proposed.push(cmd);
    super.propose(cmd);
  }
}

const pub = (topic: string, text: string, qos: 0 | 1 | 2, pid?: number): PublishPacket => {
  const p: PublishPacket = { type: 'publish', dup: false, qos, retain: false, topic, payload: Buffer.from(text), props: {} };
  if (pid !== undefined) p.pid = pid;
  return p;
};

/** What the log was asked to carry of the client's publishes: a command type and the payloads. */
const publishing = (cmds: readonly Command[]): Array<[string, string[]]> =>
  cmds.flatMap((c): Array<[string, string[]]> => {
    if (c.t === 'publish') return [['publish', [Buffer.from(c.msg.payload).toString()]]];
    if (c.t === 'publishes')
      return [['publishes', c.pubs.map((p) => (p.t === 'publish' ? Buffer.from(p.msg.payload).toString() : `rel ${p.pid}`))]];
    if (c.t === 'pubrel') return [['pubrel', [`rel ${c.pid}`]]];
    return [];
  });

describe('publishes of one read', { timeout: 30_000 }, () => {
  let node: BrokerNode | null = null;
  afterEach(async () => {
    await node?.stop();
    node = null;
  });

  async function start(): Promise<RecordingLog> {
    const opts = nodeOptions();
    const log = new RecordingLog({ node: 1, settings: settingsFrom(opts) });
    node = new BrokerNode(opts, log);
    await withTimeout(node.start(), WAIT_MS, 'node start');
    return log;
  }

  async function client(id: string): Promise<RawClient> {
    const c = await RawClient.open((node as BrokerNode).port, 5);
    c.send(connectPacket({ clientId: id, clean: true, level: 5 }));
    await c.waitFor('connack');
    return c;
  }

  it('are proposed as one command, answered each with its own code, and routed in the order read', async () => {
    const log = await start();
    const sub = await client('sub');
    sub.send({ type: 'subscribe', pid: 1, subs: [{ filter: 'b/#', qos: 1, nl: false, rap: false, rh: 0 }], props: {} });
    await sub.waitFor('suback');
    const p = await client('pub');
    const before = log.proposed.length;
    // One write, so one read: two QoS 1 (one to a topic nobody subscribes to), a QoS 2, a QoS 0
    // (routed at once when nothing of the publisher waits, so it must wait for those before it),
    // then two more QoS 1.
    const read = [
      pub('b/1', 'm0', 1, 1),
      pub('none', 'm1', 1, 2),
      pub('b/2', 'm2', 2, 3),
      pub('b/3', 'm3', 0),
      pub('b/4', 'm4', 1, 4),
      pub('b/5', 'm5', 1, 5),
    ];
    p.sendBytes(Buffer.concat(read.map((x) => encode(x, 5))));
    await sub.waitFor('publish', (x) => Buffer.from(x.payload).toString() === 'm5');
    await p.waitFor('puback', (x) => x.pid === 5);
    assert.deepStrictEqual(publishing(log.proposed.slice(before)), [
      ['publishes', ['m0', 'm1', 'm2']],
      ['publishes', ['m4', 'm5']],
    ]);
    await sub.waitFor('publish', (x) => Buffer.from(x.payload).toString() === 'm3');
    const delivered = sub.packets.filter((x): x is PublishPacket => x.type === 'publish').map((x) => Buffer.from(x.payload).toString());
    // In the order read within a QoS (MQTT orders per topic and QoS); the QoS 0 message after those read before it.
    assert.deepStrictEqual(
      delivered.filter((t) => t !== 'm3'),
      ['m0', 'm2', 'm4', 'm5'],
    );
    assert.ok(delivered.indexOf('m3') > delivered.indexOf('m2'), `QoS 0 after the QoS 1/2 read before it: ${delivered.join(' ')}`);
    const answers = p.packets
      .filter((x): x is PubAckPacket => x.type === 'puback' || x.type === 'pubrec')
      .map((x) => [x.type, x.pid, x.code]);
    assert.deepStrictEqual(answers, [
      ['puback', 1, RC.SUCCESS],
      ['puback', 2, RC.NO_MATCHING_SUBSCRIBERS],
      ['pubrec', 3, RC.SUCCESS],
      ['puback', 4, RC.SUCCESS],
      ['puback', 5, RC.SUCCESS],
    ]);
    // The PUBREL of a QoS 2 message travels in the same command as the publishes around it, in
    // order: the release before a new message under the same packet id, which is then routed, not
    // taken for a repeat of the held one.
    const mark = log.proposed.length;
    p.sendBytes(
      Buffer.concat([
        encode({ type: 'pubrel', pid: 3, code: 0, props: {} }, 5),
        encode(pub('b/6', 'm6', 2, 3), 5),
        encode(pub('b/7', 'm7', 1, 6), 5),
      ]),
    );
    await p.waitFor('puback', (x) => x.pid === 6);
    await sub.waitFor('publish', (x) => Buffer.from(x.payload).toString() === 'm7');
    assert.deepStrictEqual(publishing(log.proposed.slice(mark)), [['publishes', ['rel 3', 'm6', 'm7']]]);
    const later = p.packets.slice(answers.length + 1).filter((x): x is PubAckPacket => x.type !== 'publish' && 'pid' in x);
    assert.deepStrictEqual(
      later.map((x) => [x.type, x.pid, x.code]),
      [
        ['pubcomp', 3, RC.SUCCESS],
        ['pubrec', 3, RC.SUCCESS],
        ['puback', 6, RC.SUCCESS],
      ],
    );
    const all = sub.packets.filter((x): x is PublishPacket => x.type === 'publish').map((x) => Buffer.from(x.payload).toString());
    assert.deepStrictEqual(all.slice(-2), ['m6', 'm7']);
    sub.destroy();
    p.destroy();
  });

  it('close a command at 32 KiB of topics and payloads, and a single one stays a plain publish', async () => {
    const log = await start();
    const p = await client('pub');
    const before = log.proposed.length;
    const big = (i: number): PublishPacket => pub('t', `${i}`.padEnd(12 * 1024, 'x'), 1, i + 1);
    p.sendBytes(Buffer.concat([0, 1, 2, 3, 4].map((i) => encode(big(i), 5))));
    await p.waitFor('puback', (x) => x.pid === 5);
    const sizes = publishing(log.proposed.slice(before)).map(([t, texts]) => [t, texts.map((s) => s.slice(0, 1))]);
    assert.deepStrictEqual(sizes, [
      ['publishes', ['0', '1']],
      ['publishes', ['2', '3']],
      ['publish', ['4']],
    ]);
    p.destroy();
  });
});
