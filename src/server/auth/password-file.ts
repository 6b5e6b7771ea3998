// The password file: one user per line, `USER:$scrypt$N=16384,r=8,p=1$SALT$HASH` with SALT and
// HASH in standard base64, `#` comment lines and blank lines allowed. Hashes are salted scrypt
// (node:crypto), compared in constant time.
import { randomBytes, scrypt, scryptSync, timingSafeEqual } from 'node:crypto';

export interface ScryptParams {
  N: number;
  r: number;
  p: number;
}

export interface PasswordHash {
  params: ScryptParams;
  salt: Buffer;
  hash: Buffer;
}

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

/** Memory scrypt needs for these parameters, plus headroom; node refuses above maxmem. */
const maxmemFor = (q: ScryptParams): number => 128 * q.N * q.r * 2 + 128 * q.r * q.p + (1 << 20);

export function formatHash(h: PasswordHash): string {
  return `$scrypt$N=${h.params.N},r=${h.params.r},p=${h.params.p}$${h.salt.toString('base64')}$${h.hash.toString('base64')}`;
}

/** A new salted hash of `password` (synchronous: used by `raftmq passwd`, never on a connection). */
export function hashPassword(password: string, params: ScryptParams = SCRYPT_DEFAULT): string {
  const salt = randomBytes(SALT_BYTES);
  const hash = scryptSync(password, salt, HASH_BYTES, { ...params, maxmem: maxmemFor(params) });
  return formatHash({ params, salt, hash });
}

/** The parsed hash of one line's hash field, or why it cannot be used. */
export function parseHash(field: string): PasswordHash | string {
  const m = LINE.exec(field);
  if (m === null) return 'expected $scrypt$N=..,r=..,p=..$SALT$HASH';
  const params = { N: Number(m[1]), r: Number(m[2]), p: Number(m[3]) };
  if (params.N < N_MIN || params.N > N_MAX || (params.N & (params.N - 1)) !== 0)
    return `N must be a power of two from ${N_MIN} to ${N_MAX}`;
  if (params.r < 1 || params.r > R_MAX) return `r must be from 1 to ${R_MAX}`;
  if (params.p < 1 || params.p > P_MAX) return `p must be from 1 to ${P_MAX}`;
  const salt = Buffer.from(m[4] as string, 'base64');
  const hash = Buffer.from(m[5] as string, 'base64');
  if (salt.length < BYTES_MIN || salt.length > BYTES_MAX) return `salt must be ${BYTES_MIN} to ${BYTES_MAX} bytes`;
  if (hash.length < BYTES_MIN || hash.length > BYTES_MAX) return `hash must be ${BYTES_MIN} to ${BYTES_MAX} bytes`;
  return { params, salt, hash };
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
    if (colon <= 0) return { problem: { line: i + 1, reason: 'expected USER:$scrypt$...' } };
    const h = parseHash(line.slice(colon + 1));
    if (typeof h === 'string') return { problem: { line: i + 1, reason: h } };
    users.set(line.slice(0, colon), h);
  }
  return { users };
}

/** Checks a password against a hash off the event loop (libuv's thread pool). */
export function verifyPassword(password: Uint8Array, h: PasswordHash): Promise<boolean> {
  return new Promise((resolve) => {
    scrypt(password, h.salt, h.hash.length, { ...h.params, maxmem: maxmemFor(h.params) }, (err, derived) => {
      resolve(err === null && derived.length === h.hash.length && timingSafeEqual(derived, h.hash));
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
