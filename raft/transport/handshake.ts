// The first frames of every link, in both directions (docs/design.md "Links", docs/design.md "Identity").
//
//   each side:  hello {clusterId, epoch, nodeId, incarnation, nonce?, clusterUid?}
//   with a cluster secret, each side, on the other's hello:
//               proof {mac = HMAC-SHA256(secret, other's nonce || bytes of own hello body)}
//
// The MAC covers the exact hello bytes that were sent, so no re-encoding can make two sides
// disagree about what was signed, and it binds the sender's identity to the receiver's fresh
// nonce. A side that reflects a hello back cannot pass: the acceptor refuses a hello with its own
// node id, and each nonce is drawn per link.
//
// clusterUid, the cluster identity made at bootstrap, is sent only by a node that knows one: a
// hello without it is the hello of older versions, which ignore the field when they read it.
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { LinkCloseCode } from './errors.js';

export const NONCE_BYTES = 32;
export const MAC_BYTES = 32;
/** Frames before the handshake completes are small; an unauthenticated peer may not make us buffer
 * a full-size frame. */
export const HANDSHAKE_FRAME_BYTES_MAX = 64 * 1024;

export type Incarnation = string | number;

export interface LocalIdentity {
  clusterId: string;
  epoch: unknown;
  nodeId: number;
  incarnation: Incarnation;
  /** The cluster identity; '' or absent: not known (a fresh node, or one of a cluster formed before
   * identities existed). */
  clusterUid?: string;
}

/** A cluster identity is 32 hex digits; anything longer in a hello is refused as invalid. */
export const CLUSTER_UID_CHARS_MAX = 64;

export type HandshakeFrame =
  | { t: 'hello'; clusterId: string; epoch: unknown; nodeId: number; incarnation: Incarnation; nonce?: Uint8Array; clusterUid?: string }
  | { t: 'proof'; mac: Uint8Array };

export type Hello = Extract<HandshakeFrame, { t: 'hello' }>;

export function makeHello(local: LocalIdentity, nonce: Uint8Array | undefined): Hello {
  const hello: Hello = {
    t: 'hello',
    clusterId: local.clusterId,
    epoch: local.epoch,
    nodeId: local.nodeId,
    incarnation: local.incarnation,
  };
  if (nonce !== undefined) hello.nonce = nonce;
  if (local.clusterUid !== undefined && local.clusterUid !== '') hello.clusterUid = local.clusterUid;
  return hello;
}

/** Checks the shape of a decoded handshake frame; undefined when it is neither hello nor proof. */
export function parseHandshakeFrame(value: unknown): HandshakeFrame | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const v = value as Record<string, unknown>;
  if (v.t === 'proof') {
    return v.mac instanceof Uint8Array && v.mac.length === MAC_BYTES ? { t: 'proof', mac: v.mac } : undefined;
  }
  if (v.t !== 'hello') return undefined;
  if (typeof v.clusterId !== 'string' || !('epoch' in v)) return undefined;
  if (!Number.isSafeInteger(v.nodeId) || !isIncarnation(v.incarnation)) return undefined;
  if (v.nonce !== undefined && !(v.nonce instanceof Uint8Array && v.nonce.length === NONCE_BYTES)) return undefined;
  const uid = v.clusterUid;
  if (uid !== undefined && !(typeof uid === 'string' && uid !== '' && uid.length <= CLUSTER_UID_CHARS_MAX)) return undefined;
  const local: LocalIdentity = { clusterId: v.clusterId, epoch: v.epoch, nodeId: v.nodeId as number, incarnation: v.incarnation };
  if (uid !== undefined) local.clusterUid = uid;
  const hello = makeHello(local, v.nonce as Uint8Array | undefined);
  return hello;
}

function isIncarnation(x: unknown): x is Incarnation {
  return typeof x === 'string' || Number.isSafeInteger(x);
}

export interface HelloExpectations {
  local: LocalIdentity;
  /** True for the node id this link may carry: the dialed peer, or any configured peer inbound. */
  expectNode: (nodeId: number) => boolean;
  epochAccepts: (local: unknown, remote: unknown) => boolean;
  hasSecret: boolean;
}

/** Judges a peer's hello; a close code and a reason when the link must end. */
export function judgeHello(hello: Hello, x: HelloExpectations): { code: LinkCloseCode; detail: string } | undefined {
  if (hello.clusterId !== x.local.clusterId) {
    return { code: 'cluster-mismatch', detail: `peer cluster id ${JSON.stringify(hello.clusterId)}` };
  }
  if (!x.expectNode(hello.nodeId)) {
    return { code: 'node-unexpected', detail: `peer says it is node ${hello.nodeId}` };
  }
  // Both know a cluster identity and they differ: the same --cluster-id, another cluster (a node
  // that resumed a state file of that cluster). Where either knows none, the link is made and the
  // one without learns it from peers of its epoch.
  const mine = x.local.clusterUid ?? '';
  if (mine !== '' && hello.clusterUid !== undefined && hello.clusterUid !== mine) {
    return {
      code: 'identity-mismatch',
      detail: `peer node ${hello.nodeId} is of cluster identity ${hello.clusterUid}, this node of ${mine}`,
    };
  }
  if (!epochAcceptsSafely(x, hello.epoch)) return { code: 'epoch-refused', detail: 'peer epoch refused' };
  if (x.hasSecret && hello.nonce === undefined) {
    return { code: 'auth-missing', detail: 'peer sent no challenge: is its cluster secret set?' };
  }
  if (!x.hasSecret && hello.nonce !== undefined) {
    return { code: 'auth-unexpected', detail: 'peer sent a challenge but this node has no cluster secret' };
  }
  return undefined;
}

function epochAcceptsSafely(x: HelloExpectations, remote: unknown): boolean {
  try {
    return x.epochAccepts(x.local.epoch, remote) === true;
  } catch {
    return false; // the remote value is untrusted; a comparison that chokes on it refuses it
  }
}

export function proofMac(secret: Uint8Array | string, nonce: Uint8Array, helloBody: Uint8Array): Buffer {
  return createHmac('sha256', secret).update(nonce).update(helloBody).digest();
}

export function proofMatches(expected: Buffer, received: Uint8Array): boolean {
  return received.length === expected.length && timingSafeEqual(expected, received);
}
