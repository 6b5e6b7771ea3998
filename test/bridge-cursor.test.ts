// The bridge's send cursor against one log entry that puts several messages into the outbox
// (docs/bridges.md "The promise"): a `tick` that fires several wills an outbound rule forwards.
// The broker is the real one, driven entry by entry as a log would; the link is the real
// BridgeLink, over TCP to a small remote on loopback that speaks MQTT 5 with the repository's
// codec, grants a Receive Maximum as small as 1 (so the send window fills between two messages of
// the entry) and acknowledges each PUBLISH. The host applies what the link proposes
// (`bridge-position`) as the next entry and pumps the link again, as a serving node does after a
// commit. The checks: no `bridge-position` passes a message the remote has not acknowledged, and
// once the position has passed the entry and emptied the outbox, the remote has acknowledged every
// message of it, once, in order; also when the remote closes the connection after each PUBACK, and
// when a message in the middle of the entry expires before it is sent. A copy of the link with the
// planted bug `bridge-cursor-skips-entry` (the cursor and the position move by log index) must fail.
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pino from 'pino';
import { buildPatched, type Patch } from '../jepsen-like-tests/mutants.js';
import type { BridgeRule } from '../src/broker/bridge-rules.js';
import { Harness, msg, testSettings } from '../src/broker/broker-harness.testkit.js';
import type { Command, Settings } from '../src/broker/commands.js';
import { Decoder } from '../src/protocol/decoder.js';
import { encode } from '../src/protocol/encoder.js';
import { RC } from '../src/protocol/reason-codes.js';
import { BRIDGE_MAX_INFLIGHT_DEFAULT, type BridgeSpec } from '../src/server/bridge/bridge-config.js';
import type { BridgeHost } from '../src/server/bridge/bridge-link.js';
import { BridgeLink } from '../src/server/bridge/bridge-link.js';
import { LOOPBACK } from './support/net.js';
import { until } from './support/wait.js';

const BUILD = fileURLToPath(new URL('..', import.meta.url));
const WAIT_MS = 10_000;

/** The planted bug: the cursor moves past the whole log entry of the message just sent, and with
 * nothing in flight the position moves there too, so the rest of the entry's messages are skipped
 * and then removed from the outbox as if the remote had completed them. */
const CURSOR_SKIPS_ENTRY: readonly Patch[] = [
  {
    file: 'src/server/bridge/bridge-link.js',
    find: '        let i = firstAtOrAboveSeq(o, this.sentSeq);\n',
    replace: '        let i = firstAtOrAbove(o, this.sentBelow);\n',
  },
  {
    file: 'src/server/bridge/bridge-link.js',
    find: '        const below = head === undefined ? this.unsentBelow() : head.index;\n',
    replace: '        const below = head === undefined ? this.sentBelow : head.index;\n',
  },
];

const RULES: BridgeRule[] = [{ bridge: 'up', pattern: 'will/#', direction: 'out', qos: 1, localPrefix: '', remotePrefix: 'r/' }];
const SETTINGS: Settings = { ...testSettings, bridgeRules: RULES };

/** A remote broker for one bridge connection at a time: CONNACK with Receive Maximum `window`,
 * then PUBACK for QoS 1 PUBLISHes; `acked` holds the topics it acknowledged, in order. After
 * `acksPerConnection` of them it closes the connection and takes nothing more on it. */
class FakeRemote {
  readonly acked: string[] = [];
  private readonly server: Server;
  private readonly open = new Set<Socket>();

  constructor(window: number, acksPerConnection: number) {
    this.server = createServer((s) => {
      this.open.add(s);
      s.on('close', () => this.open.delete(s));
      s.on('error', () => {});
      const d = new Decoder({ maxPacketSize: 1 << 20 });
      let acks = 0;
      s.on('data', (chunk: Buffer) => {
        if (acks >= acksPerConnection) return;
        const r = d.feed(chunk);
        for (const p of r.packets) {
          if (p.type === 'connect') {
            s.write(encode({ type: 'connack', sessionPresent: false, code: 0, props: { receiveMax: window } }, 5));
          } else if (p.type === 'publish' && p.pid !== undefined) {
            this.acked.push(p.topic);
            s.write(encode({ type: 'puback', pid: p.pid, code: RC.SUCCESS, props: {} }, 5));
            if (++acks >= acksPerConnection) {
              s.end();
              return;
            }
          }
        }
        if (r.error !== null) s.destroy();
      });
    });
  }

  async listen(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, LOOPBACK, () => resolve()));
    return (this.server.address() as { port: number }).port;
  }

  close(): Promise<void> {
    for (const s of this.open) s.destroy();
    return new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

type LinkClass = typeof BridgeLink;

interface Run {
  /** The remote topics the remote acknowledged, in order. */
  acked: string[];
  /** Outbox items a `bridge-position` removed before the remote had acknowledged them. */
  passedUnacked: string[];
}

interface Scenario {
  /** Wills fired by the one tick. */
  wills: number;
  /** The remote's Receive Maximum. */
  window: number;
  /** The remote closes each connection after this many PUBACKs; default: never. */
  acksPerConnection?: number;
  /** The will at this place has a Message Expiry Interval of 2 s, and the cluster clock the link
   * reads runs 2.5 s ahead of the entries: the link finds it expired before an entry removes it. */
  expiring?: number;
}

/** Time the cluster clock the link reads runs ahead of the last entry in the `expiring` case (ms). */
const CLOCK_AHEAD_MS = 2500;

/** Drives the scenario with `Link`: the wills fire in one tick; the link forwards them to the
 * remote. Resolves once the position has passed the tick and emptied the outbox. */
async function oneTickOfWills(Link: LinkClass, sc: Scenario, cleanups: (() => Promise<void>)[]): Promise<Run> {
  const { wills, window } = sc;
  const remote = new FakeRemote(window, sc.acksPerConnection ?? Number.POSITIVE_INFINITY);
  const port = await remote.listen();
  cleanups.push(() => remote.close());

  const h = new Harness(SETTINGS);
  // MQTT 5 sessions whose wills are delayed 1 s, all ended at one time: one tick fires them all.
  const ids = Array.from({ length: wills }, (_, i) => `c${i}`);
  ids.forEach((id, i) => {
    const m = msg(`will/${id}`, id, 1, false, i === sc.expiring ? { expiryS: 2 } : undefined);
    h.connect(h.conn(1 + i), id, { protocol: 5, clean: true, expiryS: 60, will: { msg: m, delayS: 1 } });
  });
  ids.forEach((_, i) => {
    h.apply({ t: 'disconnect', conn: h.conn(1 + i), reason: RC.UNSPECIFIED_ERROR, publishWill: true });
  });

  const proposed: Command[] = [];
  const passedUnacked: string[] = [];
  let link: BridgeLink | null = null;
  const commit = (): void => {
    // The next entries of the log: what the link proposed, then the pump a commit triggers.
    for (const cmd of proposed.splice(0)) {
      if (cmd.t === 'bridge-position') {
        // The rule under test: a position passes only items the remote completed.
        const items = h.broker.bridgeOutbox(cmd.bridge)?.items.toArray() ?? [];
        for (const it of items) if (it.index < cmd.below && !remote.acked.includes(it.topic)) passedUnacked.push(it.topic);
      }
      h.apply(cmd);
    }
    link?.pump();
  };
  const host: BridgeHost = {
    outbox: (name) => h.broker.bridgeOutbox(name),
    rules: () => RULES,
    mayWrite: () => true,
    now: () => h.time + (sc.expiring === undefined ? 0 : CLOCK_AHEAD_MS),
    propose: (cmd) => {
      proposed.push(cmd);
      setImmediate(commit);
    },
    event: () => {},
    logger: pino({ level: 'silent' }),
    maxPacketSize: 1 << 20,
    newConnId: () => 'bridge.1',
    routeIn: () => {},
  };
  const spec: BridgeSpec = {
    name: 'up',
    addresses: [{ url: `mqtt://${LOOPBACK}:${port}`, tls: false, ws: false, host: LOOPBACK, port, path: '' }],
    clientId: 'raftmq-bridge-up',
    username: null,
    password: null,
    protocol: 5,
    keepaliveS: 60,
    downAlertS: 60,
    cleanStart: true,
    maxInflight: BRIDGE_MAX_INFLIGHT_DEFAULT,
    maxInflightQos2: BRIDGE_MAX_INFLIGHT_DEFAULT,
    tryPrivate: false,
    tlsCa: null,
    tlsCert: null,
    tlsKey: null,
    files: [],
    rules: RULES,
  };
  const l = new Link(spec, host);
  link = l;
  cleanups.push(async () => l.stop());
  l.start();
  await until('the bridge connected', () => l.state === 'up', WAIT_MS);

  h.apply({ t: 'tick' }, 1000);
  const tick = h.index;
  const o = h.broker.bridgeOutbox('up');
  assert.equal(o?.items.length, wills, 'the tick put every will into the outbox');
  assert.ok(
    o?.items.toArray().every((it) => it.index === tick),
    'all of them from the one entry',
  );
  l.pump();
  if (sc.expiring !== undefined) {
    // The link stops at the expired will: the position reaches it and goes no further, and nothing
    // behind it is sent, until the entry whose time passes its expiry removes it.
    await until('the position at the tick', () => h.broker.bridgeOutbox('up')?.position === tick, WAIT_MS);
    assert.equal(remote.acked.length, sc.expiring, 'the wills before the expired one were forwarded, no more');
    h.apply({ t: 'tick' }, 2000);
    // The forwarded ones stay too: the position cannot pass the entry before the rest of it.
    assert.equal(h.broker.bridgeOutbox('up')?.items.length, wills - 1, 'the tick removed the expired will, only');
    l.pump();
  }
  await until('the position past the tick', () => (h.broker.bridgeOutbox('up')?.position ?? 0) > tick, WAIT_MS);
  assert.equal(h.broker.bridgeOutbox('up')?.items.length, 0, 'the position emptied the outbox');
  return { acked: remote.acked, passedUnacked };
}

describe('bridge send cursor over an entry with several outbox messages', { timeout: 60_000 }, () => {
  const cleanups: (() => Promise<void>)[] = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  const want = (wills: number): string[] => Array.from({ length: wills }, (_, i) => `r/will/c${i}`);

  for (const [wills, window] of [
    [3, 1],
    [5, 2],
    [4, 64],
  ] as const) {
    it(`forwards all ${wills} wills of one tick before the position passes it (remote window ${window})`, async () => {
      const run = await oneTickOfWills(BridgeLink, { wills, window }, cleanups);
      assert.deepEqual(run.passedUnacked, [], 'no position passed a message the remote had not acknowledged');
      assert.deepEqual(run.acked, want(wills), 'every message of the entry reached the remote, in order, once');
    });
  }

  it('gets an entry through a remote that closes the connection after each acknowledgement, sending none it acknowledged again', async () => {
    const run = await oneTickOfWills(BridgeLink, { wills: 3, window: 1, acksPerConnection: 1 }, cleanups);
    assert.deepEqual(run.passedUnacked, [], 'no position passed a message the remote had not acknowledged');
    assert.deepEqual(run.acked, want(3), 'each will acknowledged once, in order, over three connections');
  });

  it('holds at a will of the entry that expired, and forwards the rest of the entry once an entry removes it', async () => {
    const run = await oneTickOfWills(BridgeLink, { wills: 4, window: 64, expiring: 1 }, cleanups);
    assert.deepEqual(run.passedUnacked, [], 'no position passed a message the remote had not acknowledged');
    assert.deepEqual(run.acked, ['r/will/c0', 'r/will/c2', 'r/will/c3'], 'every will but the expired one, in order, once');
  });

  it('catches the planted bug bridge-cursor-skips-entry: it drops messages of the entry unsent', async () => {
    const cli = buildPatched('bridge-cursor-skips-entry', CURSOR_SKIPS_ENTRY, BUILD);
    const mod = (await import(pathToFileURL(join(dirname(cli), 'server', 'bridge', 'bridge-link.js')).href)) as {
      BridgeLink: LinkClass;
    };
    const run = await oneTickOfWills(mod.BridgeLink, { wills: 3, window: 1 }, cleanups);
    console.log(
      `# planted bridge-cursor-skips-entry: the remote got ${run.acked.length} of 3 wills; the position passed ${run.passedUnacked.length} unsent`,
    );
    assert.ok(run.passedUnacked.length > 0, 'the planted bug moves the position past wills never sent');
    assert.ok(run.acked.length < 3, 'and they never reach the remote');
  });
});
