// docs/design.md "One server at a time": the lease is checked at each write. Effects applied while the
// node served are buffered per connection and written once per batch; if the lease lapsed in
// between (a long batch, a stalled event loop), that buffered output must never reach a client,
// because another node may already be serving. A BrokerNode runs over a log whose lease the test
// makes lapse right after the broker has checked it for each applied entry, before the write.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Command, Entry } from '../src/broker/commands.js';
import { contractSettings } from '../src/log/broker-log.contract.js';
import type { BrokerLog, LogListener } from '../src/log/broker-log.js';
import { RC } from '../src/protocol/reason-codes.js';
import { BrokerNode } from '../src/server/broker-node.js';
import { connectPacket, nodeOptions, RawClient, WAIT_MS, withTimeout } from './helpers.js';

/** A log that commits only when the test says so, with a serving flag the test sets. */
class ManualLog implements BrokerLog {
  listener: LogListener | null = null;
  proposed: Command[] = [];
  lease = true;
  /** Reads of `serving` left before the lease lapses; null: no lapse planned. */
  private readsLeft: number | null = null;
  private index = 0;
  private period = 0;
  readonly accepting = true;
  get serving(): boolean {
    if (this.readsLeft !== null && this.readsLeft-- <= 0) this.lease = false;
    return this.period !== 0 && this.lease;
  }
  checkServing(): boolean {
    return this.serving;
  }
  get servePeriod(): number {
    return this.serving ? this.period : 0;
  }
  now(): number {
    return 1_700_000_000_000;
  }
  start(listener: LogListener): void {
    this.listener = listener;
  }
  updateSettings(): void {}
  propose(cmd: Command): void {
    if (this.serving) this.proposed.push(cmd);
  }
  async stop(): Promise<void> {
    this.period = 0;
  }
  /** Applies `cmds` as committed entries, in one turn. */
  commit(cmds: Command[]): void {
    const entries: Entry[] = cmds.map((cmd) => ({ index: ++this.index, time: this.now(), cmd }));
    this.listener?.committed(entries);
  }
  serveStart(): void {
    this.commit([{ t: 'serve-start', node: 1, settings: contractSettings }]);
    this.period = this.index;
    this.listener?.serving(true, this.period);
  }
  /** Commits `cmds`; the lease lapses once the broker has checked it for each of them (a serving
   * node reads it before and after each apply, and executes an entry's effects only while
   * serving), that is, just before the batch's write. */
  commitThenLapse(cmds: Command[]): void {
    this.readsLeft = 2 * cmds.length;
    this.commit(cmds);
  }
  /** Commits everything proposed so far. */
  commitProposed(): void {
    const cmds = this.proposed;
    this.proposed = [];
    this.commit(cmds);
  }
  async waitProposed(t: Command['t']): Promise<void> {
    for (let i = 0; i < 500 && !this.proposed.some((c) => c.t === t); i++) await new Promise((r) => setTimeout(r, 10));
    assert.ok(
      this.proposed.some((c) => c.t === t),
      `a ${t} was proposed`,
    );
  }
}

async function serving(): Promise<{ node: BrokerNode; log: ManualLog }> {
  const log = new ManualLog();
  const node = new BrokerNode(nodeOptions(), log);
  const started = node.start();
  log.serveStart();
  await withTimeout(started, WAIT_MS, 'listening');
  return { node, log };
}

describe('output buffered when serving ends', { timeout: 20_000 }, () => {
  it('a delivery applied in the turn the lease lapsed is discarded; v5 clients get only DISCONNECT 0x8B', async () => {
    const { node, log } = await serving();
    const sub = await RawClient.open(node.port, 5);
    try {
      sub.send(connectPacket({ level: 5, clientId: 'sub' }));
      await log.waitProposed('connect');
      const conn = (log.proposed[0] as Extract<Command, { t: 'connect' }>).conn;
      log.commitProposed();
      await sub.waitFor('connack');
      sub.send({ type: 'subscribe', pid: 1, subs: [{ filter: 't', qos: 1, nl: false, rap: false, rh: 0 }], props: {} });
      await log.waitProposed('subscribe');
      log.commitProposed();
      await sub.waitFor('suback');
      // The client's own publish commits, so its PUBACK and the delivery to its subscription are
      // buffered; before the turn's flush the lease lapses.
      log.commitThenLapse([{ t: 'publish', conn, pid: 1, msg: { topic: 't', payload: new Uint8Array([1]), qos: 1, retain: false } }]);
      await sub.waitClosed();
      assert.deepEqual(
        sub.packets.filter((p) => p.type === 'publish'),
        [],
        'no PUBLISH written after the lease lapsed',
      );
      assert.equal(
        sub.packets.find((p) => p.type === 'puback'),
        undefined,
        'nor the PUBACK',
      );
      const disconnect = sub.packets.find((p) => p.type === 'disconnect');
      assert.equal(disconnect?.type === 'disconnect' ? disconnect.code : undefined, RC.SERVER_SHUTTING_DOWN);
    } finally {
      sub.destroy();
      await node.stop();
    }
  });

  it('a CONNACK applied in the turn the lease lapsed is discarded, and no DISCONNECT precedes a CONNACK', async () => {
    const { node, log } = await serving();
    const c = await RawClient.open(node.port, 5);
    try {
      c.send(connectPacket({ level: 5, clientId: 'late' }));
      await log.waitProposed('connect');
      const cmds = log.proposed;
      log.proposed = [];
      log.commitThenLapse(cmds);
      await c.waitClosed();
      assert.deepEqual(
        c.packets.map((p) => p.type),
        [],
        'neither the CONNACK nor a DISCONNECT [MQTT-3.14.0-1]',
      );
    } finally {
      c.destroy();
      await node.stop();
    }
  });
});
