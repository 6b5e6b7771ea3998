import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseCli } from '../config.js';
import { CONFIG_ERROR } from '../errors.js';
import { clusterSettings } from './cluster-config.js';

const PEERS = '1=10.0.0.1:7000,2=10.0.0.2:7000,3=10.0.0.3:7000';

function configOf(args: string[]) {
  const r = parseCli(args);
  assert.equal(r.action, 'run');
  return r.action === 'run' ? r.config : (undefined as never);
}

function refusal(args: string[], code: string, mentions: RegExp): void {
  assert.throws(
    () => parseCli(args),
    (err: Error & { code?: string }) => {
      assert.equal(err.code, code);
      assert.match(err.message, mentions);
      return true;
    },
  );
}

describe('cluster settings', { timeout: 10_000 }, () => {
  it('is a single node without --cluster-node and --cluster-peers', () => {
    assert.equal(clusterSettings(configOf([])), null);
  });

  it('takes --audit-log in a cluster, is off without it, and refuses it on a single node', () => {
    const base = ['--cluster-node', '1', '--cluster-peers', PEERS, '--state-file', '/s'];
    assert.equal(clusterSettings(configOf(base))?.auditLog, undefined);
    assert.equal(clusterSettings(configOf([...base, '--audit-log', 'audit.jsonl']))?.auditLog, 'audit.jsonl');
    refusal(['--audit-log', 'audit.jsonl'], CONFIG_ERROR.MISSING_VALUE, /--audit-log needs --cluster-node/);
  });

  it('takes --cluster-force-start as a bare flag, with its timeout and the clock offset bound', () => {
    const base = ['--cluster-node', '1', '--cluster-peers', PEERS, '--state-file', '/s'];
    const plain = clusterSettings(configOf(base));
    assert.equal(plain?.forceStart, false);
    assert.equal(plain?.forceStartTimeoutMs, 120_000, 'default 120 s');
    assert.equal(plain?.maxClockOffsetMs, 1000);
    const forced = clusterSettings(
      configOf([...base, '--cluster-force-start', '--cluster-force-start-timeout-s', '30', '--cluster-max-clock-offset-ms', '250']),
    );
    assert.equal(forced?.forceStart, true);
    assert.equal(forced?.forceStartTimeoutMs, 30_000);
    assert.equal(forced?.maxClockOffsetMs, 250);
    assert.equal(plain?.handoverTimeoutMs, 1000, 'a stopping leader waits 2E for its handover');
    const short = clusterSettings(configOf([...base, '--shutdown-timeout-ms', '600']));
    assert.equal(short?.handoverTimeoutMs, 300, 'but at most half the shutdown timeout, so the state file is written in time');
    refusal(['--cluster-force-start'], CONFIG_ERROR.MISSING_VALUE, /--cluster-force-start needs --cluster-node/);
    refusal([...base, '--cluster-force-start-timeout-s', '0'], CONFIG_ERROR.BAD_VALUE, /--cluster-force-start-timeout-s/);
  });

  it('resolves a three-node cluster with defaults: listen on its own entry, id raftmq, E 500 ms', () => {
    const cs = clusterSettings(configOf(['--cluster-node', '2', '--cluster-peers', PEERS, '--state-file', '/var/lib/raftmq/state']));
    assert.ok(cs !== null);
    assert.equal(cs.node, 2);
    assert.deepEqual(cs.listen, { host: '10.0.0.2', port: 7000 });
    assert.equal(cs.clusterId, 'raftmq');
    assert.equal(cs.secret, undefined);
    assert.equal(cs.electionTimeoutMs, 500);
    assert.deepEqual([...cs.peers.keys()], [1, 2, 3]);
  });

  it('takes --cluster-listen, --cluster-id, --cluster-secret and the election timeout', () => {
    const cs = clusterSettings(
      configOf([
        '--cluster-node',
        '1',
        '--cluster-peers',
        PEERS,
        '--state-file',
        's',
        '--cluster-listen',
        '0.0.0.0:7100',
        '--cluster-id',
        'prod',
        '--cluster-secret',
        'k',
        '--cluster-election-timeout-ms',
        '300',
      ]),
    );
    assert.deepEqual(cs?.listen, { host: '0.0.0.0', port: 7100 });
    assert.equal(cs?.clusterId, 'prod');
    assert.equal(cs?.secret, 'k');
    assert.equal(cs?.electionTimeoutMs, 300);
  });

  it('refuses a bad peer list, naming --cluster-peers', () => {
    const base = ['--cluster-node', '1', '--state-file', 's', '--cluster-peers'];
    refusal([...base, '1=a:1,2=b:2,x=c:3'], CONFIG_ERROR.BAD_VALUE, /--cluster-peers: node id "x"/);
    refusal([...base, '1=a:1,2=b,3=c:3'], CONFIG_ERROR.BAD_VALUE, /--cluster-peers entry for node 2/);
    refusal([...base, '1=a:1,1=b:2,3=c:3'], CONFIG_ERROR.BAD_VALUE, /listed twice/);
    refusal([...base, '1=a:1,2=a:1,3=c:3'], CONFIG_ERROR.BAD_VALUE, /share the address a:1/);
    refusal([...base, '1=a:1,2=b:0,3=c:3'], CONFIG_ERROR.BAD_VALUE, /port 0/);
    refusal([...base, '1=a:1,2=b:99999,3=c:3'], CONFIG_ERROR.BAD_VALUE, /not in \[0, 65535\]/);
  });

  it('refuses a peer list that is not three nodes', () => {
    refusal(
      ['--cluster-node', '1', '--state-file', 's', '--cluster-peers', '1=a:1,2=b:2'],
      CONFIG_ERROR.BAD_VALUE,
      /exactly 3 nodes \(got 2\)/,
    );
    refusal(
      ['--cluster-node', '1', '--state-file', 's', '--cluster-peers', '1=a:1,2=b:2,3=c:3,4=d:4'],
      CONFIG_ERROR.BAD_VALUE,
      /exactly 3 nodes \(got 4\)/,
    );
  });

  it('refuses a node id that is not in the peer list', () => {
    refusal(
      ['--cluster-node', '4', '--state-file', 's', '--cluster-peers', PEERS],
      CONFIG_ERROR.BAD_VALUE,
      /--cluster-node 4 is not in --cluster-peers/,
    );
  });

  it('requires --state-file, and --cluster-node and --cluster-peers together', () => {
    refusal(['--cluster-node', '1', '--cluster-peers', PEERS], CONFIG_ERROR.MISSING_VALUE, /--state-file/);
    refusal(['--cluster-peers', PEERS, '--state-file', 's'], CONFIG_ERROR.MISSING_VALUE, /--cluster-node/);
    refusal(['--cluster-node', '1', '--state-file', 's'], CONFIG_ERROR.MISSING_VALUE, /--cluster-peers/);
    refusal(['--cluster-secret', 'k'], CONFIG_ERROR.MISSING_VALUE, /--cluster-secret needs --cluster-node/);
  });

  it('refuses --state-file on a single node, pointing to --data-dir', () => {
    refusal(['--state-file', 's'], CONFIG_ERROR.BAD_VALUE, /--state-file is for a cluster node.*--data-dir/);
  });

  it('takes --data-dir on a cluster node, with --cluster-force-start and --data-dir-min-free-bytes, but not --snapshot-log-bytes', () => {
    const base = ['--cluster-node', '1', '--cluster-peers', PEERS, '--state-file', 's', '--data-dir', 'd'];
    assert.equal(clusterSettings(configOf(base))?.dataDir, 'd');
    assert.equal(clusterSettings(configOf(base.slice(0, -2)))?.dataDir, undefined);
    assert.equal(clusterSettings(configOf([...base, '--cluster-force-start']))?.forceStart, true);
    assert.equal(clusterSettings(configOf([...base, '--data-dir-min-free-bytes', '1GiB']))?.dataDirMinFreeBytes, 1024 ** 3);
    assert.equal(clusterSettings(configOf(base))?.dataDirMinFreeBytes, 0);
    refusal(
      [...base.slice(0, -2), '--data-dir-min-free-bytes', '1GiB'],
      CONFIG_ERROR.BAD_VALUE,
      /--data-dir-min-free-bytes needs --data-dir/,
    );
    refusal([...base, '--snapshot-log-bytes', '1MiB'], CONFIG_ERROR.BAD_VALUE, /--snapshot-log-bytes is for a single node/);
  });
});
