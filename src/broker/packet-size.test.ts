import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import mqttPacket from 'mqtt-packet';
import type { QoS } from '../protocol/packets.js';
import type { Message } from './commands.js';
import { publishPacketSize } from './packet-size.js';

// publishPacketSize decides drops for the client's Maximum Packet Size, so it must agree with a
// real encoder: mqtt-packet is the oracle.

function encodedSize(protocol: 4 | 5, m: Message, qos: QoS, expiryS: number | undefined, subIds: number[] | null): number {
  const properties: Record<string, unknown> = {};
  const p = m.props ?? {};
  if (p.payloadFormat !== undefined) properties.payloadFormatIndicator = p.payloadFormat === 1;
  if (expiryS !== undefined) properties.messageExpiryInterval = expiryS;
  if (p.contentType !== undefined) properties.contentType = p.contentType;
  if (p.responseTopic !== undefined) properties.responseTopic = p.responseTopic;
  if (p.correlationData !== undefined) properties.correlationData = Buffer.from(p.correlationData);
  if (p.userProps !== undefined && p.userProps.length > 0) {
    // mqtt-packet groups user properties by key; keep keys distinct so the byte count matches.
    properties.userProperties = Object.fromEntries(p.userProps);
  }
  if (subIds !== null && subIds.length > 0) properties.subscriptionIdentifier = subIds.length === 1 ? subIds[0] : subIds;
  const packet = {
    cmd: 'publish' as const,
    topic: m.topic,
    payload: Buffer.from(m.payload),
    qos,
    retain: false,
    dup: false,
    ...(qos > 0 ? { messageId: 1 } : {}),
    ...(protocol === 5 ? { properties } : {}),
  };
  return mqttPacket.generate(packet as never, { protocolVersion: protocol }).length;
}

describe('publishPacketSize', { timeout: 30_000 }, () => {
  it('equals the size mqtt-packet encodes, for 3.1.1 and 5.0 with every property', () => {
    const word = fc.string({ minLength: 1, maxLength: 20 }).filter((s) => !s.includes('\u0000') && !/[+#]/.test(s));
    const props = fc.record(
      {
        payloadFormat: fc.constantFrom(0 as const, 1 as const),
        contentType: word,
        responseTopic: word,
        correlationData: fc.uint8Array({ maxLength: 30 }),
        userProps: fc.uniqueArray(fc.tuple(word, word), { maxLength: 3, selector: (kv) => kv[0] }),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(
        fc.constantFrom(4 as const, 5 as const),
        word,
        fc.integer({ min: 0, max: 20_000 }),
        fc.constantFrom(0 as const, 1 as const, 2 as const),
        props,
        fc.option(fc.integer({ min: 1, max: 100_000 }), { nil: undefined }),
        fc.option(fc.array(fc.integer({ min: 1, max: 268_435_455 }), { minLength: 1, maxLength: 3 }), { nil: null }),
        (protocol, topic, payloadLen, qos, p, expiryS, subIds) => {
          const m: Message = { topic, payload: new Uint8Array(payloadLen), qos, retain: false, props: p };
          const ours = publishPacketSize(protocol, m, qos, protocol === 5 ? expiryS : undefined, protocol === 5 ? subIds : null);
          assert.equal(ours, encodedSize(protocol, m, qos, protocol === 5 ? expiryS : undefined, protocol === 5 ? subIds : null));
        },
      ),
      { numRuns: 300 },
    );
  });
});
