// The Authenticator (src/server/authenticator.ts) over a password file, with anonymous access
// decided by --allow-anonymous and failed attempts throttled per address and username. It is also
// the credential store of SCRAM-SHA-256 enhanced authentication: the file's SCRAM lines, re-read
// with the rest of the file.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { CONFIG_ERROR, ConfigError } from '../../errors.js';
import type { EventKind } from '../../events.js';
import type { ConnectPacket } from '../../protocol/packets.js';
import { RC } from '../../protocol/reason-codes.js';
import type { Authenticator, AuthResult, LoginThrottle } from '../authenticator.js';
import { commonIterations, type ScramCredential, type ScramCredentialStore } from '../scram.js';
import type { Transport } from '../transport.js';
import { AuthThrottle } from './auth-throttle.js';
import { type PasswordHash, parsePasswordFile, verifyPassword } from './password-file.js';

const OK: AuthResult = { ok: true };
const BAD_CREDENTIALS: AuthResult = { ok: false, reason: RC.BAD_USER_NAME_OR_PASSWORD };
const NOT_AUTHORIZED: AuthResult = { ok: false, reason: RC.NOT_AUTHORIZED };
const BAD_METHOD: AuthResult = { ok: false, reason: RC.BAD_AUTHENTICATION_METHOD };

/** Reads and parses a password file; a problem names the file and line (exit 2 at start). */
export function readPasswordFile(path: string): Map<string, PasswordHash> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(CONFIG_ERROR.UNREADABLE_FILE, `--password-file ${path}: cannot read: ${(err as Error).message}`);
  }
  const r = parsePasswordFile(text);
  if ('problem' in r) throw new ConfigError(CONFIG_ERROR.BAD_FILE, `--password-file ${path}:${r.problem.line}: ${r.problem.reason}`);
  return r.users;
}

/** The key of unknown users' made-up SCRAM salts: a hash over every user's stored credential. */
function decoySecretOf(users: ReadonlyMap<string, PasswordHash>): Buffer {
  const h = createHash('sha256').update('raftmq scram decoy salt\0');
  for (const user of [...users.keys()].sort()) h.update(`${user}\0${JSON.stringify(users.get(user))}\0`);
  return h.digest();
}

export interface AuthCounters {
  /** A counted event, e.g. 'auth-failed', 'auth-throttled'. */
  event(kind: EventKind, fields?: Record<string, unknown>): void;
}

export class PasswordFileAuthenticator implements Authenticator, ScramCredentialStore {
  readonly throttle = new AuthThrottle();
  private users: Map<string, PasswordHash>;
  private iterations: number;
  private secret: Buffer;
  readonly loginThrottle: LoginThrottle = {
    blocked: (address, user) => {
      const ms = this.throttle.blockedFor(address, user, this.monotonicMs());
      if (ms > 0) this.counters.event('auth-throttled', { address, username: user ?? '', delayMs: Math.round(ms) });
      return ms;
    },
    failed: (address, user) => {
      const delay = this.throttle.fail(address, user, this.monotonicMs());
      this.counters.event('auth-failed', { address, username: user ?? '', delayMs: delay });
      return delay;
    },
    succeeded: (address, user) => this.throttle.succeed(address, user),
  };

  constructor(
    readonly path: string,
    private readonly allowAnonymous: boolean,
    private readonly counters: AuthCounters,
    private readonly monotonicMs: () => number = () => performance.now(),
  ) {
    this.users = readPasswordFile(path);
    this.iterations = scramIterations(this.users);
    this.secret = decoySecretOf(this.users);
  }

  get userCount(): number {
    return this.users.size;
  }

  /** Users with a SCRAM line; a user with only a scrypt hash is unknown to SCRAM, and the method
   * then fails its proof exactly as for a wrong password. */
  lookup(user: string): ScramCredential | undefined {
    const h = this.users.get(user);
    return h?.k === 'scram' ? h.scram : undefined;
  }

  /** The iteration count the file's SCRAM lines use most: what an unknown user is shown. */
  decoyIterations(): number {
    return this.iterations;
  }

  /** Derived from the file's credentials: the same on every node given the same file, and as
   * secret as the hashes it is made of. */
  decoySecret(): Uint8Array {
    return this.secret;
  }

  /** Re-reads the file (SIGHUP); on a problem the old users stay and the error is thrown. */
  reload(): void {
    const users = readPasswordFile(this.path);
    this.users = users;
    this.iterations = scramIterations(users);
    this.secret = decoySecretOf(users);
  }

  authenticate(connect: ConnectPacket, remoteAddress: string, transport?: Transport): AuthResult | Promise<AuthResult> {
    if (connect.props.authMethod !== undefined) return BAD_METHOD; // [MQTT-4.12.0-1]
    // A client certificate verified against --tls-ca during the handshake is the credential; its
    // identity is already the username, and no password is asked for.
    if (transport !== undefined && transport.certIdentity !== null) return OK;
    const user = connect.username;
    if (user === null) {
      if (this.allowAnonymous) return OK;
      this.counters.event('auth-anonymous-refused', { address: remoteAddress });
      return NOT_AUTHORIZED;
    }
    const now = this.monotonicMs();
    const blocked = this.throttle.blockedFor(remoteAddress, user, now);
    if (blocked > 0) {
      this.counters.event('auth-throttled', { address: remoteAddress, username: user, delayMs: Math.round(blocked) });
      return delayed(BAD_CREDENTIALS, blocked);
    }
    const h = this.users.get(user);
    if (h === undefined || connect.password === null) return this.failed(remoteAddress, user, now);
    return verifyPassword(connect.password, h).then((ok) => {
      if (!ok) return this.failed(remoteAddress, user, this.monotonicMs());
      this.throttle.succeed(remoteAddress, user);
      return OK;
    });
  }

  private failed(address: string, user: string, now: number): Promise<AuthResult> {
    const delay = this.throttle.fail(address, user, now);
    this.counters.event('auth-failed', { address, username: user, delayMs: delay });
    return delayed(BAD_CREDENTIALS, delay);
  }
}

function scramIterations(users: Map<string, PasswordHash>): number {
  const creds: ScramCredential[] = [];
  for (const h of users.values()) if (h.k === 'scram') creds.push(h.scram);
  return commonIterations(creds);
}

function delayed(r: AuthResult, ms: number): Promise<AuthResult> {
  return new Promise((resolve) => setTimeout(resolve, ms, r));
}
