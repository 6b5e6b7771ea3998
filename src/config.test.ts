import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { configurationTable, defaults, listenerSpecs, parseCli } from './config.js';
import { refusal } from './config.testkit.js';
import { CONFIG_ERROR } from './errors.js';

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

describe('configuration', { timeout: 10_000 }, () => {
  it('uses the defaults of docs/configuration.md when nothing is given', () => {
    const c = run([]);
    assert.deepEqual(c, defaults());
    assert.equal(c.port, 1883);
    assert.equal(c['max-packet-size'], 1024 * 1024);
    assert.equal(c['max-queued-messages'], 10_000);
    assert.equal(c['max-queued-bytes'], 64 * 1024 * 1024);
    assert.equal(c['max-inflight'], 1_024);
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

  it('takes every boolean flag bare, as --flag=value and as --flag value', () => {
    const bools = ['retain-available', 'tls-require-client-id-match'] as const;
    for (const key of bools) {
      assert.equal(run([`--${key}`])[key], true, `--${key} bare`);
      assert.equal(run([`--${key}=false`])[key], false, `--${key}=false`);
      assert.equal(run([`--${key}`, 'false'])[key], false, `--${key} false`);
      assert.equal(run([`--${key}`, '--port', '0'])[key], true, `--${key} before another flag`);
    }
    assert.equal(refusal(['--retain-available=maybe']).message.includes('--retain-available'), true);
  });

  it('reads a value that starts with a dash as the value of its flag, and names the flag when it is bad', () => {
    assert.match(refusal(['--port', '-5']).message, /^--port: /);
    assert.match(refusal(['--max-inflight', '-1']).message, /^--max-inflight: /);
  });

  it('prints help for -h as for --help, with the allowed values of each choice', () => {
    assert.equal(parseCli(['-h']).action, 'help');
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

  it('refuses YAML the yaml library only warns about, naming the file (found by fuzz/targets/text-files.ts)', () => {
    const warned: unknown[] = [];
    const emit = process.emitWarning;
    process.emitWarning = ((w: unknown) => {
      warned.push(w);
    }) as typeof process.emitWarning;
    try {
      // An unresolved tag was read as the bare string and printed to stderr without the file.
      const tag = refusal(['--config', file('tag.yaml', 'port: !2 1884\n')]);
      assert.equal(tag.code, CONFIG_ERROR.BAD_FILE);
      assert.match(tag.message, /tag\.yaml: not valid YAML: Unresolved tag: !2/);
      const anchor = refusal(['--config', file('anchor.yaml', 'listen: &a: [x]\n')]);
      assert.equal(anchor.code, CONFIG_ERROR.BAD_FILE);
      assert.match(anchor.message, /anchor\.yaml: not valid YAML/);
      // A collection as a key: stringified with a warning, then read as a key of that name.
      const key = refusal(['--config', file('key.yaml', '{"port": 0, ["mqtts://127.0.0.1:0"]}\n')]);
      assert.equal(key.code, CONFIG_ERROR.UNKNOWN_KEY);
      assert.match(key.message, /key\.yaml: unknown key/);
    } finally {
      process.emitWarning = emit;
    }
    assert.deepEqual(warned, []);
  });

  it('refuses a YAML value that contains itself through an alias, naming the key', () => {
    // The message showed the value with JSON.stringify, which threw a TypeError on the cycle.
    for (const [text, key] of [
      ['listen: &a [*a]\n', 'listen'],
      ['port: &a {x: *a}\n', 'port'],
      ['&a {port: *a}\n', 'port'],
    ] as const) {
      const e = refusal(['--config', file('cycle.yaml', text)]);
      assert.equal(e.code, CONFIG_ERROR.BAD_VALUE, text);
      assert.match(e.message, new RegExp(`cycle\\.yaml: key "${key}": .* \\(got a (list|object) that contains itself\\)`), text);
    }
  });

  it('reads --listen repeated on the command line and as a YAML list, with defaults for path and port', () => {
    const c = run([
      '--listen',
      'mqtt://0.0.0.0:1883?proxy=v2',
      '--listen',
      'ws://127.0.0.1:8080',
      '--listen',
      'wss://[::1]:8084/broker',
      '--tls-cert',
      'c.pem',
      '--tls-key',
      'k.pem',
    ]);
    assert.deepEqual(listenerSpecs(c), [
      { kind: 'mqtt', host: '0.0.0.0', port: 1883, path: '', proxy: 2 },
      { kind: 'ws', host: '127.0.0.1', port: 8080, path: '/mqtt', proxy: null },
      { kind: 'wss', host: '::1', port: 8084, path: '/broker', proxy: null },
    ]);
    const yaml = file('l.yaml', 'listen:\n  - mqtt://127.0.0.1\n  - ws://127.0.0.1:9001/mqtt?proxy=v1\n');
    assert.deepEqual(run(['--config', yaml]).listen, ['mqtt://127.0.0.1', 'ws://127.0.0.1:9001/mqtt?proxy=v1']);
    assert.deepEqual(listenerSpecs(run(['--port', '0', '--host', '127.0.0.1'])), [
      { kind: 'mqtt', host: '127.0.0.1', port: 0, path: '', proxy: null },
    ]);
  });

  it('refuses a bad listener URL naming --listen, and TLS settings without what they need', () => {
    for (const url of [
      'tcp://0.0.0.0:1883',
      'mqtt://0.0.0.0:1883/path',
      'ws://0.0.0.0/mqtt',
      'mqtt://0.0.0.0:1883?proxy=v3',
      'mqtt://0.0.0.0:1883?tls=1',
      'not a url',
    ]) {
      const e = refusal(['--listen', url]);
      assert.equal(e.code, CONFIG_ERROR.BAD_VALUE, url);
      assert.match(e.message, /--listen/);
    }
    const noCert = refusal(['--listen', 'mqtts://0.0.0.0:8883']);
    assert.equal(noCert.code, CONFIG_ERROR.MISSING_VALUE);
    assert.match(noCert.message, /--tls-cert/);
    const noCa = refusal(['--tls-client-auth', 'required']);
    assert.equal(noCa.code, CONFIG_ERROR.MISSING_VALUE);
    assert.match(noCa.message, /--tls-ca/);
    assert.equal(refusal(['--tls-identity', 'ou']).code, CONFIG_ERROR.BAD_VALUE);
  });

  it('keeps docs/configuration.md in sync with the schema', () => {
    const doc = readFileSync(join(process.cwd(), 'docs', 'configuration.md'), 'utf8');
    assert.ok(doc.includes(configurationTable()), 'docs/configuration.md lacks the current table; regenerate it from configurationTable()');
  });
});
