// The free-space watch of --data-dir: the bound, the low state entered and left with one log line
// each, and a failed reading that changes nothing.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Logger } from 'pino';
import { DiskWatch, MIN_FREE_FLOOR_BYTES, minFreeBytes } from './disk-space.js';

const MiB = 1024 * 1024;

function recordingLogger(): { logger: Logger; lines: { level: string; msg: string }[] } {
  const lines: { level: string; msg: string }[] = [];
  const at = (level: string) => (_f: unknown, msg: string) => lines.push({ level, msg });
  return { logger: { warn: at('warn'), info: at('info'), error: at('error') } as unknown as Logger, lines };
}

describe('DiskWatch', () => {
  it('bounds free space by twice the last snapshot, at least the floor, unless configured', () => {
    assert.equal(minFreeBytes(0, 0), MIN_FREE_FLOOR_BYTES);
    assert.equal(minFreeBytes(0, 10 * MiB), MIN_FREE_FLOOR_BYTES);
    assert.equal(minFreeBytes(0, 100 * MiB), 200 * MiB);
    assert.equal(minFreeBytes(5 * MiB, 100 * MiB), 5 * MiB);
  });

  it('goes low below the bound with one warning, however many readings, and resumes with one info line', async () => {
    let free = 1000 * MiB;
    const { logger, lines } = recordingLogger();
    const w = new DiskWatch({ dir: 'd', probe: async () => free, configuredMinFreeBytes: 0, lastSnapshotBytes: () => 50 * MiB, logger });
    await w.check();
    assert.equal(w.low, false);
    free = 99 * MiB; // below twice the 50 MiB snapshot
    for (let i = 0; i < 3; i++) await w.check();
    assert.equal(w.low, true);
    assert.equal(w.freeBytes, 99 * MiB);
    free = 100 * MiB;
    await w.check();
    await w.check();
    assert.equal(w.low, false);
    assert.deepEqual(
      lines.map((l) => l.level),
      ['warn', 'info'],
    );
    assert.equal(w.lowEpisodes, 1);
  });

  it('keeps its state when a reading fails, warning once per run of failures', async () => {
    let fail = false;
    const { logger, lines } = recordingLogger();
    const w = new DiskWatch({
      dir: 'd',
      probe: async () => {
        if (fail) throw new Error('EIO');
        return 1;
      },
      configuredMinFreeBytes: 10,
      lastSnapshotBytes: () => 0,
      logger,
    });
    await w.check();
    assert.equal(w.low, true);
    fail = true;
    await w.check();
    await w.check();
    assert.equal(w.low, true, 'still low');
    assert.equal(w.freeBytes, null);
    assert.deepEqual(
      lines.map((l) => l.msg.slice(0, 30)),
      ['data directory low on space: n', 'cannot read the free space of '],
    );
  });
});
