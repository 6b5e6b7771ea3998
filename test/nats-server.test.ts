// The nats-server test kit (test/support/nats-server.ts) that the scale-out tests stand on: it
// starts a real JetStream server on a free loopback port with its own store directory, that server
// keeps a key-value bucket across a stop and a start, enforces the user and password it was given,
// is stopped by its PID, and a missing binary fails naming the Debian package.
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { NATS_SERVER_PACKAGE, NatsServer } from './support/nats-server.js';

const servers: NatsServer[] = [];
const connections: NatsConnection[] = [];
after(async () => {
  for (const nc of connections) await nc.close().catch(() => undefined);
  for (const s of servers) await s.dispose();
});

async function started(o: Parameters<typeof NatsServer.start>[0] = {}): Promise<NatsServer> {
  const s = await NatsServer.start(o);
  servers.push(s);
  return s;
}

async function client(s: NatsServer, o: { user?: string; pass?: string } = {}): Promise<NatsConnection> {
  const nc = await connect({ servers: s.url, reconnect: false, timeout: 5_000, ...o });
  connections.push(nc);
  return nc;
}

/** Whether a process with this PID exists (signal 0 checks without sending anything). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('nats-server test kit', { timeout: 60_000 }, () => {
  it('serves JetStream from its own store directory, kept across a stop and a start', async () => {
    const s = await started();
    assert.match(s.url, /^nats:\/\/127\.0\.0\.1:[0-9]+$/);
    const nc = await client(s);
    const kv = await new Kvm(nc).create('kit');
    await kv.put('k', 'v1');
    assert.equal((await kv.get('k'))?.string(), 'v1');
    await nc.close();
    await s.stop();
    assert.ok(existsSync(join(s.storeDir, 'jetstream')), `store in ${s.storeDir}: ${readdirSync(s.storeDir).join(', ')}`);
    await s.run();
    const nc2 = await client(s);
    const kv2 = await new Kvm(nc2).open('kit');
    assert.equal((await kv2.get('k'))?.string(), 'v1');
  });

  it('refuses a client without the configured user and password', async () => {
    const s = await started({ user: 'shard', password: 'secret-1' });
    await assert.rejects(client(s), /AUTHORIZATION|Authorization/);
    await assert.rejects(client(s, { user: 'shard', pass: 'wrong' }), /AUTHORIZATION|Authorization/);
    const nc = await client(s, { user: 'shard', pass: 'secret-1' });
    assert.equal(nc.isClosed(), false);
    await nc.flush();
  });

  it('stops the process it started, by its PID', async () => {
    const s = await started();
    const pid = s.pid;
    assert.ok(pid !== undefined && alive(pid));
    await s.stop();
    assert.equal(s.pid, undefined);
    assert.equal(alive(pid), false);
    await assert.rejects(client(s));
  });

  it('fails naming the Debian package when the binary is missing', async () => {
    await assert.rejects(NatsServer.start({ binary: '/nonexistent/nats-server' }), (err: Error) =>
      err.message.includes(`Debian package ${NATS_SERVER_PACKAGE}`),
    );
  });
});
