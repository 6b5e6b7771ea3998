// A sharded raftmq process logging in to a real nats-server (docs/scale-out.md "NATS login and
// TLS"): with a user and password, with a token, and over TLS with a client certificate (made by
// openssl at test time); with the wrong credentials or without the certificate it is refused, says
// why on /health and in its log, and keeps serving MQTT. Flags that do not fit stop the start
// naming the flag.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { EXIT } from '../src/errors.js';
import { BrokerProcess, CLI } from './broker-process.js';
import { connectClient, disconnect, publish, subscribe } from './helpers.js';
import { NatsServer, type NatsServerOptions } from './support/nats-server.js';
import { freePort, httpGet, LOOPBACK } from './support/net.js';
import { idsOf } from './support/shards.js';
import { until } from './support/wait.js';
import { makePki, type Pki } from './tls-certs.js';

interface NatsHealth {
  nats?: { state: string; connected: boolean; lastError: string | null };
}

const dir = mkdtempSync(join(tmpdir(), 'raftmq-nats-login-'));
const servers: NatsServer[] = [];
const procs: BrokerProcess[] = [];
let pki: Pki;
let serverCert: { cert: string; key: string };
let clientCert: { cert: string; key: string };

before(() => {
  pki = makePki('nats-login');
  serverCert = pki.issue('nats', { cn: 'nats', san: `IP:${LOOPBACK}`, server: true });
  clientCert = pki.issue('shard-a', { cn: 'shard-a' });
});
after(async () => {
  for (const p of procs) await p.stop();
  for (const s of servers) await s.dispose();
  rmSync(dir, { recursive: true, force: true });
});

async function natsServer(o: NatsServerOptions): Promise<NatsServer> {
  const s = await NatsServer.start(o);
  servers.push(s);
  return s;
}

/** A single node of shard a joined to `url` with `flags`; its /health. */
async function shardA(url: string, flags: string[]): Promise<{ proc: BrokerProcess; health: () => Promise<NatsHealth> }> {
  const healthPort = await freePort();
  const proc = await BrokerProcess.start(['--health-port', String(healthPort), '--shard', 'a', '--shards', 'a,b', '--nats', url, ...flags]);
  procs.push(proc);
  return { proc, health: async () => JSON.parse((await httpGet(healthPort, '/health')).text) as NatsHealth };
}

/** MQTT still works on the node: a client of shard a gets its own message. */
async function servesMqtt(proc: BrokerProcess): Promise<void> {
  const [id] = idsOf(['a', 'b'], 'a', 1, 'local');
  const c = await connectClient(proc.port, { clientId: id as string });
  try {
    await subscribe(c, 'l/#', 1);
    await publish(c, 'l/1', 'here', { qos: 1 });
    await c.waitFor((m) => m.payload === 'here', 'the local message');
  } finally {
    await disconnect(c);
  }
}

describe('logging in to NATS', { timeout: 120_000 }, () => {
  it('connects with --nats-user and --nats-password; a wrong password is refused, said on /health, and MQTT goes on', async () => {
    const s = await natsServer({ user: 'shard', password: 'right-one' });
    const good = await shardA(s.url, ['--nats-user', 'shard', '--nats-password', 'right-one']);
    await until('connected', async () => (await good.health()).nats?.connected === true);
    const bad = await shardA(s.url, ['--nats-user', 'shard', '--nats-password', 'wrong']);
    const line = await bad.proc.waitForLog((l) => l.msg === 'nats-connect-failed');
    assert.match(String(line.reason ?? line.error ?? JSON.stringify(line)), /authorization/i);
    const h = await bad.health();
    assert.equal(h.nats?.connected, false);
    assert.match(String(h.nats?.lastError), /authorization/i);
    assert.doesNotMatch(JSON.stringify(bad.proc.logs), /wrong/, 'the password is not logged');
    await servesMqtt(bad.proc);
  });

  it('connects with --nats-token', async () => {
    const s = await natsServer({ token: 's3cret-token' });
    const good = await shardA(s.url, ['--nats-token', 's3cret-token']);
    await until('connected', async () => (await good.health()).nats?.connected === true);
    assert.doesNotMatch(JSON.stringify(good.proc.logs), /s3cret-token/, 'the token is not logged');
  });

  it('connects over TLS with --nats-tls-ca and a client certificate; without the certificate it is refused', async () => {
    const s = await natsServer({ tls: { cert: serverCert.cert, key: serverCert.key, ca: pki.caCert } });
    const url = `tls://${LOOPBACK}:${s.port}`;
    const good = await shardA(url, ['--nats-tls-ca', pki.caCert, '--nats-tls-cert', clientCert.cert, '--nats-tls-key', clientCert.key]);
    await until('connected over TLS', async () => (await good.health()).nats?.connected === true);
    const anon = await shardA(url, ['--nats-tls-ca', pki.caCert]);
    await anon.proc.waitForLog((l) => l.msg === 'nats-connect-failed');
    const h = await anon.health();
    assert.equal(h.nats?.connected, false);
    assert.equal(typeof h.nats?.lastError, 'string');
    await servesMqtt(anon.proc);
  });

  it('stops the start naming the flag: no --nats, half a login, two logins, unreadable or wrong files', () => {
    const junk = join(dir, 'junk.pem');
    writeFileSync(junk, 'not a certificate\n');
    const creds = join(dir, 'user.creds');
    writeFileSync(creds, 'not a credentials file\n');
    const base = ['--port', '0', '--shard', 'a', '--shards', 'a,b'];
    const nats = ['--nats', 'nats://127.0.0.1:4222'];
    const cases: [string[], RegExp][] = [
      [[...base, '--nats-user', 'u', '--nats-password', 'p'], /--nats-user needs --nats/],
      [[...base, ...nats, '--nats-user', 'u'], /--nats-user and --nats-password go together/],
      [[...base, ...nats, '--nats-user', 'u', '--nats-password', 'p', '--nats-token', 't'], /give one way to log in/],
      [[...base, ...nats, '--nats-creds', join(dir, 'absent.creds')], /--nats-creds .*absent\.creds: cannot read/],
      [[...base, ...nats, '--nats-creds', creds], /--nats-creds .*user\.creds: no NATS USER JWT block/],
      [[...base, ...nats, '--nats-tls-ca', junk], /--nats-tls-ca .*junk\.pem: no PEM certificate/],
      [[...base, ...nats, '--nats-tls-cert', clientCert.cert], /--nats-tls-cert and --nats-tls-key go together/],
      [[...base, ...nats, '--nats-tls-cert', clientCert.cert, '--nats-tls-key', serverCert.key], /--nats-tls-cert .*--nats-tls-key/],
    ];
    for (const [args, why] of cases) {
      const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 10_000 });
      assert.equal(r.status, EXIT.USAGE, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, why, args.join(' '));
    }
  });
});
