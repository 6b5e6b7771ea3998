// PEM files named by the configuration (a bridge's tls-ca, tls-cert and tls-key; --nats-tls-ca,
// --nats-tls-cert and --nats-tls-key), read and checked at load, so that a bad file stops the start
// naming the key or flag and the file instead of failing every connection attempt later.
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import { CONFIG_ERROR, ConfigError } from './errors.js';

/** The bytes of `file`, or a ConfigError naming `where` and the file. */
export function readPem(file: string, where: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new ConfigError(CONFIG_ERROR.UNREADABLE_FILE, `${where} ${file}: cannot read: ${(err as Error).message}`);
  }
}

/** A PEM file read for configuration key or flag `key`. */
export interface PemFile {
  key: string;
  file: string;
  pem: Buffer;
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;

/** TLS files as OpenSSL will take them at connect time: a CA file must hold at least one
 * certificate, each one parseable (OpenSSL skips what is not one); a certificate and its key must
 * parse and match. */
export function checkTls(ca: PemFile | null, cert: PemFile | null, key: PemFile | null): void {
  const named = (f: PemFile): string => `${f.key} ${f.file}`;
  if (ca !== null) {
    const blocks = ca.pem.toString('latin1').match(PEM_CERTIFICATE) ?? [];
    if (blocks.length === 0) throw new ConfigError(CONFIG_ERROR.BAD_TLS, `${named(ca)}: no PEM certificate in it`);
    for (const b of blocks) {
      try {
        new X509Certificate(b);
      } catch (err) {
        throw new ConfigError(CONFIG_ERROR.BAD_TLS, `${named(ca)}: ${(err as Error).message}`);
      }
    }
  }
  if (cert === null || key === null) return;
  try {
    createSecureContext({ cert: cert.pem, key: key.pem });
  } catch (err) {
    throw new ConfigError(CONFIG_ERROR.BAD_TLS, `${named(cert)}, ${named(key)}: ${(err as Error).message}`);
  }
}
