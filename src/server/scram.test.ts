// SCRAM-SHA-256 against the worked example of RFC 7677 §3, and the refusals of malformed input.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RC } from '../protocol/reason-codes.js';
import type { AuthStep } from './enhanced-auth.js';
import { MemoryScramStore, ScramClient, ScramSha256, scramCredential } from './scram.js';

const utf8 = (s: string): Buffer => Buffer.from(s, 'utf8');
const text = (d: Uint8Array | undefined): string => Buffer.from(d ?? new Uint8Array()).toString('utf8');

// RFC 7677 §3: user "user", password "pencil".
const RFC = {
  clientFirst: 'n,,n=user,r=rOprNGfwEbeRWgbNEkqO',
  serverNonce: '%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0',
  serverFirst: 'r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096',
  clientFinal: 'c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=',
  serverFinal: 'v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=',
};

function rfcMethod(): ScramSha256 {
  const store = new MemoryScramStore();
  store.set('user', scramCredential('pencil', Buffer.from('W22ZaJ0SNY7soEsUEjb6gQ==', 'base64'), 4096));
  return new ScramSha256({ store, nonce: () => RFC.serverNonce });
}

function continued(step: AuthStep): Extract<AuthStep, { k: 'continue' }> {
  assert.equal(step.k, 'continue');
  return step as Extract<AuthStep, { k: 'continue' }>;
}

describe('SCRAM-SHA-256 method', { timeout: 30_000 }, () => {
  it('reproduces the RFC 7677 example exchange byte for byte', () => {
    const first = continued(rfcMethod().start(utf8(RFC.clientFirst)));
    assert.equal(text(first.data), RFC.serverFirst);
    const done = first.next.step(utf8(RFC.clientFinal));
    assert.deepEqual(done, { k: 'success', user: 'user', data: utf8(RFC.serverFinal) });
  });

  it('agrees with its own client, which verifies the server-final', () => {
    const method = new ScramSha256({ store: new MemoryScramStore([['na,me=x', 'pässword']]) });
    const client = new ScramClient('na,me=x', 'pässword');
    const first = continued(method.start(client.first()));
    const done = first.next.step(client.final(first.data));
    assert.equal(done.k, 'success');
    if (done.k !== 'success') return;
    assert.equal(done.user, 'na,me=x', 'saslname escapes =2C and =3D are undone');
    assert.ok(client.verify(done.data as Uint8Array));
  });

  it('refuses a wrong proof, a replayed nonce and an unknown user with 0x86 only at the proof', () => {
    const method = rfcMethod();
    const tampered = RFC.clientFinal.replace('p=dHzb', 'p=eHzb');
    assert.equal(continued(method.start(utf8(RFC.clientFirst))).next.step(utf8(tampered)).k, 'failure');
    const otherNonce = RFC.clientFinal.replace('r=rOpr', 'r=xOpr');
    const step = continued(method.start(utf8(RFC.clientFirst))).next.step(utf8(otherNonce));
    assert.equal(step.k === 'failure' && step.reason, RC.NOT_AUTHORIZED);
    const stranger = new ScramClient('nobody', 'pencil');
    const first = continued(method.start(stranger.first()));
    const done = first.next.step(stranger.final(first.data));
    assert.equal(done.k === 'failure' && done.reason, RC.BAD_USER_NAME_OR_PASSWORD);
  });

  it('gives an unknown user the same salt every time, so its absence does not show', () => {
    const method = rfcMethod();
    const salt = (): string => text(continued(method.start(utf8('n,,n=ghost,r=abc'))).data).split(',')[1] as string;
    assert.equal(salt(), salt());
  });

  it('refuses malformed client-first messages and channel binding with 0x87', () => {
    const method = rfcMethod();
    for (const bad of ['', 'n=user,r=abc', 'p=tls-unique,,n=user,r=abc', 'n,,n=us=er,r=abc', 'n,,n=,r=abc', 'n,,r=abc', '\xff\xfe']) {
      const step = method.start(bad === '\xff\xfe' ? Buffer.from([0xff, 0xfe]) : utf8(bad));
      assert.equal(step.k === 'failure' && step.reason, RC.NOT_AUTHORIZED, bad);
    }
    assert.equal(method.start(undefined).k, 'failure');
    assert.equal(continued(method.start(utf8(RFC.clientFirst))).next.step(undefined).k, 'failure');
    assert.equal(continued(method.start(utf8(RFC.clientFirst))).next.step(utf8('c=biws')).k, 'failure');
  });
});

describe('SCRAM-SHA-256: SASLprep of passwords and what an unknown user is shown', { timeout: 30_000 }, () => {
  const login = (method: ScramSha256, user: string, password: string): AuthStep => {
    const c = new ScramClient(user, password);
    const first = continued(method.start(c.first()));
    return first.next.step(c.final(first.data));
  };

  it('logs in with a password that differs only by what SASLprep maps, and refuses to store a prohibited one', () => {
    const store = new MemoryScramStore();
    store.set('u', scramCredential('pass word\u00AD'));
    const method = new ScramSha256({ store });
    assert.equal(login(method, 'u', 'pass\u00A0word').k, 'success');
    assert.equal(login(method, 'u', 'pass\u3000word\u200B').k, 'success');
    assert.equal(login(method, 'u', 'password').k, 'failure');
    assert.throws(() => scramCredential('bell\u0007'), { code: 'ERR_SASLPREP' });
    assert.throws(() => scramCredential('\u0627a'), { code: 'ERR_SASLPREP' });
  });

  it('shows an unknown user the iteration count most users have, so i= does not tell who exists', () => {
    const store = new MemoryScramStore();
    store.set('a', scramCredential('x', undefined, 4096));
    store.set('b', scramCredential('y', undefined, 5000));
    store.set('c', scramCredential('z', undefined, 5000));
    const iterations = (s: MemoryScramStore, user: string) =>
      /,i=(\d+)$/.exec(text(continued(new ScramSha256({ store: s }).start(new ScramClient(user, 'p').first())).data))?.[1];
    assert.equal(iterations(store, 'nobody'), '5000');
    assert.equal(iterations(store, 'a'), '4096');
    assert.equal(iterations(new MemoryScramStore(), 'nobody'), '4096', 'the default when there are no users');
  });
});
