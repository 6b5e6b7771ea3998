import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, it } from 'node:test';
import pino from 'pino';
import { RateLimitedLog } from './rate-limited-log.js';

function capture(): { logger: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      lines.push(JSON.parse(String(chunk)));
      done();
    },
  });
  return { logger: pino({ level: 'info' }, stream), lines };
}

describe('RateLimitedLog', { timeout: 30_000 }, () => {
  it('writes one line per key per window and reports how many it suppressed', async () => {
    const { logger, lines } = capture();
    let now = 0;
    const log = new RateLimitedLog(logger, 10_000, () => now);
    log.warn('utf8', { conn: '1.1' }, 'bad string');
    log.warn('utf8', { conn: '1.2' }, 'bad string');
    log.warn('utf8', { conn: '1.3' }, 'bad string');
    log.warn('qos3', { conn: '1.4' }, 'bad qos');
    now = 10_000;
    log.warn('utf8', { conn: '1.5' }, 'bad string');
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(
      lines.map((l) => [l.key, l.conn, l.suppressed]),
      [
        ['utf8', '1.1', 0],
        ['qos3', '1.4', 0],
        ['utf8', '1.5', 2],
      ],
    );
  });
});
