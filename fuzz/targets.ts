// Every fuzz target, in the order npm test and npm run fuzz run them.
import type { FuzzTarget } from './harness.js';
import { brokerSnapshot } from './targets/broker-snapshot.js';
import { commandCodec } from './targets/command-codec.js';
import { mqttDecoder } from './targets/mqtt-decoder.js';
import { mqttNode, wsFrames } from './targets/node-sockets.js';
import { proxyProtocol } from './targets/proxy-protocol.js';
import { raftFrames } from './targets/raft-frames.js';
import { stateFile } from './targets/state-file.js';
import { aclFile, configFile, passwordFile } from './targets/text-files.js';
import { walSegment } from './targets/wal-segment.js';

export function allTargets(): FuzzTarget[] {
  return [
    mqttDecoder,
    commandCodec,
    brokerSnapshot,
    raftFrames,
    stateFile,
    walSegment,
    configFile,
    aclFile,
    passwordFile,
    proxyProtocol,
    wsFrames,
    mqttNode,
  ];
}
