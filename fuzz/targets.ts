// Every fuzz target, in the order npm test and npm run fuzz run them.
import type { FuzzTarget } from './harness.js';
import { mqttDecoder } from './targets/mqtt-decoder.js';

export function allTargets(): FuzzTarget[] {
  return [mqttDecoder];
}
