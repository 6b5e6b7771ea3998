// cluster-scripts/start-local and stop-local as an operator runs them: start-local starts three nodes
// on the given base ports in DIR and names the one that serves; stop-local stops exactly the PIDs
// start-local recorded, and leaves another raftmq process alone. start-local DIR NODE restarts one
// killed node with the flags recorded at the first start, appending to its log.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import mqtt from 'mqtt';
import { BrokerProcess } from './broker-process.js';
import { freePort, httpGet, LOOPBACK } from './support/net.js';

const SCRIPTS = join(process.cwd(), 'cluster-scripts');
const SCRIPT_TIMEOUT_MS = 30_000;
const PORT_RUN_TRIES = 50;

const cleanups: Array<() => Promise<void> | void> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

function bindable(port: number): Promise<boolean> {
  const server = createServer();
  return new Promise((resolve) => {
    server.once('error', () => resolve(false));
    server.listen({ host: LOOPBACK, port }, () => server.close(() => resolve(true)));
  });
}

/** The first of three consecutive ports that were free a moment ago (the scripts take BASE..BASE+2). */
async function freeRunOfThree(): Promise<number> {
  for (let i = 0; i < PORT_RUN_TRIES; i++) {
    const base = await freePort();
    if (base + 2 < 65536 && (await bindable(base + 1)) && (await bindable(base + 2))) return base;
  }
  throw new Error(`no three consecutive free ports in ${PORT_RUN_TRIES} tries`);
}

function run(script: string, args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(join(SCRIPTS, script), args, { env: { ...process.env, ...env }, timeout: SCRIPT_TIMEOUT_MS }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Whether PID runs; a zombie (exited, not yet reaped by its new parent) does not. */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

describe('cluster-scripts/start-local and stop-local', { timeout: 90_000 }, () => {
  it('start-local starts three nodes on the given ports and names the serving one; stop-local stops exactly those PIDs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-local-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const other = await BrokerProcess.start();
    cleanups.push(async () => {
      await other.stop();
    });
    const env = {
      BASE_PEER: String(await freeRunOfThree()),
      BASE_MQTT: String(await freeRunOfThree()),
      BASE_HEALTH: String(await freeRunOfThree()),
    };
    const recorded: number[] = [];
    cleanups.push(() => {
      for (const pid of recorded) if (running(pid)) process.kill(pid, 'SIGKILL');
    });

    const started = await run('start-local', [dir], env);
    for (let id = 1; id <= 3; id++) {
      const f = join(dir, `node${id}.pid`);
      if (existsSync(f)) recorded.push(Number(readFileSync(f, 'utf8').trim()));
    }
    assert.equal(started.code, 0, `start-local failed: ${started.stderr}`);
    const announced = [...started.stdout.matchAll(/^node (\d): PID (\d+), /gm)].map((m) => Number(m[2]));
    assert.deepEqual(announced, recorded, 'the printed PIDs are the recorded ones');
    assert.ok(recorded.every(running), 'all three nodes run');

    const serves = /^node (\d) serves$/m.exec(started.stdout);
    assert.ok(serves !== null, `no "node N serves" line in: ${started.stdout}`);
    const id = Number(serves[1]);
    const health = await httpGet(Number(env.BASE_HEALTH) + id - 1, '/health');
    assert.equal(health.code, 200);
    assert.equal((JSON.parse(health.text) as { node: number }).node, id, 'the named node answers on its health port');
    const client = await mqtt.connectAsync({
      host: LOOPBACK,
      port: Number(env.BASE_MQTT) + id - 1,
      reconnectPeriod: 0,
      connectTimeout: 5_000,
    });
    await client.endAsync();

    const stopped = await run('stop-local', [dir], {});
    assert.equal(stopped.code, 0, `stop-local failed: ${stopped.stderr}`);
    assert.deepEqual(recorded.filter(running), [], 'every recorded node stopped');
    assert.ok(
      [1, 2, 3].every((n) => !existsSync(join(dir, `node${n}.pid`))),
      'the PID files are removed',
    );
    assert.equal(other.proc.exitCode, null, 'another raftmq process still runs');
    assert.ok(running(other.proc.pid!), 'another raftmq process still runs');
  });

  it('start-local DIR NODE restarts a killed node with its own flags and appends to its log', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-local-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const env = {
      BASE_PEER: String(await freeRunOfThree()),
      BASE_MQTT: String(await freeRunOfThree()),
      BASE_HEALTH: String(await freeRunOfThree()),
    };
    const pids = (): number[] =>
      [1, 2, 3].map((n) => (existsSync(join(dir, `node${n}.pid`)) ? Number(readFileSync(join(dir, `node${n}.pid`), 'utf8')) : 0));
    cleanups.push(() => {
      for (const pid of pids()) if (pid > 0 && running(pid)) process.kill(pid, 'SIGKILL');
    });
    const started = await run('start-local', [dir], env);
    assert.equal(started.code, 0, `start-local failed: ${started.stderr}`);
    const serving = Number(/^node (\d) serves$/m.exec(started.stdout)?.[1]);
    const id = serving === 1 ? 2 : 1;
    const args = readFileSync(join(dir, `node${id}.args`), 'utf8');
    assert.match(args, new RegExp(`^--health-port\n${Number(env.BASE_HEALTH) + id - 1}$`, 'm'), 'the flags are recorded');

    const refused = await run('start-local', [dir, String(id)], {});
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, new RegExp(`node ${id} already runs`));
    assert.equal((await run('start-local', [dir, '4'], {})).code, 2);

    const old = pids()[id - 1] as number;
    process.kill(old, 'SIGKILL');
    for (let i = 0; i < 100 && running(old); i++) await new Promise((r) => setTimeout(r, 50));
    const firstLog = readFileSync(join(dir, `node${id}.log`), 'utf8');
    assert.ok(firstLog.length > 0);
    // No BASE_* now: the restart takes the recorded flags, not the defaults.
    const restarted = await run('start-local', [dir, String(id)], {});
    assert.equal(restarted.code, 0, `restart failed: ${restarted.stderr}`);
    const pid = pids()[id - 1] as number;
    assert.notEqual(pid, old);
    assert.ok(running(pid));
    assert.match(restarted.stdout, new RegExp(`^node ${id}: PID ${pid}, mqtt 127\\.0\\.0\\.1:${Number(env.BASE_MQTT) + id - 1}, `, 'm'));
    assert.equal(readFileSync(join(dir, `node${id}.args`), 'utf8'), args, 'the recorded flags are unchanged');
    const health = await httpGet(Number(env.BASE_HEALTH) + id - 1, '/health');
    assert.equal((JSON.parse(health.text) as { node: number }).node, id, 'the restarted node answers on its own health port');
    const log = readFileSync(join(dir, `node${id}.log`), 'utf8');
    assert.ok(log.startsWith(firstLog), 'the log of the first run is kept');
    assert.equal([...log.matchAll(new RegExp(`^== \\S+ start-local: node ${id}`, 'gm'))].length, 2, 'one marker per start');

    const stopped = await run('stop-local', [dir], {});
    assert.equal(stopped.code, 0);
    assert.deepEqual(
      [old, pid, ...pids()].filter((p) => p > 0 && running(p)),
      [],
    );
  });
});
