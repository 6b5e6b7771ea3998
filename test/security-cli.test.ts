// The security files as an operator uses them: `raftmq passwd` writes the password file, the
// broker refuses malformed files naming file and line (exit 2), and SIGHUP re-reads both files.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import mqtt from 'mqtt';
import { RC } from '../src/protocol/reason-codes.js';
import { SCRAM_SHA_256, ScramClient } from '../src/server/scram.js';
import { BrokerProcess, CLI } from './broker-process.js';
import { connectClient, disconnect, publish, subscribe, withTimeout } from './helpers.js';

function cli(args: string[], input?: string) {
  return spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 20_000, input });
}

async function connackCode(port: number, username: string, password: string): Promise<number> {
  const client = mqtt.connect(`mqtt://127.0.0.1:${port}`, {
    reconnectPeriod: 0,
    protocolVersion: 5,
    username,
    password,
    clientId: `${username}-${password}`,
  });
  try {
    return await withTimeout(
      new Promise<number>((resolve) => {
        client.once('connect', (p) => resolve(p.reasonCode ?? 0));
        client.once('error', (e: Error & { code?: number }) => resolve(e.code ?? -1));
      }),
      15_000,
      'CONNACK',
    );
  } finally {
    client.end(true);
  }
}

/** The CONNACK reason code of an MQTT.js v5 client authenticating with SCRAM-SHA-256, driving the
 * exchange through its handleAuth hook; `verified` tells whether server-final proved the server. */
async function scramConnack(port: number, username: string, password: string): Promise<{ code: number; verified: boolean }> {
  const scram = new ScramClient(username, password);
  const client = mqtt.connect(`mqtt://127.0.0.1:${port}`, {
    reconnectPeriod: 0,
    protocolVersion: 5,
    clientId: `scram-${username}-${password}`,
    properties: { authenticationMethod: SCRAM_SHA_256, authenticationData: scram.first() },
  });
  client.handleAuth = (packet, callback) => {
    const data = packet.properties?.authenticationData as Buffer;
    callback(undefined, {
      cmd: 'auth',
      reasonCode: RC.CONTINUE_AUTHENTICATION,
      properties: { authenticationMethod: SCRAM_SHA_256, authenticationData: scram.final(data) },
    });
  };
  try {
    return await withTimeout(
      new Promise<{ code: number; verified: boolean }>((resolve) => {
        client.once('connect', (p) =>
          resolve({ code: p.reasonCode ?? 0, verified: scram.verify(p.properties?.authenticationData as Buffer) }),
        );
        client.once('error', (e: Error & { code?: number }) => resolve({ code: e.code ?? -1, verified: false }));
      }),
      15_000,
      'CONNACK',
    );
  } finally {
    client.end(true);
  }
}

describe('raftmq passwd and the security files', { timeout: 120_000 }, () => {
  it('adds users from stdin and in batch mode, replaces a user in place, and writes mode 0600', () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-passwd-'));
    const file = join(dir, 'pw');
    writeFileSync(file, '# operators\n');
    assert.equal(cli(['passwd', file, 'alice'], 'first\n').status, 0);
    assert.equal(cli(['passwd', '-b', file, 'bob', 'builder']).status, 0);
    const before = readFileSync(file, 'utf8');
    assert.equal(cli(['passwd', file, 'alice'], 'second\n').status, 0);
    const lines = readFileSync(file, 'utf8').trimEnd().split('\n');
    assert.equal(lines[0], '# operators');
    assert.match(lines[1] ?? '', /^alice:\$scrypt\$N=16384,r=8,p=1\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+$/);
    assert.notEqual(lines[1], before.split('\n')[1], 'a new salt and hash');
    assert.equal(lines[2], before.split('\n')[2], 'bob untouched');
    assert.equal(lines.length, 3);
    assert.equal(statSync(file).mode & 0o777, 0o600);
  });

  it('writes SCRAM lines with --scram, whose users log in by SCRAM-SHA-256 or a plain password', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-scram-'));
    const pw = join(dir, 'pw');
    assert.equal(cli(['passwd', '--scram', pw, 'alice'], 'wonderland\n').status, 0);
    assert.equal(cli(['passwd', '-b', '--scram', pw, 'carol', 'singer']).status, 0);
    assert.equal(cli(['passwd', '-b', pw, 'bob', 'builder']).status, 0);
    const lines = readFileSync(pw, 'utf8').trimEnd().split('\n');
    assert.match(lines[0] ?? '', /^alice:\$scram-sha-256\$i=4096\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+$/);
    assert.match(lines[1] ?? '', /^carol:\$scram-sha-256\$/);
    assert.match(lines[2] ?? '', /^bob:\$scrypt\$/);
    const broker = await BrokerProcess.start(['--password-file', pw, '--log-level', 'info']);
    try {
      assert.deepEqual(await scramConnack(broker.port, 'alice', 'wonderland'), { code: RC.SUCCESS, verified: true });
      assert.deepEqual(await scramConnack(broker.port, 'carol', 'singer'), { code: RC.SUCCESS, verified: true });
      assert.equal((await scramConnack(broker.port, 'carol', 'wrong')).code, RC.BAD_USER_NAME_OR_PASSWORD);
      // bob has no SCRAM line: asking SCRAM for him fails exactly like a wrong password.
      assert.equal((await scramConnack(broker.port, 'bob', 'builder')).code, RC.BAD_USER_NAME_OR_PASSWORD);
      assert.equal(await connackCode(broker.port, 'alice', 'wonderland'), RC.SUCCESS);
      assert.equal(await connackCode(broker.port, 'bob', 'builder'), RC.SUCCESS);
      // A user changed to a SCRAM line on disk is seen by both methods after SIGHUP.
      assert.equal(cli(['passwd', '-b', '--scram', pw, 'bob', 'rebuilt']).status, 0);
      broker.proc.kill('SIGHUP');
      await broker.waitForLog((l) => l.msg === 'password file reloaded');
      assert.deepEqual(await scramConnack(broker.port, 'bob', 'rebuilt'), { code: RC.SUCCESS, verified: true });
      assert.equal(await connackCode(broker.port, 'bob', 'rebuilt'), RC.SUCCESS);
    } finally {
      await broker.stop();
    }
  });

  it('refuses bad usage, a user name with ":" and an empty password with exit 2', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'raftmq-passwd-')), 'pw');
    assert.equal(cli(['passwd', file]).status, 2);
    assert.equal(cli(['passwd', '--scram', '--scram', file, 'alice'], 'x\n').status, 2);
    assert.equal(cli(['passwd', '--sha1', file, 'alice'], 'x\n').status, 2);
    assert.equal(cli(['passwd', file, 'a:b'], 'x\n').status, 2);
    assert.equal(cli(['passwd', file, 'alice'], '\n').status, 2);
  });

  it('exits 2 naming the file and line of a malformed password or ACL file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-files-'));
    writeFileSync(join(dir, 'pw'), '# ok\nalice:plaintext\n');
    writeFileSync(join(dir, 'acl'), 'topic read a/#\n\ntopic sometimes b\n');
    const pw = cli(['--port', '0', '--password-file', join(dir, 'pw')]);
    assert.equal(pw.status, 2);
    assert.match(pw.stderr, /pw:2:/);
    const acl = cli(['--port', '0', '--acl-file', join(dir, 'acl')]);
    assert.equal(acl.status, 2);
    assert.match(acl.stderr, /acl:3:/);
    const anon = cli(['--port', '0', '--allow-anonymous', 'false']);
    assert.equal(anon.status, 2);
    assert.match(anon.stderr, /--password-file/);
  });

  it('re-reads the password file and the ACL file on SIGHUP', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-hup-'));
    const pw = join(dir, 'pw');
    const aclFile = join(dir, 'acl');
    assert.equal(cli(['passwd', '-b', pw, 'alice', 'one']).status, 0);
    writeFileSync(aclFile, 'user alice\ntopic readwrite a/#\n');
    const broker = await BrokerProcess.start(['--password-file', pw, '--acl-file', aclFile, '--log-level', 'info']);
    try {
      assert.equal(await connackCode(broker.port, 'alice', 'one'), RC.SUCCESS);
      const sub = await connectClient(broker.port, { protocolVersion: 5, username: 'alice', password: 'one', clientId: 'sub' });
      await subscribe(sub, 'a/#', 1);
      assert.equal(cli(['passwd', '-b', pw, 'alice', 'two']).status, 0);
      writeFileSync(aclFile, 'user alice\ntopic readwrite a/#\ntopic deny a/closed\n');
      broker.proc.kill('SIGHUP');
      await broker.waitForLog((l) => l.msg === 'acl file reloaded');
      await broker.waitForLog((l) => l.msg === 'password file reloaded');
      assert.equal(await connackCode(broker.port, 'alice', 'one'), RC.BAD_USER_NAME_OR_PASSWORD);
      const pub = await connectClient(broker.port, { protocolVersion: 5, username: 'alice', password: 'two', clientId: 'pub' });
      await assert.rejects(publish(pub, 'a/closed', 'x', { qos: 1 }), (e: Error & { code?: number }) => e.code === RC.NOT_AUTHORIZED);
      await publish(pub, 'a/open', 'y', { qos: 1 });
      await sub.waitFor((m) => m.topic === 'a/open', 'a/open');
      assert.deepEqual(
        sub.messages.map((m) => m.topic),
        ['a/open'],
      );
      await disconnect(pub);
      await disconnect(sub);
    } finally {
      await broker.stop();
    }
  });
});
