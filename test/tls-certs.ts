// Certificates made with openssl at test time: a CA (through `openssl ca`, which can back-date
// validity and revoke), a server certificate for 127.0.0.1, client certificates (good, expired,
// revoked, from another CA) and a CRL. Nothing is checked in; each call makes a fresh folder.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { requireCommand } from './broker-process.js';

export interface Pki {
  dir: string;
  caCert: string;
  caKey: string;
  crl: string;
  /** Issues a certificate; returns { cert, key } file paths. */
  issue(name: string, opts: IssueOptions): { cert: string; key: string };
  /** Revokes a certificate issued by this CA and rewrites the CRL file. */
  revoke(cert: string): void;
}

export interface IssueOptions {
  cn: string;
  /** subjectAltName value, e.g. "IP:127.0.0.1,DNS:localhost" or "email:a@b". */
  san?: string;
  server?: boolean;
  /** openssl ca dates (YYYYMMDDHHMMSSZ); defaults: now for 30 days. */
  startDate?: string;
  endDate?: string;
}

function openssl(args: string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'], timeout: 20_000 });
}

/** A CA in a new temporary folder. */
export function makePki(label = 'ca'): Pki {
  requireCommand('openssl', 'openssl');
  const dir = mkdtempSync(join(tmpdir(), `raftmq-pki-${label}-`));
  mkdirSync(join(dir, 'issued'));
  writeFileSync(join(dir, 'index.txt'), '');
  writeFileSync(join(dir, 'serial'), '1000\n');
  writeFileSync(join(dir, 'crlnumber'), '1000\n');
  writeFileSync(
    join(dir, 'ca.cnf'),
    [
      '[ca]',
      'default_ca = local',
      '[local]',
      `dir = ${dir}`,
      'database = $dir/index.txt',
      'serial = $dir/serial',
      'crlnumber = $dir/crlnumber',
      'new_certs_dir = $dir/issued',
      'certificate = $dir/ca.crt',
      'private_key = $dir/ca.key',
      'default_md = sha256',
      'default_days = 30',
      'default_crl_days = 30',
      'policy = anything',
      'unique_subject = no',
      'copy_extensions = copy',
      '[anything]',
      'commonName = supplied',
      '[client_ext]',
      'basicConstraints = CA:FALSE',
      'extendedKeyUsage = clientAuth',
      '[server_ext]',
      'basicConstraints = CA:FALSE',
      'extendedKeyUsage = serverAuth',
      '',
    ].join('\n'),
  );
  openssl(
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      'ca.key',
      '-out',
      'ca.crt',
      '-days',
      '30',
      '-subj',
      `/CN=raftmq test ${label}`,
    ],
    dir,
  );
  const pki: Pki = {
    dir,
    caCert: join(dir, 'ca.crt'),
    caKey: join(dir, 'ca.key'),
    crl: join(dir, 'crl.pem'),
    issue(name, o) {
      const key = join(dir, `${name}.key`);
      const csr = join(dir, `${name}.csr`);
      const cert = join(dir, `${name}.crt`);
      const req = ['req', '-new', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', csr, '-subj', `/CN=${o.cn}`];
      if (o.san !== undefined) req.push('-addext', `subjectAltName=${o.san}`);
      openssl(req, dir);
      const sign = [
        'ca',
        '-batch',
        '-notext',
        '-config',
        'ca.cnf',
        '-extensions',
        o.server ? 'server_ext' : 'client_ext',
        '-in',
        csr,
        '-out',
        cert,
      ];
      if (o.startDate !== undefined) sign.push('-startdate', o.startDate);
      if (o.endDate !== undefined) sign.push('-enddate', o.endDate);
      openssl(sign, dir);
      return { cert, key };
    },
    revoke(cert) {
      openssl(['ca', '-config', 'ca.cnf', '-revoke', cert], dir);
      openssl(['ca', '-config', 'ca.cnf', '-gencrl', '-out', 'crl.pem'], dir);
    },
  };
  openssl(['ca', '-config', 'ca.cnf', '-gencrl', '-out', 'crl.pem'], dir);
  return pki;
}
