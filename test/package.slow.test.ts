// The package as a user gets it: a clone of HEAD with no build output is packed (prepack builds
// it), the tarball is installed into an empty folder, `npx raftmq --help` runs there, and the
// embedding example of docs/operations.md "Embedding raftmq" is extracted from the page and run
// from that folder, with an MQTT.js client publishing through it.
//
// Offline and bounded: the clone's node_modules is a symlink to this checkout's (the build needs
// only typescript from it), and the install reads the npm cache first (--prefer-offline), so the
// registry is asked only for what the cache lacks.
import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { connectClient, disconnect, publish, withTimeout } from './helpers.js';

const ROOT = process.cwd();
const STEP_TIMEOUT_MS = 240_000;
const EXAMPLE_WAIT_MS = 20_000;

const cleanups: Array<() => void> = [];
after(() => {
  for (const c of cleanups.reverse()) c();
});

function run(cmd: string, args: string[], cwd: string): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { cwd, timeout: STEP_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err !== null) reject(new Error(`${cmd} ${args.join(' ')} in ${cwd} failed: ${err.message}\n${stdout}\n${stderr}`));
      else resolve({ stdout, stderr });
    });
  });
}

/** The first ```js block after the `<!-- embedding-example` marker of docs/operations.md. */
export function embeddingExample(page: string): string {
  const at = page.indexOf('<!-- embedding-example');
  assert.ok(at >= 0, 'docs/operations.md has no <!-- embedding-example --> marker');
  const m = /```js\n([\s\S]*?)```/.exec(page.slice(at));
  assert.ok(m !== null, 'no ```js block after the embedding-example marker');
  return m[1] as string;
}

/** Resolves with the first stdout line of `child` that matches. */
function lineOf(child: ChildProcess, out: string[], match: RegExp, what: string): Promise<RegExpExecArray> {
  return withTimeout(
    new Promise<RegExpExecArray>((resolve) => {
      const check = (): void => {
        for (const line of out.join('').split('\n')) {
          const m = match.exec(line);
          if (m !== null) {
            child.stdout?.off('data', check);
            resolve(m);
            return;
          }
        }
      };
      child.stdout?.on('data', check);
      check();
    }),
    EXAMPLE_WAIT_MS,
    what,
  );
}

describe('npm pack of an unbuilt clone', { timeout: 600_000 }, () => {
  it('installs into an empty folder, runs npx raftmq --help there, and runs the documented embedding example', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'raftmq-pack-'));
    cleanups.push(() => rmSync(tmp, { recursive: true, force: true }));
    const clone = join(tmp, 'clone');
    await run('git', ['clone', '--quiet', '--no-hardlinks', ROOT, clone], tmp);
    assert.equal(existsSync(join(clone, 'build')), false, 'a clone has no build output');
    symlinkSync(realpathSync(join(ROOT, 'node_modules')), join(clone, 'node_modules'));
    const packs = join(tmp, 'packs');
    mkdirSync(packs);
    await run('npm', ['pack', '--silent', '--pack-destination', packs], clone);
    const tarballs = readdirSync(packs).filter((f) => f.endsWith('.tgz'));
    assert.equal(tarballs.length, 1, `one tarball (got ${tarballs.join(', ')})`);
    const tarball = join(packs, tarballs[0] as string);
    const listing = (await run('tar', ['-tzf', tarball], tmp)).stdout.split('\n').filter((l) => l !== '');
    for (const f of listing) {
      assert.doesNotMatch(
        f,
        /\.test\.|\.testkit\.|\/bench\/|\/fuzz\/|jepsen-like-tests|\/sim\/|\.map$|^package\/(src|raft|test)\//,
        `${f} is not shipped`,
      );
    }
    for (const f of [
      'package/build/src/index.js',
      'package/build/src/index.d.ts',
      'package/build/src/cli.js',
      'package/docs/operations.md',
      'package/cluster-scripts/start-local',
      'package/README.md',
    ]) {
      assert.ok(listing.includes(f), `${f} is shipped`);
    }

    const app = join(tmp, 'app');
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--silent', tarball], app);
    assert.ok(existsSync(join(app, 'node_modules', 'raftmq', 'build', 'src', 'index.js')));
    assert.equal(existsSync(join(app, 'node_modules', 'typescript')), false, 'dev dependencies are not installed');

    const help = await run('npx', ['--no-install', 'raftmq', '--help'], app);
    assert.match(help.stdout, /^Usage: raftmq \[flags\]/);
    assert.match(help.stdout, /--auth-http-url/);

    const example = embeddingExample(readFileSync(join(clone, 'docs', 'operations.md'), 'utf8'));
    writeFileSync(join(app, 'example.mjs'), example);
    const child = spawn(process.execPath, ['example.mjs'], { cwd: app, stdio: ['ignore', 'pipe', 'pipe'] });
    cleanups.push(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    const out: string[] = [];
    const err: string[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b.toString()));
    child.stderr.on('data', (b: Buffer) => err.push(b.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const url = (
      await lineOf(child, out, /^listening (mqtt:\/\/\S+)$/, `"listening URL" from the example (stderr: ${err.join('')})`)
    )[1] as string;
    const port = Number(new URL(url).port);
    assert.ok(port > 0);

    // The example's authenticate hook: only app/secret.
    await assert.rejects(connectClient(port, { username: 'app', password: 'wrong', clientId: 'intruder' }));
    const c = await connectClient(port, { username: 'app', password: 'secret', clientId: 'embedded-1', protocolVersion: 5 });
    await lineOf(child, out, /^connected embedded-1$/, '"connected embedded-1"');
    await publish(c, 'greeting', 'hello', { qos: 1 });
    await lineOf(child, out, /^published greeting hello$/, '"published greeting hello"');
    await disconnect(c);

    child.kill('SIGTERM');
    await lineOf(child, out, /^closed$/, '"closed"');
    assert.equal(await withTimeout(exited, EXAMPLE_WAIT_MS, 'the example to exit after close()'), 0);
    assert.equal(out.join('').includes('connected intruder'), false);
  });
});
