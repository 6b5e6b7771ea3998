// Planted bugs of the bridge link (docs/guarantees.md "How we know"), each a copy of the compiled
// broker with a few lines replaced (jepsen-like-tests/mutants.ts buildPatched): the failover tests
// run them and require the loss or the duplicates to show, and test/bridge-mutants.test.ts checks
// in the quick layer that each still finds its text in the build.
import type { Patch } from '../../jepsen-like-tests/mutants.js';

/** The planted bug: the bridge acknowledges a QoS 1 message to the remote as it proposes it, not
 * when apply answers after the commit. */
const ACK_BEFORE_COMMIT: readonly Patch[] = [
  {
    file: 'src/server/bridge/bridge-link.js',
    find: "        this.host.propose({ t: 'bridge-in', bridge: name, conn: this.connId, ...(msg.qos === 0 ? {} : { pid: p.pid }), msg });\n",
    replace:
      "        this.host.propose({ t: 'bridge-in', bridge: name, conn: this.connId, ...(msg.qos === 0 ? {} : { pid: p.pid }), msg });\n        if (msg.qos === 1)\n            this.ackRemote(p.pid, 1);\n",
  },
  {
    file: 'src/server/bridge/bridge-link.js',
    find: '        this.received++;\n        this.ackRemote(packet.pid, 1);\n',
    replace: '        this.received++;\n',
  },
];

/** The planted bug: a QoS 1 message counts as completed at the remote once written to the socket,
 * so the position passes messages the remote never acknowledged. */
const POSITION_ON_WRITE: readonly Patch[] = [
  {
    file: 'src/server/bridge/bridge-link.js',
    find: '            this.inflight.set(packet.pid, entry);\n            if (qos === 2)\n                this.inflight2++;\n            s.write(bytes);\n',
    replace:
      '            s.write(bytes, (err) => {\n                if (err == null && s === this.socket)\n                    this.complete(entry, true);\n            });\n',
  },
];

/** The planted bug: PUBREL as the PUBREC arrives, before its record is committed. */
const PUBREL_BEFORE_RECORD: readonly Patch[] = [
  {
    file: 'src/server/bridge/bridge-link.js',
    find: "        entry.phase = 'rec';\n        this.queueRecord(entry.index, pid);\n",
    replace: "        entry.phase = 'rel';\n        this.writePubrel(pid);\n        this.queueRecord(entry.index, pid);\n",
  },
];

/** The planted bug: apply publishes a QoS 2 message from the remote again when the remote sends it
 * again under an id held (its PUBREC was lost), instead of only answering. */
const IGNORES_HELD_IDS: readonly Patch[] = [
  {
    file: 'src/broker/broker.js',
    find: 'if (cmd.q2 === true && bridge.inIds.has(cmd.pid)) {',
    replace: 'if (false && bridge.inIds.has(cmd.pid)) {',
  },
];

/** Every bridge mutant by name. */
export const BRIDGE_MUTANTS = {
  'bridge-in-ack-before-commit': ACK_BEFORE_COMMIT,
  'bridge-position-on-write': POSITION_ON_WRITE,
  'pubrel-before-record': PUBREL_BEFORE_RECORD,
  'bridge-in-ignores-held-ids': IGNORES_HELD_IDS,
} as const satisfies Record<string, readonly Patch[]>;
