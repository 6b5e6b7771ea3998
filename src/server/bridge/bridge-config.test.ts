import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parseCli } from '../../config.js';
import { refusal } from '../../config.testkit.js';
import { CONFIG_ERROR } from '../../errors.js';
import { bridgeSpecs } from './bridge-config.js';

const dir = mkdtempSync(join(tmpdir(), 'raftmq-bridge-config-'));
let files = 0;
function configFile(text: string): string {
  const p = join(dir, `c${files++}.yaml`);
  writeFileSync(p, text);
  return p;
}
function specsOf(argv: string[]) {
  const r = parseCli(argv);
  assert.equal(r.action, 'run');
  return bridgeSpecs((r as Extract<typeof r, { action: 'run' }>).config);
}

const ONE = `
bridges:
  cloud:
    client-id: site1
    username: u
    password: p
    protocol-version: 5
    keepalive-s: 30
    clean-start: false
    topic:
      - sensors/# out 1 site/ cloud/
      - alerts out 0
`;

describe('bridge configuration', () => {
  it('takes the address from --bridge and the rest from the bridges map', () => {
    const [s, ...rest] = specsOf(['--config', configFile(ONE), '--bridge', 'cloud=mqtt://127.0.0.1:18830']);
    assert.equal(rest.length, 0);
    assert.deepEqual(s?.addresses, [{ url: 'mqtt://127.0.0.1:18830', tls: false, ws: false, host: '127.0.0.1', port: 18830, path: '' }]);
    assert.equal(s?.clientId, 'site1');
    assert.equal(s?.username, 'u');
    assert.equal(s?.password, 'p');
    assert.equal(s?.protocol, 5);
    assert.equal(s?.keepaliveS, 30);
    assert.equal(s?.cleanStart, false);
    assert.deepEqual(
      s?.rules.map((r) => [r.pattern, r.direction, r.qos, r.localPrefix, r.remotePrefix]),
      [
        ['sensors/#', 'out', 1, 'site/', 'cloud/'],
        ['alerts', 'out', 0, '', ''],
      ],
    );
  });

  it('takes ws:// and wss:// addresses with their path (/mqtt when none), and the usual ports when none is given', () => {
    const file = configFile(
      `bridges:\n  b:\n    address: [ws://h1:9001/ws, wss://h2, 'ws://[::1]:8080/a/b', 'ws://h3:1/']\n    topic: a\n`,
    );
    const [spec] = specsOf(['--config', file]);
    assert.deepEqual(
      spec?.addresses.map((a) => [a.host, a.port, a.tls, a.ws, a.path]),
      [
        ['h1', 9001, false, true, '/ws'],
        ['h2', 443, true, true, '/mqtt'],
        ['::1', 8080, false, true, '/a/b'],
        ['h3', 1, false, true, '/'],
      ],
    );
  });

  it('takes several addresses, tried in turn, from the file or from --bridge given twice', () => {
    const file = configFile(`bridges:\n  b:\n    address: [mqtt://h1:1883, mqtts://h2]\n    topic: a\n`);
    const [fromFile] = specsOf(['--config', file]);
    assert.deepEqual(
      fromFile?.addresses.map((a) => [a.host, a.port, a.tls]),
      [
        ['h1', 1883, false],
        ['h2', 8883, true],
      ],
    );
    assert.equal(fromFile?.clientId, 'raftmq-bridge-b');
    assert.equal(fromFile?.protocol, 4);
    assert.equal(fromFile?.cleanStart, true);
    const [fromFlags] = specsOf(['--config', file, '--bridge', 'b=mqtt://x:1', '--bridge', 'b=mqtt://y:2']);
    assert.deepEqual(
      fromFlags?.addresses.map((a) => a.host),
      ['x', 'y'],
    );
  });

  it('refuses an unknown key, naming the bridge and the key', () => {
    const e = refusal(['--config', configFile('bridges:\n  cloud:\n    adress: mqtt://h\n    topic: a\n')]);
    assert.equal(e.code, CONFIG_ERROR.UNKNOWN_KEY);
    assert.match(e.message, /bridges\.cloud: unknown key "adress"/);
  });

  it('refuses a bad URL, naming the flag', () => {
    const file = configFile(ONE);
    for (const [url, why] of [
      ['cloud=http://h:1', /scheme http is not supported/],
      ['cloud=mqtt://u:p@h:1', /credentials do not go into the URL/],
      ['cloud=wss://u:p@h:1/mqtt', /credentials do not go into the URL/],
      ['cloud=mqtt://h:1/path', /no path/],
      ['cloud=ws://h:1/mqtt?x=1', /no query or fragment/],
      ['cloud=ws://h:70000/mqtt', /not a URL|bad port/],
      ['cloud=not a url', /not a URL/],
      ['=mqtt://h:1', /expected NAME=URL/],
      ['bad/name=mqtt://h:1', /expected NAME=URL/],
    ] as const) {
      const e = refusal(['--config', file, '--bridge', url]);
      assert.equal(e.code, CONFIG_ERROR.BAD_VALUE, url);
      assert.ok(e.message.startsWith(`--bridge ${url}`), e.message);
      assert.match(e.message, why);
    }
  });

  it('refuses a bad topic rule, naming the bridge and the rule', () => {
    const e = refusal(['--config', configFile('bridges:\n  cloud:\n    address: mqtt://h\n    topic: ["a/#/b out 1"]\n')]);
    assert.equal(e.code, CONFIG_ERROR.BAD_VALUE);
    assert.match(e.message, /bridges\.cloud\.topic "a\/#\/b out 1": filter "a\/#\/b": # not alone/);
  });

  it('refuses in and out rules that would loop, naming both', () => {
    const e = refusal([
      '--config',
      configFile('bridges:\n  cloud:\n    address: mqtt://h\n    topic: ["data/# out 1 \\"\\" up/", "data/# in 1 \\"\\" up/"]\n'),
    ]);
    assert.equal(e.code, CONFIG_ERROR.BAD_VALUE);
    assert.match(e.message, /bridges\.cloud\.topic: rules "data\/# out 1 "" up\/" and "data\/# in 1 "" up\/" would loop/);
  });

  it('takes inbound rules, keeping the session at the remote unless clean-start says otherwise', () => {
    const one = (extra: string) =>
      specsOf(['--config', configFile(`bridges:\n  cloud:\n    address: mqtt://h\n    topic: ["cmd/# in 1 dev/ \\"\\""]\n${extra}`)])[0];
    assert.equal(one('')?.cleanStart, false, 'inbound: a persistent session by default');
    assert.equal(one('')?.tryPrivate, true, "Mosquitto's bridge bit by default");
    assert.equal(one('    clean-start: true\n    try-private: false\n')?.cleanStart, true);
    assert.equal(one('    try-private: false\n')?.tryPrivate, false);
    assert.equal(
      specsOf(['--bridge', 'x=mqtt://h', '--config', configFile('bridges:\n  x:\n    topic: a\n')])[0]?.cleanStart,
      true,
      'outbound only: clean',
    );
    const q2 = (topic: string) => specsOf(['--bridge', 'x=mqtt://h', '--config', configFile(`bridges:\n  x:\n    topic: "${topic}"\n`)])[0];
    assert.equal(q2('a out 2')?.cleanStart, false, 'outbound at QoS 2: the remote keeps the packet ids');
    assert.equal(q2('a out 1')?.cleanStart, true);
    assert.match(
      refusal(['--config', configFile('bridges:\n  c:\n    address: mqtt://h\n    topic: a in\n    try-private: 1\n')]).message,
      /bridges\.c\.try-private: expected true or false/,
    );
  });

  it('refuses a bridge without an address or without a rule, and settings of the wrong type', () => {
    assert.match(refusal(['--config', configFile('bridges:\n  cloud:\n    topic: a\n')]).message, /bridges\.cloud: no address/);
    assert.match(refusal(['--bridge', 'cloud=mqtt://h']).message, /bridges\.cloud: no topic rule/);
    const bad = (line: string) => refusal(['--config', configFile(`bridges:\n  c:\n    address: mqtt://h\n    topic: a\n    ${line}\n`)]);
    assert.match(bad('protocol-version: 3').message, /bridges\.c\.protocol-version: expected 4/);
    assert.match(bad('keepalive-s: 0').message, /bridges\.c\.keepalive-s/);
    assert.match(bad('down-alert-s: 0').message, /bridges\.c\.down-alert-s: expected a whole number of seconds from 1 to 86400/);
    assert.match(bad('down-alert-s: "1m"').message, /bridges\.c\.down-alert-s/);
    assert.match(bad('clean-start: maybe').message, /bridges\.c\.clean-start: expected true or false/);
    assert.match(bad('tls-ca: ca.pem').message, /need an mqtts:\/\/ or wss:\/\/ address/);
    assert.match(bad('password: p').message, /needs a username/);
    assert.match(refusal(['--config', configFile('bridges: [a]\n')]).message, /key "bridges": expected a map/);
    assert.match(refusal(['--config', configFile('bridges:\n  "a b": {}\n')]).message, /bridges\.a b: a bridge name/);
  });

  it('bounds the messages in flight to the remote: 64, and 20 at QoS 2 to a 3.1.1 remote, unless the settings say', () => {
    const one = (lines: string) => {
      const [s] = specsOf(['--config', configFile(`bridges:\n  c:\n    address: mqtt://h\n    topic: a\n${lines}`)]);
      return [s?.maxInflight, s?.maxInflightQos2];
    };
    assert.deepEqual(one(''), [64, 20]);
    assert.deepEqual(one('    protocol-version: 5\n'), [64, 64]);
    assert.deepEqual(one('    max-inflight: 10\n'), [10, 10]);
    assert.deepEqual(one('    max-inflight: 100\n    max-inflight-qos2: 100\n'), [100, 100]);
    assert.deepEqual(one('    protocol-version: 5\n    max-inflight-qos2: 3\n'), [64, 3]);
    const bad = (lines: string) =>
      refusal(['--config', configFile(`bridges:\n  c:\n    address: mqtt://h\n    topic: a\n${lines}`)]).message;
    assert.match(bad('    max-inflight: 0\n'), /bridges\.c\.max-inflight: expected a whole number of messages from 1 to 32767 \(got 0\)/);
    assert.match(bad('    max-inflight: 40000\n'), /bridges\.c\.max-inflight: .* from 1 to 32767/);
    assert.match(bad('    max-inflight: 2.5\n'), /bridges\.c\.max-inflight: /);
    assert.match(
      bad('    max-inflight: 8\n    max-inflight-qos2: 9\n'),
      /bridges\.c\.max-inflight-qos2: expected a whole number of messages from 1 to 8 \(got 9\)/,
    );
    assert.match(bad('    max-inflight-qos2: "x"\n'), /bridges\.c\.max-inflight-qos2: /);
  });

  it('refuses a certificate file that cannot be read, naming the key and file', () => {
    const e = refusal([
      '--config',
      configFile(`bridges:\n  c:\n    address: mqtts://h\n    topic: a\n    tls-ca: ${join(dir, 'absent.pem')}\n`),
    ]);
    assert.equal(e.code, CONFIG_ERROR.UNREADABLE_FILE);
    assert.match(e.message, /bridges\.c\.tls-ca .*absent\.pem: cannot read/);
  });

  it('refuses TLS files OpenSSL would not take, naming the key and the file', () => {
    const garbage = join(dir, 'garbage.pem');
    writeFileSync(garbage, 'not a certificate\n');
    const withTls = (lines: string) => refusal(['--config', configFile(`bridges:\n  c:\n    address: mqtts://h\n    topic: a\n${lines}`)]);
    const ca = withTls(`    tls-ca: ${garbage}\n`);
    assert.equal(ca.code, CONFIG_ERROR.BAD_TLS);
    assert.match(ca.message, /bridges\.c\.tls-ca .*garbage\.pem: no PEM certificate in it/);
    const broken = join(dir, 'broken.pem');
    writeFileSync(broken, '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
    assert.match(withTls(`    tls-ca: ${broken}\n`).message, /bridges\.c\.tls-ca .*broken\.pem: /);
    const pair = withTls(`    tls-cert: ${garbage}\n    tls-key: ${garbage}\n`);
    assert.equal(pair.code, CONFIG_ERROR.BAD_TLS);
    assert.match(pair.message, /bridges\.c\.tls-cert .*garbage\.pem, bridges\.c\.tls-key .*garbage\.pem: .*no start line/);
    assert.match(withTls(`    tls-cert: ${garbage}\n`).message, /tls-cert and tls-key go together/);
  });

  it('has no flag for the bridges map', () => {
    assert.equal(refusal(['--bridges', '{}']).code, CONFIG_ERROR.UNKNOWN_FLAG);
  });
});
