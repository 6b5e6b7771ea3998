import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { MemStorage } from './mem-storage.js';
import { FsStorage, type Storage } from './storage.js';

const root = mkdtempSync(join(tmpdir(), 'raftmq-storage-'));
after(() => rmSync(root, { recursive: true, force: true }));

/** The same sequence of calls gives the same files on disk and in the double (before any cut). */
async function exercise(s: Storage): Promise<Record<string, number[] | null>> {
  const a = await s.create('a');
  await a.append([Uint8Array.of(1, 2), new Uint8Array(0), Uint8Array.of(3)]);
  await a.sync();
  await a.append([new Uint8Array(70_000).fill(9)]);
  await a.sync();
  await a.close();
  await assert.rejects(s.create('a'), (err: NodeJS.ErrnoException) => err.code === 'EEXIST');
  const again = await s.openAppend('a');
  await again.append([Uint8Array.of(4)]);
  await again.sync();
  await again.close();
  await s.truncate('a', 70_002);
  const b = await s.create('b.tmp');
  await b.append([Uint8Array.of(7)]);
  await b.sync();
  await b.close();
  await s.rename('b.tmp', 'b');
  const c = await s.create('c');
  await c.close();
  await s.remove('c');
  await s.syncDir();
  const out: Record<string, number[] | null> = {};
  for (const n of await s.list()) {
    const bytes = await s.read(n);
    out[n] = bytes === null ? null : [bytes.length, bytes[0] ?? -1, bytes[2] ?? -1, bytes.at(-1) ?? -1];
  }
  out.missing = (await s.read('missing')) === null ? null : [];
  return out;
}

describe('FsStorage', () => {
  it('behaves as the in-memory double for create, append, sync, rename, truncate, remove and list', async () => {
    const dir = mkdtempSync(join(root, 'fs-'));
    const fs = await exercise(new FsStorage(dir));
    const mem = await exercise(new MemStorage());
    assert.deepEqual(fs, mem);
    assert.deepEqual(Object.keys(fs).sort(), ['a', 'b', 'missing']);
    assert.deepEqual(fs.a, [70_002, 1, 3, 9]);
  });
});
