import { Packr } from 'msgpackr';
import type { Command } from '../broker/commands.js';

// Commands are encoded once with msgpackr, without saved record structures, so the bytes depend on
// nothing but the command (DESIGN.md "Encoding"). Both logs apply decoded bytes, never the
// proposer's object, so single-node and cluster mode apply exactly the same values.
const packr = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true });

const COMMAND_TYPES: ReadonlySet<string> = new Set<Command['t']>([
  'serve-start',
  'settings',
  'connect',
  'disconnect',
  'subscribe',
  'unsubscribe',
  'publish',
  'pubrel',
  'ack',
  'tick',
  'check',
]);

export function encodeCommand(cmd: Command): Uint8Array {
  return packr.pack(cmd);
}

export class CommandDecodeError extends Error {
  readonly code = 'ERR_COMMAND_DECODE';
}

/** Decodes bytes made by encodeCommand. Checks only the envelope: the command's content is judged
 * by apply, which never throws on it. */
export function decodeCommand(bytes: Uint8Array): Command {
  let value: unknown;
  try {
    value = packr.unpack(bytes);
  } catch (err) {
    throw new CommandDecodeError(`command is not valid msgpack: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new CommandDecodeError('command is not a map');
  }
  const t = (value as { t?: unknown }).t;
  if (typeof t !== 'string' || !COMMAND_TYPES.has(t)) {
    throw new CommandDecodeError(`unknown command type ${JSON.stringify(t)}`);
  }
  return value as Command;
}
