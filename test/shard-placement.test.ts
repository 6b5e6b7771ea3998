// Placement and refusal at the wrong shard (docs/scale-out.md): two single-node shards, a and b,
// as real processes that know each other's address. A client id of the other shard is never served:
// MQTT 5 gets CONNACK 0x9C with that shard's address as Server Reference, 3.1.1 return code 3; a
// client id of this shard is served; an empty client id is assigned one that belongs to the
// shard that assigns it. The refusals are on /metrics and in the log; bad flags exit 2.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { Placement } from '../src/scale/placement.js';
import { BrokerProcess, CLI } from './broker-process.js';
import { parseMetrics } from './prom-text.js';
import { freePort, httpGet, LOOPBACK } from './support/net.js';
import { connectOnce, idsOf, servedBy } from './support/shards.js';

const SHARDS = ['a', 'b'];
const placement = new Placement(SHARDS);

describe('placement and refusal at the wrong shard', { timeout: 60_000 }, () => {
  const nodes = new Map<string, { proc: BrokerProcess; port: number; health: number }>();
  let addresses = '';

  before(async () => {
    const ports = new Map<string, number>();
    for (const s of SHARDS) ports.set(s, await freePort());
    addresses = SHARDS.map((s) => `${s}=${LOOPBACK}:${ports.get(s)}`).join(',');
    for (const s of SHARDS) {
      const health = await freePort();
      const proc = await BrokerProcess.start([
        '--port',
        String(ports.get(s)),
        '--health-port',
        String(health),
        '--sys-interval',
        '1',
        '--shard',
        s,
        '--shards',
        SHARDS.join(','),
        '--shard-address',
        addresses,
      ]);
      nodes.set(s, { proc, port: proc.port, health });
    }
  });
  after(async () => {
    for (const n of nodes.values()) await n.proc.stop();
  });
  const node = (s: string) => nodes.get(s) as { proc: BrokerProcess; port: number; health: number };

  it("refuses an MQTT 5 client of the other shard with 0x9C and that shard's address, and serves it there", async () => {
    const [id] = idsOf(SHARDS, 'b', 1, 'v5');
    const refused = await connectOnce(node('a').port, { protocolVersion: 5, clientId: id as string, clean: true });
    assert.equal(refused.code, 0x9c);
    assert.equal(refused.reference, `${LOOPBACK}:${node('b').port}`);
    assert.equal(refused.reason, 'client id belongs to shard b');
    assert.equal(refused.client, null);

    const served = await connectOnce(node('b').port, { protocolVersion: 5, clientId: id as string, clean: true });
    assert.equal(served.code, 0);
    assert.ok(served.client !== null);
    assert.equal(await servedBy(served.client), 'b');
    served.client.end(true);
  });

  it('refuses a 3.1.1 client of the other shard with return code 3 and serves one of its own', async () => {
    const [mine, other] = [idsOf(SHARDS, 'a', 1, 'v4')[0] as string, idsOf(SHARDS, 'b', 1, 'v4')[0] as string];
    const refused = await connectOnce(node('a').port, { protocolVersion: 4, clientId: other, clean: true });
    assert.equal(refused.code, 3);

    const served = await connectOnce(node('a').port, { protocolVersion: 4, clientId: mine, clean: false });
    assert.equal(served.code, 0);
    const c = served.client;
    assert.ok(c !== null);
    // Served for real: a persistent session that subscribes and gets its own QoS 1 message.
    await c.subscribeAsync(`own/${mine}`, { qos: 1 });
    const got = new Promise<string>((resolve) => c.once('message', (_t, p) => resolve(p.toString())));
    await c.publishAsync(`own/${mine}`, 'here', { qos: 1 });
    assert.equal(await got, 'here');
    c.end(true);
  });

  it('assigns an empty MQTT 5 client id one that belongs to the assigning shard', async () => {
    const assigned: string[] = [];
    for (const s of SHARDS) {
      for (let i = 0; i < 12; i++) {
        const a = await connectOnce(node(s).port, { protocolVersion: 5, clientId: '', clean: true });
        assert.equal(a.code, 0);
        assert.ok(a.assigned !== undefined, 'an Assigned Client Identifier');
        assert.equal(placement.owner(a.assigned), s, `${a.assigned} assigned by ${s}`);
        assigned.push(a.assigned);
        a.client?.end(true);
      }
      // The id is the client's from now on: connecting with it again is served on the same shard.
      const again = await connectOnce(node(s).port, { protocolVersion: 5, clientId: assigned.at(-1) as string, clean: false });
      assert.equal(again.code, 0);
      again.client?.end(true);
    }
    assert.equal(new Set(assigned).size, assigned.length, 'every assigned id is new');
    // About half the usual ids (auto-PERIOD.SEQ) belong to the other shard: those were replaced.
    assert.ok(
      assigned.some((id) => !/^auto-\d+\.\d+$/.test(id)),
      `some ids were searched for, not the usual ones: ${assigned.join(' ')}`,
    );
  });

  it('counts the refusals by shard on /metrics, logs them and shows the shard on /health and the status page', async () => {
    const ids = idsOf(SHARDS, 'a', 3, 'count');
    for (const id of ids) {
      const r = await connectOnce(node('b').port, { protocolVersion: 5, clientId: id, clean: true });
      assert.equal(r.code, 0x9c);
    }
    const m = parseMetrics((await httpGet(node('b').health, '/metrics')).text);
    assert.equal(m.get('raftmq_shard_refused_total{shard="a"}'), ids.length);
    assert.equal(m.get('raftmq_shard_info{shard="b"}'), 1);
    const health = JSON.parse((await httpGet(node('b').health, '/health')).text) as { shard?: string };
    assert.equal(health.shard, 'b');
    const status = JSON.parse((await httpGet(node('b').health, '/status.json')).text) as { shard?: string | null };
    assert.equal(status.shard, 'b', 'the status page names the shard');
    const line = await node('b').proc.waitForLog((l) => l.msg === 'connect-wrong-shard');
    assert.equal(line.shard, 'a');
    assert.equal(line.reference, `${LOOPBACK}:${node('a').port}`);
  });
});

describe('the scale-out flags at start', () => {
  const start = (args: string[]) => spawnSync(process.execPath, [CLI, '--port', '0', ...args], { encoding: 'utf8', timeout: 10_000 });

  it('exits 2 naming the flag for a shard not in the list, a duplicate, a bad name or a bad NATS URL', () => {
    const cases: Array<[string[], RegExp]> = [
      [['--shard', 'c', '--shards', 'a,b'], /--shard "c" is not in --shards/],
      [['--shard', 'a', '--shards', 'a,b,b'], /--shards: shard b is listed twice/],
      [['--shard', 'a', '--shards', 'a,Bad'], /--shards: shard name "Bad"/],
      [['--shard', 'a'], /--shard a needs --shards/],
      [['--shard', 'a', '--shards', 'a', '--nats', 'http://x'], /--nats: "http:\/\/x": scheme http/],
    ];
    for (const [args, message] of cases) {
      const r = start(args);
      assert.equal(r.status, 2, args.join(' '));
      assert.match(r.stderr, message, args.join(' '));
    }
  });
});
