/** Identity and configuration (docs/design.md "Identity", docs/design.md "Configuration"). A member is a node id
 * plus an incarnation, drawn at every start that does not resume a state file: a process that
 * forgot its term, vote and log comes back as another member, so "one vote per term" (§5.2) holds
 * per member without a disk. */
export interface Member {
  readonly node: number;
  /** Random id of one process lifetime (or of a chain of lifetimes joined by state files). */
  readonly inc: string;
}

/** A cluster generation, made at bootstrap and at every force-start. `generation` 0 with id '' is
 * "no epoch yet" (a fresh or amnesiac node before it joins one). */
export interface Epoch {
  readonly generation: number;
  readonly id: string;
}

export const noEpoch: Epoch = { generation: 0, id: '' };

/** What a node knows of itself at start (docs/design.md "Fresh, amnesiac, bootstrap"): `fresh` has no
 * membership record, `amnesiac` has one but no resumable state file, `member` resumed a state file
 * (or was given a static configuration). */
export type Membership = 'fresh' | 'amnesiac' | 'member';
export const membershipKinds: readonly Membership[] = ['fresh', 'amnesiac', 'member'];

/** A configuration lists voters only, at most one member per node id. */
export type Configuration = readonly Member[];

export function sameMember(a: Member, b: Member): boolean {
  return a.node === b.node && a.inc === b.inc;
}

export function sameEpoch(a: Epoch, b: Epoch): boolean {
  return a.generation === b.generation && a.id === b.id;
}

export function hasMember(config: Configuration, node: number, inc: string): boolean {
  for (const m of config) if (m.node === node && m.inc === inc) return true;
  return false;
}

export function memberOf(config: Configuration, node: number): Member | undefined {
  for (const m of config) if (m.node === node) return m;
  return undefined;
}

export function quorumOf(config: Configuration): number {
  return Math.floor(config.length / 2) + 1;
}

/** True when every majority of `a` meets every majority of `b` (thesis §4.1: single-server
 * changes guarantee it). A majority of `a` must contain at least q(a) − |a \ b| members of a ∩ b,
 * and likewise for `b`; two such sets are forced to meet iff together they exceed |a ∩ b|. */
export function majoritiesOverlap(a: Configuration, b: Configuration): boolean {
  let common = 0;
  for (const m of a) if (hasMember(b, m.node, m.inc)) common++;
  const fromA = quorumOf(a) - (a.length - common);
  const fromB = quorumOf(b) - (b.length - common);
  return fromA > 0 && fromB > 0 && fromA + fromB > common;
}

export function formatConfig(config: Configuration): string {
  return config.map((m) => `${m.node}${m.inc === '0' ? '' : `.${m.inc}`}`).join(',');
}
