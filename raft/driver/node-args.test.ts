import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { DriverError } from './errors.js';
import { parseNodeArgs } from './node-args.js';

const PEERS = '1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:0';

function refusal(argv: string[]): string {
  try {
    parseNodeArgs(argv);
  } catch (err) {
    assert.ok(err instanceof DriverError);
    assert.equal(err.code, 'RAFT_DRIVER_BAD_ARGS');
    return err.message;
  }
  assert.fail(`accepted ${argv.join(' ')}`);
}

describe('raft node program flags', { timeout: 10_000 }, () => {
  test('parses peers, listens on its own entry by default and the client port on 0', () => {
    const a = parseNodeArgs(['--id', '2', '--peers', PEERS, '--election-timeout-ms', '300']);
    assert.equal(a.id, 2);
    assert.equal(a.electionTimeoutMs, 300);
    assert.deepEqual([...a.peers.keys()], [1, 2, 3]);
    assert.deepEqual(a.listen, { host: '127.0.0.1', port: 7002 });
    assert.deepEqual(a.client, { host: '127.0.0.1', port: 0 });
    assert.equal(a.clusterId, 'raftmq');
  });

  test('defaults E to 500 ms and takes --listen and --client-listen', () => {
    const a = parseNodeArgs(['--id', '1', '--peers', PEERS, '--listen', '0.0.0.0:0', '--client-listen', '127.0.0.1:9000']);
    assert.equal(a.electionTimeoutMs, 500);
    assert.deepEqual(a.listen, { host: '0.0.0.0', port: 0 });
    assert.deepEqual(a.client, { host: '127.0.0.1', port: 9000 });
  });

  test('every refusal names the flag it is about', () => {
    assert.match(refusal(['--peers', PEERS]), /--id is required/);
    assert.match(refusal(['--id', '4', '--peers', PEERS]), /no entry for --id 4/);
    assert.match(refusal(['--id', '1', '--peers', '1=a:1,1=b:2']), /node 1 twice/);
    assert.match(refusal(['--id', '1', '--peers', '1=a:70000']), /--peers entry for node 1 port/);
    assert.match(refusal(['--id', '1', '--peers', 'x']), /--peers entry "x"/);
    assert.match(refusal(['--id', '-1', '--peers', PEERS]), /--id "-1"/);
    assert.match(refusal(['--id', '1', '--peers', PEERS, '--election-timeout-ms', '1.5']), /--election-timeout-ms/);
    assert.match(refusal(['--id', '1', '--peers', PEERS, '--bogus', '1']), /unknown flag --bogus/);
    assert.match(refusal(['--id', '1', '--peers']), /--peers needs a value/);
    assert.match(refusal(['--id', '1', '--peers', PEERS, '--cluster-force-start']), /--cluster-force-start needs --state-file/);
    assert.match(
      refusal(['--id', '1', '--peers', PEERS, '--state-file', 's', '--force-start-timeout-ms', '100']),
      /--force-start-timeout-ms needs --cluster-force-start/,
    );
    assert.match(
      refusal(['--id', '1', '--peers', PEERS, '--state-file', 's', '--cluster-force-start', '--force-start-timeout-ms', '0']),
      /--force-start-timeout-ms "0"/,
    );
  });

  test('--state-file runs on the state file; --cluster-force-start is a switch that takes no value, anywhere on the line', () => {
    const plain = parseNodeArgs(['--id', '1', '--peers', PEERS]);
    assert.equal(plain.stateFile, undefined, 'without it: the static configuration');
    assert.equal(plain.forceStart, false);
    const forced = parseNodeArgs([
      '--cluster-force-start',
      '--id',
      '1',
      '--peers',
      PEERS,
      '--state-file',
      'state/n1.state',
      '--force-start-timeout-ms',
      '9000',
    ]);
    assert.equal(forced.stateFile, 'state/n1.state');
    assert.equal(forced.forceStart, true);
    assert.equal(forced.forceStartTimeoutMs, 9000);
    assert.equal(forced.id, 1);
  });
});
