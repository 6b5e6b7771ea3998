import { RaftError } from '../errors.js';
import { TestCluster } from './test-cluster.js';

/** Scenario scripts in the style of etcd-io/raft's testdata: each block is one command, a line
 * `----`, and the output it must print; blocks are separated by a blank line, `#` starts a comment.
 * Commands: campaign N | propose N DATA... | partition 1|2,3 | heal | stabilize | tick MS (one tick
 * of every node) | run MS (10 ms ticks, stabilizing after each) |
 * crash N | restart N | status. Nodes 1, 2, 3; E = 100 ms; the harness PRNG is seeded with 1. */
export interface ScenarioBlock {
  readonly command: string;
  readonly expected: string;
}

export function parseScenario(text: string): ScenarioBlock[] {
  const blocks: ScenarioBlock[] = [];
  const lines = text.split('\n');
  let k = 0;
  while (k < lines.length) {
    const line = (lines[k] ?? '').trim();
    k++;
    if (line === '' || line.startsWith('#')) continue;
    if ((lines[k] ?? '').trim() !== '----') throw bad(`line ${k}: "${line}" must be followed by ----`);
    k++;
    const out: string[] = [];
    while (k < lines.length && (lines[k] ?? '') !== '') out.push(lines[k++] ?? '');
    blocks.push({ command: line, expected: out.join('\n') });
  }
  return blocks;
}

/** Runs every block against one fresh cluster; returns the actual output of each. */
export function runScenario(blocks: readonly ScenarioBlock[]): string[] {
  // Small snapshot bounds, so that a script shows a compaction and a transfer in a few lines.
  const cluster = new TestCluster({ electionTimeoutMs: 100, seed: 1, node: { logEntriesMax: 2, snapshotChunkBytesMax: 4 } });
  cluster.drainOutput();
  return blocks.map((b) => {
    const printed = runCommand(cluster, b.command);
    const out = [...cluster.drainOutput(), ...printed];
    return out.length === 0 ? 'ok' : out.join('\n');
  });
}

/** Formats blocks with the given outputs: the rewrite mode writes this back to the file. */
export function formatScenario(blocks: readonly ScenarioBlock[], outputs: readonly string[]): string {
  return `${blocks.map((b, k) => `${b.command}\n----\n${outputs[k] ?? ''}`).join('\n\n')}\n`;
}

function runCommand(c: TestCluster, command: string): string[] {
  const [verb, ...args] = command.split(/\s+/);
  const enc = new TextEncoder();
  switch (verb) {
    case 'campaign':
      c.node(nodeId(args[0])).campaign();
      return [];
    case 'propose': {
      const r = c.node(nodeId(args[0])).propose(args.slice(1).map((a) => enc.encode(a)));
      return [r.ok ? `proposed ${r.firstIndex}..${r.lastIndex}` : `refused ${r.error.code} leader=${r.leader}`];
    }
    case 'partition':
      c.partition((args[0] ?? '').split('|').map((g) => g.split(',').map(nodeId)));
      return [];
    case 'heal':
      c.heal();
      return [];
    case 'stabilize':
      c.stabilize();
      return [];
    case 'tick':
      c.tick(count(args[0]));
      return [];
    case 'run':
      c.run(count(args[0]));
      return [];
    case 'crash':
      c.crash(nodeId(args[0]));
      return [];
    case 'restart':
      c.restart(nodeId(args[0]));
      return [];
    case 'compact': {
      // The application's state is the rest of the line; the snapshot is at the applied index.
      const n = c.node(nodeId(args[0]));
      const error = n.compact(n.appliedIndex, [enc.encode(args.slice(1).join(' '))]);
      return [error === null ? `compacted to ${n.appliedIndex}, log from ${n.firstIndex}` : `refused ${error.code}`];
    }
    case 'status':
      return c.status();
    default:
      throw bad(`unknown command "${command}"`);
  }
}

function nodeId(arg: string | undefined): number {
  const n = Number(arg);
  if (![1, 2, 3].includes(n)) throw bad(`node id must be 1, 2 or 3, got "${arg}"`);
  return n;
}

function count(arg: string | undefined): number {
  const n = Number(arg);
  if (!Number.isSafeInteger(n) || n <= 0) throw bad(`expected a positive integer, got "${arg}"`);
  return n;
}

function bad(detail: string): RaftError {
  return new RaftError('RAFT_SCENARIO_BAD_COMMAND', detail);
}
