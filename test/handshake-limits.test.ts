// The bound on sockets not yet past CONNECT counts a socket from accept, through its TLS handshake
// or WebSocket upgrade: raw TCP sockets that open a TLS listener and never send a ClientHello hold
// their slots, a flood beyond the bound is closed at accept and counted, and a silent handshake is
// abandoned at the CONNECT timeout.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect as netConnect, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { BrokerNode } from '../src/server/broker-node.js';
import type { ListenerSpec } from '../src/server/listeners/listen-url.js';
import { TlsMaterial } from '../src/server/listeners/tls-material.js';
import { connectClient, counter, disconnect, startNode, WAIT_MS, withTimeout } from './helpers.js';
import { until } from './support/wait.js';
import { makePki, type Pki } from './tls-certs.js';

const L = (kind: ListenerSpec['kind']): ListenerSpec => ({
  kind,
  host: '127.0.0.1',
  port: 0,
  path: kind === 'ws' || kind === 'wss' ? '/mqtt' : '',
  proxy: null,
});

interface Silent {
  socket: Socket;
  closed: Promise<void>;
}

/** A TCP connection that sends nothing; `closed` settles when the server closes it. */
async function silent(port: number): Promise<Silent> {
  const socket = netConnect({ host: '127.0.0.1', port });
  socket.on('error', () => {});
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  await withTimeout(
    new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('error', reject);
    }),
    WAIT_MS,
    'TCP connect',
  );
  return { socket, closed };
}

describe('handshakes count toward max-pending-connections', { timeout: 60_000 }, () => {
  let pki: Pki;
  let server: { cert: string; key: string };
  let node: BrokerNode;

  before(async () => {
    pki = makePki('handshake');
    server = pki.issue('server', { cn: 'broker', san: 'IP:127.0.0.1', server: true });
    const tls = TlsMaterial.load({
      cert: server.cert,
      key: server.key,
      ca: null,
      crl: null,
      clientAuth: 'none',
      identity: 'cn',
      requireClientIdMatch: false,
    });
    node = await startNode({
      listeners: [L('mqtt'), L('mqtts'), L('ws')],
      tls,
      nodeLimits: { maxPendingConnections: 3, connectTimeoutMs: 1_500 },
    });
  });
  after(() => node.stop());

  it('holds a slot for a TLS socket without ClientHello, refuses the flood beyond the bound at accept, and frees the slot at the timeout', async () => {
    const [tcpPort, tlsPort, wsPort] = node.ports as [number, number, number];
    const holders = [await silent(tlsPort), await silent(tlsPort), await silent(wsPort)];
    await until('three sockets in their handshake', () => node.stats().handshaking === 3);
    assert.equal(node.stats().pending, 3);

    const before = counter(node, 'limit-pending-connections');
    const flood = await Promise.all([tlsPort, tlsPort, tlsPort, wsPort, tcpPort].map((p) => silent(p)));
    await withTimeout(Promise.all(flood.map((f) => f.closed)), WAIT_MS, 'flood closed at accept');
    assert.equal(counter(node, 'limit-pending-connections'), before + 5);
    assert.equal(node.stats().handshaking, 3, 'the holders keep their slots');

    // The TLS handshakes are abandoned at the CONNECT timeout; the WebSocket one at the HTTP
    // request timeout, which the test does not wait for.
    const refused = counter(node, 'tls-handshake-refused');
    await withTimeout(Promise.all(holders.slice(0, 2).map((h) => h.closed)), 10_000, 'silent TLS sockets closed');
    assert.equal(counter(node, 'tls-handshake-refused'), refused + 2);
    holders[2]?.socket.destroy();
    await until('slots released', () => node.stats().pending === 0);

    const ok = await connectClient(`mqtts://127.0.0.1:${tlsPort}`, { ca: readFileSync(pki.caCert), clientId: 'after-flood' });
    await disconnect(ok);
  });
});
