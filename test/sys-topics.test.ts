// $SYS topics of a real raftmq process started with --sys-interval 1: mosquitto_sub and MQTT.js
// subscribers get the retained values right after SUBACK and the updates after; `#` never brings
// a $SYS message [MQTT-4.7.2-1]; a client's publish to $SYS is refused; the ACL decides who reads.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BrokerProcess, CLI, requireCommand } from './broker-process.js';
import { connectClient, disconnect, publish, subscribe, withTimeout } from './helpers.js';

/** mosquitto_sub for `count` messages, giving up after 10 s of silence; its lines `topic payload`. */
function mosquittoSub(port: number, args: string[], count: number): string[] {
  const r = spawnSync('mosquitto_sub', ['-h', '127.0.0.1', '-p', String(port), '-v', '-C', String(count), '-W', '10', ...args], {
    encoding: 'utf8',
    timeout: 20_000,
  });
  assert.equal(r.status, 0, `mosquitto_sub: ${r.stderr}`);
  return r.stdout.split('\n').filter((l) => l !== '');
}

/** Topics of a single node's $SYS table: 18 values and 8 loads over 3 periods. */
const SINGLE_NODE_TOPICS = 18 + 8 * 3;

describe('$SYS topics', { timeout: 90_000 }, () => {
  let broker: BrokerProcess;
  before(async () => {
    requireCommand('mosquitto_sub', 'mosquitto-clients');
    broker = await BrokerProcess.start(['--sys-interval', '1']);
  });
  after(async () => {
    await broker?.stop();
  });

  it('mosquitto_sub -t $SYS/# gets the version and clients/connected after its SUBACK', () => {
    // The single-node table holds 42 topics, sent together right after the SUBACK (the first
    // update at the interval comes in a later turn), version last in topic order.
    const lines = mosquittoSub(broker.port, ['-t', '$SYS/#'], SINGLE_NODE_TOPICS);
    assert.equal(lines.length, SINGLE_NODE_TOPICS);
    assert.ok(
      lines.every((l) => l.startsWith('$SYS/broker/')),
      lines.join('\n'),
    );
    assert.equal(new Set(lines.map((l) => l.split(' ')[0])).size, SINGLE_NODE_TOPICS, 'each topic once');
    assert.ok(lines.includes('$SYS/broker/version raftmq version 0.1.0'), lines.join('\n'));
    // mosquitto_sub itself is connected.
    assert.ok(
      lines.some((l) => /^\$SYS\/broker\/clients\/connected [1-9][0-9]*$/.test(l)),
      lines.join('\n'),
    );
  });

  it('publishes updates at the interval to a live subscriber, QoS 0 and without the retain flag', async () => {
    const c = await connectClient(broker.port, { clientId: 'sys-live', protocolVersion: 5 });
    try {
      await subscribe(c, '$SYS/broker/uptime');
      const first = await c.waitFor((m) => m.topic === '$SYS/broker/uptime', 'the retained uptime');
      assert.equal(first.packet.retain, true, 'the table value after SUBACK is retained');
      assert.equal(first.packet.qos, 0);
      const next = await c.waitFor((m) => m !== first && m.topic === '$SYS/broker/uptime', 'an uptime update', 10_000);
      assert.equal(next.packet.retain, false, 'a live update carries no retain flag');
      assert.match(next.payload, /^[0-9]+ seconds$/);
    } finally {
      await disconnect(c);
    }
  });

  it('never gives a subscriber to # a $SYS message', async () => {
    const all = await connectClient(broker.port, { clientId: 'sys-hash' });
    const watcher = await connectClient(broker.port, { clientId: 'sys-watch' });
    try {
      await subscribe(all, '#');
      await subscribe(watcher, '$SYS/broker/uptime');
      const seen = watcher.messages.length;
      await publish(watcher, 'plain/topic', 'hello');
      await all.waitFor((m) => m.topic === 'plain/topic', 'the plain message');
      // Two updates at the interval have gone out since `#` was subscribed.
      await watcher.waitFor(() => watcher.messages.length >= seen + 2, 'two $SYS updates', 10_000);
      assert.deepEqual(
        all.messages.map((m) => m.topic),
        ['plain/topic'],
      );
    } finally {
      await disconnect(all);
      await disconnect(watcher);
    }
  });

  it('refuses a client publish to $SYS/x: MQTT 5 PUBACK 0x87, and nothing is routed or retained', async () => {
    const sub = await connectClient(broker.port, { clientId: 'sys-sub' });
    const pub = await connectClient(broker.port, { clientId: 'sys-pub', protocolVersion: 5 });
    try {
      await subscribe(sub, '$SYS/#');
      const acks: number[] = [];
      pub.client.on('packetreceive', (p) => {
        if (p.cmd === 'puback') acks.push((p as { reasonCode?: number }).reasonCode ?? 0);
      });
      await withTimeout(
        pub.client.publishAsync('$SYS/x', 'forged', { qos: 1, retain: true }).then(
          () => undefined,
          () => undefined,
        ),
        5_000,
        'PUBACK',
      );
      assert.deepEqual(acks, [0x87]);
      const recs: number[] = [];
      pub.client.on('packetreceive', (p) => {
        if (p.cmd === 'pubrec') recs.push((p as { reasonCode?: number }).reasonCode ?? 0);
      });
      await withTimeout(
        pub.client.publishAsync('$SYS/z', 'forged', { qos: 2 }).then(
          () => undefined,
          () => undefined,
        ),
        5_000,
        'PUBREC',
      );
      assert.deepEqual(recs, [0x87], 'QoS 2: PUBREC 0x87 ends the flow');
      // A QoS 0 publish (no answer) and a 3.1.1 one.
      pub.client.publish('$SYS/broker/version', 'forged', { qos: 0, retain: true });
      await publish(sub, '$SYS/y', 'forged', { qos: 1 });
      // A new subscriber gets the stored values after SUBACK: the forged ones are not among them.
      const late = await connectClient(broker.port, { clientId: 'sys-late' });
      try {
        await subscribe(late, '$SYS/#');
        await late.waitFor((m) => m.topic === '$SYS/broker/version', 'the version');
        assert.ok(late.messages.every((m) => m.payload !== 'forged'));
        assert.equal(late.messages.find((m) => m.topic === '$SYS/broker/version')?.payload, 'raftmq version 0.1.0');
      } finally {
        await disconnect(late);
      }
      assert.ok(
        sub.messages.every((m) => m.payload !== 'forged'),
        'no forged message routed',
      );
    } finally {
      await disconnect(sub);
      await disconnect(pub);
    }
  });
});

describe('$SYS wills', { timeout: 30_000 }, () => {
  it('refuses a CONNECT whose will is on $SYS: CONNACK 5 (3.1.1), 0x87 (MQTT 5)', async () => {
    const broker = await BrokerProcess.start([]);
    try {
      for (const protocolVersion of [4, 5] as const) {
        await assert.rejects(
          connectClient(broker.port, {
            clientId: `will-${protocolVersion}`,
            protocolVersion,
            will: { topic: '$SYS/broker/version', payload: Buffer.from('forged'), qos: 0, retain: true },
          }),
          /Not authorized|not authorized/i,
        );
      }
    } finally {
      await broker.stop();
    }
  });
});

describe('$SYS topics under an ACL', { timeout: 90_000 }, () => {
  let broker: BrokerProcess;
  let dir: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'raftmq-sys-acl-'));
    const pw = join(dir, 'pw');
    for (const [user, pass] of [
      ['ops', 'ops-pass'],
      ['device', 'device-pass'],
    ]) {
      const r = spawnSync(process.execPath, [CLI, 'passwd', '-b', pw, user, pass], { encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
    }
    const acl = join(dir, 'acl');
    writeFileSync(
      acl,
      [
        'user ops',
        'topic read $SYS/#',
        'topic deny $SYS/broker/clients/#',
        'user device',
        'topic readwrite devices/#',
        'topic read #',
        '',
      ].join('\n'),
    );
    broker = await BrokerProcess.start(['--sys-interval', '1', '--password-file', pw, '--acl-file', acl]);
  });
  after(async () => {
    await broker?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps $SYS from a user the ACL does not grant it, and a denied subtree from one it does', async () => {
    // `topic read #` does not reach $SYS [MQTT-4.7.2-1]: the subscription is refused.
    const device = await connectClient(broker.port, { clientId: 'd1', username: 'device', password: 'device-pass', protocolVersion: 5 });
    const ops = await connectClient(broker.port, { clientId: 'o1', username: 'ops', password: 'ops-pass', protocolVersion: 5 });
    try {
      const codes: number[] = [];
      device.client.on('packetreceive', (p) => {
        if (p.cmd === 'suback') codes.push(...((p as { granted?: number[] }).granted ?? []));
      });
      await withTimeout(
        device.client.subscribeAsync('$SYS/#', { qos: 0 }).then(
          () => undefined,
          () => undefined,
        ),
        5_000,
        'SUBACK',
      );
      assert.deepEqual(codes, [0x87]);
      await subscribe(ops, '$SYS/#');
      await ops.waitFor((m) => m.topic === '$SYS/broker/version', 'the version');
      // Two interval updates later still nothing under the denied clients/ subtree.
      const n = ops.messages.length;
      await ops.waitFor(() => ops.messages.filter((m) => m.topic === '$SYS/broker/uptime').length >= 2, 'an update', 10_000);
      assert.ok(ops.messages.length > n);
      assert.ok(
        ops.messages.every((m) => !m.topic.startsWith('$SYS/broker/clients/')),
        ops.messages.map((m) => m.topic).join(' '),
      );
      assert.equal(device.messages.length, 0);
    } finally {
      await disconnect(device);
      await disconnect(ops);
    }
  });
});
