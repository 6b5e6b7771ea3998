// Writes the seed corpus, fuzz/corpus/<target>/NN.bin, from the fixtures the tests already hold.
// The files are kept in the repository; writeCorpus only remakes them.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { TO_SERVER_TYPES } from '../src/protocol/codec.testkit.js';
import { fixtures } from '../src/protocol/codec-fixtures.testkit.js';
import { CORPUS_DIR } from './harness.js';
import { snapshotCorpus } from './targets/broker-snapshot.js';
import { commandCorpus } from './targets/command-codec.js';
import { mqttNodeCorpus, wsCorpus } from './targets/node-sockets.js';
import { proxyCorpus } from './targets/proxy-protocol.js';
import { raftCorpus } from './targets/raft-frames.js';
import { stateFileCorpus } from './targets/state-file.js';
import { aclCorpus, configCorpus, passwordCorpus } from './targets/text-files.js';
import { walSegmentCorpus } from './targets/wal-segment.js';

const LEVEL_INDEX = { 3: 0, 4: 1, 5: 2 } as const;

/** Each codec fixture behind the options byte of the decoder that reads it (mqtt-decoder.ts). */
function mqttDecoder(): Uint8Array[] {
  return fixtures.map((f) => {
    const level = LEVEL_INDEX[f.level];
    let options: number;
    if (f.packet.type === 'connect') options = level;
    else if (f.toClient !== true && TO_SERVER_TYPES.has(f.packet.type)) options = 0x40 | level;
    else options = 0x80 | level;
    return new Uint8Array(Buffer.concat([Buffer.of(options), f.bytes]));
  });
}

export const CORPUS_MAKERS: Record<string, () => Uint8Array[]> = {
  'mqtt-decoder': mqttDecoder,
  'command-codec': commandCorpus,
  'broker-snapshot': snapshotCorpus,
  'config-file': configCorpus,
  'acl-file': aclCorpus,
  'password-file': passwordCorpus,
  'proxy-protocol': proxyCorpus,
  'ws-frames': wsCorpus,
  'mqtt-node': mqttNodeCorpus,
  'raft-frames': raftCorpus,
  'state-file': stateFileCorpus,
  'wal-segment': walSegmentCorpus,
};

export function writeCorpus(names: readonly string[] = Object.keys(CORPUS_MAKERS)): void {
  for (const name of names) {
    const make = CORPUS_MAKERS[name];
    if (make === undefined) continue;
    const dir = new URL(`${name}/`, CORPUS_DIR);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    make().forEach((bytes, i) => {
      writeFileSync(new URL(`${String(i).padStart(3, '0')}.bin`, dir), bytes);
    });
  }
}
