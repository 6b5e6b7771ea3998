// MQTT 5 interoperability with a client we did not write: Python paho-mqtt 1.6 (Debian
// python3-paho-mqtt, run with /usr/bin/python3) drives test/interop/paho_v5.py against one raftmq
// process, the behaviours an independent MQTT 5 conformance suite checks (issue 3). The script runs
// once; each scenario prints one JSON line {name, ok, detail} and is one `it` here.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BrokerProcess } from './broker-process.js';

const PYTHON = '/usr/bin/python3';
const SCRIPT = join(process.cwd(), 'test', 'interop', 'paho_v5.py');
const MAX_KEEPALIVE_S = 60;
const SCRIPT_TIMEOUT_MS = 90_000;
// subscribe_failure needs a filter the ACL refuses; everything else is granted.
const ACL = 'topic deny pv5/denied/#\ntopic readwrite #\n';

/** The scenarios of the script, in its order; a scenario it did not report fails here. */
const SCENARIOS: Record<string, string> = {
  qos_round_trip: 'delivers QoS 0, 1 and 2 at their QoS with PUBACK/PUBREC 0x00, and 0x10 when nobody subscribes',
  retained_user_properties:
    'keeps retained messages with their user properties in order, capped at the granted QoS, cleared by an empty payload',
  will_on_keepalive_expiry: 'publishes the will of a client silent past 1.5 x its keep-alive, user properties in order',
  assigned_client_identifier:
    'assigns an id to an empty client id (also with Clean Start 0) that resumes its session, and none to a given id',
  offline_queueing: 'queues QoS 1 and 2 for an offline session and delivers them on resume, not QoS 0',
  overlapping_subscriptions: 'sends one message at the highest QoS with both Subscription Identifiers for overlapping subscriptions',
  subscribe_failure: 'answers SUBSCRIBE per filter: granted, 0x87 for an ACL-denied filter, 0x8F for an empty share name',
  unsubscribe: 'answers UNSUBSCRIBE with 0x00 and 0x11 and delivers nothing after it',
  session_expiry: 'keeps a session for its expiry interval, ends it after, and follows the interval a DISCONNECT sets',
  shared_round_robin: 'splits a shared subscription round robin between two members, each message once, no retained',
  subscribe_options: 'honours No Local, Retain As Published and Retain Handling 0, 1 and 2',
  payload_format_and_content_type:
    'passes Payload Format Indicator and Content Type through and refuses non-UTF-8 under indicator 1 with 0x99',
  message_expiry: 'never delivers an expired message and sends the remaining expiry of the others',
  subscription_identifiers: 'adds the Subscription Identifier of the subscription to deliveries, replaced with it',
  request_response: 'gives Response Information when asked and passes response topic and correlation data',
  server_topic_alias: 'aliases outbound topics within the client Topic Alias Maximum, which paho resolves in order',
  client_topic_alias: 'resolves client topic aliases and refuses one left from an earlier connection with 0x82',
  maximum_packet_size: 'drops for a client a PUBLISH larger than its Maximum Packet Size, keeping the connection',
  server_keep_alive: 'answers a keep-alive above --max-keepalive with Server Keep Alive',
  flow_control: 'never has more unacknowledged QoS 1 PUBLISHes out than the client Receive Maximum 2',
  will_on_disconnect_with_will: 'publishes the will on DISCONNECT 0x04 and discards it on DISCONNECT 0x00',
  redelivery_on_reconnect: 'sends an unacknowledged QoS 1 PUBLISH again with DUP when the session resumes',
  will_delay: 'publishes a will after its Will Delay Interval and cancels it on a reconnect within the delay',
};

interface Result {
  name: string;
  ok: boolean;
  detail: string;
}

function runScript(port: number): Promise<{ results: Map<string, Result>; stderr: string; code: number | null }> {
  return new Promise((resolve) => {
    const proc = spawn(PYTHON, [SCRIPT, String(port), String(MAX_KEEPALIVE_S)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let stderr = '';
    proc.stdout.setEncoding('utf8').on('data', (c: string) => {
      out += c;
    });
    proc.stderr.setEncoding('utf8').on('data', (c: string) => {
      stderr += c;
    });
    const timer = setTimeout(() => {
      stderr += `\nkilled after ${SCRIPT_TIMEOUT_MS} ms`;
      proc.kill('SIGKILL');
    }, SCRIPT_TIMEOUT_MS);
    proc.on('close', (code) => {
      clearTimeout(timer);
      const results = new Map<string, Result>();
      for (const line of out.split('\n')) {
        if (!line.startsWith('{')) continue;
        const r = JSON.parse(line) as Result;
        results.set(r.name, r);
      }
      resolve({ results, stderr, code });
    });
  });
}

describe('MQTT 5 interoperability with Python paho-mqtt 1.6', { timeout: 150_000 }, () => {
  let broker: BrokerProcess;
  let dir: string;
  let run: Awaited<ReturnType<typeof runScript>>;

  before(async () => {
    const probe = spawnSync(PYTHON, ['-c', 'import paho.mqtt.client'], { encoding: 'utf8' });
    if (probe.status !== 0) {
      throw new Error(`paho-mqtt is not importable by ${PYTHON}: install the Debian package python3-paho-mqtt (bash .ci/run does this)`);
    }
    dir = mkdtempSync(join(tmpdir(), 'raftmq-paho5-'));
    const acl = join(dir, 'acl');
    writeFileSync(acl, ACL);
    broker = await BrokerProcess.start(['--max-keepalive', String(MAX_KEEPALIVE_S), '--acl-file', acl]);
    run = await runScript(broker.port);
  });

  after(async () => {
    await broker?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('reports every scenario it runs, and only those', () => {
    assert.deepEqual([...run.results.keys()].sort(), Object.keys(SCENARIOS).sort(), `script exit ${run.code}; stderr: ${run.stderr}`);
  });

  for (const [name, behaviour] of Object.entries(SCENARIOS)) {
    it(behaviour, () => {
      const r = run.results.get(name);
      assert.ok(r !== undefined, `scenario ${name} did not report (script exit ${run.code}); stderr: ${run.stderr}`);
      assert.ok(r.ok, `${name}: ${r.detail}`);
    });
  }
});
