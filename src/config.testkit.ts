// Test helpers for the command line (src/config.ts); not part of the package.
import assert from 'node:assert/strict';
import { parseCli } from './config.js';
import { ConfigError } from './errors.js';

/** The ConfigError `argv` is refused with; fails the test when it is accepted. */
export function refusal(argv: string[]): ConfigError {
  try {
    parseCli(argv);
  } catch (err) {
    assert.ok(err instanceof ConfigError, `ConfigError expected, got ${String(err)}`);
    return err;
  }
  assert.fail(`${argv.join(' ')} was accepted`);
}
