// The raft node program: `node build/raft/driver/node-main.js --id 1 --peers 1=H:P,2=H:P,3=H:P`.
// Prints one JSON line {"event":"listening",...} with its bound ports, then JSON log lines. Exit
// codes: 0 after SIGTERM/SIGINT (the state file written, with --state-file), 2 bad arguments (the
// message names the flag), 70 the core failed, 75 the force-start was refused or timed out, 78 a
// state file, record or PID lock was refused (the message names the file), 1 any other start
// failure (a port in use).

import type { DriverLogger } from './driver.js';
import { DriverError } from './errors.js';
import { EXIT_STATE_FILE_REFUSED, NodeApp } from './node-app.js';
import { parseNodeArgs } from './node-args.js';

function line(level: string, fields: Record<string, unknown>, msg: string): void {
  process.stdout.write(`${JSON.stringify({ level, time: Date.now(), msg, ...fields })}\n`);
}

const logger: DriverLogger = {
  info: (fields, msg) => line('info', fields, msg),
  warn: (fields, msg) => line('warn', fields, msg),
  error: (fields, msg) => line('error', fields, msg),
};

/** The state file, its record or its PID lock was refused: read at construction, taken at start. */
const stateFileRefused = (err: DriverError): boolean => err.code.startsWith('RAFT_STATE_FILE');

async function main(): Promise<void> {
  let app: NodeApp;
  try {
    app = new NodeApp(parseNodeArgs(process.argv.slice(2)), logger);
  } catch (err) {
    if (!(err instanceof DriverError)) throw err;
    process.stderr.write(`${err.message}\n`);
    process.exit(stateFileRefused(err) ? EXIT_STATE_FILE_REFUSED : 2);
  }
  app.onExit = (code, err) => {
    process.stderr.write(`${err.message}\n`);
    process.exit(code);
  };
  let ports: { raftPort: number; clientPort: number };
  try {
    ports = await app.start();
  } catch (err) {
    if (!(err instanceof DriverError) || !stateFileRefused(err)) throw err;
    process.stderr.write(`${err.message}\n`);
    process.exit(EXIT_STATE_FILE_REFUSED);
  }
  const status = app.driver.status();
  const identity = { membership: status.membership, epoch: status.epoch, incarnation: status.incarnation };
  process.stdout.write(`${JSON.stringify({ event: 'listening', id: app.driver.id, ...ports, ...identity, pid: process.pid })}\n`);
  const shutdown = (): void => {
    void app.stop().then((file) => {
      if (file !== null) line('info', { file }, 'raft state file written');
      process.exit(process.exitCode ?? 0);
    });
  };
  process.once('SIGTERM', shutdown);
  process.once('SIGINT', shutdown);
}

main().catch((err: Error) => {
  process.stderr.write(`raft node failed to start: ${err.message}\n`);
  process.exit(1);
});
