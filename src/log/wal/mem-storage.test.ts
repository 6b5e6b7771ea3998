import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { MemStorage, PowerCutError, seededRandom as seeded } from './mem-storage.js';

describe('MemStorage power cut', () => {
  it('keeps every synced byte, and of the unsynced ones at most a prefix with holes of zeros', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uint8Array({ minLength: 1, maxLength: 3000 }),
        fc.uint8Array({ maxLength: 3000 }),
        fc.nat(),
        async (synced, loose, seed) => {
          const s = new MemStorage();
          const f = await s.create('a');
          await f.append([synced]);
          await f.sync();
          await s.syncDir();
          await f.append([loose]);
          const after = s.powerCut(seeded(seed));
          const got = await after.read('a');
          assert.ok(got !== null);
          assert.deepEqual(got.subarray(0, synced.length), synced);
          assert.ok(got.length <= synced.length + loose.length);
          for (let i = synced.length; i < got.length; i++) assert.ok(got[i] === 0 || got[i] === loose[i - synced.length]);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('keeps a created file only if the directory was synced, or by chance', async () => {
    let kept = 0;
    let lost = 0;
    for (let seed = 1; seed <= 40; seed++) {
      const s = new MemStorage();
      const f = await s.create('new');
      await f.append([Uint8Array.of(1, 2, 3)]);
      await f.sync();
      const after = s.powerCut(seeded(seed));
      if ((await after.read('new')) === null) lost++;
      else kept++;
    }
    assert.ok(kept > 0 && lost > 0, `kept ${kept}, lost ${lost}`);
    const s = new MemStorage();
    const f = await s.create('new');
    await f.append([Uint8Array.of(1)]);
    await f.sync();
    await s.syncDir();
    assert.deepEqual(await s.powerCut(seeded(1)).read('new'), Uint8Array.of(1));
  });

  it('refuses every call of the old instance after the cut', async () => {
    const s = new MemStorage();
    const f = await s.create('x');
    s.powerCut(seeded(3));
    await assert.rejects(f.append([Uint8Array.of(1)]), PowerCutError);
    await assert.rejects(s.list(), PowerCutError);
  });
});
