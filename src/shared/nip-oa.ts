// NIP-OA owner attestation: an `["auth", owner, conditions, sig]` tag by which an owner key
// vouches for an agent key (../shared/specs/nip-oa-owner-attestation-summary.md). The relay uses a valid tag
// on an agent's AUTH or kind 0 event as the proof of agent -> owner that NIP-AO frames require.
// Errors are plain reason strings: an invalid attestation proves nothing, but the event carrying
// it may still be a fine event, so the caller decides what (if anything) to reject.

import { schnorr } from '@noble/curves/secp256k1.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { err, ok, type Result } from './errors.js';
import { checkIdAndSignature, MAX_TIMESTAMP, type NostrEvent } from './event.js';
import { MAX_KIND } from './kinds.js';
import { bytesToHex, hexToBytes, isHex128, isHex64 } from './hex.js';
import type { SchnorrVerifier } from './verify.js';

export type Clause =
  | { readonly field: 'kind'; readonly op: '='; readonly value: number }
  | { readonly field: 'created_at'; readonly op: '<' | '>'; readonly value: number };

export type AuthTag = ['auth', string, string, string];

export interface Attestation {
  /** The owner's pubkey (hex). The event is still authored by `agent`. */
  owner: string;
  /** The event's pubkey. */
  agent: string;
  /** The conditions string, verbatim as signed. */
  conditions: string;
  clauses: Clause[];
}

const NO_ATTESTATION = 'no attestation';

const CANONICAL_UINT = /^(0|[1-9][0-9]*)$/;
const CLAUSE = /^(kind=|created_at<|created_at>)(.*)$/s;

const show = (s: string): string => JSON.stringify(s.length > 40 ? `${s.slice(0, 40)}…` : s);

/**
 * Clauses one conditions string may have. NIP-OA sets no bound; relays keep attestations, so
 * edgestr takes at most this many (an owner restricting an agent to a few kinds and a time window
 * needs far fewer; docs/PROTOCOL.md).
 */
export const MAX_CLAUSES = 32;

/**
 * Parses a conditions string: "" or at most MAX_CLAUSES clauses joined by "&", each `kind=<n>`
 * (0..65535), `created_at<<t>` or `created_at><t>` (0..4294967295), canonical decimal, no whitespace.
 */
export function parseConditions(s: string): Result<Clause[], string> {
  if (s === '') return ok([]);
  const clauses: Clause[] = [];
  const parts = s.split('&', MAX_CLAUSES + 1);
  if (parts.length > MAX_CLAUSES) return err(`more than ${MAX_CLAUSES} clauses`);
  for (const part of parts) {
    if (part === '') return err('empty clause (leading, trailing or doubled "&")');
    const m = CLAUSE.exec(part);
    if (!m) return err(`unsupported clause ${show(part)}`);
    const [, head, digits] = m as unknown as [string, string, string];
    if (!CANONICAL_UINT.test(digits)) return err(`malformed number in clause ${show(part)}`);
    const value = Number(digits);
    if (head === 'kind=') {
      if (value > MAX_KIND) return err(`kind out of range in clause ${show(part)}`);
      clauses.push({ field: 'kind', op: '=', value });
    } else {
      if (value > MAX_TIMESTAMP) return err(`timestamp out of range in clause ${show(part)}`);
      clauses.push({ field: 'created_at', op: head === 'created_at<' ? '<' : '>', value });
    }
  }
  return ok(clauses);
}

const formatClause = (c: Clause): string => `${c.field}${c.op}${c.value}`;

type TimeClause = Extract<Clause, { field: 'created_at' }>;

/** `created_at<T` ⇔ t < T; `created_at>T` ⇔ t > T (bounds are exclusive). */
const timeHolds = (c: TimeClause, t: number): boolean => (c.op === '<' ? t < c.value : t > c.value);

/**
 * Whether every `created_at` clause holds for time `t` (kind clauses are not looked at): how a relay
 * that keeps an attestation checks it later, against its own clock (NIP-OA leaves wall-clock
 * freshness to relays that need it) or against another event's created_at.
 */
export const timeClausesHold = (clauses: readonly Clause[], t: number): boolean =>
  clauses.every((c) => c.field === 'kind' || timeHolds(c, t));

/** Whether every clause holds for the event (bounds are exclusive); the error names the first failure. */
export function checkClauses(clauses: readonly Clause[], event: Pick<NostrEvent, 'kind' | 'created_at'>): Result<true, string> {
  for (const c of clauses) {
    const holds = c.field === 'kind' ? event.kind === c.value : timeHolds(c, event.created_at);
    if (!holds) {
      const actual = c.field === 'kind' ? `kind ${event.kind}` : `created_at ${event.created_at}`;
      return err(`condition ${formatClause(c)} does not hold for the event (${actual})`);
    }
  }
  return ok(true);
}

/** "nostr:agent-auth:" + agent pubkey + ":" + conditions (verbatim). */
export const attestationPreimage = (agentPubkey: string, conditions: string): string =>
  `nostr:agent-auth:${agentPubkey}:${conditions}`;

/** SHA-256 of the UTF-8 preimage: the 32-byte message the owner signs. */
export const attestationDigest = (agentPubkey: string, conditions: string): Uint8Array =>
  sha256(new TextEncoder().encode(attestationPreimage(agentPubkey, conditions)));

/** The owner's `auth` tag for an agent. Throws on programmer errors (bad key, bad conditions, self). */
export function signAttestation(ownerSk: Uint8Array | string, agentPubkey: string, conditions: string): AuthTag {
  const sk = typeof ownerSk === 'string' ? hexToBytes(ownerSk) : ownerSk;
  if (!isHex64(agentPubkey)) throw new Error('signAttestation: agent pubkey must be 64 lowercase hex characters');
  const parsed = parseConditions(conditions);
  if (!parsed.ok) throw new Error(`signAttestation: invalid conditions: ${parsed.error}`);
  const owner = bytesToHex(schnorr.getPublicKey(sk));
  if (owner === agentPubkey) throw new Error('signAttestation: an owner cannot attest its own key');
  const sig = bytesToHex(schnorr.sign(attestationDigest(agentPubkey, conditions), sk));
  return ['auth', owner, conditions, sig];
}

/**
 * Verifies the event's NIP-OA attestation, applying every validity rule: exactly one `auth` tag
 * (several count as none), 4 elements, lowercase hex owner and sig, well-formed conditions, no
 * self-attestation, the event's own id and signature, every clause holding for the event, and the
 * owner's signature over the preimage digest.
 */
export function verifyAttestation(event: NostrEvent, verifier: SchnorrVerifier): Result<Attestation, string> {
  const tags = event.tags.filter((t) => t[0] === 'auth');
  if (tags.length === 0) return err(NO_ATTESTATION);
  if (tags.length > 1) return err(`${NO_ATTESTATION}: more than one auth tag`);
  const shaped = checkAuthTagShape(tags[0]!, event.pubkey);
  if (!shaped.ok) return shaped;
  const self = checkIdAndSignature(event, verifier);
  if (!self.ok) return err(`invalid event: ${self.error.reason}`);
  const holds = checkClauses(shaped.value.clauses, event);
  if (!holds.ok) return holds;
  return checkOwnerSignature(shaped.value, verifier);
}

/**
 * Verifies an `auth` tag for `agentPubkey` on its own (shape, conditions, owner signature), for a
 * tag that will be carried by events of `kind` created at `created_at` (e.g. one about to be
 * published on the agent's kind 0). The carrying event's signature is not involved.
 */
export function verifyAuthTag(
  tag: readonly string[],
  agentPubkey: string,
  carrier: Pick<NostrEvent, 'kind' | 'created_at'>,
  verifier: SchnorrVerifier,
): Result<Attestation, string> {
  const shaped = checkAuthTagShape(tag, agentPubkey);
  if (!shaped.ok) return shaped;
  const holds = checkClauses(shaped.value.clauses, carrier);
  if (!holds.ok) return holds;
  return checkOwnerSignature(shaped.value, verifier);
}

type ShapedTag = Attestation & { sig: string };

function checkAuthTagShape(tag: readonly string[], agentPubkey: string): Result<ShapedTag, string> {
  if (tag.length !== 4) return err(`auth tag must have 4 elements (has ${tag.length})`);
  const [, owner, conditions, sig] = tag as AuthTag;
  if (!isHex64(owner)) return err('auth tag owner must be 64 lowercase hex characters');
  if (!isHex128(sig)) return err('auth tag signature must be 128 lowercase hex characters');
  const clauses = parseConditions(conditions);
  if (!clauses.ok) return err(`invalid conditions: ${clauses.error}`);
  if (owner === agentPubkey) return err('self-attestation: owner is the event author');
  return ok({ owner, agent: agentPubkey, conditions, clauses: clauses.value, sig });
}

function checkOwnerSignature(t: ShapedTag, verifier: SchnorrVerifier): Result<Attestation, string> {
  if (!verifier.verify(hexToBytes(t.sig), attestationDigest(t.agent, t.conditions), hexToBytes(t.owner))) {
    return err('attestation signature verification failed');
  }
  return ok({ owner: t.owner, agent: t.agent, conditions: t.conditions, clauses: t.clauses });
}
