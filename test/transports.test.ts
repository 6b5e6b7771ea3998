// Every listener kind serves the same broker: MQTT.js over mqtt, mqtts, ws and wss; mutual TLS
// with identities from certificates; refused handshakes; certificate reload without dropping an
// open connection; PROXY protocol v1/v2 through raw sockets; graceful drain on every listener.
// Certificates are made with openssl at test time (test/tls-certs.ts).
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { connect as netConnect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import mqtt, { type IClientOptions } from 'mqtt';
import WebSocket from 'ws';
import { encode } from '../src/protocol/encoder.js';
import { CONNACK_V4, RC } from '../src/protocol/reason-codes.js';
import type { Authenticator } from '../src/server/authenticator.js';
import type { BrokerNode } from '../src/server/broker-node.js';
import type { ListenerSpec } from '../src/server/listeners/listen-url.js';
import { TlsMaterial, type TlsSettings } from '../src/server/listeners/tls-material.js';
import type { Transport } from '../src/server/transport.js';
import { connectClient, connectPacket, disconnect, publish, RawClient, startNode, subscribe, WAIT_MS, withTimeout } from './helpers.js';
import { until } from './support/wait.js';
import { makePki, type Pki } from './tls-certs.js';

const L = (kind: ListenerSpec['kind'], extra: Partial<ListenerSpec> = {}): ListenerSpec => ({
  kind,
  host: '127.0.0.1',
  port: 0,
  path: kind === 'ws' || kind === 'wss' ? '/mqtt' : '',
  proxy: null,
  ...extra,
});

interface Seen {
  clientId: string;
  username: string | null;
  remote: string;
  transport: Transport;
}

function recordingAuth(seen: Seen[]): Authenticator {
  return {
    authenticate(c, remote, transport) {
      seen.push({ clientId: c.clientId, username: c.username, remote, transport });
      return { ok: true };
    },
  };
}

/** Resolves with why a client never got a CONNACK; fails the test if it did. */
function expectRefused(url: string, opts: IClientOptions): Promise<string> {
  const client = mqtt.connect(url, { reconnectPeriod: 0, connectTimeout: WAIT_MS, ...opts });
  return withTimeout(
    new Promise<string>((resolve, reject) => {
      client.once('connect', () => {
        client.end(true);
        reject(new Error(`${url}: connected although it should be refused`));
      });
      client.once('error', (err) => {
        client.end(true);
        resolve(err.message);
      });
      client.once('close', () => resolve('closed'));
    }),
    WAIT_MS * 2,
    `refusal at ${url}`,
  );
}

/** The subject CN of the certificate a new TLS handshake gets. */
function serverCertCn(port: number, ca: string): Promise<string> {
  return withTimeout(
    new Promise((resolve, reject) => {
      const s = tlsConnect({ host: '127.0.0.1', port, ca: readPem(ca), rejectUnauthorized: false }, () => {
        const cn = s.getPeerCertificate().subject?.CN;
        s.destroy();
        resolve(String(cn));
      });
      s.once('error', reject);
    }),
    WAIT_MS,
    'TLS handshake',
  );
}

function readPem(p: string): Buffer {
  return readFileSync(p);
}

function tlsSettings(pki: Pki, server: { cert: string; key: string }, over: Partial<TlsSettings> = {}): TlsSettings {
  return {
    cert: server.cert,
    key: server.key,
    ca: pki.caCert,
    crl: null,
    clientAuth: 'none',
    identity: 'cn',
    requireClientIdMatch: false,
    ...over,
  };
}

describe('listeners and transport security', { timeout: 120_000 }, () => {
  let pki: Pki;
  let other: Pki;
  let server: { cert: string; key: string };
  let server2: { cert: string; key: string };
  let device: { cert: string; key: string };
  let expired: { cert: string; key: string };
  let revoked: { cert: string; key: string };
  let stranger: { cert: string; key: string };
  const nodes: BrokerNode[] = [];

  before(() => {
    pki = makePki('main');
    other = makePki('other');
    server = pki.issue('server', { cn: 'first', san: 'IP:127.0.0.1,DNS:localhost', server: true });
    server2 = pki.issue('server2', { cn: 'second', san: 'IP:127.0.0.1,DNS:localhost', server: true });
    device = pki.issue('device', { cn: 'device-1', san: 'IP:10.0.0.1,email:device-1@example.com' });
    expired = pki.issue('expired', { cn: 'old-device', startDate: '20200101000000Z', endDate: '20200102000000Z' });
    revoked = pki.issue('revoked', { cn: 'lost-device' });
    pki.revoke(revoked.cert);
    stranger = other.issue('stranger', { cn: 'device-1' });
  });

  after(async () => {
    await Promise.all(nodes.map((n) => n.stop()));
  });

  async function node(listeners: ListenerSpec[], tls: TlsSettings | null, seen?: Seen[]): Promise<BrokerNode> {
    const n = await startNode({
      listeners,
      tls: tls === null ? null : TlsMaterial.load(tls),
      ...(seen ? { authenticator: recordingAuth(seen) } : {}),
    });
    nodes.push(n);
    return n;
  }

  it('delivers between clients on mqtt, mqtts, ws and wss listeners of one node', async () => {
    const n = await node([L('mqtt'), L('mqtts'), L('ws'), L('wss', { path: '/broker' })], tlsSettings(pki, server));
    const [p0, p1, p2, p3] = n.ports as [number, number, number, number];
    const ca = readPem(pki.caCert);
    const sub = await connectClient(`wss://127.0.0.1:${p3}/broker`, { ca, clientId: 'wss-sub' });
    await subscribe(sub, 'all/#', 1);
    const pubs = [
      await connectClient(p0, { clientId: 'tcp' }),
      await connectClient(`mqtts://127.0.0.1:${p1}`, { ca, clientId: 'tls' }),
      await connectClient(`ws://127.0.0.1:${p2}/mqtt`, { clientId: 'ws', protocolVersion: 5 }),
    ];
    for (const [i, p] of pubs.entries()) await publish(p, `all/${i}`, `from ${i}`, { qos: 1 });
    for (let i = 0; i < pubs.length; i++)
      await sub.waitFor((m) => m.topic === `all/${i}` && m.payload === `from ${i}`, `all/${i} over wss`);
    for (const c of [sub, ...pubs]) await disconnect(c);
  });

  it('maps the verified certificate CN to the username and refuses wrong-CA, expired, revoked and missing certificates', async () => {
    const seen: Seen[] = [];
    const n = await node([L('mqtts')], tlsSettings(pki, server, { clientAuth: 'required', crl: pki.crl }), seen);
    const url = `mqtts://127.0.0.1:${n.port}`;
    const ca = readPem(pki.caCert);
    const good = await connectClient(url, {
      ca,
      cert: readPem(device.cert),
      key: readPem(device.key),
      clientId: 'anything',
      username: 'claimed',
    });
    assert.equal(seen.at(-1)?.username, 'device-1', 'the certificate CN replaces the username sent');
    assert.equal(seen.at(-1)?.transport.certIdentity, 'device-1');
    assert.equal(seen.at(-1)?.transport.kind, 'mqtts');
    await disconnect(good);
    const before = n.counters.get('tls-handshake-refused') ?? 0;
    for (const cert of [stranger, expired, revoked]) {
      await expectRefused(url, { ca, cert: readPem(cert.cert), key: readPem(cert.key) });
    }
    await expectRefused(url, { ca });
    assert.equal(seen.length, 1, 'no refused client reached the authenticator');
    assert.ok((n.counters.get('tls-handshake-refused') ?? 0) - before >= 4, 'each refused handshake is counted');
  });

  it('requires the client id to equal the certificate identity when configured (CONNACK 0x85, 3.1.1: 2)', async () => {
    const n = await node([L('mqtts'), L('wss')], tlsSettings(pki, server, { clientAuth: 'required', requireClientIdMatch: true }));
    const [tlsPort, wssPort] = n.ports as [number, number];
    const creds = { ca: readPem(pki.caCert), cert: readPem(device.cert), key: readPem(device.key) };
    const v5 = await expectRefused(`mqtts://127.0.0.1:${tlsPort}`, { ...creds, clientId: 'someone-else', protocolVersion: 5 });
    assert.match(v5, /Client Identifier not valid|0x85|133/i);
    const v4 = await expectRefused(`wss://127.0.0.1:${wssPort}/mqtt`, { ...creds, clientId: 'someone-else', protocolVersion: 4 });
    assert.match(v4, new RegExp(`Identifier rejected|${CONNACK_V4.IDENTIFIER_REJECTED}`, 'i'));
    const ok = await connectClient(`wss://127.0.0.1:${wssPort}/mqtt`, { ...creds, clientId: 'device-1' });
    await disconnect(ok);
  });

  it('takes the first DNS, email or URI SAN as identity with --tls-identity san, and lets clients without a certificate in under optional', async () => {
    const seen: Seen[] = [];
    const n = await node([L('mqtts')], tlsSettings(pki, server, { clientAuth: 'optional', identity: 'san' }), seen);
    const url = `mqtts://127.0.0.1:${n.port}`;
    const ca = readPem(pki.caCert);
    const withCert = await connectClient(url, { ca, cert: readPem(device.cert), key: readPem(device.key), clientId: 'c1' });
    assert.equal(seen.at(-1)?.username, 'device-1@example.com', 'IP SANs are skipped; the email SAN names the device');
    const anonymous = await connectClient(url, { ca, clientId: 'c2', username: 'u' });
    assert.equal(seen.at(-1)?.username, 'u');
    assert.equal(seen.at(-1)?.transport.certIdentity, null);
    await expectRefused(url, { ca, cert: readPem(stranger.cert), key: readPem(stranger.key) });
    await disconnect(withCert);
    await disconnect(anonymous);
  });

  it('serves new certificate files to new handshakes without dropping an open connection', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-reload-'));
    const live = { cert: join(dir, 'server.crt'), key: join(dir, 'server.key') };
    copyFileSync(server.cert, live.cert);
    copyFileSync(server.key, live.key);
    const n = await node([L('mqtts')], tlsSettings(pki, live));
    const url = `mqtts://127.0.0.1:${n.port}`;
    const ca = readPem(pki.caCert);
    assert.equal(await serverCertCn(n.port, pki.caCert), 'first');
    const open = await connectClient(url, { ca, clientId: 'stays' });
    await subscribe(open, 'reload/t', 1);
    // A key and certificate replaced one after the other, as a deploy tool does.
    writeFileSync(live.key, readFileSync(server2.key));
    writeFileSync(live.cert, readFileSync(server2.cert));
    let cn = '';
    for (let i = 0; i < 50 && cn !== 'second'; i++) {
      await new Promise((r) => setTimeout(r, 100));
      cn = await serverCertCn(n.port, pki.caCert);
    }
    assert.equal(cn, 'second', 'a new handshake gets the new certificate');
    const fresh = await connectClient(url, { ca, clientId: 'fresh' });
    await publish(fresh, 'reload/t', 'after reload', { qos: 1 });
    await open.waitFor((m) => m.payload === 'after reload', 'delivery on the connection opened before the reload');
    assert.equal(open.client.connected, true);
    await disconnect(fresh);
    await disconnect(open);
  });

  it('takes the device address from PROXY v1 and v2 headers, on TCP, TLS and WebSocket listeners', async () => {
    const seen: Seen[] = [];
    const n = await node(
      [L('mqtt', { proxy: 1 }), L('mqtt', { proxy: 2 }), L('mqtts', { proxy: 2 }), L('ws', { proxy: 1 })],
      tlsSettings(pki, server),
      seen,
    );
    const [v1Port, v2Port, tlsPort, wsPort] = n.ports as [number, number, number, number];
    const connect = encode(connectPacket({ clientId: 'proxied-v1' }), 4);
    const raw1 = await RawClient.open(v1Port, 4);
    raw1.sendBytes(Buffer.concat([Buffer.from('PROXY TCP4 203.0.113.7 192.0.2.1 40001 1883\r\n'), connect]));
    assert.equal((await raw1.waitFor('connack')).code, 0);
    assert.equal(seen.at(-1)?.remote, '203.0.113.7');
    assert.equal(seen.at(-1)?.transport.remotePort, 40001);
    raw1.destroy();

    const v2 = (a: number[], port: number): Buffer =>
      Buffer.from([
        0x0d,
        0x0a,
        0x0d,
        0x0a,
        0x00,
        0x0d,
        0x0a,
        0x51,
        0x55,
        0x49,
        0x54,
        0x0a,
        0x21,
        0x11,
        0,
        12,
        ...a,
        192,
        0,
        2,
        1,
        port >> 8,
        port & 0xff,
        0x07,
        0x5b,
      ]);
    const raw2 = await RawClient.open(v2Port, 4);
    raw2.sendBytes(Buffer.concat([v2([198, 51, 100, 9], 50000), encode(connectPacket({ clientId: 'proxied-v2' }), 4)]));
    await raw2.waitFor('connack');
    assert.equal(seen.at(-1)?.remote, '198.51.100.9');
    raw2.destroy();

    // TLS after the header: the header is plain bytes ahead of the handshake.
    const sock = netConnect({ host: '127.0.0.1', port: tlsPort });
    await new Promise((r) => sock.once('connect', r));
    sock.write(v2([198, 51, 100, 10], 50001));
    const secure = tlsConnect({ socket: sock, ca: readPem(pki.caCert), servername: 'localhost' });
    await withTimeout(new Promise((r) => secure.once('secureConnect', r)), WAIT_MS, 'TLS after PROXY v2');
    secure.write(encode(connectPacket({ clientId: 'proxied-tls' }), 4));
    const connack = await withTimeout(new Promise<Buffer>((r) => secure.once('data', r)), WAIT_MS, 'CONNACK over TLS');
    assert.equal(connack[0], 0x20);
    assert.equal(seen.at(-1)?.remote, '198.51.100.10');
    secure.destroy();

    // WebSocket: header, upgrade request and one masked binary frame with CONNECT, in one write.
    const mqttConnect = encode(connectPacket({ clientId: 'proxied-ws' }), 4);
    const frame = Buffer.concat([Buffer.from([0x82, 0x80 | mqttConnect.length, 0, 0, 0, 0]), mqttConnect]);
    const upgrade = [
      'PROXY TCP6 2001:db8::77 ::1 40002 80',
      'GET /mqtt HTTP/1.1',
      'Host: broker',
      'Upgrade: websocket',
      'Connection: Upgrade',
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
      'Sec-WebSocket-Version: 13',
      'Sec-WebSocket-Protocol: mqtt',
      '',
      '',
    ].join('\r\n');
    const ws = await rawSocket(wsPort);
    let got = Buffer.alloc(0);
    ws.on('data', (d: Buffer) => {
      got = Buffer.concat([got, d]);
    });
    ws.write(Buffer.concat([Buffer.from(upgrade), frame]));
    await until('CONNACK frame over ws', () => got.includes(Buffer.from([0x82, 0x04, 0x20, 0x02, 0x00, 0x00])));
    assert.match(got.toString('latin1'), /^HTTP\/1\.1 101/);
    assert.equal(seen.at(-1)?.remote, '2001:db8::77');
    ws.destroy();
  });

  it('closes a connection whose PROXY header is malformed, and counts it', async () => {
    const n = await node([L('mqtt', { proxy: 1 }), L('mqtt', { proxy: 2 })], null);
    for (const port of n.ports) {
      const raw = await RawClient.open(port, 4);
      raw.sendBytes(encode(connectPacket(), 4));
      await raw.waitClosed();
    }
    assert.equal(n.counters.get('proxy-malformed'), 2);
  });

  it('refuses a WebSocket upgrade without the mqtt subprotocol or on another path, accepts mqttv3.1, and closes on a text frame', async () => {
    const n = await node([L('ws')], null);
    const url = `ws://127.0.0.1:${n.port}/mqtt`;
    assert.equal(await upgradeStatus(url, []), 400);
    assert.equal(await upgradeStatus(url, ['chat']), 400);
    assert.equal(await upgradeStatus(`ws://127.0.0.1:${n.port}/other`, ['mqtt']), 404);
    assert.equal(n.counters.get('ws-no-subprotocol'), 2);
    const old = new WebSocket(url, ['mqttv3.1']);
    await withTimeout(new Promise((r, j) => old.once('open', r).once('error', j)), WAIT_MS, 'ws open');
    assert.equal(old.protocol, 'mqttv3.1');
    old.send('not binary');
    await withTimeout(new Promise((r) => old.once('close', r)), WAIT_MS, 'close after a text frame');
  });

  it('sends MQTT 5 clients DISCONNECT 0x8B on every listener when the node stops', async () => {
    const n = await node([L('mqtt'), L('mqtts'), L('ws'), L('wss')], tlsSettings(pki, server));
    const [p0, p1, p2, p3] = n.ports as [number, number, number, number];
    const ca = readPem(pki.caCert);
    const urls = [`mqtt://127.0.0.1:${p0}`, `mqtts://127.0.0.1:${p1}`, `ws://127.0.0.1:${p2}/mqtt`, `wss://127.0.0.1:${p3}/mqtt`];
    const clients = await Promise.all(urls.map((u, i) => connectClient(u, { ca, protocolVersion: 5, clientId: `drain-${i}` })));
    const reasons = clients.map((c) => new Promise<number | undefined>((r) => c.client.once('disconnect', (p) => r(p.reasonCode))));
    await n.stop();
    assert.deepEqual(
      await withTimeout(Promise.all(reasons), WAIT_MS, 'DISCONNECT on all'),
      urls.map(() => RC.SERVER_SHUTTING_DOWN),
    );
    for (const c of clients) c.client.end(true);
  });
});

function rawSocket(port: number): Promise<Socket> {
  const s = netConnect({ host: '127.0.0.1', port });
  return withTimeout(new Promise((r, j) => s.once('connect', () => r(s)).once('error', j)), WAIT_MS, 'TCP connect');
}

function upgradeStatus(url: string, protocols: string[]): Promise<number> {
  const ws = new WebSocket(url, protocols);
  return withTimeout(
    new Promise((resolve, reject) => {
      ws.once('unexpected-response', (_req, res) => {
        resolve(res.statusCode ?? 0);
        ws.terminate();
      });
      ws.once('open', () => {
        ws.terminate();
        reject(new Error(`${url} upgraded with ${protocols.join(',')}`));
      });
      ws.once('error', () => {});
    }),
    WAIT_MS,
    'upgrade answer',
  );
}
