// The raft node program answers every proposal (raft/driver/node-app.ts): one its leader appended
// and then lost to a newer leader gets "err lost INDEX", even when the new leader's log never
// reaches that index. Three node processes: the leader is told its peers are at addresses where
// nothing listens, so it is cut off from them; it appends five proposals; the followers, hearing
// nothing, elect one of themselves, which commits one entry of the new term; then the old leader is
// given the right addresses again and learns the new leader's log. Before the node program read the
// driver's ticket at commit time and lost its waiters at the first entry of a newer term, the
// proposals beyond the new leader's last index were never answered.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, describe, it } from 'node:test';
import { agreedLeader, type RaftNodeProcess, startCluster, stopNodes } from './raft-node-process.js';
import { freePort, LOOPBACK } from './support/net.js';
import { sleep, until } from './support/wait.js';

const E = 300;
const WAIT_MS = 40 * E;
const PROPOSALS = 5;

describe('raft node program: proposals lost to a newer leader', { timeout: 60_000 }, () => {
  let nodes: RaftNodeProcess[] = [];
  after(() => stopNodes(nodes));

  it('answers each with err lost, also those beyond the new leader log', async () => {
    nodes = await startCluster(E);
    const leader = await until('an agreed leader', () => agreedLeader(nodes), WAIT_MS);
    const before = await leader.status();
    const followers = nodes.filter((n) => n !== leader);
    for (const f of followers) assert.equal(await leader.request(`peer ${f.id} ${LOOPBACK}:${await freePort()}`), 'ok');
    // On one connection, so the replies come back on it; the leader appends them and cannot commit.
    const replies: string[] = [];
    const socket = connect({ host: LOOPBACK, port: leader.clientPort });
    socket.setEncoding('utf8');
    let buf = '';
    socket.on('data', (chunk: string) => {
      buf += chunk;
      const lines = buf.split('\n');
      buf = lines.pop() ?? '';
      replies.push(...lines);
    });
    socket.on('error', () => {});
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(Array.from({ length: PROPOSALS }, (_, i) => `propose lost-${i}\n`).join(''));
    await until('the proposals appended', async () => (await leader.status()).lastIndex >= before.lastIndex + PROPOSALS, WAIT_MS);
    const next = await until('a new leader among the followers', () => agreedLeader(followers), WAIT_MS);
    assert.match(await next.request('propose after', WAIT_MS), /^ok \d+$/);
    // The old leader meets the others again and learns the new leader's log.
    for (const f of followers) assert.equal(await leader.request(`peer ${f.id} ${LOOPBACK}:${f.raftPort}`), 'ok');
    await until(`${PROPOSALS} replies`, () => replies.length >= PROPOSALS, WAIT_MS).catch((err: Error) => {
      throw new Error(`${err.message}; got: ${replies.join(' | ')}`);
    });
    socket.destroy();
    assert.equal(replies.length, PROPOSALS);
    for (const r of replies) assert.match(r, /^err lost \d+$/, 'lost to the newer leader, never ok');
    // The new leader's log holds none of them.
    await sleep(E);
    const texts = (await next.entries()).map(([, , t]) => t);
    assert.ok(!texts.some((t) => t?.startsWith('lost-')));
  });
});
