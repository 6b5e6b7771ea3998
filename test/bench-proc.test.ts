// The bench's /proc readings: a window counts this process's own CPU and system calls.
import assert from 'node:assert/strict';
import { closeSync, openSync, readSync, writeSync } from 'node:fs';
import { describe, it } from 'node:test';
import { sampleProc, windowOf } from '../bench/proc.js';

describe('bench /proc window', () => {
  it('counts the write and read system calls made between two samples', () => {
    const a = sampleProc(process.pid);
    const out = openSync('/dev/null', 'w');
    const zero = openSync('/dev/zero', 'r');
    const buf = Buffer.alloc(16);
    for (let i = 0; i < 200; i++) {
      writeSync(out, buf);
      readSync(zero, buf);
    }
    closeSync(out);
    closeSync(zero);
    const w = windowOf(a, sampleProc(process.pid));
    assert.ok(w !== null, 'a window of this process');
    assert.ok(w.writes !== null && w.writes >= 200, `writes ${w.writes}`);
    assert.ok(w.reads !== null && w.reads >= 200, `reads ${w.reads}`);
    assert.ok(w.cpuS >= 0 && w.rssKb > 0);
  });

  it('has no window for a process that is gone', () => {
    assert.equal(windowOf(sampleProc(process.pid), sampleProc(2 ** 22 + 7)), null);
  });
});
