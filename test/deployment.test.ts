// The deployment files as the raftmq command would read them. No Docker engine runs here, so the
// image is not built and the compose file not started (docs/operations.md "Containers"); what can
// be checked without one is: every node command of cluster-scripts/compose.yaml and the
// Dockerfile's CMD parse with raftmq's own flag parser into the cluster the file means (three nodes,
// one peer list naming the compose services, state files on each node's volume), HAProxy's
// environment points at the ports the nodes listen on, the stop grace outlasts the shutdown
// timeout, and the single-node systemd unit's flags parse too.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { parse as parseYaml } from 'yaml';
import { clusterSettings } from '../src/cluster/cluster-config.js';
import { type Config, parseCli } from '../src/config.js';

const ROOT = process.cwd();
const tmp = mkdtempSync(join(tmpdir(), 'raftmq-deploy-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

interface Service {
  hostname?: string;
  command?: string[];
  volumes?: string[];
  environment?: Record<string, string>;
  stop_grace_period?: string;
  build?: { context: string; dockerfile: string };
}

/** Compose's `${VAR:?message}` and `${VAR}` as a shell would give them with VAR set. */
function interpolate(arg: string, env: Record<string, string>): string {
  return arg.replace(/\$\{(\w+)(?::?[?-][^}]*)?\}/g, (_, name: string) => {
    assert.ok(name in env, `${name} is not set in the test`);
    return env[name] as string;
  });
}

function run(argv: string[]): Config {
  const r = parseCli(argv);
  assert.equal(r.action, 'run');
  return (r as { config: Config }).config;
}

describe('deployment files', () => {
  it('compose.yaml: three node commands that parse into one cluster, with HAProxy on their ports', () => {
    const doc = parseYaml(readFileSync(join(ROOT, 'cluster-scripts', 'compose.yaml'), 'utf8'), { merge: true }) as {
      services: Record<string, Service>;
    };
    const nodes = Object.entries(doc.services).filter(([, s]) => s.command !== undefined);
    assert.deepEqual(
      nodes.map(([name]) => name),
      ['node1', 'node2', 'node3'],
    );
    const peerLists = new Set<string>();
    for (const [name, s] of nodes) {
      const config = run((s.command as string[]).map((a) => interpolate(a, { RAFTMQ_CLUSTER_SECRET: 'x'.repeat(64) })));
      const cs = clusterSettings(config);
      assert.ok(cs !== null, `${name} is a cluster node`);
      const id = Number(name.slice(4));
      assert.equal(cs.node, id);
      assert.equal(config['cluster-secret'], 'x'.repeat(64));
      assert.equal(config.host, '0.0.0.0', `${name} takes connections from HAProxy's container`);
      peerLists.add(config['cluster-peers']);
      for (const [peerId, addr] of cs.peers)
        assert.equal(addr.host, doc.services[`node${peerId}`]?.hostname, 'peers are the compose services');
      const volume = (s.volumes ?? []).map((v) => v.split(':')[1] as string);
      assert.ok(
        volume.some((dir) => config['state-file'].startsWith(`${dir}/`)),
        `${name}: --state-file ${config['state-file']} is on a volume`,
      );
      const lb = doc.services.haproxy?.environment ?? {};
      assert.equal(lb[`RAFTMQ_NODE${id}_ADDR`], s.hostname);
      assert.equal(Number(lb[`RAFTMQ_NODE${id}_MQTT`]), config.port);
      assert.equal(Number(lb[`RAFTMQ_NODE${id}_HEALTH`]), config['health-port']);
      const grace = /^(\d+)s$/.exec(s.stop_grace_period ?? '');
      assert.ok(grace !== null && Number(grace[1]) * 1000 > config['shutdown-timeout-ms'], `${name}: stop_grace_period outlasts the stop`);
      assert.equal(s.build?.dockerfile, 'Dockerfile');
    }
    assert.equal(peerLists.size, 1, 'one peer list on every node');
    // HAProxy gets the shipped configuration, which reads those variables.
    const haproxyCfg = readFileSync(join(ROOT, 'cluster-scripts', 'haproxy.cfg'), 'utf8');
    for (const v of Object.keys(doc.services.haproxy?.environment ?? {}))
      assert.ok(haproxyCfg.includes(`\${${v}-`), `haproxy.cfg reads ${v}`);
    assert.ok(doc.services.haproxy?.volumes?.some((v) => v.startsWith('./haproxy.cfg:')));
  });

  it("Dockerfile: node:20-slim stages, the entry point is a file the runtime stage copies, and CMD's flags parse", () => {
    const text = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
    const froms = [...text.matchAll(/^FROM (\S+)/gm)].map((m) => m[1]);
    assert.deepEqual(froms, ['node:20-slim', 'node:20-slim']);
    const entry = JSON.parse(/^ENTRYPOINT (.*)$/m.exec(text)?.[1] ?? '[]') as string[];
    assert.equal(entry[0], 'node');
    const copied = [...text.matchAll(/^COPY --from=build \S+ (\S+)$/gm)].map((m) => `/opt/raftmq/${m[1]}`);
    assert.ok(
      copied.some((dir) => entry[1]?.startsWith(`${dir}/`)),
      `${entry[1]} is in ${copied.join(', ')}`,
    );
    assert.equal(entry[1], '/opt/raftmq/build/src/cli.js', 'the path package.json names as bin, under the work dir');
    assert.equal(
      (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { bin: { raftmq: string } }).bin.raftmq,
      'build/src/cli.js',
    );
    const cmd = JSON.parse(/^CMD (.*)$/m.exec(text)?.[1] ?? '[]') as string[];
    assert.equal(run(cmd).host, '0.0.0.0');
  });

  it('raftmq.service: the single-node unit beside the cluster one, whose flags parse', () => {
    const unit = readFileSync(join(ROOT, 'cluster-scripts', 'raftmq.service'), 'utf8');
    const exec = /^ExecStart=\/usr\/bin\/node \/opt\/raftmq\/build\/src\/cli\.js (.*)$/m.exec(unit);
    assert.ok(exec !== null);
    const argv = (exec[1] as string).split(' ');
    const cfg = argv.indexOf('--config');
    assert.ok(cfg >= 0);
    const file = join(tmp, 'raftmq.yaml');
    writeFileSync(file, 'host: 0.0.0.0\n');
    argv[cfg + 1] = file;
    const config = run(argv);
    assert.equal(clusterSettings(config), null, 'a single node');
    assert.equal(config['data-dir'], '/var/lib/raftmq/data');
    assert.match(unit, /^StateDirectory=raftmq$/m);
    const stop = Number(/^TimeoutStopSec=(\d+)$/m.exec(unit)?.[1]);
    assert.ok(stop * 1000 > config['shutdown-timeout-ms']);
  });
});
