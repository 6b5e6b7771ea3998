// The raftmq command's logger: pino into the bounded writer (log-writer.ts), as JSON lines, or
// for a terminal (--log-format pretty) formatted by pino-pretty in the same turn, on the main
// thread, into the same writer. Not a pino transport: those run in a worker thread whose pipe
// is flushed synchronously at exit, which is what a stop must never wait for.
import { isatty } from 'node:tty';
import { pino } from 'pino';
import { prettyFactory } from 'pino-pretty';
import type { BoundedLogWriter } from './log-writer.js';

export type LogFormat = 'json' | 'pretty';

export function createLogger(o: { level: string; format: LogFormat; writer: BoundedLogWriter }): pino.Logger {
  const options = { level: o.level, base: { pid: process.pid } };
  if (o.format === 'json') return pino(options, o.writer);
  const pretty = prettyFactory({ colorize: isatty(1), translateTime: 'SYS:standard', ignore: 'pid,hostname' });
  return pino(options, { write: (line: string) => o.writer.write(pretty(line)) });
}
