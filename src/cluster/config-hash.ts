// A node's configuration as one hash (docs/design.md "The seam": every node is given the same files, and
// /health reports a node whose configuration differs). The serving leader's hash travels in its
// serve-start; every replica compares it with its own. Covered: the replicated Settings (limits,
// will grace, ACL rules as parsed) and the bytes of the password and ACL files; a password file
// changes who may connect after a failover, although nothing of it is replicated.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Settings } from '../broker/commands.js';

/** Hex SHA-256 of the settings (keys sorted, so field order does not matter), the node-local
 * settings `local` (when not null) and each file's contents in order; a file that cannot be read hashes as its error code, so the difference shows. */
export function configHash(settings: Settings, files: readonly string[], local: unknown = null): string {
  const h = createHash('sha256');
  h.update(canonical(settings));
  // Node-local settings that are not replicated (a bridge's addresses and credentials); absent
  // when there are none, so a node without them hashes as before they existed.
  if (local !== null) h.update(`\0local\0${canonical(local)}`);
  for (const file of files) {
    h.update('\0file\0');
    try {
      h.update(readFileSync(file));
    } catch (err) {
      h.update(`unreadable:${(err as NodeJS.ErrnoException).code ?? 'error'}`);
    }
  }
  return h.digest('hex');
}

/** JSON with object keys sorted at every level. */
export function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, value: unknown) => {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return value;
    const sorted: Record<string, unknown> = {};
    for (const k of Object.keys(value).sort()) sorted[k] = (value as Record<string, unknown>)[k];
    return sorted;
  });
}
