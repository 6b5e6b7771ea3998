import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { afterEach, describe, it } from 'node:test';
import { type BodyCodec, BodyRefusal, newUnpacker, packBody, unpackBody } from './codec.js';
import { type LinkCloseCode, TransportError } from './errors.js';
import { allocFrame, encodeFrame, FRAME_HEADER_BYTES } from './frame.js';
import type { LinkEvent } from './transport.js';
import {
  frameOf,
  LOOPBACK,
  makeNode,
  type Node,
  RawPeer,
  settle,
  stopAll,
  type TestMsg,
  waitFor,
  wire,
} from './transport-harness.testkit.js';

let running: Node[] = [];
let raws: RawPeer[] = [];
afterEach(async () => {
  for (const r of raws) r.destroy();
  await stopAll(running);
  running = [];
  raws = [];
});

function nodes(...list: Node[]): Node[] {
  running.push(...list);
  return list;
}

function node(n: Node): Node {
  running.push(n);
  return n;
}

function raw(port: number): RawPeer {
  const r = new RawPeer(port);
  raws.push(r);
  return r;
}

/** A raw peer that has completed the unauthenticated handshake with `node` as node `as`. */
async function handshaken(node: Node, as: number): Promise<RawPeer> {
  const r = raw(node.transport.address().port);
  r.write(frameOf(RawPeer.hello(as)));
  await waitFor('the transport hello', () => r.frames.length === 1);
  await waitFor('the inbound link to be up', () => node.logger.lines.some((l) => l.msg === 'peer link up' && l.fields.peer === as));
  return r;
}

/** A codec with a layout of its own under version 7 for messages without text (n as a uint32), and
 * msgpackr under version 1 for the rest. */
const counterCodec: BodyCodec<TestMsg> = {
  versions: [1, 7],
  encode(msg) {
    if (msg.text !== undefined || !Number.isInteger(msg.n) || msg.n < 0 || msg.n > 0xffff_ffff) return { version: 1, body: packBody(msg) };
    const body = new Uint8Array(4);
    new DataView(body.buffer).setUint32(0, msg.n);
    return { version: 7, body };
  },
  newDecoder() {
    const unpacker = newUnpacker();
    return (version, body) => {
      if (version === 1) return unpackBody(unpacker, body);
      if (body.length !== 4) return new BodyRefusal('body-malformed', `counter of ${body.length} bytes`);
      return { n: new DataView(body.buffer, body.byteOffset, 4).getUint32(0) };
    };
  },
};

/** The same, building each frame in place. */
const framingCounterCodec: BodyCodec<TestMsg> = {
  ...counterCodec,
  encodeFrame(msg) {
    const { version, body } = counterCodec.encode(msg);
    const frame = allocFrame(body.length, version);
    frame.set(body, FRAME_HEADER_BYTES);
    return frame;
  },
};

function counterFrame(bytes: number[], version = 7): Buffer {
  return encodeFrame(Uint8Array.from(bytes), version);
}

describe('raft transport over loopback', { timeout: 60_000 }, () => {
  it('carries messages among three nodes in both directions, in order per sender', async () => {
    const ids = [1, 2, 3];
    const all = nodes(...ids.map((id) => makeNode(id, ids)));
    await wire(all);
    for (const from of all) {
      for (const to of ids) if (to !== from.id) for (let n = 0; n < 50; n++) from.transport.send(to, { n, text: `${from.id}->${to}` });
    }
    await waitFor('100 messages at every node', () => all.every((x) => x.inbox.length === 100));
    for (const to of all) {
      for (const from of ids.filter((i) => i !== to.id)) {
        const got = to.inbox.filter((e) => e.from === from).map((e) => e.msg);
        assert.deepEqual(
          got,
          Array.from({ length: 50 }, (_, n) => ({ n, text: `${from}->${to.id}` })),
        );
      }
      const s = to.transport.stats();
      assert.equal(s.framesIn, 100);
      assert.equal(s.framesOut, 100);
      assert.equal(s.dropped, 0);
      assert.equal(s.badFrames, 0);
    }
    assert.equal(all[0].transport.authenticatesPeers, false);
  });

  it('reassembles frames that arrive a byte at a time', async () => {
    const a = node(makeNode(1, [1, 2]));
    await a.transport.start();
    const r = raw(a.transport.address().port);
    const stream = Buffer.concat([frameOf(RawPeer.hello(2)), frameOf({ n: 1 }), frameOf({ n: 2, text: 'split' })]);
    await r.writeByteByByte(stream);
    await waitFor('both messages', () => a.inbox.length === 2);
    assert.deepEqual(a.inbox, [
      { from: 2, msg: { n: 1 } },
      { from: 2, msg: { n: 2, text: 'split' } },
    ]);
  });

  it('refuses an oversize length before the body arrives, after the handshake and before it', async () => {
    const a = node(makeNode(1, [1, 2, 3], { maxFrameBytes: 1024 }));
    await a.transport.start();
    const r = await handshaken(a, 2);
    r.write(new Uint8Array([0, 0, 0x04, 0x01])); // length 1025, and no body ever follows
    await r.waitClosed();
    assert.ok(a.logger.closedWith('frame-oversize'));
    // Before the handshake the bound is far smaller than maxFrameBytes.
    const early = raw(a.transport.address().port);
    early.write(new Uint8Array([0, 1, 0, 1])); // 65537 bytes
    await early.waitClosed();
    assert.equal(a.transport.stats().badFrames, 2);
    assert.equal(a.inbox.length, 0);
  });

  it('closes links that send garbage, and none of it reaches onMessage', async () => {
    const a = node(makeNode(1, [1, 2, 3]));
    await a.transport.start();
    const port = a.transport.address().port;
    const junk = raw(port);
    junk.write(randomBytes(4096));
    await junk.waitClosed();

    const cases: Array<{ bytes: Uint8Array; code: LinkCloseCode }> = [
      { bytes: Buffer.from([0, 0, 0, 3, 9, 0x81, 0x01]), code: 'frame-version' },
      { bytes: encodeFrame(new Uint8Array([0x92, 0x01])), code: 'body-not-msgpack' }, // array of 2, one item
      { bytes: frameOf({ nope: true }), code: 'message-invalid' },
      { bytes: frameOf({ t: 'hello', nodeId: 'x' }), code: 'hello-invalid' },
    ];
    for (const c of cases) {
      const r = c.code === 'hello-invalid' ? raw(port) : await handshaken(a, 2);
      r.write(c.bytes);
      await r.waitClosed();
      assert.ok(a.logger.closedWith(c.code), c.code);
    }
    assert.equal(a.inbox.length, 0);
    assert.ok(a.transport.stats().badFrames >= cases.length);
  });

  it('closes a connection that never completes the handshake', async () => {
    const a = node(makeNode(1, [1, 2], { handshakeTimeoutMs: 150 }));
    await a.transport.start();
    const silent = raw(a.transport.address().port);
    await silent.waitClosed();
    assert.ok(a.logger.closedWith('handshake-timeout'));
  });

  it('refuses a peer of another cluster on both sides', async () => {
    const a = makeNode(1, [1, 2]);
    const b = makeNode(2, [1, 2], { clusterId: 'other' });
    await wire(nodes(a, b));
    a.transport.send(2, { n: 1 });
    b.transport.send(1, { n: 1 });
    await waitFor('both refusals', () => a.logger.closedWith('cluster-mismatch') && b.logger.closedWith('cluster-mismatch'));
    await settle();
    assert.equal(a.inbox.length + b.inbox.length, 0);
    assert.ok(a.transport.stats().refusedLinks >= 1);
  });

  it('refuses a dialed node that answers with another node id, and an inbound unknown node id', async () => {
    const a = makeNode(1, [1, 2]);
    const c = makeNode(3, [1, 3]);
    nodes(a, c);
    await a.transport.start();
    await c.transport.start();
    a.transport.setPeerAddress(2, c.transport.address()); // node 1 believes node 2 lives here
    a.transport.send(2, { n: 1 });
    await waitFor('node 1 to refuse node 3 posing as node 2', () => a.logger.closedWith('node-unexpected'));
    const stranger = raw(a.transport.address().port);
    stranger.write(frameOf(RawPeer.hello(9)));
    await stranger.waitClosed();
    const self = raw(a.transport.address().port);
    self.write(frameOf(RawPeer.hello(1)));
    await self.waitClosed();
    await settle(100);
    assert.equal(c.inbox.length + a.inbox.length, 0);
  });

  it('lets the caller refuse a peer epoch, and reports the member and epoch of each link it accepts', async () => {
    type Epoch = { generation: number; id: string };
    const newerOrSame = (local: unknown, remote: unknown): boolean => (remote as Epoch).generation >= (local as Epoch).generation;
    const a = makeNode(1, [1, 2, 3], { epoch: { generation: 2, id: 'e2' }, epochAccepts: newerOrSame });
    const b = makeNode(2, [1, 2, 3], { epoch: { generation: 2, id: 'e2' }, epochAccepts: newerOrSame });
    const old = makeNode(3, [1, 2, 3], { epoch: { generation: 1, id: 'e1' }, epochAccepts: newerOrSame });
    const events: unknown[] = [];
    a.transport.onLink((e) => events.push(e));
    await wire(nodes(a, b, old));
    await waitFor('node 1 to refuse the old epoch', () => a.logger.closedWith('epoch-refused'));
    await waitFor('both links between 1 and 2', () => events.length === 2);
    assert.deepEqual(
      new Set(events.map((e) => JSON.stringify(e))),
      new Set(
        ['out', 'in'].map((direction) =>
          JSON.stringify({ t: 'up', nodeId: 2, direction, incarnation: 'inc-2', epoch: { generation: 2, id: 'e2' }, clusterUid: '' }),
        ),
      ),
    );
  });

  it('refuses a peer of another cluster identity, logging it once, and links with one that knows none', async () => {
    const a = makeNode(1, [1, 2, 3], { clusterUid: 'aaaa' });
    const other = makeNode(2, [1, 2, 3], { clusterUid: 'bbbb' });
    const unknown = makeNode(3, [1, 2, 3]);
    const events: LinkEvent[] = [];
    a.transport.onLink((e) => events.push(e));
    await wire(nodes(a, other, unknown));
    await waitFor('node 1 to link with node 3 both ways', () => events.filter((e) => e.t === 'up' && e.nodeId === 3).length === 2);
    // Node 2 redials after each refusal; several refusals, one line.
    await waitFor('two refusals of node 2', () => events.filter((e) => e.t === 'identity-refused').length >= 2, 20_000);
    const refused = events.filter((e) => e.t === 'identity-refused');
    assert.ok(refused.every((e) => e.t === 'identity-refused' && e.nodeId === 2 && e.clusterUid === 'bbbb'));
    assert.equal(a.logger.lines.filter((l) => l.fields.code === 'identity-mismatch').length, 1, 'logged once');
    assert.ok(other.logger.closedWith('identity-mismatch'), 'the other side refuses too');
    assert.equal(
      events.some((e) => e.t === 'up' && e.nodeId === 2),
      false,
    );
  });

  it('makes its links again when it learns its cluster identity, so that peers see it in the hello', async () => {
    const a = makeNode(1, [1, 2]);
    const b = makeNode(2, [1, 2]);
    const seen: LinkEvent[] = [];
    b.transport.onLink((e) => seen.push(e));
    await wire(nodes(a, b));
    await waitFor('both links up', () => seen.filter((e) => e.t === 'up').length === 2);
    assert.ok(seen.every((e) => e.t !== 'up' || e.clusterUid === ''));
    a.transport.setClusterUid('cafe');
    await waitFor(
      'both links made again with the identity',
      () => seen.filter((e) => e.t === 'up' && e.clusterUid === 'cafe').length === 2,
    );
  });

  it('replaces an inbound link when the same node connects again', async () => {
    const a = node(makeNode(1, [1, 2]));
    await a.transport.start();
    const first = await handshaken(a, 2);
    const second = raw(a.transport.address().port);
    second.write(frameOf(RawPeer.hello(2)));
    await first.waitClosed();
    second.write(frameOf({ n: 5 }));
    await waitFor('the message on the newer link', () => a.inbox.length === 1);
    assert.equal(second.closed, false);
  });

  it('with a cluster secret, links only between nodes that share it', async () => {
    const a = makeNode(1, [1, 2, 3], { secret: 'right secret' });
    const b = makeNode(2, [1, 2, 3], { secret: 'right secret' });
    const c = makeNode(3, [1, 2, 3], { secret: 'wrong secret' });
    await wire(nodes(a, b, c));
    for (const n of [a, b, c]) for (const to of [1, 2, 3]) if (to !== n.id) n.transport.send(to, { n: n.id });
    await waitFor('1 and 2 to hear each other', () => a.inbox.length === 1 && b.inbox.length === 1);
    await waitFor('3 to be refused', () => a.logger.closedWith('auth-failed') && c.logger.closedWith('auth-failed'));
    await settle();
    assert.deepEqual(a.inbox, [{ from: 2, msg: { n: 2 } }]);
    assert.deepEqual(b.inbox, [{ from: 1, msg: { n: 1 } }]);
    assert.equal(c.inbox.length, 0);
    assert.equal(a.transport.authenticatesPeers, true);
  });

  it('refuses a peer without a secret when this node has one, on both sides', async () => {
    const a = makeNode(1, [1, 2], { secret: 's' });
    const b = makeNode(2, [1, 2]);
    await wire(nodes(a, b));
    a.transport.send(2, { n: 1 });
    b.transport.send(1, { n: 1 });
    await waitFor('both refusals', () => a.logger.closedWith('auth-missing') && b.logger.closedWith('auth-unexpected'));
    await settle();
    assert.equal(a.inbox.length + b.inbox.length, 0);
  });

  it('reconnects to a peer that restarts on the same address', async () => {
    const a = makeNode(1, [1, 2]);
    let b = makeNode(2, [1, 2]);
    await wire(nodes(a, b));
    a.transport.send(2, { n: 1 });
    await waitFor('the first message', () => b.inbox.length === 1);
    const address = b.transport.address();
    await b.transport.stop();
    await waitFor('node 1 to see the link down', () => a.transport.stats().peers[0].connected === false);
    b = makeNode(2, [1, 2], { listen: address, incarnation: 'inc-2-again' });
    nodes(b);
    await b.transport.start();
    b.transport.setPeerAddress(1, a.transport.address());
    await waitFor('node 1 to redial', () => a.transport.stats().peers[0].connected);
    a.transport.send(2, { n: 2 });
    await waitFor('the message after restart', () => b.inbox.length === 1);
    assert.deepEqual(b.inbox, [{ from: 1, msg: { n: 2 } }]);
    assert.equal(a.transport.stats().reconnects, 1);
  });

  it('keeps only the newest messages, within the queue bound, while the peer is down', async () => {
    const bFirst = makeNode(2, [1, 2]);
    await bFirst.transport.start();
    const address = bFirst.transport.address();
    await bFirst.transport.stop();
    const frameBytes = frameOf({ n: 0, text: 'x'.repeat(100) }).length;
    const a = makeNode(1, [1, 2], { sendQueueBytesMax: frameBytes * 10, peers: new Map([[2, address]]) });
    nodes(a);
    await a.transport.start();
    for (let n = 0; n < 25; n++) a.transport.send(2, { n, text: 'x'.repeat(100) });
    const s = a.transport.stats();
    assert.equal(s.dropped, 15);
    assert.deepEqual(s.peers[0], { nodeId: 2, connected: false, queuedFrames: 10, queuedBytes: frameBytes * 10 });
    const b = makeNode(2, [1, 2], { listen: address });
    nodes(b);
    await b.transport.start();
    await waitFor('the queued messages', () => b.inbox.length === 10, 8_000);
    assert.deepEqual(
      b.inbox.map((e) => e.msg.n),
      [15, 16, 17, 18, 19, 20, 21, 22, 23, 24],
    );
  });

  it('fails start at once with a clear error when the listen port is taken', async () => {
    const a = makeNode(1, [1, 2]);
    nodes(a);
    await a.transport.start();
    const twin = makeNode(1, [1, 2], { listen: a.transport.address() });
    nodes(twin);
    await assert.rejects(twin.transport.start(), (err: unknown) => {
      assert.ok(err instanceof TransportError);
      assert.equal(err.code, 'RAFT_TRANSPORT_LISTEN');
      assert.match(err.message, /address in use/);
      return true;
    });
  });

  it('never throws from send: unknown peers, oversize and unencodable messages are dropped and counted', async () => {
    const a = makeNode(1, [1, 2], { maxFrameBytes: 200 });
    nodes(a);
    await a.transport.start();
    const cyclic: Record<string, unknown> = { n: 1 };
    cyclic.self = cyclic;
    a.transport.send(7, { n: 1 });
    a.transport.send(2, { n: 1, text: 'y'.repeat(500) });
    a.transport.send(2, { n: 1, big: 10n ** 30n } as unknown as TestMsg);
    a.transport.send(2, cyclic as unknown as TestMsg);
    const s = a.transport.stats();
    assert.equal(s.dropped, 4);
    assert.equal(s.peers[0].queuedFrames, 0);
  });

  it('carries messages through a pluggable body codec, each under the version it chose', async () => {
    const [a, b] = nodes(makeNode(1, [1, 2], { codec: counterCodec }), makeNode(2, [1, 2], { codec: framingCounterCodec }));
    await wire([a, b]);
    for (const [from, to] of [
      [a, b],
      [b, a],
    ] as const) {
      from.transport.send(to.id, { n: 7 });
      from.transport.send(to.id, { n: 8, text: 'msgpackr' });
      from.transport.send(to.id, { n: 2 ** 40 });
      await waitFor('three messages', () => to.inbox.length === 3);
      assert.deepEqual(
        to.inbox.map((e) => e.msg),
        [{ n: 7 }, { n: 8, text: 'msgpackr' }, { n: 2 ** 40 }],
      );
    }
    // A node with the default codec still reads the version-1 bodies of a codec node.
    const plain = node(makeNode(3, [1, 3]));
    await plain.transport.start();
    const r = await handshaken(plain, 1);
    r.write(frameOf({ n: 9 }));
    await waitFor('the msgpackr message', () => plain.inbox.length === 1);
  });

  it('closes a link whose codec refuses a body, and refuses versions the codec does not name', async () => {
    const a = node(makeNode(1, [1, 2, 3], { codec: counterCodec }));
    await a.transport.start();
    const port = a.transport.address().port;
    const cases: Array<{ bytes: Uint8Array; code: LinkCloseCode; handshake: boolean }> = [
      { bytes: counterFrame([0, 0, 1]), code: 'body-malformed', handshake: true },
      { bytes: counterFrame([0, 0, 0, 1], 9), code: 'frame-version', handshake: true },
      { bytes: encodeFrame(new Uint8Array([0x92, 0x01])), code: 'body-not-msgpack', handshake: true },
      // Before the handshake only msgpackr under version 1 is read, whatever the codec.
      { bytes: counterFrame([0, 0, 0, 1]), code: 'frame-version', handshake: false },
    ];
    for (const c of cases) {
      a.logger.lines.length = 0;
      const r = c.handshake ? await handshaken(a, 2) : raw(port);
      r.write(counterFrame([0, 0, 0, 5]));
      r.write(c.bytes);
      await r.waitClosed();
      assert.ok(a.logger.closedWith(c.code), c.code);
    }
    // Only the well-formed counters of the handshaken links arrived, each before its link closed.
    assert.deepEqual(
      a.inbox.map((e) => e.msg),
      [{ n: 5 }, { n: 5 }, { n: 5 }],
    );
    assert.equal(a.transport.stats().badFrames, cases.length);
    // A node with the default codec refuses version 7 after the handshake too.
    const plain = node(makeNode(3, [1, 3]));
    await plain.transport.start();
    const p = await handshaken(plain, 1);
    p.write(counterFrame([0, 0, 0, 1]));
    await p.waitClosed();
    assert.ok(plain.logger.closedWith('frame-version'));
    assert.equal(plain.inbox.length, 0);
  });

  it('refuses bad options with a stable code instead of misbehaving later', () => {
    const bad = [
      { maxFrameBytes: 0 },
      { sendQueueBytesMax: -1 },
      { secret: '' },
      { listen: { host: LOOPBACK, port: 70_000 } },
      { codec: { ...counterCodec, versions: [] } },
      { codec: { ...counterCodec, versions: [1, 256] } },
    ];
    for (const opts of bad) {
      assert.throws(
        () => makeNode(1, [1, 2], opts),
        (err: unknown) => err instanceof TransportError && err.code === 'RAFT_TRANSPORT_BAD_OPTIONS',
      );
    }
  });
});
