// docs/errors.md lists every error code of every registry and every exit status of the raftmq
// command, and nothing else: a code added without its row, or a row left after its code went,
// fails here.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { DriverErrorCodes } from '../raft/driver/errors.js';
import { EXIT_FORCE_START_FAILED, EXIT_STATE_FILE_REFUSED } from '../raft/driver/node-app.js';
import { RaftErrorCodes } from '../raft/errors.js';
import { TransportErrorCodes } from '../raft/transport/errors.js';
import { SNAPSHOT_ERROR } from '../src/broker/snapshot.js';
import { CONFIG_ERROR, EXIT, ListenError, SaslprepError } from '../src/errors.js';
import { CommandDecodeError } from '../src/log/command-codec.js';
import { WAL_ERROR } from '../src/log/wal/segment.js';
import { DATA_DIR_ERRORS, WalIoError } from '../src/log/wal/wal.js';

const DOC = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');

/** Every code of every registry, by the registry that holds it. */
function registries(): Map<string, string> {
  const codes = new Map<string, string>();
  const add = (from: string, list: Iterable<string>): void => {
    for (const c of list) codes.set(c, from);
  };
  add('CONFIG_ERROR', Object.values(CONFIG_ERROR));
  add('SaslprepError', [new SaslprepError('x').code]);
  add('ListenError', [new ListenError('x').code]);
  add('WAL_ERROR', Object.values(WAL_ERROR));
  add('DataDirError', DATA_DIR_ERRORS);
  add('WalIoError', [new WalIoError('f', 'write', new Error('x')).code]);
  add('SNAPSHOT_ERROR', Object.values(SNAPSHOT_ERROR));
  add('CommandDecodeError', [new CommandDecodeError('x').code]);
  add('RaftErrorCodes', Object.keys(RaftErrorCodes));
  add('DriverErrorCodes', Object.keys(DriverErrorCodes));
  add('TransportErrorCodes', Object.keys(TransportErrorCodes));
  return codes;
}

/** The first cell of each table row of the error sections, when it is one code in backticks. */
function documentedCodes(): string[] {
  const body = DOC.slice(DOC.indexOf('## Configuration'));
  const out: string[] = [];
  for (const line of body.split('\n')) {
    const m = /^\| `([A-Z][A-Z0-9_]+)` \|/.exec(line);
    if (m !== null) out.push(m[1] as string);
  }
  return out;
}

describe('docs/errors.md', () => {
  it('has a row for every error code, and no row for a code that does not exist', () => {
    const codes = registries();
    const documented = documentedCodes();
    const missing = [...codes.keys()].filter((c) => !documented.includes(c));
    assert.deepEqual(missing, [], 'codes without a row in docs/errors.md');
    const unknown = documented.filter((c) => !codes.has(c));
    assert.deepEqual(unknown, [], 'rows in docs/errors.md that name no code');
    assert.equal(new Set(documented).size, documented.length, 'a code listed twice');
  });

  it('lists every exit status with its name, and the raft node program uses the same values', () => {
    const rows = [...DOC.matchAll(/^\| (\d+) \| `([A-Z_]+)` \|/gm)].map((m) => [m[2], Number(m[1])]);
    assert.deepEqual(Object.fromEntries(rows), EXIT);
    assert.equal(EXIT_FORCE_START_FAILED, EXIT.FORCE_START_FAILED);
    assert.equal(EXIT_STATE_FILE_REFUSED, EXIT.STATE_FILE_REFUSED);
  });
});
