// The scale-out flags (src/scale/shard-config.ts) through the command line and the config file:
// accepted lists, and each refusal naming its flag.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PeerCertificate } from 'node:tls';
import { parseCli, parseConfigText } from '../config.js';
import { refusal } from '../config.testkit.js';
import { CONFIG_ERROR } from '../errors.js';
import { shardSettings } from './shard-config.js';
import { natsClientOptions } from './shard-link.js';

function settings(argv: string[]) {
  const r = parseCli(argv);
  assert.equal(r.action, 'run');
  if (r.action !== 'run') throw new Error('unreachable');
  return shardSettings(r.config);
}

describe('--shard, --shards, --shard-address, --shard-route, --nats', () => {
  it('is off without --shard', () => {
    assert.equal(settings([]), null);
  });

  it('takes a NATS login, and gives the NATS client its options', () => {
    const base = ['--shard', 'a', '--shards', 'a,b', '--nats', 'nats://n1.example'];
    const user = settings([...base, '--nats-user', 'u', '--nats-password', 'p']);
    assert.deepEqual(user?.natsClient, { user: 'u', password: 'p' });
    assert.deepEqual(natsClientOptions(user?.natsClient), { user: 'u', pass: 'p' });
    const token = settings([...base, '--nats-token', 't']);
    assert.deepEqual(natsClientOptions(token?.natsClient), { token: 't' });
    assert.deepEqual(settings(base)?.natsClient, {}, 'nothing given, nothing set');
    assert.deepEqual(natsClientOptions({}), {});
    assert.deepEqual(natsClientOptions({}, ['nats://10.0.0.1:4222']), {}, 'no TLS object for a plain server: it would require TLS');
  });

  it('checks a NATS server certificate against the configured hosts, IP addresses included', () => {
    const o = natsClientOptions({ tls: { ca: 'PEM' } }, ['tls://10.0.0.1:4222', 'tls://nats.example:4222']);
    const tls = o.tls as { ca: string; checkServerIdentity: (name: string, cert: PeerCertificate) => Error | undefined };
    assert.equal(tls.ca, 'PEM');
    const cert = (san: string) => ({ subject: { CN: 'x' }, subjectaltname: san }) as unknown as PeerCertificate;
    // The client names "localhost" for an IP address URL; the check ignores that name.
    assert.equal(tls.checkServerIdentity('localhost', cert('IP Address:10.0.0.1')), undefined);
    assert.equal(tls.checkServerIdentity('localhost', cert('DNS:nats.example')), undefined);
    assert.ok(tls.checkServerIdentity('localhost', cert('DNS:elsewhere.example')) instanceof Error);
    assert.ok(tls.checkServerIdentity('localhost', cert('DNS:localhost')) instanceof Error, 'localhost is not a configured host');
  });

  it('takes a shard of the list, addresses for every shard and NATS URLs', () => {
    const s = settings([
      '--shard',
      'eu-2',
      '--shards',
      'eu-1,eu-2,us-1',
      '--shard-address',
      'us-1=us.example:1883,eu-1=10.0.0.1:1883,eu-2=[::1]:1884',
      '--nats',
      'nats://n1.example,tls://10.0.0.9:4443',
    ]);
    assert.ok(s !== null);
    assert.equal(s.shard, 'eu-2');
    assert.deepEqual(s.placement.shards, ['eu-1', 'eu-2', 'us-1']);
    assert.equal(s.addresses?.get('us-1'), 'us.example:1883');
    assert.equal(s.addresses?.get('eu-2'), '[::1]:1884');
    assert.deepEqual(
      s.nats.map((n) => [n.tls, n.host, n.port]),
      [
        [false, 'n1.example', 4222],
        [true, '10.0.0.9', 4443],
      ],
    );
    assert.equal(settings(['--shard', 'a', '--shards', 'a'])?.addresses, null, 'one shard, no addresses: allowed');
  });

  it('takes repeatable placement rules, which place a topic by its client level', () => {
    const s = settings(['--shard', 'a', '--shards', 'a,b,c', '--shard-route', 'devices/{client}/cmd', '--shard-route', 'u/{client}/#']);
    assert.ok(s !== null);
    assert.deepEqual(
      s.rules.rules.map((r) => r.pattern),
      ['devices/{client}/cmd', 'u/{client}/#'],
    );
    assert.equal(s.rules.ownerOf('devices/d7/cmd'), s.placement.owner('d7'));
    assert.equal(s.rules.ownerOf('u/d7/x'), s.placement.owner('d7'));
    assert.equal(s.rules.ownerOf('devices/d7/telemetry'), null);
    assert.equal(settings(['--shard', 'a', '--shards', 'a'])?.rules.rules.length, 0, 'no rule: the route table decides every topic');
    const file = parseConfigText('shard: a\nshards: a,b\nshard-route:\n  - devices/{client}/cmd\n', 'x.yaml');
    assert.deepEqual(file['shard-route'], ['devices/{client}/cmd']);
  });

  it('reads the same keys from a config file', () => {
    const file = parseConfigText('shard: b\nshards: a,b\nshard-address: a=h:1,b=h:2\n', 'x.yaml');
    assert.equal(file.shard, 'b');
    assert.equal(file.shards, 'a,b');
    assert.equal(file['shard-address'], 'a=h:1,b=h:2');
  });

  it('refuses bad input naming the flag', () => {
    const cases: Array<[string[], RegExp, string]> = [
      [['--shard', 'c', '--shards', 'a,b'], /^--shard "c" is not in --shards \(a, b\)/, CONFIG_ERROR.BAD_VALUE],
      [['--shard', 'a', '--shards', 'a,b,a'], /^--shards: shard a is listed twice/, CONFIG_ERROR.BAD_VALUE],
      [['--shard', 'a', '--shards', 'a,,b'], /^--shards: an empty shard name/, CONFIG_ERROR.BAD_VALUE],
      [['--shard', 'a', '--shards', 'a,b,'], /^--shards: an empty shard name/, CONFIG_ERROR.BAD_VALUE],
      [['--shard', 'a', '--shards', 'a,B'], /^--shards: shard name "B" is not 1 to 32 of a-z, 0-9/, CONFIG_ERROR.BAD_VALUE],
      [['--shard', 'a', '--shards', 'a,b.c'], /^--shards: shard name "b.c"/, CONFIG_ERROR.BAD_VALUE],
      [['--shard', 'a'], /^--shard a needs --shards/, CONFIG_ERROR.MISSING_VALUE],
      [['--shards', 'a,b'], /^--shards needs --shard NAME/, CONFIG_ERROR.MISSING_VALUE],
      [['--nats', 'nats://h:4222'], /^--nats needs --shard NAME/, CONFIG_ERROR.MISSING_VALUE],
      [['--shard-address', 'a=h:1'], /^--shard-address needs --shard NAME/, CONFIG_ERROR.MISSING_VALUE],
      [['--shard-route', 'd/{client}'], /^--shard-route needs --shard NAME/, CONFIG_ERROR.MISSING_VALUE],
      [
        ['--shard', 'a', '--shards', 'a', '--shard-route', 'devices/+/cmd'],
        /^--shard-route: route rule "devices\/\+\/cmd": needs exactly one level \{client\}/,
        CONFIG_ERROR.BAD_VALUE,
      ],
      [
        ['--shard', 'a', '--shards', 'a', '--shard-route', 'd/{client}/#/x'],
        /^--shard-route: route rule "d\/\{client\}\/#\/x": not a topic filter/,
        CONFIG_ERROR.BAD_VALUE,
      ],
      [
        ['--shard', 'a', '--shards', 'a', '--shard-route', 'd/{client}', '--shard-route', 'd/+'],
        /^--shard-route: route rule "d\/\+": needs exactly one level/,
        CONFIG_ERROR.BAD_VALUE,
      ],
      [
        ['--shard', 'a', '--shards', 'a', '--shard-route', 'd/{client}', '--shard-route', '{client}/x'],
        /^--shard-route: route rules "d\/\{client\}" and "\{client\}\/x" match common topics/,
        CONFIG_ERROR.BAD_VALUE,
      ],
      [['--shard', 'a', '--shards', 'a,b', '--shard-address', 'a=h:1'], /^--shard-address: no address for shard b/, CONFIG_ERROR.BAD_VALUE],
      [
        ['--shard', 'a', '--shards', 'a,b', '--shard-address', 'a=h:1,c=h:2'],
        /^--shard-address: "c" is not a shard/,
        CONFIG_ERROR.BAD_VALUE,
      ],
      [
        ['--shard', 'a', '--shards', 'a,b', '--shard-address', 'a=h:1,a=h:2'],
        /^--shard-address: shard a is listed twice/,
        CONFIG_ERROR.BAD_VALUE,
      ],
      [
        ['--shard', 'a', '--shards', 'a,b', '--shard-address', 'a=h:1,b=h:0'],
        /^--shard-address: shard b needs a host and a port/,
        CONFIG_ERROR.BAD_VALUE,
      ],
      [
        ['--shard', 'a', '--shards', 'a,b', '--shard-address', 'a=h:1,b'],
        /^--shard-address: entry "b" is not NAME=HOST:PORT/,
        CONFIG_ERROR.BAD_VALUE,
      ],
      [
        ['--shard', 'a', '--shards', 'a', '--nats', 'http://h:4222'],
        /^--nats: "http:\/\/h:4222": scheme http is not supported/,
        CONFIG_ERROR.BAD_VALUE,
      ],
      [['--shard', 'a', '--shards', 'a', '--nats', 'h:4222'], /^--nats: "h:4222": scheme h is not supported/, CONFIG_ERROR.BAD_VALUE],
      [['--shard', 'a', '--shards', 'a', '--nats', 'nats//h'], /^--nats: "nats\/\/h" is not a URL/, CONFIG_ERROR.BAD_VALUE],
      [
        ['--shard', 'a', '--shards', 'a', '--nats', 'nats://u:p@h:4222'],
        /^--nats: .*credentials do not go into the URL/,
        CONFIG_ERROR.BAD_VALUE,
      ],
      [['--shard', 'a', '--shards', 'a', '--nats', 'nats://h:0'], /^--nats: "nats:\/\/h:0": bad port/, CONFIG_ERROR.BAD_VALUE],
      [['--shard', 'a', '--shards', 'a', '--nats', 'nats://h:4222/x'], /^--nats: .*expected no path/, CONFIG_ERROR.BAD_VALUE],
      [['--shard', 'a', '--shards', 'a', '--nats', 'nats://h:1,'], /^--nats: "" is not a URL/, CONFIG_ERROR.BAD_VALUE],
    ];
    for (const [argv, message, code] of cases) {
      const err = refusal(argv);
      assert.match(err.message, message, argv.join(' '));
      assert.equal(err.code, code, argv.join(' '));
    }
  });
});
