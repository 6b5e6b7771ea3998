// The TLS files of the node's mqtts:// and wss:// listeners: read and checked at start (a bad or
// unreadable file stops the command naming the flag and the file), re-read when a file changes or
// on SIGHUP, and handed to every TLS server as a new secure context. Connections already open keep
// the context they were made with; only new handshakes see the new files.
import { type FSWatcher, readFileSync, watch } from 'node:fs';
import { basename, dirname } from 'node:path';
import { createSecureContext, type PeerCertificate, type SecureContextOptions, type TlsOptions } from 'node:tls';
import { CONFIG_ERROR, ConfigError } from '../../errors.js';

export type ClientAuth = 'none' | 'optional' | 'required';
export type IdentityField = 'cn' | 'san';

export interface TlsSettings {
  cert: string;
  key: string;
  ca: string | null;
  crl: string | null;
  clientAuth: ClientAuth;
  identity: IdentityField;
  requireClientIdMatch: boolean;
}

/** Editors and deploy tools write a certificate and its key in several steps; one reload after
 * the burst, not one per step. */
const RELOAD_DEBOUNCE_MS = 200;

type Loaded = { cert: Buffer; key: Buffer; ca: Buffer | undefined; crl: Buffer | undefined };

function readTlsFile(flag: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new ConfigError(CONFIG_ERROR.UNREADABLE_FILE, `${flag} ${path}: cannot read: ${(err as Error).message}`);
  }
}

function readAll(s: TlsSettings): Loaded {
  return {
    cert: readTlsFile('--tls-cert', s.cert),
    key: readTlsFile('--tls-key', s.key),
    ca: s.ca === null ? undefined : readTlsFile('--tls-ca', s.ca),
    crl: s.crl === null ? undefined : readTlsFile('--tls-crl', s.crl),
  };
}

function contextOptions(l: Loaded): SecureContextOptions {
  const o: SecureContextOptions = { cert: l.cert, key: l.key, minVersion: 'TLSv1.2' };
  if (l.ca !== undefined) o.ca = l.ca;
  if (l.crl !== undefined) o.crl = l.crl;
  return o;
}

function check(s: TlsSettings, l: Loaded): void {
  try {
    createSecureContext(contextOptions(l));
  } catch (err) {
    const files = [`--tls-cert ${s.cert}`, `--tls-key ${s.key}`];
    if (s.ca !== null) files.push(`--tls-ca ${s.ca}`);
    if (s.crl !== null) files.push(`--tls-crl ${s.crl}`);
    throw new ConfigError(CONFIG_ERROR.BAD_TLS, `${files.join(', ')}: ${(err as Error).message}`);
  }
}

function same(a: Buffer | undefined, b: Buffer | undefined): boolean {
  return a === undefined || b === undefined ? a === b : a.equals(b);
}

export class TlsMaterial {
  readonly settings: TlsSettings;
  private loaded: Loaded;
  private readonly subscribers = new Set<(o: SecureContextOptions) => void>();
  private watchers: FSWatcher[] = [];
  private debounce: NodeJS.Timeout | null = null;

  private constructor(settings: TlsSettings, loaded: Loaded) {
    this.settings = settings;
    this.loaded = loaded;
  }

  /** Reads and checks the files; throws ConfigError naming the flag and file. */
  static load(settings: TlsSettings): TlsMaterial {
    if (settings.clientAuth !== 'none' && settings.ca === null) {
      throw new ConfigError(
        CONFIG_ERROR.MISSING_VALUE,
        `--tls-client-auth ${settings.clientAuth} needs --tls-ca to verify client certificates`,
      );
    }
    if (settings.crl !== null && settings.clientAuth === 'none') {
      throw new ConfigError(CONFIG_ERROR.MISSING_VALUE, '--tls-crl needs --tls-client-auth optional or required');
    }
    const loaded = readAll(settings);
    check(settings, loaded);
    return new TlsMaterial(settings, loaded);
  }

  /** Options for tls.createServer / https.createServer. */
  serverOptions(): TlsOptions {
    const auth = this.settings.clientAuth;
    // 'optional' still verifies a certificate that is presented; the listener refuses an
    // unverified one after the handshake instead of treating it as anonymous.
    return { ...contextOptions(this.loaded), requestCert: auth !== 'none', rejectUnauthorized: auth === 'required' };
  }

  /** Called with new context options after every successful reload that changed a file. */
  subscribe(fn: (o: SecureContextOptions) => void): () => void {
    this.subscribers.add(fn);
    return () => this.subscribers.delete(fn);
  }

  /** Re-reads the files. Returns 'changed', 'unchanged', or throws ConfigError (the old files stay
   * in use, e.g. while a certificate and its key are half-replaced). */
  reload(): 'changed' | 'unchanged' {
    const next = readAll(this.settings);
    const prev = this.loaded;
    if (same(prev.cert, next.cert) && same(prev.key, next.key) && same(prev.ca, next.ca) && same(prev.crl, next.crl)) return 'unchanged';
    check(this.settings, next);
    this.loaded = next;
    const opts = contextOptions(next);
    for (const fn of this.subscribers) fn(opts);
    return 'changed';
  }

  /** Watches the files' folders (a rename into place replaces the inode a file watch would
   * follow) and calls `onChange` once per burst of changes. */
  watch(onChange: () => void): void {
    const s = this.settings;
    const paths = [s.cert, s.key, s.ca, s.crl].filter((p): p is string => p !== null);
    const names = new Set(paths.map((p) => basename(p)));
    for (const dir of new Set(paths.map((p) => dirname(p)))) {
      try {
        const w = watch(dir, { persistent: false }, (_event, file) => {
          // Kubernetes swaps a "..data" symlink; a null name means the platform could not say.
          if (file !== null && !names.has(String(file)) && !String(file).startsWith('..')) return;
          if (this.debounce !== null) clearTimeout(this.debounce);
          this.debounce = setTimeout(() => {
            this.debounce = null;
            onChange();
          }, RELOAD_DEBOUNCE_MS);
        });
        w.on('error', () => w.close());
        this.watchers.push(w);
      } catch {
        // A folder that cannot be watched still reloads on SIGHUP.
      }
    }
  }

  close(): void {
    for (const w of this.watchers) w.close();
    this.watchers = [];
    if (this.debounce !== null) clearTimeout(this.debounce);
    this.debounce = null;
    this.subscribers.clear();
  }
}

/** The identity of a verified client certificate: its subject CN, or its first subject alternative
 * name of type DNS, email or URI (IP addresses are skipped: they name a host, not a device). */
export function certIdentity(cert: PeerCertificate, field: IdentityField): string | null {
  if (field === 'cn') {
    const cn: unknown = cert.subject?.CN;
    const first = Array.isArray(cn) ? cn[0] : cn;
    return typeof first === 'string' && first !== '' ? first : null;
  }
  for (const { type, value } of parseSubjectAltName(cert.subjectaltname ?? '')) {
    if ((type === 'DNS' || type === 'email' || type === 'URI') && value !== '') return value;
  }
  return null;
}

/** Node's subjectaltname string: "DNS:a, email:b, URI:c"; a value with a comma or quote is
 * written as a JSON string ("DNS:\"a, b\""). */
export function parseSubjectAltName(s: string): { type: string; value: string }[] {
  const out: { type: string; value: string }[] = [];
  let i = 0;
  while (i < s.length) {
    const colon = s.indexOf(':', i);
    if (colon < 0) break;
    const type = s.slice(i, colon);
    let value: string;
    let next: number;
    if (s[colon + 1] === '"') {
      let j = colon + 2;
      while (j < s.length && s[j] !== '"') j += s[j] === '\\' ? 2 : 1;
      try {
        value = JSON.parse(s.slice(colon + 1, j + 1)) as string;
      } catch {
        return out;
      }
      next = s.indexOf(', ', j + 1);
    } else {
      next = s.indexOf(', ', colon + 1);
      value = s.slice(colon + 1, next < 0 ? s.length : next);
    }
    out.push({ type, value });
    if (next < 0) break;
    i = next + 2;
  }
  return out;
}
