// The password file: one user per line, `#` comment lines and blank lines allowed, in one of two forms
// (base64 fields):
//   USER:$scrypt$N=16384,r=8,p=1$SALT$HASH                       salted scrypt (node:crypto)
//   USER:$scram-sha-256$i=4096$SALT$STOREDKEY$SERVERKEY          SCRAM credential (RFC 5802 §3)
// A SCRAM user can also log in with a plain CONNECT password: StoredKey is derived from it and
// compared. Every comparison is in constant time.
import { createHash, createHmac, pbkdf2, randomBytes, scrypt, scryptSync, timingSafeEqual } from 'node:crypto';
import { saslprep } from '../saslprep.js';
import { SCRAM_ITERATIONS_DEFAULT, type ScramCredential, scramCredential } from '../scram.js';

export interface ScryptParams {
  N: number;
  r: number;
  p: number;
}

export interface ScryptHash {
  params: ScryptParams;
  salt: Buffer;
  hash: Buffer;
}

/** One user's line: a scrypt hash, or a SCRAM-SHA-256 credential. */
export type PasswordHash = { k: 'scrypt'; scrypt: ScryptHash } | { k: 'scram'; scram: ScramCredential };

/** Cost of new hashes: about 16 MiB and tens of milliseconds per check on current machines. */
export const SCRYPT_DEFAULT: ScryptParams = { N: 16_384, r: 8, p: 1 };
const SALT_BYTES = 16;
const HASH_BYTES = 32;
/** Bounds on parameters read from a file, so a hostile file cannot make one check take minutes or
 * gigabytes: N a power of two in [2^10, 2^20], r in [1, 32], p in [1, 16], salt and hash 8..128 bytes. */
const N_MIN = 1 << 10;
const N_MAX = 1 << 20;
const R_MAX = 32;
const P_MAX = 16;
const BYTES_MIN = 8;
const BYTES_MAX = 128;
const LINE = /^\$scrypt\$N=(\d{1,8}),r=(\d{1,3}),p=(\d{1,3})\$([A-Za-z0-9+/]+={0,2})\$([A-Za-z0-9+/]+={0,2})$/;
/** SCRAM iterations read from a file: RFC 7677 §4's minimum, and a maximum that keeps one plain
 * password check (PBKDF2 on the thread pool) under about a second. */
const SCRAM_I_MIN = SCRAM_ITERATIONS_DEFAULT;
const SCRAM_I_MAX = 1_000_000;
/** StoredKey and ServerKey are SHA-256 outputs. */
const SCRAM_KEY_BYTES = 32;
const B64 = '([A-Za-z0-9+/]+={0,2})';
const SCRAM_LINE = new RegExp(`^\\$scram-sha-256\\$i=(\\d{1,8})\\$${B64}\\$${B64}\\$${B64}$`);

/** Memory scrypt needs for these parameters, plus headroom; node refuses above maxmem. */
const maxmemFor = (q: ScryptParams): number => 128 * q.N * q.r * 2 + 128 * q.r * q.p + (1 << 20);

export function formatHash(h: ScryptHash): string {
  return `$scrypt$N=${h.params.N},r=${h.params.r},p=${h.params.p}$${h.salt.toString('base64')}$${h.hash.toString('base64')}`;
}

/** A new salted hash of `password` (synchronous: used by `raftmq passwd`, never on a connection). */
export function hashPassword(password: string, params: ScryptParams = SCRYPT_DEFAULT): string {
  const salt = randomBytes(SALT_BYTES);
  const hash = scryptSync(password, salt, HASH_BYTES, { ...params, maxmem: maxmemFor(params) });
  return formatHash({ params, salt, hash });
}

export function formatScram(c: ScramCredential): string {
  const b = (x: Buffer): string => x.toString('base64');
  return `$scram-sha-256$i=${c.iterations}$${b(c.salt)}$${b(c.storedKey)}$${b(c.serverKey)}`;
}

/** A new SCRAM-SHA-256 credential for `password` (synchronous: `raftmq passwd --scram` only). */
export function scramPassword(password: string): string {
  return formatScram(scramCredential(password));
}

/** The parsed hash of one line's hash field, or why it cannot be used. */
export function parseHash(field: string): PasswordHash | string {
  if (field.startsWith('$scram-sha-256$')) return parseScram(field);
  const m = LINE.exec(field);
  if (m === null) return 'expected $scrypt$N=..,r=..,p=..$SALT$HASH or $scram-sha-256$i=..$SALT$STOREDKEY$SERVERKEY';
  const params = { N: Number(m[1]), r: Number(m[2]), p: Number(m[3]) };
  if (params.N < N_MIN || params.N > N_MAX || (params.N & (params.N - 1)) !== 0)
    return `N must be a power of two from ${N_MIN} to ${N_MAX}`;
  if (params.r < 1 || params.r > R_MAX) return `r must be from 1 to ${R_MAX}`;
  if (params.p < 1 || params.p > P_MAX) return `p must be from 1 to ${P_MAX}`;
  const salt = Buffer.from(m[4] as string, 'base64');
  const hash = Buffer.from(m[5] as string, 'base64');
  if (salt.length < BYTES_MIN || salt.length > BYTES_MAX) return `salt must be ${BYTES_MIN} to ${BYTES_MAX} bytes`;
  if (hash.length < BYTES_MIN || hash.length > BYTES_MAX) return `hash must be ${BYTES_MIN} to ${BYTES_MAX} bytes`;
  return { k: 'scrypt', scrypt: { params, salt, hash } };
}

function parseScram(field: string): PasswordHash | string {
  const m = SCRAM_LINE.exec(field);
  if (m === null) return 'expected $scram-sha-256$i=..$SALT$STOREDKEY$SERVERKEY';
  const iterations = Number(m[1]);
  if (iterations < SCRAM_I_MIN || iterations > SCRAM_I_MAX) return `i must be from ${SCRAM_I_MIN} to ${SCRAM_I_MAX}`;
  const salt = Buffer.from(m[2] as string, 'base64');
  const storedKey = Buffer.from(m[3] as string, 'base64');
  const serverKey = Buffer.from(m[4] as string, 'base64');
  if (salt.length < BYTES_MIN || salt.length > BYTES_MAX) return `salt must be ${BYTES_MIN} to ${BYTES_MAX} bytes`;
  if (storedKey.length !== SCRAM_KEY_BYTES || serverKey.length !== SCRAM_KEY_BYTES)
    return `StoredKey and ServerKey must be ${SCRAM_KEY_BYTES} bytes`;
  return { k: 'scram', scram: { salt, iterations, storedKey, serverKey } };
}

export interface PasswordFileProblem {
  line: number;
  reason: string;
}

/** Users by name; a later line for the same user replaces an earlier one. */
export function parsePasswordFile(text: string): { users: Map<string, PasswordHash> } | { problem: PasswordFileProblem } {
  const users = new Map<string, PasswordHash>();
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = (lines[i] as string).trim();
    if (line.length === 0 || line.startsWith('#')) continue;
    const colon = line.indexOf(':');
    if (colon <= 0) return { problem: { line: i + 1, reason: 'expected USER:$scrypt$... or USER:$scram-sha-256$...' } };
    const h = parseHash(line.slice(colon + 1));
    if (typeof h === 'string') return { problem: { line: i + 1, reason: h } };
    users.set(line.slice(0, colon), h);
  }
  return { users };
}

/** Checks a password against a user's line off the event loop (libuv's thread pool). */
export function verifyPassword(password: Uint8Array, h: PasswordHash): Promise<boolean> {
  switch (h.k) {
    case 'scrypt':
      return verifyScrypt(password, h.scrypt);
    case 'scram':
      return verifyScram(password, h.scram);
    default: {
      const _: never = h;
      return _;
    }
  }
}

function verifyScrypt(password: Uint8Array, h: ScryptHash): Promise<boolean> {
  return new Promise((resolve) => {
    scrypt(password, h.salt, h.hash.length, { ...h.params, maxmem: maxmemFor(h.params) }, (err, derived) => {
      resolve(err === null && derived.length === h.hash.length && timingSafeEqual(derived, h.hash));
    });
  });
}

/** StoredKey = H(HMAC(SaltedPassword, "Client Key")) with SaltedPassword = PBKDF2(password)
 * (RFC 5802 §3), the password normalised as scramCredential() did when the line was made. A
 * password that is not UTF-8 cannot be one that was typed into `raftmq passwd`, and fails. */
function verifyScram(password: Uint8Array, c: ScramCredential): Promise<boolean> {
  const raw = Buffer.from(password.buffer, password.byteOffset, password.length);
  const text = raw.toString('utf8');
  if (!Buffer.from(text, 'utf8').equals(raw)) return Promise.resolve(false);
  const prepared = saslprep(text, false);
  if (!prepared.ok) return Promise.resolve(false);
  const normalised = Buffer.from(prepared.value, 'utf8');
  return new Promise((resolve) => {
    pbkdf2(normalised, c.salt, c.iterations, SCRAM_KEY_BYTES, 'sha256', (err, salted) => {
      if (err !== null) return resolve(false);
      const clientKey = createHmac('sha256', salted).update('Client Key').digest();
      const storedKey = createHash('sha256').update(clientKey).digest();
      resolve(timingSafeEqual(storedKey, c.storedKey));
    });
  });
}

/** A user name may not contain `:` (the separator), a line break, or be empty; MQTT strings are at
 * most 65535 bytes. */
export function usernameProblem(user: string): string | null {
  if (user.length === 0) return 'empty user name';
  if (/[:\r\n]/.test(user)) return 'user name contains ":" or a line break';
  if (Buffer.byteLength(user, 'utf8') > 65_535) return 'user name longer than 65535 bytes';
  return null;
}

/** The file's text with `user` added or replaced, other lines (comments included) kept in place. */
export function upsertUser(text: string, user: string, hashField: string): string {
  const lines = text.length === 0 ? [] : text.replace(/\n$/, '').split('\n');
  const entry = `${user}:${hashField}`;
  let found = false;
  for (let i = 0; i < lines.length; i++) {
    const line = (lines[i] as string).trim();
    if (!line.startsWith('#') && line.slice(0, line.indexOf(':')) === user && line.includes(':')) {
      if (found) lines.splice(i--, 1);
      else lines[i] = entry;
      found = true;
    }
  }
  if (!found) lines.push(entry);
  return `${lines.join('\n')}\n`;
}
