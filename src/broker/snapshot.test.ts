import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Packr } from 'msgpackr';
import { Broker } from './broker.js';
import { SNAPSHOT_ERROR, SnapshotError } from './snapshot.js';

const packr = new Packr({ useRecords: false, mapsAsObjects: true });

describe('snapshot restore of hostile images (found by fuzz/targets/broker-snapshot.ts)', () => {
  it('refuses a version that is a map with a toString key with SnapshotError, not a TypeError', () => {
    // The root array's version field as {toString: 1}: String() of it threw in the refusal.
    const image = Buffer.from('9bde0001a8746f537472696e670106cb4278bcfe56832000019964ce001000000802c3ce001000001e00c0c00090909090', 'hex');
    for (const bytes of [image, packr.pack([{ toString: 1 }, 0, 0, 0, null, null, 0, [], [], [], []]), packr.pack([3n ** 40n])]) {
      assert.throws(
        () => new Broker().restore([bytes]),
        (e: unknown) =>
          e instanceof SnapshotError && e.code === SNAPSHOT_ERROR.CORRUPT && /^corrupt snapshot: (version of type|root)/.test(e.message),
      );
    }
    assert.throws(() => new Broker().restore([packr.pack([99, 0, 0, 0, null, null, 0, [], [], [], []])]), /corrupt snapshot: version 99/);
  });
});
