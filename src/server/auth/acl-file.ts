// Reads an ACL file (Mosquitto's acl_file syntax, parsed by the pure src/broker/acl.ts).
import { readFileSync } from 'node:fs';
import { parseAcl } from '../../broker/acl.js';
import type { AclRule } from '../../broker/commands.js';
import { CONFIG_ERROR, ConfigError } from '../../errors.js';

/** The rules of the file in file order; a problem names the file and line (exit 2 at start). */
export function readAclFile(path: string): AclRule[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(CONFIG_ERROR.UNREADABLE_FILE, `--acl-file ${path}: cannot read: ${(err as Error).message}`);
  }
  const r = parseAcl(text);
  if ('problem' in r) throw new ConfigError(CONFIG_ERROR.BAD_FILE, `--acl-file ${path}:${r.problem.line}: ${r.problem.reason}`);
  return r.rules;
}
