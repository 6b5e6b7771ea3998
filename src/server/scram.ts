// SCRAM-SHA-256 (RFC 7677, the mechanism of RFC 5802) as an MQTT 5 enhanced-authentication method.
// Authentication Data carries the SCRAM messages as UTF-8:
//   CONNECT / AUTH 0x19   client-first   "n,,n=user,r=cnonce"
//   AUTH 0x18 (server)    server-first   "r=cnonce+snonce,s=salt,i=iterations"
//   AUTH 0x18 (client)    client-final   "c=biws,r=cnonce+snonce,p=proof"
//   CONNACK / AUTH 0x00   server-final   "v=signature"
// The server keeps only StoredKey and ServerKey (RFC 5802 §3), never the password. Channel binding
// is not offered ("n" only); a client that asks for it ("p=") is refused. Passwords go through
// SASLprep (RFC 4013, src/server/saslprep.ts); user names are compared as sent.
import { createHash, createHmac, pbkdf2Sync, randomBytes, timingSafeEqual } from 'node:crypto';
import { SaslprepError } from '../errors.js';
import { RC } from '../protocol/reason-codes.js';
import type { AuthExchange, AuthStep, EnhancedAuthMethod } from './enhanced-auth.js';
import { saslprep } from './saslprep.js';

export const SCRAM_SHA_256 = 'SCRAM-SHA-256';
/** RFC 7677 §4: at least 4096 iterations. */
export const SCRAM_ITERATIONS_DEFAULT = 4096;
/** Bytes of server nonce (base64-encoded on the wire). */
const SERVER_NONCE_BYTES = 18;
const SALT_BYTES = 16;
/** A SCRAM message longer than this is refused before parsing (user names, nonces are short). */
const SCRAM_MESSAGE_MAX_BYTES = 4096;

/** What the server stores per user (RFC 5802 §3). */
export interface ScramCredential {
  salt: Buffer;
  iterations: number;
  storedKey: Buffer;
  serverKey: Buffer;
}

/** Where SCRAM looks users up; an interface so that a password file can back it later. */
export interface ScramCredentialStore {
  lookup(user: string): ScramCredential | undefined;
  /** The iteration count shown to an unknown user: the one most users have, so that i= does not
   * tell which users exist. Absent: SCRAM_ITERATIONS_DEFAULT. */
  decoyIterations?(): number;
  /** Key of the made-up salts of unknown users. Nodes given the same credentials must return the
   * same key, so an unknown user sees the same salt whichever node serves; absent: a random key per
   * process. */
  decoySecret?(): Uint8Array;
}

/** The most common iteration count of `creds` (the larger on a tie), or the default when none. */
export function commonIterations(creds: Iterable<ScramCredential>): number {
  const counts = new Map<number, number>();
  for (const c of creds) counts.set(c.iterations, (counts.get(c.iterations) ?? 0) + 1);
  let best = SCRAM_ITERATIONS_DEFAULT;
  let bestCount = 0;
  for (const [iterations, n] of counts) {
    if (n > bestCount || (n === bestCount && iterations > best)) {
      best = iterations;
      bestCount = n;
    }
  }
  return best;
}

const sha256 = (b: Buffer): Buffer => createHash('sha256').update(b).digest();
const hmac = (key: Uint8Array, text: string): Buffer => createHmac('sha256', key).update(text).digest();

/** The password as SCRAM hashes it: SASLprep'd (RFC 5802 §2.2), as a stored string when a
 * credential is made, as a query when one is checked. Throws SaslprepError when refused. */
export function scramPrepare(password: string, stored: boolean): Buffer {
  const r = saslprep(password, stored);
  if (!r.ok) throw new SaslprepError(`password refused by SASLprep (RFC 4013): ${r.reason}`);
  return Buffer.from(r.value, 'utf8');
}

/** Derives the stored credential from a password (RFC 5802 §3). */
export function scramCredential(
  password: string,
  salt: Buffer = randomBytes(SALT_BYTES),
  iterations = SCRAM_ITERATIONS_DEFAULT,
): ScramCredential {
  const salted = pbkdf2Sync(scramPrepare(password, true), salt, iterations, 32, 'sha256');
  return {
    salt,
    iterations,
    storedKey: sha256(hmac(salted, 'Client Key')),
    serverKey: hmac(salted, 'Server Key'),
  };
}

/** A small in-memory store built from user → password pairs at start. */
export class MemoryScramStore implements ScramCredentialStore {
  private readonly users = new Map<string, ScramCredential>();

  constructor(passwords: Iterable<[string, string]> = [], iterations = SCRAM_ITERATIONS_DEFAULT) {
    for (const [user, password] of passwords) this.set(user, scramCredential(password, undefined, iterations));
  }

  set(user: string, credential: ScramCredential): void {
    this.users.set(user, credential);
  }

  lookup(user: string): ScramCredential | undefined {
    return this.users.get(user);
  }

  decoyIterations(): number {
    return commonIterations(this.users.values());
  }
}

export interface ScramOptions {
  store: ScramCredentialStore;
  /** The server nonce source; tests may fix it. */
  nonce?: () => string;
}

/** The SCRAM-SHA-256 method. An unknown user gets a made-up salt (stable per user) and fails at the
 * proof, so the exchange does not tell which user names exist (RFC 5802 §9). */
export class ScramSha256 implements EnhancedAuthMethod {
  readonly name = SCRAM_SHA_256;
  private readonly store: ScramCredentialStore;
  private readonly nonce: () => string;
  private readonly decoyKey = randomBytes(32);

  constructor(opts: ScramOptions) {
    this.store = opts.store;
    this.nonce = opts.nonce ?? (() => randomBytes(SERVER_NONCE_BYTES).toString('base64'));
  }

  start(authData: Uint8Array | undefined): AuthStep {
    const first = parseClientFirst(authData);
    if (typeof first === 'string') return refuse(RC.NOT_AUTHORIZED, first);
    const known = this.store.lookup(first.user);
    const cred = known ?? this.decoy(first.user);
    const nonce = first.clientNonce + this.nonce();
    const serverFirst = `r=${nonce},s=${cred.salt.toString('base64')},i=${cred.iterations}`;
    const next = new ScramFinal(first, serverFirst, nonce, cred, known !== undefined);
    return { k: 'continue', data: Buffer.from(serverFirst, 'utf8'), next };
  }

  private decoy(user: string): ScramCredential {
    const salt = hmac(this.store.decoySecret?.() ?? this.decoyKey, user).subarray(0, SALT_BYTES);
    const iterations = this.store.decoyIterations?.() ?? SCRAM_ITERATIONS_DEFAULT;
    return { salt, iterations, storedKey: this.decoyKey, serverKey: this.decoyKey };
  }
}

interface ClientFirst {
  gs2Header: string;
  bare: string;
  user: string;
  clientNonce: string;
}

/** The step after server-first: checks the client's proof. */
class ScramFinal implements AuthExchange {
  constructor(
    private readonly first: ClientFirst,
    private readonly serverFirst: string,
    private readonly nonce: string,
    private readonly cred: ScramCredential,
    private readonly known: boolean,
  ) {}

  step(authData: Uint8Array | undefined): AuthStep {
    const text = scramText(authData);
    if (text === null) return refuse(RC.NOT_AUTHORIZED, 'client-final is not UTF-8 text');
    const m = /^c=([A-Za-z0-9+/=]*),r=([^,]*)(?:,[^,]*)*?,p=([A-Za-z0-9+/=]+)$/.exec(text);
    if (m === null) return refuse(RC.NOT_AUTHORIZED, 'client-final malformed');
    const [, binding, nonce, proofB64] = m as unknown as [string, string, string, string];
    if (Buffer.from(binding, 'base64').toString('utf8') !== this.first.gs2Header)
      return refuse(RC.NOT_AUTHORIZED, 'channel binding mismatch');
    if (nonce !== this.nonce) return refuse(RC.NOT_AUTHORIZED, 'nonce mismatch');
    const withoutProof = text.slice(0, text.lastIndexOf(',p='));
    const authMessage = `${this.first.bare},${this.serverFirst},${withoutProof}`;
    const proof = Buffer.from(proofB64, 'base64');
    const signature = hmac(this.cred.storedKey, authMessage);
    if (proof.length !== signature.length) return refuse(RC.BAD_USER_NAME_OR_PASSWORD, 'proof length', this.first.user);
    const clientKey = Buffer.alloc(proof.length);
    for (let i = 0; i < proof.length; i++) clientKey[i] = (proof[i] as number) ^ (signature[i] as number);
    if (!timingSafeEqual(sha256(clientKey), this.cred.storedKey) || !this.known) {
      return refuse(RC.BAD_USER_NAME_OR_PASSWORD, 'invalid proof', this.first.user);
    }
    const serverSignature = hmac(this.cred.serverKey, authMessage).toString('base64');
    return { k: 'success', user: this.first.user, data: Buffer.from(`v=${serverSignature}`, 'utf8') };
  }
}

function refuse(reason: number, why: string, user?: string): AuthStep {
  return user === undefined ? { k: 'failure', reason, why } : { k: 'failure', reason, why, user };
}

function scramText(data: Uint8Array | undefined): string | null {
  if (data === undefined || data.length === 0 || data.length > SCRAM_MESSAGE_MAX_BYTES) return null;
  const text = Buffer.from(data.buffer, data.byteOffset, data.length).toString('utf8');
  return Buffer.byteLength(text, 'utf8') === data.length && !text.includes('\uFFFD') ? text : null;
}

/** Parses client-first (RFC 5802 §7): gs2-header "n,," or "y,," (with an optional "a=authzid"),
 * then "n=user,r=nonce", extensions ignored. Returns a reason string when it cannot. */
function parseClientFirst(data: Uint8Array | undefined): ClientFirst | string {
  const text = scramText(data);
  if (text === null) return 'client-first missing or not UTF-8 text';
  const m = /^([ny]),(a=[^,]*)?,(n=([^,]*),r=([\x21-\x2b\x2d-\x7e]+)(?:,.*)?)$/.exec(text);
  if (m === null) return text.startsWith('p=') ? 'channel binding not offered' : 'client-first malformed';
  const [, flag, authzid, bare, rawUser, clientNonce] = m as unknown as [string, string, string | undefined, string, string, string];
  const user = saslName(rawUser);
  if (user === null || user === '') return 'user name malformed';
  return { gs2Header: `${flag},${authzid ?? ''},`, bare, user, clientNonce };
}

/** RFC 5802 §5.1: ',' and '=' travel as "=2C" and "=3D"; any other '=' is an error. */
function saslName(s: string): string | null {
  if (/=(?!2C|3D)/.test(s)) return null;
  return s.replace(/=2C/g, ',').replace(/=3D/g, '=');
}

/** The client side of SCRAM-SHA-256, for tests and tools: builds client-first and client-final and
 * verifies server-final. */
export class ScramClient {
  private readonly clientNonce: string;
  private readonly bare: string;
  private authMessage = '';
  private serverKey: Buffer | null = null;

  constructor(
    private readonly user: string,
    private readonly password: string,
    clientNonce = randomBytes(SERVER_NONCE_BYTES).toString('base64'),
  ) {
    this.clientNonce = clientNonce;
    this.bare = `n=${this.user.replace(/=/g, '=3D').replace(/,/g, '=2C')},r=${this.clientNonce}`;
  }

  first(): Buffer {
    return Buffer.from(`n,,${this.bare}`, 'utf8');
  }

  /** client-final for the server's server-first, or throws if server-first is not acceptable. */
  final(serverFirst: Uint8Array): Buffer {
    const text = Buffer.from(serverFirst).toString('utf8');
    const m = /^r=([^,]+),s=([^,]+),i=(\d+)/.exec(text);
    if (m === null) throw new Error(`server-first malformed: ${text}`);
    const [, nonce, saltB64, iter] = m as unknown as [string, string, string, string];
    if (!nonce.startsWith(this.clientNonce)) throw new Error('server nonce does not extend the client nonce');
    const salted = pbkdf2Sync(scramPrepare(this.password, false), Buffer.from(saltB64, 'base64'), Number(iter), 32, 'sha256');
    const clientKey = hmac(salted, 'Client Key');
    this.serverKey = hmac(salted, 'Server Key');
    const withoutProof = `c=biws,r=${nonce}`;
    this.authMessage = `${this.bare},${text},${withoutProof}`;
    const signature = hmac(sha256(clientKey), this.authMessage);
    const proof = Buffer.alloc(clientKey.length);
    for (let i = 0; i < proof.length; i++) proof[i] = (clientKey[i] as number) ^ (signature[i] as number);
    return Buffer.from(`${withoutProof},p=${proof.toString('base64')}`, 'utf8');
  }

  /** True when server-final proves the server knows the credential. */
  verify(serverFinal: Uint8Array): boolean {
    if (this.serverKey === null) return false;
    const expected = `v=${hmac(this.serverKey, this.authMessage).toString('base64')}`;
    return Buffer.from(serverFinal).toString('utf8') === expected;
  }
}
