// The event-loop delay report (docs/design.md "Performance principles") with the GC pauses: the benchmark
// reads it from the broker's log, under --log-level warn, on SIGUSR2 and at stop.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { describe, it } from 'node:test';
import mqtt from 'mqtt';
import { CLI } from './broker-process.js';
import { freePort, portOpen } from './support/net.js';
import { sleep, until } from './support/wait.js';

const START_WAIT_MS = 10_000;
const POLL_MS = 50;

/** 4,000 publishes of 2 KiB from one client to a subscriber of their topic, all delivered. */
async function makeGarbage(port: number): Promise<void> {
  const opts = { host: '127.0.0.1', port, reconnectPeriod: 0, connectTimeout: START_WAIT_MS };
  // A copy each: MQTT.js writes the client id it makes into the options object.
  const sub = await mqtt.connectAsync({ ...opts });
  const pub = await mqtt.connectAsync({ ...opts });
  try {
    await sub.subscribeAsync('garbage', { qos: 0 });
    const count = 4_000;
    let got = 0;
    const all = new Promise<void>((resolve) =>
      sub.on('message', () => {
        if (++got === count) resolve();
      }),
    );
    const payload = Buffer.alloc(2048, 7);
    // In rounds of 100 acknowledged publishes, so no queue bound of the broker comes into play.
    for (let k = 0; k < count; k += 100) {
      await Promise.all(Array.from({ length: 100 }, () => pub.publishAsync('garbage', payload, { qos: 1 })));
    }
    await Promise.race([all, sleep(START_WAIT_MS).then(() => Promise.reject(new Error(`${got} of ${count} delivered`)))]);
  } finally {
    await Promise.all([sub.endAsync(), pub.endAsync()]);
  }
}

function reports(stdout: string): Record<string, unknown>[] {
  return stdout
    .split('\n')
    .filter((l) => l.includes('"event-loop-delay"'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe('event-loop delay report', { timeout: 30_000 }, () => {
  it('logs the delay histogram on SIGUSR2 and at stop even under --log-level warn', async () => {
    const port = await freePort();
    const proc = spawn(process.execPath, [CLI, '--host', '127.0.0.1', '--port', String(port), '--log-level', 'warn'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let stdout = '';
    proc.stdout.setEncoding('utf8').on('data', (c: string) => {
      stdout += c;
    });
    const exited = once(proc, 'exit');
    try {
      // Under --log-level warn the 'listening' line is not written: wait until the port accepts.
      await until(`the broker to listen on ${port}`, () => portOpen(port), START_WAIT_MS, { intervalMs: POLL_MS });
      await sleep(POLL_MS); // the signal handler is installed right after the listener opens
      await makeGarbage(port);
      proc.kill('SIGUSR2');
      const deadline = Date.now() + START_WAIT_MS;
      while (reports(stdout).length === 0 && Date.now() < deadline) await sleep(POLL_MS);
      proc.kill('SIGTERM');
      const [code] = (await exited) as [number | null];
      assert.equal(code, 0);
      const [onSignal, atStop] = reports(stdout);
      assert.equal(onSignal?.on, 'SIGUSR2');
      assert.equal(atStop?.on, 'stop');
      assert.equal(onSignal?.resolutionMs, 10);
      for (const k of ['p50Ms', 'p99Ms', 'p999Ms', 'maxMs']) assert.equal(typeof onSignal?.[k], 'number', k);
      assert.ok((onSignal?.p50Ms as number) <= (onSignal?.maxMs as number), 'p50 ≤ max');
      // GC pauses apart from the delay: 8 MB of publishes to read and route collect at least once.
      const gc = onSignal?.gc as Record<'minor' | 'major', { count: number; ms: number; maxMs: number }>;
      for (const kind of ['minor', 'major'] as const) {
        const t = gc[kind];
        for (const k of ['count', 'ms', 'maxMs'] as const) assert.equal(typeof t[k], 'number', `${kind}.${k}`);
        assert.ok(t.maxMs <= t.ms + 0.02 && (t.count > 0 || t.ms === 0), `${kind}: ${JSON.stringify(t)}`);
      }
      assert.ok(gc.minor.count + gc.major.count >= 1, `a collection under the publishes: ${JSON.stringify(gc)}`);
    } finally {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    }
  });
});
