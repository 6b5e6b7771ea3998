// Planted bugs for the fault harness (docs/guarantees.md "How we know"): each is a copy of the
// compiled broker with a few lines replaced, built under build/mutants/NAME/ from build/, which the
// package never ships (package.json "files" names build/src and build/raft only) and the test runner
// never lists. A replacement whose text is not found exactly once fails the build naming the mutant
// and the file, so a change to the code cannot leave a mutant silently unplanted.
import { cpSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface Patch {
  /** Path under build/, e.g. src/server/connection.js. */
  readonly file: string;
  readonly find: string;
  readonly replace: string;
}

export interface Mutant {
  /** The safety rule it breaks, and the checker expected to catch it. */
  readonly breaks: string;
  readonly patches: readonly Patch[];
}

export const JEPSEN_MUTANTS = {
  'ack-before-commit': {
    breaks: 'a QoS 1 PUBACK leaves only after its publish is committed (checker: lost)',
    patches: [
      {
        file: 'src/server/inbound-publish.js',
        find: "    const cmd = { t: 'publish', conn: conn.id, msg };\n    if (p.qos > 0)\n        cmd.pid = p.pid;\n    conn.proposePublish(cmd);\n",
        replace:
          "    const cmd = { t: 'publish', conn: conn.id, msg };\n    if (p.qos > 0)\n        cmd.pid = p.pid;\n    conn.proposePublish(cmd);\n    if (p.qos === 1)\n        conn.deliver({ type: 'puback', pid: p.pid, code: 0 });\n",
      },
    ],
  },
  'drop-delivery': {
    breaks: 'every QoS 1 delivery is written to its subscriber (checker: lost)',
    patches: [
      {
        file: 'src/server/connection-output.js',
        find: '            conn.host.traffic.publishOut[p.qos]++;\n',
        replace:
          '            if (p.qos === 1 && Math.random() < 0.02)\n                return;\n            conn.host.traffic.publishOut[p.qos]++;\n',
      },
    ],
  },
  'no-lease': {
    breaks: 'a node serves only while it holds a lease (checkers: two-servers-seen, lease-overlap, write-outside-lease)',
    patches: [
      {
        file: 'src/cluster/serving-rule.js',
        find: "    if (!f.hasLease)\n        return 'lease lapsed';\n",
        replace: '',
      },
    ],
  },
} as const satisfies Record<string, Mutant>;

export type JepsenMutant = keyof typeof JEPSEN_MUTANTS;

export function isJepsenMutant(name: string): name is JepsenMutant {
  return Object.hasOwn(JEPSEN_MUTANTS, name);
}

/** Copies build/src and build/raft into build/mutants/NAME/ and applies the mutant's patches;
 * returns the path of its CLI. Throws when a patch's text is not found exactly once. */
export function buildMutant(name: JepsenMutant, buildDir: string): string {
  return buildPatched(name, JEPSEN_MUTANTS[name].patches, buildDir);
}

/** Builds a copy of the broker under build/mutants/NAME/ with `patches` applied, as buildMutant
 * does, for planted bugs that other tests than the harness catch; returns the copy's CLI. */
export function buildPatched(name: string, patches: readonly Patch[], buildDir: string): string {
  const out = join(buildDir, 'mutants', name);
  rmSync(out, { recursive: true, force: true });
  for (const part of ['src', 'raft']) {
    cpSync(join(buildDir, part), join(out, part), {
      recursive: true,
      filter: (p) => !p.endsWith('.test.js') && !p.endsWith('.map'),
    });
  }
  // src/run-node.js reads ../../package.json (its version): build/mutants/package.json, which also
  // makes the copies ES modules as the originals are.
  cpSync(join(buildDir, '..', 'package.json'), join(buildDir, 'mutants', 'package.json'));
  for (const p of patches) {
    const path = join(out, p.file);
    if (!existsSync(path)) throw new Error(`mutant ${name}: ${p.file} is not in the build`);
    const text = readFileSync(path, 'utf8');
    const first = text.indexOf(p.find);
    if (first < 0 || text.indexOf(p.find, first + 1) >= 0) {
      throw new Error(`mutant ${name}: the text to replace in ${p.file} is ${first < 0 ? 'not there' : 'there more than once'}`);
    }
    writeFileSync(path, text.slice(0, first) + p.replace + text.slice(first + p.find.length));
  }
  return join(out, 'src', 'cli.js');
}
