// The files an operator hands the broker: the config file (src/config.ts, YAML or JSON), the ACL
// file (src/broker/acl.ts) and the password file (src/server/auth/password-file.ts). Their bytes
// are read as UTF-8, as readFileSync(path, 'utf8') reads them. Rules: the config reader throws
// nothing but ConfigError, and neither do the checks of the settings it returns; the ACL and
// password parsers never throw, and a rule or user they accept is one the broker can use.
import fc from 'fast-check';
import { aclAllows, parseAcl } from '../../src/broker/acl.js';
import { clusterSettings } from '../../src/cluster/cluster-config.js';
import { type Config, defaults, listenerSpecs, parseConfigText, SCHEMA } from '../../src/config.js';
import { ConfigError } from '../../src/errors.js';
import { hashPassword, parsePasswordFile, scramPassword, usernameProblem } from '../../src/server/auth/password-file.js';
import { check, type FuzzInput, type FuzzTarget, onlyTyped, textTokens } from '../harness.js';

const text = (data: Uint8Array): string => Buffer.from(data).toString('utf8');
const bytesOf = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'utf8'));
const isConfigError = (e: unknown) => e instanceof ConfigError;

// ---- config ----

/** Runs `read` and fails if it emitted a process warning: a warning goes to stderr unattributed,
 * where an operator's mistake in a file must be an error naming the file. */
function withoutWarnings<T>(read: () => T): T {
  const warnings: string[] = [];
  const emit = process.emitWarning;
  process.emitWarning = ((w: string | Error) => {
    warnings.push(typeof w === 'string' ? w : w.message);
  }) as typeof process.emitWarning;
  try {
    return read();
  } finally {
    process.emitWarning = emit;
    check(warnings.length === 0, `the reader emitted a process warning instead of an error: ${warnings[0]?.split('\n')[0]}`);
  }
}

export function runConfig(input: FuzzInput): void {
  const path = input.knob % 3 === 0 ? 'fuzz.json' : 'fuzz.yaml';
  const parsed = withoutWarnings(() => onlyTyped(() => parseConfigText(text(input.data), path), isConfigError, 'parseConfigText'));
  if (parsed === undefined) return;
  for (const [k, v] of Object.entries(parsed)) {
    check(Object.hasOwn(SCHEMA, k), `parseConfigText returned an unknown key ${k}`);
    const kind = SCHEMA[k as keyof typeof SCHEMA].kind;
    const ok =
      kind === 'bool'
        ? typeof v === 'boolean'
        : kind === 'int' || kind === 'size'
          ? Number.isSafeInteger(v)
          : kind === 'list'
            ? Array.isArray(v)
            : typeof v === 'string';
    check(ok, `key ${k} of kind ${kind} came back as ${typeof v}`);
  }
  const config: Config = Object.assign(defaults(), parsed);
  onlyTyped(() => listenerSpecs(config), isConfigError, 'listenerSpecs');
  onlyTyped(() => clusterSettings(config), isConfigError, 'clusterSettings');
}

const keys = Object.keys(SCHEMA);
const scalar = fc.oneof(
  fc.constantFrom('true', 'false', '0', '1', '65535', '1MiB', '10KiB', '-1', 'null', '~', '"x"', "''", '[]', '{}'),
  fc.constantFrom('mqtt://127.0.0.1:0', 'ws://[::1]:0/mqtt?proxy=v2', 'wss://h:1', 'tcp://x', '1=127.0.0.1:7000', 'none'),
  // Anchors and aliases, an alias inside its own anchor's value too.
  fc.constantFrom('&a 1', '*a', '&a [*a]', '&a {k: *a}', '&a [1, &b [*b]]', '!!str 1', '!!int x'),
  fc.nat().map(String),
  fc.string({ maxLength: 12 }),
);
const yamlDoc = fc
  .array(
    fc.tuple(
      fc.constantFrom(...keys),
      fc.oneof(
        scalar,
        fc.array(scalar, { maxLength: 3 }).map((a) => `[${a.join(', ')}]`),
      ),
    ),
    { maxLength: 6 },
  )
  .map((pairs) => bytesOf(pairs.map(([k, v]) => `${k}: ${v}`).join('\n')));

export const configFile: FuzzTarget = {
  name: 'config-file',
  modules: ['src/config.ts', 'src/server/listeners/listen-url.ts', 'src/cluster/cluster-config.ts'],
  valid: yamlDoc,
  dictionary: textTokens(
    '&a ',
    '*a',
    '!!str ',
    '!!binary ',
    '!!set ',
    '!!omap ',
    '<<: ',
    '? ',
    '- ',
    ': ',
    '{',
    '}',
    '[',
    ']',
    '"',
    "'",
    '\n  ',
    '#',
    '%YAML 1.1\n---\n',
    '---\n',
    '...\n',
    'listen',
    'port',
    'cluster-peers',
    '1MiB',
  ),
  run: runConfig,
  quickRuns: 300,
};

export function configCorpus(): Uint8Array[] {
  return [
    bytesOf('port: 1884\nhost: 127.0.0.1\nmax-packet-size: 1MiB\n'),
    bytesOf('listen:\n  - mqtt://127.0.0.1:0\n  - ws://127.0.0.1:0/mqtt?proxy=v1\n'),
    bytesOf('{"port": 0, "listen": ["mqtts://127.0.0.1:0"], "tls-cert": "c.pem", "tls-key": "k.pem"}'),
    bytesOf('anchors: &a [1, 2]\nport: *a\n'),
    bytesOf('cluster-node-id: 1\ncluster-peers: 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003\n'),
  ];
}

// ---- ACL ----

export function runAcl(input: FuzzInput): void {
  const r = onlyTyped(
    () => parseAcl(text(input.data)),
    () => false,
    'parseAcl',
  ) as ReturnType<typeof parseAcl>;
  if ('problem' in r) {
    check(Number.isInteger(r.problem.line) && r.problem.line >= 1 && r.problem.reason.length > 0, 'a problem without a line or reason');
    return;
  }
  // Rules that parse are rules the broker can judge with.
  const who = { username: 'u', clientId: 'c' };
  onlyTyped(
    () => {
      aclAllows(r.rules, who, 'read', 'a/b');
      aclAllows(r.rules, who, 'write', 'u/c/x');
    },
    () => false,
    'aclAllows',
  );
}

const aclLine = fc
  .tuple(
    fc.constantFrom('user', 'topic', 'pattern', '#', ''),
    fc.constantFrom('', 'read ', 'write ', 'readwrite ', 'deny ', 'rw '),
    fc.constantFrom('a/b', '#', 'a/+/c', '%u/%c/#', 'a#', '+a', 'x y', '\u0000', ''),
  )
  .map(([k, a, f]) => (k === 'user' ? `user ${f}` : `${k} ${a}${f}`));
const aclDoc = fc.array(aclLine, { maxLength: 8 }).map((lines) => bytesOf(lines.join('\n')));

export const aclFile: FuzzTarget = {
  name: 'acl-file',
  modules: ['src/broker/acl.ts'],
  valid: aclDoc,
  dictionary: textTokens(
    'user ',
    'topic ',
    'pattern ',
    'read ',
    'write ',
    'readwrite ',
    'deny ',
    '%u',
    '%c',
    '#',
    '+',
    '/',
    '\r\n',
    '\n',
    '\u0000',
    '\t',
    '\u00a0',
  ),
  run: runAcl,
};

export function aclCorpus(): Uint8Array[] {
  return [
    bytesOf('# comment\ntopic read $SYS/#\nuser alice\ntopic readwrite a/#\ntopic deny a/secret\npattern write %u/%c/out\n'),
    bytesOf('user bob\ntopic a/+/c\n\n   topic write b\r\n'),
  ];
}

// ---- password file ----

export function runPasswordFile(input: FuzzInput): void {
  const r = onlyTyped(
    () => parsePasswordFile(text(input.data)),
    () => false,
    'parsePasswordFile',
  ) as ReturnType<typeof parsePasswordFile>;
  if ('problem' in r) {
    check(Number.isInteger(r.problem.line) && r.problem.line >= 1 && r.problem.reason.length > 0, 'a problem without a line or reason');
    return;
  }
  for (const [user, h] of r.users) {
    onlyTyped(
      () => usernameProblem(user),
      () => false,
      'usernameProblem',
    );
    if (h.k === 'scrypt') {
      const { N, r: blocks, p } = h.scrypt.params;
      check(Number.isSafeInteger(N) && Number.isSafeInteger(blocks) && Number.isSafeInteger(p), 'scrypt parameters not integers');
    } else {
      check(Number.isSafeInteger(h.scram.iterations) && h.scram.iterations > 0, 'SCRAM iterations not a positive integer');
    }
  }
}

const b64 = (n: number) => fc.uint8Array({ minLength: n, maxLength: n }).map((a) => Buffer.from(a).toString('base64'));
const pwLine = fc.oneof(
  fc
    .tuple(
      fc.constantFrom('alice', 'bob', ':', ''),
      fc.constantFrom(16384, 1024, 3, 1 << 20),
      fc.constantFrom(8, 1, 0, 99),
      fc.constantFrom(1, 0, 16),
      b64(16),
      b64(64),
    )
    .map(([u, N, r, p, salt, hash]) => `${u}:$scrypt$N=${N},r=${r},p=${p}$${salt}$${hash}`),
  fc
    .tuple(fc.constantFrom('carol', 'dave'), fc.constantFrom(4096, 1, 0, 1e9), b64(16), b64(32), b64(32))
    .map(([u, i, salt, sk, svk]) => `${u}:$scram-sha-256$i=${i}$${salt}$${sk}$${svk}`),
);
const pwDoc = fc.array(pwLine, { maxLength: 4 }).map((lines) => bytesOf(lines.join('\n')));

export const passwordFile: FuzzTarget = {
  name: 'password-file',
  modules: ['src/server/auth/password-file.ts'],
  valid: pwDoc,
  dictionary: textTokens('$scrypt$', '$scram-sha-256$', 'N=', ',r=', ',p=', 'i=', '$', '==', '=', ':', '\n', '\r\n', '#', ' '),
  run: runPasswordFile,
};

/** Seed corpus: a scrypt line and a SCRAM line as the passwd command writes them, with comments. */
export function passwordCorpus(): Uint8Array[] {
  const scrypt = hashPassword('secret', { N: 1024, r: 8, p: 1 });
  const scram = scramPassword('secret');
  return [bytesOf(`# users\nalice:${scrypt}\n\nbob:${scram}\n`), bytesOf(`carol:${scram}\r\n`)];
}
