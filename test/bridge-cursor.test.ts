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
import { dirname, join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { buildPatched, type Patch } from '../jepsen-like-tests/mutants.js';
import type { BridgeRule } from '../src/broker/bridge-rules.js';
import { Harness, msg, testSettings } from '../src/broker/broker-harness.testkit.js';
import type { Settings } from '../src/broker/commands.js';
import { encode } from '../src/protocol/encoder.js';
import { RC } from '../src/protocol/reason-codes.js';
import { BridgeLink } from '../src/server/bridge/bridge-link.js';
import { harnessHost, LoopbackRemote, loopbackSpec } from './support/bridge-link-harness.js';
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
function ackingRemote(window: number, acksPerConnection: number, acked: string[]): LoopbackRemote {
  const acks = new WeakMap<object, number>();
  return new LoopbackRemote((s, p) => {
    if (p.type === 'connect') {
      s.write(encode({ type: 'connack', sessionPresent: false, code: 0, props: { receiveMax: window } }, 5));
    } else if (p.type === 'publish' && p.pid !== undefined) {
      acked.push(p.topic);
      s.write(encode({ type: 'puback', pid: p.pid, code: RC.SUCCESS, props: {} }, 5));
      const n = (acks.get(s) ?? 0) + 1;
      acks.set(s, n);
      if (n >= acksPerConnection) {
        s.end();
        return false;
      }
    }
    return true;
  });
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
  const acked: string[] = [];
  const remote = ackingRemote(window, sc.acksPerConnection ?? Number.POSITIVE_INFINITY, acked);
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

  const passedUnacked: string[] = [];
  const { host, setLink } = harnessHost(h, RULES, {
    now: () => h.time + (sc.expiring === undefined ? 0 : CLOCK_AHEAD_MS),
    check: (cmd) => {
      // The rule under test: a position passes only items the remote completed.
      if (cmd.t !== 'bridge-position') return;
      const items = h.broker.bridgeOutbox(cmd.bridge)?.items.toArray() ?? [];
      for (const it of items) if (it.index < cmd.below && !acked.includes(it.topic)) passedUnacked.push(it.topic);
    },
  });
  const l = new Link(loopbackSpec('up', port, RULES, true), host);
  setLink(l);
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
    assert.equal(acked.length, sc.expiring, 'the wills before the expired one were forwarded, no more');
    h.apply({ t: 'tick' }, 2000);
    // The forwarded ones stay too: the position cannot pass the entry before the rest of it.
    assert.equal(h.broker.bridgeOutbox('up')?.items.length, wills - 1, 'the tick removed the expired will, only');
    l.pump();
  }
  await until('the position past the tick', () => (h.broker.bridgeOutbox('up')?.position ?? 0) > tick, WAIT_MS);
  assert.equal(h.broker.bridgeOutbox('up')?.items.length, 0, 'the position emptied the outbox');
  return { acked: acked, passedUnacked };
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
