import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { configurationTable, defaults, parseCli } from './config.js';
import { CONFIG_ERROR, ConfigError } from './errors.js';

const dir = mkdtempSync(join(tmpdir(), 'raftmq-config-'));
function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}
function run(argv: string[]) {
  const r = parseCli(argv);
  assert.equal(r.action, 'run');
  return (r as Extract<typeof r, { action: 'run' }>).config;
}
function refusal(argv: string[]): ConfigError {
  try {
    parseCli(argv);
  } catch (err) {
    assert.ok(err instanceof ConfigError, `ConfigError expected, got ${String(err)}`);
    return err;
  }
  assert.fail(`${argv.join(' ')} was accepted`);
}

describe('configuration', { timeout: 10_000 }, () => {
  it('uses the documented defaults of DESIGN.md when nothing is given', () => {
    const c = run([]);
    assert.deepEqual(c, defaults());
    assert.equal(c.port, 1883);
    assert.equal(c['max-packet-size'], 1024 * 1024);
    assert.equal(c['max-queued-messages'], 10_000);
    assert.equal(c['max-queued-bytes'], 64 * 1024 * 1024);
    assert.equal(c['max-inflight'], 32);
    assert.equal(c['receive-maximum'], 64);
  });

  it('reads flags in both --flag value and --flag=value forms, with size suffixes', () => {
    const c = run(['--port', '0', '--max-packet-size=2MiB', '--retain-available', 'false', '--log-level', 'silent']);
    assert.equal(c.port, 0);
    assert.equal(c['max-packet-size'], 2 * 1024 * 1024);
    assert.equal(c['retain-available'], false);
    assert.equal(c['log-level'], 'silent');
  });

  it('lets a flag beat the config file, and the file beat the default (YAML and JSON)', () => {
    const yaml = file('a.yaml', 'port: 2000\nmax-inflight: 7\nretain-available: false\n');
    const c = run(['--config', yaml, '--port', '3000']);
    assert.equal(c.port, 3000);
    assert.equal(c['max-inflight'], 7);
    assert.equal(c['retain-available'], false);
    const json = file('b.json', JSON.stringify({ 'max-queued-bytes': '1KiB', host: '127.0.0.1' }));
    const d = run(['--config', json]);
    assert.equal(d['max-queued-bytes'], 1024);
    assert.equal(d.host, '127.0.0.1');
  });

  it('refuses an unknown flag and names it', () => {
    const e = refusal(['--max-packet-siz', '10']);
    assert.equal(e.code, CONFIG_ERROR.UNKNOWN_FLAG);
    assert.match(e.message, /--max-packet-siz/);
  });

  it('refuses a bad value and names the flag', () => {
    for (const [argv, flag] of [
      [['--port', '70000'], '--port'],
      [['--port', 'abc'], '--port'],
      [['--max-qos', '3'], '--max-qos'],
      [['--retain-available', 'yes'], '--retain-available'],
      [['--log-level', 'loud'], '--log-level'],
      [['--max-packet-size', '1.5MiB'], '--max-packet-size'],
    ] as const) {
      const e = refusal([...argv]);
      assert.equal(e.code, CONFIG_ERROR.BAD_VALUE, argv.join(' '));
      assert.ok(e.message.includes(flag), e.message);
    }
  });

  it('refuses an unreadable, malformed or unknown-keyed config file and names the file and key', () => {
    assert.equal(refusal(['--config', join(dir, 'missing.yaml')]).code, CONFIG_ERROR.UNREADABLE_FILE);
    assert.equal(refusal(['--config', file('bad.json', '{"port": ')]).code, CONFIG_ERROR.BAD_FILE);
    assert.equal(refusal(['--config', file('list.yaml', '- 1\n- 2\n')]).code, CONFIG_ERROR.BAD_FILE);
    const unknown = refusal(['--config', file('k.yaml', 'prot: 1\n')]);
    assert.equal(unknown.code, CONFIG_ERROR.UNKNOWN_KEY);
    assert.match(unknown.message, /"prot"/);
    const badValue = refusal(['--config', file('v.yaml', 'max-inflight: 0\n')]);
    assert.equal(badValue.code, CONFIG_ERROR.BAD_VALUE);
    assert.match(badValue.message, /max-inflight/);
  });

  it('keeps docs/configuration.md in sync with the schema', () => {
    const doc = readFileSync(join(process.cwd(), 'docs', 'configuration.md'), 'utf8');
    assert.ok(doc.includes(configurationTable()), 'docs/configuration.md lacks the current table; regenerate it from configurationTable()');
  });
});
