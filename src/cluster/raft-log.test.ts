// The serving rule of RaftLog (docs/design.md "One server at a time"), driven by hand through a fake
// driver: role, term, lease and commits are set by the test, so each condition can be taken away
// alone. The real driver over TCP runs the BrokerLog contract in test/cluster-raft-log.slow.test.ts.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { LogEntry } from '../../raft/core/messages.js';
import type { Role } from '../../raft/core/raft.js';
import type { ProposeTicket } from '../../raft/driver/driver.js';
import { Broker } from '../broker/broker.js';
import type { Command, Effect, Entry } from '../broker/commands.js';
import { contractSettings } from '../log/broker-log.contract.js';
import type { LogListener } from '../log/broker-log.js';
import { decodeCommand, encodeCommand } from '../log/command-codec.js';
import { type ClusterDriver, type DriverHooks, type MembershipStatus, RaftLog, type RaftLogOptions } from './raft-log.js';

class FakeDriver implements ClusterDriver {
  role: Role = 'follower';
  term = 1;
  lease = false;
  /** Cluster time the fake core stamps on what it appends. */
  time = 1_000;
  log: LogEntry[] = [];
  committed = 0;
  hooks: DriverHooks;
  constructor(hooks: DriverHooks) {
    this.hooks = hooks;
  }
  async start(): Promise<void> {}
  async stop(): Promise<void> {
    this.stoppedAfter = [...this.transfers];
  }
  halted = false;
  halt(): void {
    this.halted = true;
    this.stoppedAfter ??= [...this.transfers];
  }
  /** The target of a transfer takes over; false: it never does (it is stopped, or partitioned). */
  transfersSucceed = true;
  propose(data: Uint8Array): ProposeTicket | Error {
    if (this.role !== 'leader') return Object.assign(new Error('not leader'), { code: 'RAFT_NOT_LEADER' });
    const index = this.log.length + 1;
    this.log.push({ index, term: this.term, time: this.time, data });
    return { index, term: this.term };
  }
  get accepting(): boolean {
    return true;
  }
  get currentRole(): Role {
    return this.role;
  }
  get currentTerm(): number {
    return this.term;
  }
  get leader(): number {
    return this.role === 'leader' ? 1 : 2;
  }
  get commitIndex(): number {
    return this.committed;
  }
  get lastIndex(): number {
    return this.log.length;
  }
  get appliedIndex(): number {
    return this.committed;
  }
  hasLease(): boolean {
    return this.lease;
  }
  leaseUntil(): number {
    return this.lease ? 1_000 : 0;
  }
  leaseRemainingMs(): number {
    return this.lease ? 100 : 0;
  }
  clusterTime(): number | null {
    return this.time;
  }
  /** Targets of transferLeadership, in order; `stopped` records when stop() came. */
  transfers: number[] = [];
  stoppedAfter: number[] | null = null;
  matches = new Map<number, number>();
  lastContactAgoMs(): number | null {
    return null;
  }
  clockOffsets(): Map<number, number> {
    return new Map();
  }
  transferLeadership(to: number): Error | null {
    this.transfers.push(to);
    // The target wins its election a little later.
    setTimeout(() => {
      if (!this.transfersSucceed) return;
      this.role = 'follower';
      this.term++;
    }, 20);
    return null;
  }
  /** The fake core's cluster time follows the clocks unless a test says otherwise. */
  timeReady = true;
  clusterTimeReady(): boolean {
    return this.role === 'leader' && this.timeReady;
  }
  matchIndex(peer: number): number | undefined {
    return this.role === 'leader' ? (this.matches.get(peer) ?? this.committed) : undefined;
  }
  /** Every peer answers at once unless a test says otherwise. */
  lastContact(): number | undefined {
    return performance.now();
  }
  on(): unknown {
    return this;
  }
  membership: MembershipStatus = {
    membership: 'member',
    epoch: { generation: 1, id: 'e1' },
    voter: true,
    redundant: true,
    needsForceStart: false,
    forceStart: null,
    excludedClocks: [],
    clusterUid: '9a1f',
    outOfMembership: null,
  };
  excludedClocks(): number[] {
    return this.membership.excludedClocks;
  }
  status(): MembershipStatus {
    return this.membership;
  }
  stateFileWrites = 0;
  writeStateFile(): string | null {
    this.stateFileWrites++;
    return null;
  }
  /** Becomes leader of a new term and appends the empty entry of §8. */
  lead(term: number): void {
    this.role = 'leader';
    this.term = term;
    this.log.push({ index: this.log.length + 1, term, time: this.time, data: null });
    this.hooks.onStateChange({ role: 'leader', term, leader: 1, commit: this.committed });
  }
  /** Commits everything appended. */
  commitAll(): void {
    const from = this.committed;
    this.committed = this.log.length;
    if (this.committed > from) this.hooks.onCommitted(this.log.slice(from));
  }
  commandAt(index: number): Command | null {
    const data = this.log[index - 1]?.data;
    return data == null ? null : decodeCommand(data);
  }
}

class Listener implements LogListener {
  entries: Entry[] = [];
  servingCalls: [boolean, number][] = [];
  committed(entries: readonly Entry[]): void {
    this.entries.push(...entries);
  }
  serving(on: boolean, period: number): void {
    this.servingCalls.push([on, period]);
  }
  drain(): void {}
}

const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

/** For tests that never compact: a snapshot request or install would be a failure of the test. */
const unusedSnapshots = {
  snapshot: (): Iterable<Uint8Array> => assert.fail('no snapshot expected'),
  restore: (): void => assert.fail('no restore expected'),
  reset: (): void => assert.fail('no reset expected'),
};

/** A listener that applies what it is given to a real Broker, as BrokerNode does. */
class ApplyingListener extends Listener {
  readonly broker = new Broker();
  override committed(entries: readonly Entry[]): void {
    super.committed(entries);
    const out: Effect[] = [];
    for (const e of entries) this.broker.apply(e, out);
  }
}

/** A RaftLog over a FakeDriver with the tests' defaults; `over` adds or replaces options. */
function fakeLog(over: Partial<Omit<RaftLogOptions, 'driver'>> = {}): { log: RaftLog; driver: FakeDriver } {
  let driver: FakeDriver | undefined;
  const log = new RaftLog({
    node: 1,
    nodes: [1, 2, 3],
    settings: contractSettings,
    logger: { info() {}, warn() {}, error() {} },
    pollIntervalMs: 1_000_000,
    ...over,
    driver: (hooks) => {
      driver = new FakeDriver(hooks);
      return driver;
    },
  });
  return { log, driver: driver! };
}

async function setup(): Promise<{ log: RaftLog; driver: FakeDriver; listener: Listener }> {
  const { log, driver } = fakeLog({ handoverTimeoutMs: 5_000 });
  const listener = new Listener();
  await log.open();
  log.start(listener);
  await turn();
  return { log, driver, listener };
}

/** Leads term `term`, commits the serve-start it proposes, and grants the lease. */
async function serve(d: FakeDriver, term: number): Promise<void> {
  d.lead(term);
  d.lease = true;
  d.commitAll();
  await turn();
}

describe('RaftLog serving rule', { timeout: 10_000 }, () => {
  it('serves only once leader, own-term entry applied, serve-start committed and lease all hold', async () => {
    const { log, driver, listener } = await setup();
    try {
      driver.lead(2);
      const start = driver.commandAt(driver.lastIndex);
      assert.equal(start?.t, 'serve-start', 'a new leader proposes serve-start at once');
      assert.equal(log.serving, false, 'not before serve-start commits');
      driver.commitAll();
      assert.equal(log.serving, false, 'not without a lease');
      assert.deepEqual(listener.servingCalls, []);
      driver.lease = true;
      driver.hooks.onStateChange({ role: 'leader', term: 2, leader: 1, commit: driver.committed });
      assert.equal(log.serving, true);
      assert.deepEqual(listener.servingCalls, [[true, 2]], 'the period is the serve-start index');
      assert.equal(log.servePeriod, 2);
    } finally {
      await log.stop();
    }
  });

  it('carries the epoch generation in serve-start, so apply sees the first serve-start of a forced epoch', async () => {
    const { log, driver } = await setup();
    try {
      driver.membership = { ...driver.membership, epoch: { generation: 3, id: 'e3' } };
      driver.lead(2);
      const start = driver.commandAt(driver.lastIndex);
      assert.equal(start?.t === 'serve-start' ? start.generation : undefined, 3);
    } finally {
      await log.stop();
    }
  });

  it('stops serving when the lease lapses, and serves again only under a new serve-start', async () => {
    const { log, driver, listener } = await setup();
    try {
      await serve(driver, 2);
      assert.deepEqual(listener.servingCalls, [[true, 2]]);
      driver.lease = false;
      assert.equal(log.checkServing(), false, 'the check sees the lapse at once (each accept and write)');
      await turn();
      assert.deepEqual(listener.servingCalls.at(-1), [false, 0], 'and the listener hears of it in a turn of its own');
      assert.equal(driver.commandAt(driver.lastIndex)?.t, 'serve-start', 'a fresh serve-start is proposed');
      const next = driver.lastIndex;
      driver.lease = true;
      driver.commitAll();
      assert.deepEqual(listener.servingCalls.at(-1), [true, next], 'the new period is the new serve-start');
    } finally {
      await log.stop();
    }
  });

  it('reads serving as a plain query: only checkServing ends a lapsed period', async () => {
    // The getter is judged live but schedules nothing; the end of the period is checkServing's.
    const { log, driver, listener } = await setup();
    try {
      await serve(driver, 2);
      driver.lease = false;
      assert.equal(log.serving, false, 'the getter sees the lapse at once');
      await turn();
      assert.deepEqual(listener.servingCalls, [[true, 2]], 'reading the getter ends nothing');
      assert.equal(log.checkServing(), false);
      await turn();
      assert.deepEqual(listener.servingCalls.at(-1), [false, 0], 'the check ends the period in a turn of its own');
    } finally {
      await log.stop();
    }
  });

  it('stops serving when a higher term appears', async () => {
    const { log, driver, listener } = await setup();
    try {
      await serve(driver, 2);
      driver.role = 'follower';
      driver.term = 3;
      driver.hooks.onStateChange({ role: 'follower', term: 3, leader: 2, commit: driver.committed });
      assert.deepEqual(listener.servingCalls, [
        [true, 2],
        [false, 0],
      ]);
      assert.equal(log.serving, false);
      log.propose({ t: 'tick' });
      await turn();
      assert.equal(driver.lastIndex, 2, 'proposals while not serving are dropped');
    } finally {
      await log.stop();
    }
  });

  it('does not serve on a ticket whose index holds another entry, and proposes serve-start again', async () => {
    const errors: string[] = [];
    const { log, driver } = fakeLog({ logger: { info() {}, warn() {}, error: (_f: object, msg: string) => void errors.push(msg) } });
    const listener = new Listener();
    await log.open();
    log.start(listener);
    await turn();
    try {
      // A driver that names the index a proposal would have had, while an entry of its own (a
      // configuration change) went in first.
      const propose = driver.propose.bind(driver);
      driver.propose = (data) => {
        const named = driver.log.length + 1;
        driver.log.push({ index: named, term: driver.term, time: driver.time, data: null });
        const t = propose(data);
        driver.propose = propose;
        return t instanceof Error ? t : { index: named, term: t.term };
      };
      driver.lead(2);
      driver.lease = true;
      driver.commitAll();
      await turn();
      assert.deepEqual(listener.servingCalls, [], 'not serving under a period that names the wrong entry');
      assert.deepEqual(errors, ['serve-start ticket holds another entry']);
      assert.equal(driver.commandAt(driver.lastIndex)?.t, 'serve-start', 'a new serve-start is proposed');
      driver.commitAll();
      await turn();
      assert.deepEqual(listener.servingCalls, [[true, driver.lastIndex]], 'the period is the index of a serve-start');
    } finally {
      await log.stop();
    }
  });

  it('does not serve on a serve-start of an earlier term', async () => {
    const { log, driver, listener } = await setup();
    try {
      driver.lead(2);
      driver.lease = true;
      // Leadership moves before the serve-start commits; the node leads again in term 4.
      driver.role = 'follower';
      driver.term = 3;
      driver.hooks.onStateChange({ role: 'follower', term: 3, leader: 2, commit: 0 });
      driver.commitAll();
      assert.deepEqual(listener.servingCalls, []);
      driver.lead(4);
      assert.equal(log.serving, false);
      driver.commitAll();
      assert.deepEqual(listener.servingCalls, [[true, driver.lastIndex]]);
      assert.equal(driver.log[driver.lastIndex - 1]?.term, 4);
    } finally {
      await log.stop();
    }
  });

  it('hands decoded commands in log order with the time raft stamped, skipping the empty entry', async () => {
    const { log, driver, listener } = await setup();
    try {
      driver.time = 5_000;
      await serve(driver, 2);
      log.propose({ t: 'tick' });
      log.propose({ t: 'pubrel', conn: '2.1', pid: 7 });
      driver.time = 4_000; // a stamp behind the previous one still never moves apply's time back
      log.propose({ t: 'tick' });
      assert.equal(listener.entries.length, 1, 'nothing is committed inside propose');
      driver.commitAll();
      assert.deepEqual(
        listener.entries.map((e) => [e.index, e.cmd.t, e.time]),
        [
          [2, 'serve-start', 5_000],
          [3, 'tick', 5_000],
          [4, 'pubrel', 5_000],
          [5, 'tick', 5_000],
        ],
        'the empty entry of the new leader (index 1) carries no command and is skipped',
      );
      assert.ok(log.now() >= 5_000, 'now() is not behind the last entry');
    } finally {
      await log.stop();
    }
  });

  it('delivers entries committed before start() first, and serves only after the listener has them', async () => {
    // A node may lead and commit its serve-start before the broker calls start(); entries that
    // commit between start() and the delivery of those early ones must queue behind them.
    const { log, driver } = fakeLog();
    await log.open();
    const d = driver!;
    d.lead(1);
    d.lease = true;
    d.commitAll(); // the serve-start commits with no listener yet
    const listener = new Listener();
    log.start(listener);
    d.role = 'leader';
    d.log.push({ index: d.log.length + 1, term: 1, time: d.time, data: null });
    d.commitAll(); // commits in the same turn as start(), before the early entries are delivered
    assert.deepEqual(listener.servingCalls, [], 'not serving before the listener has seen serve-start');
    await turn();
    const start = listener.entries.findIndex((e) => e.cmd.t === 'serve-start');
    assert.ok(start >= 0, 'the serve-start was delivered');
    assert.deepEqual(listener.servingCalls, [[true, listener.entries[start]!.index]]);
    const indexes = listener.entries.map((e) => e.index);
    assert.deepEqual(
      indexes,
      [...indexes].sort((a, b) => a - b),
      'entries in log order',
    );
    await log.stop();
  });

  it('stops serving when the state machine reports a failure, and says so in status', async () => {
    const { log, driver, listener } = await setup();
    let failure: string | null = null;
    log.attach({ lastCheck: () => null, failure: () => failure, ...unusedSnapshots });
    try {
      await serve(driver, 2);
      assert.equal(log.status().serving, true);
      failure = 'digest mismatch at 40';
      assert.equal(log.checkServing(), false);
      await turn();
      assert.deepEqual(listener.servingCalls.at(-1), [false, 0]);
      const s = log.status();
      assert.equal(s.serving, false);
      assert.equal(s.failure, 'digest mismatch at 40');
      const before = driver.lastIndex;
      driver.hooks.onStateChange({ role: 'leader', term: 2, leader: 1, commit: driver.committed });
      assert.equal(driver.lastIndex, before, 'a failed node proposes no new serve-start');
    } finally {
      await log.stop();
    }
  });

  it('proposes a check carrying the digest of the previous check once enough entries committed', async () => {
    const { log, driver } = fakeLog({ check: { entriesMax: 3, intervalMs: 1_000_000 } });
    const listener = new Listener();
    let last: { index: number; digest: string } | null = null;
    log.attach({ lastCheck: () => last, failure: () => null, ...unusedSnapshots });
    await log.open();
    log.start(listener);
    await turn();
    try {
      await serve(driver!, 2);
      for (let i = 0; i < 3; i++) log.propose({ t: 'tick' });
      await turn();
      driver!.commitAll();
      await turn();
      const first = driver!.commandAt(driver!.lastIndex);
      assert.deepEqual(first, { t: 'check', atIndex: 0, digest: '' }, 'the first check only records');
      last = { index: driver!.lastIndex, digest: 'abc' };
      driver!.commitAll();
      for (let i = 0; i < 3; i++) log.propose({ t: 'tick' });
      await turn();
      driver!.commitAll();
      await turn();
      assert.deepEqual(driver!.commandAt(driver!.lastIndex), { t: 'check', atIndex: last.index, digest: 'abc' });
    } finally {
      await log.stop();
    }
  });

  it("proposes serve-start only once the leader's cluster time follows the voters' clocks", async () => {
    // A bootstrapped leader stamps time 0 until two clocks agree, then jumps (docs/raft.md); a
    // serving period must not straddle that jump, or apply would see time leap mid-period.
    const { log, driver } = fakeLog({ pollIntervalMs: 1 });
    const listener = new Listener();
    await log.open();
    log.start(listener);
    await turn();
    const d = driver!;
    try {
      d.timeReady = false;
      d.time = 0;
      d.lead(1);
      d.lease = true;
      d.commitAll();
      for (let i = 0; i < 5; i++) await new Promise((r) => setTimeout(r, 2));
      assert.equal(d.lastIndex, 1, 'no serve-start while time runs from the log alone');
      assert.deepEqual(listener.servingCalls, []);
      d.timeReady = true;
      d.time = 1_700_000_000_000;
      for (let i = 0; i < 500 && d.commandAt(d.lastIndex)?.t !== 'serve-start'; i++) await new Promise((r) => setTimeout(r, 2));
      assert.equal(d.commandAt(d.lastIndex)?.t, 'serve-start', 'proposed by the poll once time is ready');
      d.commitAll();
      assert.deepEqual(listener.servingCalls, [[true, d.lastIndex]]);
      assert.equal(listener.entries[0]?.time, 1_700_000_000_000, 'the period starts on clock-following time');
    } finally {
      await log.stop();
    }
  });

  it("reports configMatchesServing by comparing its own hash with the serving leader's serve-start", async () => {
    const { log, driver } = fakeLog({ configHashOf: () => 'aaaa' });
    await log.open();
    log.start(new Listener());
    await turn();
    const d = driver!;
    try {
      assert.equal(log.status().configMatchesServing, true, 'nothing applied yet: nothing differs');
      await serve(d, 2);
      const start = d.commandAt(d.lastIndex);
      assert.equal(start?.t === 'serve-start' ? start.configHash : undefined, 'aaaa', "the serve-start carries this node's hash");
      assert.equal(log.status().configMatchesServing, true);
      // Node 2 takes over with other files; this node, now a follower, applies its serve-start.
      d.role = 'follower';
      d.term = 3;
      d.hooks.onStateChange({ role: 'follower', term: 3, leader: 2, commit: d.committed });
      const other = encodeCommand({ t: 'serve-start', node: 2, settings: contractSettings, configHash: 'bbbb' });
      d.log.push({ index: d.log.length + 1, term: 3, time: d.time, data: other });
      d.commitAll();
      assert.equal(log.status().configMatchesServing, false, 'a node whose configuration differs says so');
    } finally {
      await log.stop();
    }
  });

  it('carries reloaded settings and their hash in settings commands and in its next serve-start', async () => {
    // A SIGHUP reload (an ACL file, a password file) must reach every replica now, and a later
    // serving period of this node must not go back to the settings it started with.
    let files = 'v1';
    const { log, driver } = fakeLog({ configHashOf: (s) => `${files}:${s.willGraceS}` });
    await log.open();
    log.start(new Listener());
    await turn();
    const d = driver!;
    try {
      await serve(d, 2);
      files = 'v2';
      const reloaded = { ...contractSettings, willGraceS: 99 };
      log.updateSettings(reloaded);
      log.propose({ t: 'settings', settings: reloaded });
      const proposed = d.commandAt(d.lastIndex);
      assert.equal(proposed?.t, 'settings');
      assert.equal(proposed?.t === 'settings' ? proposed.configHash : undefined, 'v2:99', 'the settings command carries the new hash');
      d.commitAll();
      assert.equal(log.status().configMatchesServing, true);
      // Leadership moves away and comes back: the new serving period starts with the reloaded settings.
      d.role = 'follower';
      d.lease = false;
      d.hooks.onStateChange({ role: 'follower', term: 3, leader: 2, commit: d.committed });
      await serve(d, 4);
      const start = [...d.log]
        .reverse()
        .map((e) => (e.data === null ? null : decodeCommand(e.data)))
        .find((c) => c?.t === 'serve-start');
      assert.equal(start?.t === 'serve-start' ? start.settings.willGraceS : undefined, 99);
      assert.equal(start?.t === 'serve-start' ? start.configHash : undefined, 'v2:99');
    } finally {
      await log.stop();
    }
  });

  it('hands raft the broker state for compaction, and installs a snapshot from the leader into it', async () => {
    const { log, driver } = fakeLog();
    const listener = new ApplyingListener();
    log.attach({
      lastCheck: () => null,
      failure: () => null,
      snapshot: () => listener.broker.snapshot(),
      restore: (c) => listener.broker.restore(c),
      reset: () => assert.fail('no reset expected'),
    });
    await log.open();
    const d = driver!;
    assert.throws(() => d.hooks.snapshotSource(), /not applied/, 'no snapshot before the broker has the delivered entries');
    log.start(listener);
    await turn();
    try {
      await serve(d, 2);
      log.propose({
        t: 'connect',
        conn: `${log.servePeriod}.1`,
        clientId: 'keeper',
        protocol: 4,
        clean: false,
        expiryS: 0xffffffff,
        will: null,
        username: null,
        receiveMax: 65535,
        maxPacketSize: 0,
        problemInfo: true,
      });
      log.propose({
        t: 'subscribe',
        conn: `${log.servePeriod}.1`,
        pid: 1,
        subs: [{ filter: 'k/#', qos: 1, nl: false, rap: false, rh: 0 }],
      });
      d.commitAll();
      const chunks = [...(d.hooks.snapshotSource() ?? assert.fail('the broker cursor is free'))];
      const copy = new Broker();
      copy.restore(chunks);
      assert.equal(copy.digest(), listener.broker.digest(), 'the snapshot is the broker state at the last delivered entry');

      // A follower that fell behind gets the leader's snapshot: its broker becomes the leader's.
      const follower = new ApplyingListener();
      const sourceBytes = chunks.reduce((n, c) => n + c.length, 0);
      log.attach({
        lastCheck: () => null,
        failure: () => null,
        snapshot: () => follower.broker.snapshot(),
        restore: (c) => follower.broker.restore(c),
        reset: () => assert.fail('no reset expected'),
      });
      d.hooks.onSnapshot({ index: d.lastIndex, term: 2, time: d.time, config: null, chunks, bytes: sourceBytes });
      assert.equal(follower.broker.digest(), listener.broker.digest());
    } finally {
      await log.stop();
    }
  });

  it('stop() on a leader hands leadership to the most caught-up peer before raft traffic stops', async () => {
    // docs/design.md "State file": stop serving, hand over leadership if leading, stop raft traffic.
    const { log, driver, listener } = await setup();
    await serve(driver, 2);
    driver.matches.set(2, 1);
    driver.matches.set(3, 2);
    await log.stop();
    assert.deepEqual(driver.transfers, [3], 'to node 3, which holds more of the log');
    assert.deepEqual(driver.stoppedAfter, [3], 'the driver stopped only after the transfer');
    assert.equal(driver.role, 'follower', 'and after the target took over');
    assert.equal(log.serving, false);
    assert.deepEqual(listener.servingCalls, [[true, 2]], 'the broker had stopped serving itself; no call after stop');
  });

  it('stop() on a follower stops raft at once, with no handover', async () => {
    const { log, driver } = await setup();
    await log.stop();
    assert.deepEqual(driver.transfers, []);
    assert.deepEqual(driver.stoppedAfter, []);
  });

  it('reports redundant only on a leader whose peers hold the commit index', async () => {
    const { log, driver } = await setup();
    try {
      assert.equal(log.status().redundant, false, 'a follower does not know');
      await serve(driver, 2);
      const s = log.status();
      assert.equal(s.redundant, true);
      assert.equal(s.role, 'leader');
      assert.equal(s.needsForceStart, false);
      assert.equal(s.membership, 'member');
      assert.deepEqual(s.epoch, { generation: 1, id: 'e1' });
      driver.membership = { ...driver.membership, redundant: false };
      assert.equal(log.status().redundant, false, 'raft says a voter is missing or behind');
    } finally {
      await log.stop();
    }
  });

  it('reports what raft says of membership and a needed force-start', async () => {
    const { log, driver } = await setup();
    try {
      driver.membership = {
        membership: 'amnesiac',
        epoch: { generation: 0, id: '' },
        voter: false,
        redundant: false,
        needsForceStart: true,
        forceStart: null,
        excludedClocks: [],
        clusterUid: '',
        outOfMembership: { forMs: 5000, peers: { '1': 'RAFT_OTHER_MEMBER: append from 1 for incarnation x of node 2' } },
      };
      const s = log.status();
      assert.equal(s.membership, 'amnesiac');
      assert.equal(s.epoch, null, 'no epoch joined yet');
      assert.equal(s.voter, false);
      assert.equal(s.needsForceStart, true);
      assert.equal(s.serving, false);
      assert.equal(s.clusterUid, null, 'no cluster identity known');
      assert.deepEqual(s.outOfMembership?.peers, { '1': 'RAFT_OTHER_MEMBER: append from 1 for incarnation x of node 2' });
    } finally {
      await log.stop();
    }
  });

  it('reports a voter clock left out of cluster time once when it leaves and once when it is back', async () => {
    const lines: { level: string; msg: string; fields: Record<string, unknown> }[] = [];
    const logger = {
      info: (fields: Record<string, unknown>, msg: string) => lines.push({ level: 'info', msg, fields }),
      warn: (fields: Record<string, unknown>, msg: string) => lines.push({ level: 'warn', msg, fields }),
      error: (fields: Record<string, unknown>, msg: string) => lines.push({ level: 'error', msg, fields }),
    };
    const { log, driver } = fakeLog({ pollIntervalMs: 2, logger });
    await log.open();
    log.start(new Listener());
    try {
      await serve(driver, 2);
      driver.membership = { ...driver.membership, excludedClocks: [3] };
      const clockLines = () => lines.filter((l) => l.msg.includes('clock'));
      const deadline = Date.now() + 5_000;
      while (clockLines().length < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
      await new Promise((r) => setTimeout(r, 20));
      assert.equal(clockLines().length, 1, 'one line while the set stays the same');
      assert.equal(clockLines()[0]?.level, 'warn');
      assert.deepEqual(clockLines()[0]?.fields.excluded, [3]);
      assert.deepEqual(log.status().excludedClocks, [3], '/health shows it');
      driver.membership = { ...driver.membership, excludedClocks: [] };
      while (clockLines().length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
      assert.equal(clockLines()[1]?.level, 'info', 'and says when every clock is back');
    } finally {
      await log.stop();
    }
  });

  it('writes the state file last: after the handover and after raft traffic stopped', async () => {
    const { log, driver } = await setup();
    await serve(driver, 2);
    let writesAtStop = -1;
    const stop = driver.stop.bind(driver);
    driver.stop = async () => {
      writesAtStop = driver.stateFileWrites;
      await stop();
    };
    await log.stop();
    assert.equal(writesAtStop, 0, 'no file before raft stopped');
    assert.equal(driver.stateFileWrites, 1);
    assert.deepEqual(driver.stoppedAfter, [2], 'the handover came first');
  });

  it('stopNow() during a handover that never ends: skips it, writes the state file once, now', async () => {
    const logged: { msg: string; reason?: unknown }[] = [];
    const note = (fields: Record<string, unknown>, msg: string) => logged.push({ msg, reason: fields.reason });
    const { log, driver } = fakeLog({ handoverTimeoutMs: 60_000, logger: { info: note, warn: note, error: note } });
    await log.open();
    log.start(new Listener());
    await turn();
    await serve(driver, 2);
    driver.transfersSucceed = false;
    const stopping = log.stop();
    await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(driver.transfers, [2], 'the handover began');
    assert.equal(driver.stateFileWrites, 0, 'and is waited for');
    log.stopNow();
    assert.equal(driver.halted, true, 'raft traffic stopped');
    assert.equal(driver.stateFileWrites, 1, 'the file is written in the same turn');
    await stopping;
    assert.equal(driver.stateFileWrites, 1, 'and only once');
    assert.ok(logged.some((l) => l.msg === 'leadership handover skipped' && l.reason === 'stop timed out'));
    assert.equal(
      logged.some((l) => l.msg === 'leadership handover timed out'),
      false,
    );
  });

  it('stopNow() after a finished stop writes nothing more', async () => {
    const { log, driver } = await setup();
    await log.stop();
    log.stopNow();
    assert.equal(driver.stateFileWrites, 1);
  });

  it('keeps serving-rule checks quiet when a leader may not propose yet (a force-started one)', async () => {
    const { log, driver, listener } = await setup();
    try {
      let refused = 0;
      driver.propose = () => {
        refused++;
        return Object.assign(new Error('not serving'), { code: 'RAFT_NOT_SERVING' });
      };
      driver.lead(2);
      driver.lease = true;
      await turn();
      assert.ok(refused >= 1 && refused < 10, `serve-start asked for a bounded number of times (${refused}), not in a loop`);
      assert.deepEqual(listener.servingCalls, []);
    } finally {
      await log.stop();
    }
  });

  it('drops the broker state and starts over when raft joins a newer epoch', async () => {
    const { log, driver } = fakeLog();
    const listener = new ApplyingListener();
    let resets = 0;
    log.attach({
      lastCheck: () => null,
      failure: () => null,
      snapshot: () => listener.broker.snapshot(),
      restore: (c) => listener.broker.restore(c),
      reset: () => {
        resets++;
        listener.broker.restore(new Broker().snapshot());
      },
    });
    await log.open();
    log.start(listener);
    await turn();
    try {
      await serve(driver, 2);
      log.propose({
        t: 'connect',
        conn: `${log.servePeriod}.1`,
        clientId: 'old-epoch',
        protocol: 4,
        clean: false,
        expiryS: 0xffffffff,
        will: null,
        username: null,
        receiveMax: 65535,
        maxPacketSize: 0,
        problemInfo: true,
      });
      driver.commitAll();
      assert.notEqual(listener.broker.digest(), new Broker().digest());
      driver.role = 'follower';
      driver.lease = false;
      driver.hooks.onStateChange({ role: 'follower', term: 2, leader: 2, commit: driver.committed });
      driver.hooks.onReset();
      assert.equal(resets, 1);
      assert.equal(listener.broker.digest(), new Broker().digest(), "the old epoch's state is gone");
      // The new epoch's log starts at index 1 with its own (earlier) times.
      const from = listener.entries.length;
      driver.hooks.onCommitted([{ index: 1, term: 1, time: 5, data: encodeCommand({ t: 'check', atIndex: 0, digest: '' }) }]);
      assert.equal(listener.entries[from]?.time, 5, "time starts over with the new epoch's log");
    } finally {
      await log.stop();
    }
  });
});
