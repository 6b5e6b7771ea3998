import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Packr } from 'msgpackr';
import { RaftError } from '../errors.js';
import { validateMessage } from './validate.js';

const ctx = { self: 1, nodes: [1, 2, 3], entriesPerAppendMax: 8 };
const packr = new Packr({ useRecords: false, mapsAsObjects: true });
const base = { from: 2, to: 1, term: 3, cluster: 'c', epoch: 1, epochId: 'e', fromInc: 'i2', toInc: 'i1' };

describe('validateMessage on values no string can be made of (found by fuzz/targets/raft-frames.ts)', () => {
  it('refuses a type or an entry index that is a map with a toString key, with a RaftError', () => {
    // msgpackr decodes {toString: 1} to an object whose toString is 1: String() of it threw a
    // TypeError, where the link wanted RAFT_BAD_MESSAGE.
    const odd = packr.unpack(packr.pack({ toString: 1 }));
    const type = validateMessage(packr.unpack(packr.pack({ ...base, type: odd })), ctx);
    assert.ok(type instanceof RaftError);
    assert.equal(type.code, 'RAFT_BAD_MESSAGE');
    assert.match(type.message, /unknown type of type object/);
    const append = { ...base, type: 'append', prevIndex: 0, prevTerm: 0, commit: 0, sentAt: 1 };
    const entries = [{ index: odd, term: 3, time: 1, data: null }];
    const index = validateMessage(packr.unpack(packr.pack({ ...append, entries })), ctx);
    assert.ok(index instanceof RaftError);
    assert.equal(index.code, 'RAFT_BAD_MESSAGE');
    assert.match(index.message, /entry index of type object out of sequence/);
    assert.match(validateMessage({ ...base, type: 'nope' }, ctx)?.message ?? '', /unknown type nope/);
  });
});
