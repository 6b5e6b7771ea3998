// A CA and a server certificate for 127.0.0.1, both ECDSA P-256, made with openssl into a new
// temporary folder at run time. Files are world-readable (the folder too), so a broker that drops
// privileges (Mosquitto started as root) can still read them.
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface Pki {
  dir: string;
  ca: string;
  cert: string;
  key: string;
}

export function makePki(): Pki {
  const dir = mkdtempSync(join(tmpdir(), 'raftmq-fleet-pki-'));
  const run = (args: string[]): void => {
    execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'], timeout: 20_000 });
  };
  const ec = ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out'];
  run([...ec, 'ca.key']);
  run([
    'req',
    '-x509',
    '-new',
    '-key',
    'ca.key',
    '-sha256',
    '-days',
    '2',
    '-subj',
    '/CN=raftmq fleet bench CA',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
    '-out',
    'ca.crt',
  ]);
  run([...ec, 'server.key']);
  run(['req', '-new', '-key', 'server.key', '-subj', '/CN=127.0.0.1', '-out', 'server.csr']);
  writeFileSync(
    join(dir, 'server.ext'),
    'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n',
  );
  run([
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-days',
    '2',
    '-sha256',
    '-extfile',
    'server.ext',
    '-out',
    'server.crt',
  ]);
  chmodSync(dir, 0o755);
  for (const f of readdirSync(dir)) chmodSync(join(dir, f), 0o644);
  return { dir, ca: join(dir, 'ca.crt'), cert: join(dir, 'server.crt'), key: join(dir, 'server.key') };
}
