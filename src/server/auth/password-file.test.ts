// The password file's two line forms: scrypt hashes, and SCRAM-SHA-256 credentials that serve both
// enhanced authentication and a plain CONNECT password. Parsing keeps a hostile file's costs
// bounded and names the line; both verifications accept the right password and nothing else.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { AuthStep } from '../enhanced-auth.js';
import { ScramClient, ScramSha256, scramCredential } from '../scram.js';
import { PasswordFileAuthenticator } from './password-authenticator.js';
import {
  formatScram,
  hashPassword,
  type PasswordHash,
  parsePasswordFile,
  SCRYPT_DEFAULT,
  scramPassword,
  verifyPassword,
} from './password-file.js';

const utf8 = (s: string): Buffer => Buffer.from(s, 'utf8');
const b64 = (n: number, fill = 7): string => Buffer.alloc(n, fill).toString('base64');

// RFC 7677 §3: user "user", password "pencil", its salt and iteration count.
const RFC_SALT = Buffer.from('W22ZaJ0SNY7soEsUEjb6gQ==', 'base64');
const RFC_SERVER_FINAL = 'v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=';

function user(text: string, name: string): PasswordHash {
  const r = parsePasswordFile(text);
  assert.ok('users' in r, JSON.stringify(r));
  const h = r.users.get(name);
  assert.ok(h !== undefined, name);
  return h;
}

function problemLine(text: string): { line: number; reason: string } {
  const r = parsePasswordFile(text);
  assert.ok('problem' in r, `accepted: ${text}`);
  return r.problem;
}

describe('password file', { timeout: 30_000 }, () => {
  it('reads a SCRAM line into the credential it was written from, beside scrypt lines', () => {
    const cred = scramCredential('pencil', RFC_SALT, 4096);
    const cheap = hashPassword('builder', { ...SCRYPT_DEFAULT, N: 1024 });
    const text = `# both forms\nbob:${cheap}\nuser:${formatScram(cred)}\n`;
    assert.deepEqual(user(text, 'user'), { k: 'scram', scram: cred });
    assert.equal(user(text, 'bob').k, 'scrypt');
    assert.match(formatScram(cred), /^\$scram-sha-256\$i=4096\$W22ZaJ0SNY7soEsUEjb6gQ==\$[A-Za-z0-9+/]{43}=\$[A-Za-z0-9+/]{43}=$/);
  });

  it('refuses SCRAM lines outside the bounds on iterations, salt and key sizes, naming the line', () => {
    const line = (i: number, salt: string, stored: string, server: string): string =>
      `# x\nu:$scram-sha-256$i=${i}$${salt}$${stored}$${server}\n`;
    const ok = line(4096, b64(16), b64(32), b64(32));
    assert.equal(user(ok, 'u').k, 'scram');
    const bad: [string, RegExp][] = [
      [line(4095, b64(16), b64(32), b64(32)), /^i must be/],
      [line(1_000_001, b64(16), b64(32), b64(32)), /^i must be/],
      [line(4096, b64(4), b64(32), b64(32)), /^salt must be/],
      [line(4096, b64(129), b64(32), b64(32)), /^salt must be/],
      [line(4096, b64(16), b64(31), b64(32)), /StoredKey and ServerKey/],
      [line(4096, b64(16), b64(32), b64(64)), /StoredKey and ServerKey/],
      ['# x\nu:$scram-sha-256$i=4096$AAAA$BBBB\n', /^expected \$scram-sha-256/],
      ['# x\nu:$scram-sha-1$i=4096$AAAA$BBBB$CCCC\n', /^expected \$scrypt/],
    ];
    for (const [text, reason] of bad) {
      const p = problemLine(text);
      assert.equal(p.line, 2, text);
      assert.match(p.reason, reason, text);
    }
  });

  it('checks a plain password against a SCRAM line: the right one, normalised as SCRAM does, and nothing else', async () => {
    const h = user(`u:${scramPassword('pässword')}\n`, 'u');
    assert.equal(await verifyPassword(utf8('pässword'), h), true);
    // NFKC: the decomposed ä is the same password, as it is inside a SCRAM exchange.
    assert.equal(await verifyPassword(utf8('pa\u0308ssword'), h), true);
    assert.equal(await verifyPassword(utf8('password'), h), false);
    assert.equal(await verifyPassword(utf8(''), h), false);
    // Not UTF-8: cannot be a password typed into `raftmq passwd`, even where it decodes to one.
    assert.equal(await verifyPassword(Buffer.concat([utf8('pässword'), Buffer.from([0xff])]), h), false);
  });

  it('still checks a plain password against a scrypt line', async () => {
    const h = user(`u:${hashPassword('builder', { ...SCRYPT_DEFAULT, N: 1024 })}\n`, 'u');
    assert.equal(await verifyPassword(utf8('builder'), h), true);
    assert.equal(await verifyPassword(utf8('Builder'), h), false);
  });

  it('shows an unknown SCRAM user the same salt on every node given the same file, another with other credentials', () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-pw-'));
    const file = join(dir, 'pw');
    writeFileSync(file, `user:${formatScram(scramCredential('pencil', undefined, 4096))}\n`);
    const saltOn = (auth: PasswordFileAuthenticator): string => {
      const method = new ScramSha256({ store: auth, nonce: () => 'n0nce' });
      return Buffer.from(continued(method.start(utf8('n,,n=ghost,r=abc'))).data ?? [])
        .toString('utf8')
        .split(',')[1] as string;
    };
    // Two nodes of a cluster: two processes, two authenticators, one file.
    const node1 = new PasswordFileAuthenticator(file, false, { event: () => {} });
    const node2 = new PasswordFileAuthenticator(file, false, { event: () => {} });
    assert.equal(saltOn(node1), saltOn(node2), 'a failover does not change what an unknown user sees');
    writeFileSync(file, `user:${formatScram(scramCredential('other', undefined, 4096))}\n`);
    node2.reload();
    assert.notEqual(saltOn(node2), saltOn(node1), 'the key follows the credentials, which an attacker does not know');
  });

  it('serves the file SCRAM lines to SCRAM-SHA-256: the RFC 7677 exchange verifies, a scrypt-only user fails at the proof', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'raftmq-pw-')), 'pw');
    const cheap = hashPassword('builder', { ...SCRYPT_DEFAULT, N: 1024 });
    writeFileSync(file, `user:${formatScram(scramCredential('pencil', RFC_SALT, 4096))}\nbob:${cheap}\n`);
    const auth = new PasswordFileAuthenticator(file, false, { event: () => {} });
    assert.equal(auth.lookup('bob'), undefined);
    // An unknown user is shown the count the file's SCRAM lines use most.
    writeFileSync(
      file,
      `user:${formatScram(scramCredential('pencil', RFC_SALT, 4096))}\nx:${formatScram(scramCredential('a', undefined, 4100))}\ny:${formatScram(scramCredential('b', undefined, 4100))}\nbob:${cheap}\n`,
    );
    auth.reload();
    assert.equal(auth.decoyIterations(), 4100);
    const method = new ScramSha256({ store: auth, nonce: () => '%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0' });
    const rfc = new ScramClient('user', 'pencil', 'rOprNGfwEbeRWgbNEkqO');
    const first = continued(method.start(rfc.first()));
    const done = first.next.step(rfc.final(first.data));
    assert.equal(done.k === 'success' && Buffer.from(done.data ?? []).toString('utf8'), RFC_SERVER_FINAL);
    // bob has the right password, but no SCRAM line: the same refusal as a wrong password.
    const bob = new ScramClient('bob', 'builder');
    const bobFirst = continued(method.start(bob.first()));
    const wrong = new ScramClient('user', 'pen');
    const wrongFirst = continued(method.start(wrong.first()));
    const bobDone = bobFirst.next.step(bob.final(bobFirst.data));
    const wrongDone = wrongFirst.next.step(wrong.final(wrongFirst.data));
    assert.equal(bobDone.k, 'failure');
    // Each names the user it claimed, for the backoff only; the client sees the reason code.
    assert.deepEqual({ ...bobDone, why: '', user: '' }, { ...wrongDone, why: '', user: '' });
  });
});

function continued(step: AuthStep): Extract<AuthStep, { k: 'continue' }> {
  assert.equal(step.k, 'continue');
  return step as Extract<AuthStep, { k: 'continue' }>;
}
