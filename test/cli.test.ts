// The raftmq command as an operator runs it: help, version, refusals that name the flag or key,
// and a clean stop on SIGTERM and SIGINT.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { BrokerProcess, CLI } from './broker-process.js';

function cli(args: string[]) {
  return spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 10_000 });
}

describe('raftmq command', { timeout: 60_000 }, () => {
  it('prints help with every flag and the version from package.json', () => {
    const help = cli(['--help']);
    assert.equal(help.status, 0);
    for (const flag of [
      '--port',
      '--host',
      '--log-level',
      '--config',
      '--max-packet-size',
      '--max-queued-messages',
      '--max-queued-bytes',
      '--max-inflight',
    ]) {
      assert.ok(help.stdout.includes(flag), `help mentions ${flag}`);
    }
    const short = cli(['-h']);
    assert.equal(short.status, 0);
    assert.equal(short.stdout, help.stdout);
    // Each choice lists what it takes.
    assert.match(help.stdout, /--log-level .*one of [a-z]+, [a-z]+/);
    const passwd = cli(['passwd', '--help']);
    assert.equal(passwd.status, 0);
    assert.match(passwd.stdout, /^Usage: raftmq passwd/);
    const version = cli(['--version']);
    assert.equal(version.status, 0);
    const pkg = JSON.parse(readFileSync(join(process.cwd(), 'package.json'), 'utf8')) as { version: string };
    assert.equal(version.stdout.trim(), pkg.version);
  });

  it('listens on loopback only unless --host or --listen says otherwise, and says so in the start line', () => {
    // Without --host the process is stopped by spawnSync's timeout once it printed its start line.
    const r = spawnSync(process.execPath, [CLI, '--port', '0'], { encoding: 'utf8', timeout: 3_000, killSignal: 'SIGTERM' });
    const lines = r.stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.equal(lines.find((l) => l.msg === 'listening')?.host, '127.0.0.1');
    assert.match(String(lines.find((l) => l.msg === 'started')?.bind), /this host only/);
  });

  it('binds the health port on --health-host, apart from --host, and answers /live', async () => {
    const b = await BrokerProcess.start(['--health-host', '::1', '--health-port', '0']);
    try {
      const line = await b.waitForLog((l) => l.msg === 'health listening');
      const port = line.port as number;
      const get = (host: string) =>
        new Promise<number>((resolve) => {
          const s = connect({ host, port }, () => s.end(`GET /live HTTP/1.0\r\nHost: x\r\n\r\n`));
          let text = '';
          s.setEncoding('utf8').on('data', (c: string) => {
            text += c;
          });
          s.on('close', () => resolve(Number(/^HTTP\/1\.\d (\d+)/.exec(text)?.[1] ?? 0)));
          s.on('error', () => resolve(-1));
        });
      assert.equal(await get('::1'), 200, '/live on the health host');
      assert.equal(await get('127.0.0.1'), -1, 'nothing listens on --host for health');
    } finally {
      await b.stop();
    }
  });

  it('exits 2 naming the flag for an unknown flag or a bad value', () => {
    const unknown = cli(['--prot', '1']);
    assert.equal(unknown.status, 2);
    assert.match(unknown.stderr, /--prot/);
    const bad = cli(['--max-inflight', 'many']);
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /--max-inflight/);
  });

  it('exits 2 naming the file and key for an unreadable or wrong config file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-cli-'));
    const missing = cli(['--config', join(dir, 'nope.yaml')]);
    assert.equal(missing.status, 2);
    assert.match(missing.stderr, /nope\.yaml/);
    const path = join(dir, 'c.yaml');
    writeFileSync(path, 'max-queued-mesages: 5\n');
    const wrongKey = cli(['--config', path]);
    assert.equal(wrongKey.status, 2);
    assert.match(wrongKey.stderr, /max-queued-mesages/);
  });

  it('exits 2 naming the file when a TLS file cannot be read or is not a certificate', () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-cli-tls-'));
    const missing = join(dir, 'absent.crt');
    const r = cli(['--listen', 'mqtts://127.0.0.1:0', '--tls-cert', missing, '--tls-key', missing]);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /--tls-cert .*absent\.crt/);
    const junk = join(dir, 'junk.pem');
    writeFileSync(junk, 'not a certificate\n');
    const bad = cli(['--listen', 'wss://127.0.0.1:0/mqtt', '--tls-cert', junk, '--tls-key', junk]);
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /junk\.pem/);
  });

  it('starts every --listen listener and logs each bound url', async () => {
    const broker = await BrokerProcess.start([
      '--log-level',
      'info',
      '--listen',
      'mqtt://127.0.0.1:0',
      '--listen',
      'ws://127.0.0.1:0/mqtt?proxy=v1',
    ]);
    try {
      await broker.waitForLog((l) => l.msg === 'listening' && /^ws:\/\/127\.0\.0\.1:\d+\/mqtt\?proxy=v1$/.test(String(l.url)));
      const tcp = await broker.waitForLog((l) => l.msg === 'listening' && String(l.url).startsWith('mqtt://'));
      assert.notEqual(tcp.port, 0);
    } finally {
      assert.equal(await broker.stop(), 0);
    }
  });

  it('exits 1 with a clear message when the port is taken', async () => {
    const first = await BrokerProcess.start(['--log-level', 'info']);
    try {
      const second = cli(['--host', '127.0.0.1', '--port', String(first.port), '--log-level', 'silent']);
      assert.equal(second.status, 1);
      assert.match(second.stderr, /EADDRINUSE|in use/i);
    } finally {
      await first.stop();
    }
  });

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`stops accepting, closes connections and exits 0 on ${signal}`, async () => {
      const broker = await BrokerProcess.start(['--log-level', 'info']);
      const sock = connect(broker.port, '127.0.0.1');
      await new Promise<void>((resolve, reject) => sock.once('connect', resolve).once('error', reject));
      const closed = new Promise<void>((resolve) => sock.once('close', () => resolve()));
      const code = await broker.stop(signal);
      assert.equal(code, 0);
      await closed;
      assert.ok(
        broker.logs.some((l) => l.msg === 'stopped'),
        'logs that it stopped',
      );
    });
  }
});
