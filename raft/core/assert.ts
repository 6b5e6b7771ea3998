import { RaftError } from '../errors.js';

/** Assertions stay on in production (TigerBeetle style): a broken invariant in the core is a bug
 * that must stop this node before it spreads a wrong log, never be papered over. */
export function assert(condition: boolean, what: string): asserts condition {
  if (!condition) throw new RaftError('RAFT_INVARIANT', what);
}

export function assertInteger(value: number, what: string): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new RaftError('RAFT_INVARIANT', `${what} must be a non-negative integer, got ${value}`);
  }
}

export function unreachable(value: never, what: string): never {
  throw new RaftError('RAFT_INVARIANT', `${what}: unexpected ${JSON.stringify(value)}`);
}
