import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { LOCK_NAME, META_NAME, openDataDir } from './data-dir.js';
import { DataDirError } from './wal.js';

const root = mkdtempSync(join(tmpdir(), 'raftmq-datadir-'));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const fresh = (): string => join(root, `d${++n}`);

const refusedWith = (code: string, mentions: string) => (err: unknown) =>
  err instanceof DataDirError && err.code === code && err.message.includes(mentions);

describe('data directory', () => {
  it('creates the directory and its metadata, and keeps the node id across opens', async () => {
    const dir = fresh();
    const a = await openDataDir(dir);
    assert.equal(a.meta.version, 1);
    assert.equal(a.meta.mode, 'single');
    assert.equal(readFileSync(join(dir, LOCK_NAME), 'utf8').trim(), String(process.pid));
    a.release();
    const b = await openDataDir(dir);
    assert.equal(b.meta.node, a.meta.node);
    b.release();
  });

  it('refuses a non-empty directory without metadata, but not the temporary file of a crashed first start', async () => {
    const dir = fresh();
    mkdirSync(dir);
    writeFileSync(join(dir, 'something'), 'x');
    await assert.rejects(openDataDir(dir), refusedWith('DATA_DIR_FOREIGN', dir));
    const crashed = fresh();
    mkdirSync(crashed);
    writeFileSync(join(crashed, `${META_NAME}.tmp`), '{"form');
    (await openDataDir(crashed)).release();
  });

  it('refuses metadata of another version or mode, or that is not metadata, naming the file', async () => {
    const cases: [string, string][] = [
      ['{"format":"raftmq-data","version":2,"mode":"single","node":"a"}', 'DATA_DIR_FOREIGN'],
      ['{"format":"raftmq-data","version":1,"mode":"cluster","node":"a"}', 'DATA_DIR_FOREIGN'],
      ['{"format":"other","version":1}', 'DATA_DIR_CORRUPT'],
      ['{not json', 'DATA_DIR_CORRUPT'],
    ];
    for (const [text, code] of cases) {
      const dir = fresh();
      mkdirSync(dir);
      writeFileSync(join(dir, META_NAME), text);
      await assert.rejects(openDataDir(dir), refusedWith(code, join(dir, META_NAME)), text);
      assert.equal(readFileSync(join(dir, META_NAME), 'utf8'), text, 'left as it was');
    }
  });

  it('refuses a lock held by a live process and takes over one whose process is gone', async () => {
    const dir = fresh();
    (await openDataDir(dir)).release();
    writeFileSync(join(dir, LOCK_NAME), `${process.ppid}\n`);
    await assert.rejects(openDataDir(dir), refusedWith('DATA_DIR_LOCKED', `live process ${process.ppid}`));
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
    writeFileSync(join(dir, LOCK_NAME), `${gone.stdout}\n`);
    const d = await openDataDir(dir);
    assert.equal(readFileSync(join(dir, LOCK_NAME), 'utf8').trim(), String(process.pid));
    d.release();
  });
});
