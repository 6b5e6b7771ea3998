// Smoke tests with real clients that we did not write: mosquitto_pub/mosquitto_sub (Debian
// mosquitto-clients) and Python paho-mqtt 1.6 (Debian python3-paho-mqtt, run with /usr/bin/python3).
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { BrokerProcess, requireCommand } from './broker-process.js';
import { until } from './support/wait.js';

function collect(proc: ChildProcess): { out: () => string } {
  let out = '';
  proc.stdout?.setEncoding('utf8').on('data', (c: string) => {
    out += c;
  });
  return { out: () => out };
}

describe('third-party clients', { timeout: 90_000 }, () => {
  let broker: BrokerProcess;
  before(async () => {
    broker = await BrokerProcess.start(['--log-level', 'info']);
  });
  after(async () => {
    await broker.stop();
  });

  it('mosquitto_sub -t "#" -v receives what mosquitto_pub sends at QoS 0, 1 and 2', async () => {
    requireCommand('mosquitto_sub', 'mosquitto-clients');
    requireCommand('mosquitto_pub', 'mosquitto-clients');
    const sub = spawn('mosquitto_sub', ['-h', '127.0.0.1', '-p', String(broker.port), '-t', '#', '-v', '-q', '2', '-i', 'mos-sub'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const got = collect(sub);
    try {
      // mosquitto_sub prints nothing when subscribed; publish until the first message arrives.
      await until('the subscription to be live', () => {
        spawnSync('mosquitto_pub', ['-h', '127.0.0.1', '-p', String(broker.port), '-t', 'probe', '-m', 'p']);
        return got.out().includes('probe p');
      });
      for (const qos of [0, 1, 2]) {
        const r = spawnSync(
          'mosquitto_pub',
          ['-h', '127.0.0.1', '-p', String(broker.port), '-t', `sensors/${qos}/temp`, '-m', `t=${qos}`, '-q', String(qos)],
          {
            encoding: 'utf8',
            timeout: 10_000,
          },
        );
        assert.equal(r.status, 0, r.stderr);
      }
      await until('three messages', () =>
        ['sensors/0/temp t=0', 'sensors/1/temp t=1', 'sensors/2/temp t=2'].every((l) => got.out().includes(l)),
      );
    } finally {
      sub.kill('SIGTERM');
    }
  });

  it('mosquitto_sub receives a retained message set by mosquitto_pub -r', async () => {
    requireCommand('mosquitto_pub', 'mosquitto-clients');
    const pub = spawnSync(
      'mosquitto_pub',
      ['-h', '127.0.0.1', '-p', String(broker.port), '-t', 'status/door', '-m', 'open', '-r', '-q', '1'],
      {
        encoding: 'utf8',
        timeout: 10_000,
      },
    );
    assert.equal(pub.status, 0, pub.stderr);
    const sub = spawnSync('mosquitto_sub', ['-h', '127.0.0.1', '-p', String(broker.port), '-t', 'status/#', '-v', '-C', '1', '-W', '10'], {
      encoding: 'utf8',
      timeout: 15_000,
    });
    assert.equal(sub.status, 0, sub.stderr);
    assert.equal(sub.stdout.trim(), 'status/door open');
  });

  it('Python paho-mqtt 1.6 subscribes, publishes at QoS 1 and receives its message (MQTT 3.1.1)', () => {
    const probe = spawnSync('/usr/bin/python3', ['-c', 'import paho.mqtt.client'], { encoding: 'utf8' });
    if (probe.status !== 0)
      throw new Error(
        'paho-mqtt is not importable by /usr/bin/python3: install the Debian package python3-paho-mqtt (bash .ci/run does this)',
      );
    const script = `
import sys, threading
import paho.mqtt.client as mqtt
port = int(sys.argv[1])
done = threading.Event()
got = []
def on_connect(c, u, flags, rc):
    assert rc == 0, rc
    c.subscribe("paho/+/x", qos=1)
def on_subscribe(c, u, mid, granted):
    c.publish("paho/a/x", b"hello", qos=1)
def on_message(c, u, msg):
    got.append((msg.topic, msg.payload, msg.qos))
    done.set()
c = mqtt.Client(client_id="paho-smoke", clean_session=True, protocol=mqtt.MQTTv311)
c.on_connect = on_connect
c.on_subscribe = on_subscribe
c.on_message = on_message
c.connect("127.0.0.1", port, keepalive=30)
c.loop_start()
ok = done.wait(10)
c.disconnect()
c.loop_stop()
print(repr(got))
sys.exit(0 if ok else 1)
`;
    const r = spawnSync('/usr/bin/python3', ['-c', script, String(broker.port)], { encoding: 'utf8', timeout: 20_000 });
    assert.equal(r.status, 0, `paho exited ${r.status}: ${r.stdout} ${r.stderr}`);
    assert.equal(r.stdout.trim(), "[('paho/a/x', b'hello', 1)]");
  });
});
