// The status page in headless Chromium (docs/operations.md "Status page"): a real three-node
// cluster, the leader's page shows the three nodes and the leader, a live trace follows a publish
// made with MQTT.js from read to acknowledgement, and the page keeps working with a node down; a
// single node's page too. Screenshots go to a directory printed in the test log.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { BrokerProcess } from './broker-process.js';
import { connectClient, disconnect, publish, subscribe, type TestClient } from './helpers.js';
import { Cluster, type ClusterNode } from './support/cluster.js';

const CHROMIUM = '/usr/bin/chromium';
/** Every wait on the page is bounded by this (ms). */
const PAGE_WAIT_MS = 20_000;
const SHOTS = mkdtempSync(join(tmpdir(), 'raftmq-status-page-'));

async function launch(): Promise<{ context: BrowserContext; dispose: () => Promise<void> }> {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install the Debian package chromium`);
  const profile = mkdtempSync(join(tmpdir(), 'raftmq-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    timeout: PAGE_WAIT_MS,
  });
  return {
    context,
    dispose: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Opens a trace for `filter` on the page and waits until the stream is open. */
async function watch(page: Page, filter: string): Promise<void> {
  await page.fill('#filter', filter);
  await page.click('#watch');
  await page.waitForFunction(() => (document.getElementById('trace-state')?.textContent ?? '').startsWith('watching'), null, {
    timeout: PAGE_WAIT_MS,
  });
}

/** The cells of the trace row of `topic`, once its `until` cell is no longer pending. */
async function traceRow(page: Page, topic: string, until: string): Promise<Record<string, string>> {
  await page.waitForFunction(
    ([t, u]) =>
      [...document.querySelectorAll('#trace tbody tr')].some(
        (tr) => tr.querySelector('.topic')?.textContent === t && tr.querySelector(`td.${u}:not(.pending)`) !== null,
      ),
    [topic, until] as const,
    { timeout: PAGE_WAIT_MS },
  );
  return page.evaluate((t) => {
    const tr = [...document.querySelectorAll('#trace tbody tr')].find((r) => r.querySelector('.topic')?.textContent === t);
    const out: Record<string, string> = {};
    for (const td of tr?.querySelectorAll('td') ?? [])
      if (td.className !== '') out[td.className.split(' ')[0] as string] = td.textContent ?? '';
    return out;
  }, topic);
}

async function shot(page: Page, name: string): Promise<void> {
  const path = join(SHOTS, name);
  await page.screenshot({ path, fullPage: true });
  console.log(`status page screenshot: ${path}`);
}

describe('status page of a three-node cluster in Chromium', { timeout: 120_000 }, () => {
  let cluster: Cluster;
  let leader: ClusterNode;
  let browser: Awaited<ReturnType<typeof launch>>;
  let sub: TestClient;
  let pub: TestClient;

  before(async () => {
    cluster = await Cluster.start();
    leader = await cluster.serving(PAGE_WAIT_MS);
    browser = await launch();
  });
  after(async () => {
    await Promise.allSettled([sub && disconnect(sub), pub && disconnect(pub)]);
    await browser?.dispose();
    await cluster?.dispose();
  });

  it('shows three nodes and the leader, and traces a publish from read to acknowledgement', async () => {
    const page = await browser.context.newPage();
    await page.goto(`http://127.0.0.1:${leader.healthPort}/`, { timeout: PAGE_WAIT_MS });
    await page.waitForFunction(() => document.querySelectorAll('#nodes tbody tr').length === 3, null, { timeout: PAGE_WAIT_MS });
    const leaderRow = page.locator(`#nodes tbody tr[data-node="${leader.id}"]`);
    assert.equal(await leaderRow.getAttribute('class'), 'leader');
    assert.equal(await leaderRow.locator('.role').textContent(), 'leader');
    assert.match((await page.textContent('#summary-text')) ?? '', new RegExp(`leader ${leader.id} `));
    assert.equal(await page.textContent('#serving'), 'serving');
    // The leader replicates to both followers: their rows say so.
    for (const n of cluster.nodes.filter((x) => x !== leader)) {
      await page.waitForFunction((id) => document.querySelector(`#nodes tr[data-node="${id}"] .role`)?.textContent === 'follower', n.id, {
        timeout: PAGE_WAIT_MS,
      });
    }

    sub = await connectClient(leader.mqttPort, { clientId: 'page-sub' });
    await subscribe(sub, 'plant/#', 1);
    pub = await connectClient(leader.mqttPort, { clientId: 'page-pub' });
    await watch(page, 'plant/+/temp');
    await publish(pub, 'plant/7/temp', '21.5', { qos: 1 });
    const row = await traceRow(page, 'plant/7/temp', 'acked');
    assert.match(row.read ?? '', /^read /);
    assert.match(row.appended ?? '', /^appended at \d+ \(term \d+\)/);
    // A majority held the entry when it committed: the leader and at least one follower.
    const on = /committed on ([\d, ]+)/.exec(row.committed ?? '');
    assert.ok(on !== null, `committed cell: ${row.committed}`);
    const holders = (on[1] as string).split(', ').map(Number);
    assert.ok(holders.includes(leader.id) && holders.length >= 2, `stored on ${holders}`);
    assert.match(row.applied ?? '', /^applied \+\d+ ms/);
    assert.equal(row.delivered, 'delivered to 1 session');
    assert.match(row.acked ?? '', /^puback \+\d+ ms/);
    await shot(page, 'cluster-leader.png');
    await page.close();
  });

  it('keeps showing the cluster with a follower down', async () => {
    const follower = cluster.nodes.find((n) => n !== leader) as ClusterNode;
    await follower.stop();
    const page = await browser.context.newPage();
    await page.goto(`http://127.0.0.1:${leader.healthPort}/`, { timeout: PAGE_WAIT_MS });
    await page.waitForFunction(
      (id) => document.querySelector(`#nodes tr[data-node="${id}"] td:last-child`)?.textContent === 'down',
      follower.id,
      { timeout: PAGE_WAIT_MS },
    );
    assert.equal(await page.locator('#nodes tbody tr').count(), 3);
    // A peer whose link is down is not claimed to follow.
    assert.equal(await page.locator(`#nodes tr[data-node="${follower.id}"] .role`).textContent(), '?');
    await page.waitForFunction(
      (id) => (document.getElementById('events')?.textContent ?? '').includes(`link to node ${id} down`),
      follower.id,
      {
        timeout: PAGE_WAIT_MS,
      },
    );
    await shot(page, 'cluster-follower-down.png');
    await page.close();
  });
});

describe('status page of a single node in Chromium', { timeout: 60_000 }, () => {
  let broker: BrokerProcess;
  let healthPort = 0;
  let browser: Awaited<ReturnType<typeof launch>>;

  before(async () => {
    broker = await BrokerProcess.start(['--health-port', '0']);
    healthPort = (await broker.waitForLog((l) => l.msg === 'health listening')).port as number;
    browser = await launch();
  });
  after(async () => {
    await browser?.dispose();
    await broker?.stop();
  });

  it('shows the one node and traces a QoS 0 publish routed without the log', async () => {
    const page = await browser.context.newPage();
    await page.goto(`http://127.0.0.1:${healthPort}/`, { timeout: PAGE_WAIT_MS });
    await page.waitForFunction(() => (document.getElementById('title')?.textContent ?? '').includes('single node'), null, {
      timeout: PAGE_WAIT_MS,
    });
    assert.equal(await page.locator('#nodes tbody tr').count(), 1);
    const sub = await connectClient(broker.port, { clientId: 'single-sub' });
    const pub = await connectClient(broker.port, { clientId: 'single-pub' });
    try {
      await subscribe(sub, 'room/#', 0);
      await watch(page, 'room/#');
      await publish(pub, 'room/light', 'on', { qos: 0 });
      const row = await traceRow(page, 'room/light', 'delivered');
      assert.equal(row.appended, 'not logged (QoS 0)');
      assert.equal(row.delivered, 'delivered to 1 session');
      assert.equal(row.acked, 'no ack (QoS 0)');
      await publish(pub, 'room/door', 'shut', { qos: 1 });
      const logged = await traceRow(page, 'room/door', 'acked');
      assert.match(logged.appended ?? '', /^appended at \d+/);
      assert.match(logged.acked ?? '', /^puback/);
      await shot(page, 'single-node.png');
    } finally {
      await disconnect(sub);
      await disconnect(pub);
      await page.close();
    }
  });

  it('shows why a trace filter is refused', async () => {
    const page = await browser.context.newPage();
    await page.goto(`http://127.0.0.1:${healthPort}/`, { timeout: PAGE_WAIT_MS });
    await page.fill('#filter', 'room/#/x');
    await page.click('#watch');
    await page.waitForFunction(() => (document.getElementById('trace-state')?.textContent ?? '').startsWith('400'), null, {
      timeout: PAGE_WAIT_MS,
    });
    assert.match((await page.textContent('#trace-state')) ?? '', /# not alone as the last level/);
    await page.close();
  });
});
