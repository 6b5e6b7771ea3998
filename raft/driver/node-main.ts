// The raft node program: `node build/raft/driver/node-main.js --id 1 --peers 1=H:P,2=H:P,3=H:P`.
// Prints one JSON line {"event":"listening",...} with its bound ports, then JSON log lines. Exit
// codes: 0 after SIGTERM/SIGINT, 2 bad arguments (the message names the flag), 70 the core failed.
import { DriverError } from './errors.js';
import type { DriverLogger } from './driver.js';
import { NodeApp } from './node-app.js';
import { parseNodeArgs } from './node-args.js';

function line(level: string, fields: Record<string, unknown>, msg: string): void {
  process.stdout.write(`${JSON.stringify({ level, time: Date.now(), msg, ...fields })}\n`);
}

const logger: DriverLogger = {
  info: (fields, msg) => line('info', fields, msg),
  warn: (fields, msg) => line('warn', fields, msg),
  error: (fields, msg) => line('error', fields, msg),
};

async function main(): Promise<void> {
  let app: NodeApp;
  try {
    app = new NodeApp(parseNodeArgs(process.argv.slice(2)), logger);
  } catch (err) {
    if (!(err instanceof DriverError)) throw err;
    process.stderr.write(`${err.message}\n`);
    process.exit(2);
  }
  const ports = await app.start();
  process.stdout.write(`${JSON.stringify({ event: 'listening', id: app.driver.id, ...ports, pid: process.pid })}\n`);
  const shutdown = (): void => {
    void app.stop().then(() => process.exit(process.exitCode ?? 0));
  };
  process.once('SIGTERM', shutdown);
  process.once('SIGINT', shutdown);
}

main().catch((err: Error) => {
  process.stderr.write(`raft node failed to start: ${err.message}\n`);
  process.exit(1);
});
