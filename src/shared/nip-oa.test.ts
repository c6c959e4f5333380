import { describe, expect, it } from 'vitest';
import { schnorr } from '@noble/curves/secp256k1.js';
import { finalizeEvent } from 'nostr-tools/pure';
import { parseEvent, type NostrEvent, type Tag } from './event.js';
import { bytesToHex, hexToBytes } from './hex.js';
import {
  attestationDigest,
  attestationPreimage,
  checkClauses,
  MAX_CLAUSES,
  parseConditions,
  signAttestation,
  timeClausesHold,
  verifyAttestation,
} from './nip-oa.js';
import { nobleVerifier } from './verify.js';

// Test vector from ../shared/specs/nip-oa-owner-attestation-summary.md.
const OWNER_SK = '0000000000000000000000000000000000000000000000000000000000000001';
const OWNER_PK = '79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798';
const AGENT_SK = '0000000000000000000000000000000000000000000000000000000000000002';
const AGENT_PK = 'c6047f9441ed7d6d3045406e95c07cd85c778e4b8cef3ca7abac09b95c709ee5';
const CONDITIONS = 'kind=1&created_at<1713957000';
const PREIMAGE =
  'nostr:agent-auth:c6047f9441ed7d6d3045406e95c07cd85c778e4b8cef3ca7abac09b95c709ee5:kind=1&created_at<1713957000';
const DIGEST = '08cdecd55af4c28d3801fd69615dcf5cc04fab3bc134b38a840bf157197069a6';
const AUTH_SIG =
  '8b7df2575caf0a108374f8471722b233c53f9ff827a8b0f91861966c3b9dd5cb2e189eae9f49d72187674c2f5bd244145e10ff86c9f257ffe65a1ee5f108b369';
const EXAMPLE = {
  id: 'd892a65e7677e0554ebb70ee16deeb6a0727dba46450fb4bc001291d7bff971b',
  pubkey: AGENT_PK,
  created_at: 1713956400,
  kind: 1,
  tags: [['auth', OWNER_PK, CONDITIONS, AUTH_SIG]],
  content: 'owner-attested agent event',
  sig: '7fd38992b70b5e9e113644e51b4c8ee2227f3bdd402b1855f8786c0600394ab3ec2621742a7bad0b0000b93d4d1ae6e39525f286a3c1029f43f46c3359a6c76f',
};

function parsed(input: unknown): NostrEvent {
  const p = parseEvent(input);
  if (!p.ok) throw new Error(p.error.reason);
  return p.value;
}

/** An event signed by `sk` (the agent by default) with the given tags. */
const agentEvent = (tags: Tag[], over: { kind?: number; created_at?: number; sk?: string } = {}) =>
  parsed(finalizeEvent({ kind: over.kind ?? 1, created_at: over.created_at ?? 1713956400, tags, content: 'x' }, hexToBytes(over.sk ?? AGENT_SK)));

/** A raw owner signature over any conditions string (even malformed), to isolate each rule. */
const rawTag = (conditions: string, agent = AGENT_PK, ownerSk = OWNER_SK): Tag => [
  'auth',
  bytesToHex(schnorr.getPublicKey(hexToBytes(ownerSk))),
  conditions,
  bytesToHex(schnorr.sign(attestationDigest(agent, conditions), hexToBytes(ownerSk))),
];

const verify = (e: NostrEvent) => {
  const r = verifyAttestation(e, nobleVerifier);
  return r.ok ? `owner ${r.value.owner}` : r.error;
};

describe('NIP-OA spec vector', () => {
  it('preimage and sha256', () => {
    expect(attestationPreimage(AGENT_PK, CONDITIONS)).toBe(PREIMAGE);
    expect(bytesToHex(attestationDigest(AGENT_PK, CONDITIONS))).toBe(DIGEST);
    expect(bytesToHex(schnorr.getPublicKey(hexToBytes(OWNER_SK)))).toBe(OWNER_PK);
    expect(bytesToHex(schnorr.getPublicKey(hexToBytes(AGENT_SK)))).toBe(AGENT_PK);
  });

  it('auth_sig verifies under the owner key (and not under the agent key)', () => {
    expect(nobleVerifier.verify(hexToBytes(AUTH_SIG), hexToBytes(DIGEST), hexToBytes(OWNER_PK))).toBe(true);
    expect(nobleVerifier.verify(hexToBytes(AUTH_SIG), hexToBytes(DIGEST), hexToBytes(AGENT_PK))).toBe(false);
  });

  it('the signed example event carries a valid attestation', () => {
    const r = verifyAttestation(parsed(EXAMPLE), nobleVerifier);
    expect(r).toEqual({
      ok: true,
      value: {
        owner: OWNER_PK,
        agent: AGENT_PK,
        conditions: CONDITIONS,
        clauses: [
          { field: 'kind', op: '=', value: 1 },
          { field: 'created_at', op: '<', value: 1713957000 },
        ],
      },
    });
  });

  it('signAttestation produces a tag that verifies', () => {
    const tag = signAttestation(OWNER_SK, AGENT_PK, CONDITIONS);
    expect(tag.slice(0, 3)).toEqual(['auth', OWNER_PK, CONDITIONS]);
    expect(nobleVerifier.verify(hexToBytes(tag[3]), hexToBytes(DIGEST), hexToBytes(OWNER_PK))).toBe(true);
    expect(verify(agentEvent([tag]))).toBe(`owner ${OWNER_PK}`);
    expect(verify(agentEvent([signAttestation(hexToBytes(OWNER_SK), AGENT_PK, '')], { kind: 0 }))).toBe(`owner ${OWNER_PK}`);
    expect(() => signAttestation(OWNER_SK, AGENT_PK, 'kind=1&')).toThrow(/invalid conditions/);
    expect(() => signAttestation(OWNER_SK, OWNER_PK, '')).toThrow(/own key/);
  });
});

describe('NIP-OA must be rejected', () => {
  it('no auth tag, or two auth tags (treated as none)', () => {
    expect(verify(agentEvent([]))).toBe('no attestation');
    const t = rawTag(CONDITIONS);
    expect(verify(agentEvent([t, t]))).toBe('no attestation: more than one auth tag');
    expect(verify(agentEvent([t, rawTag('')]))).toBe('no attestation: more than one auth tag');
  });

  it('3 or 5 elements', () => {
    const t = rawTag(CONDITIONS);
    expect(verify(agentEvent([t.slice(0, 3)]))).toBe('auth tag must have 4 elements (has 3)');
    expect(verify(agentEvent([[...t, 'extra']]))).toBe('auth tag must have 4 elements (has 5)');
  });

  it('bad hex in owner or sig', () => {
    const [, owner, cond, sig] = rawTag(CONDITIONS) as [string, string, string, string];
    expect(verify(agentEvent([['auth', owner.toUpperCase(), cond, sig]]))).toBe('auth tag owner must be 64 lowercase hex characters');
    expect(verify(agentEvent([['auth', owner.slice(2), cond, sig]]))).toBe('auth tag owner must be 64 lowercase hex characters');
    expect(verify(agentEvent([['auth', owner, cond, sig.slice(1) + 'g']]))).toBe('auth tag signature must be 128 lowercase hex characters');
  });

  it('malformed conditions, even when validly signed', () => {
    const cases: Array<[string, string]> = [
      ['kind=1&', 'invalid conditions: empty clause (leading, trailing or doubled "&")'],
      ['&kind=1', 'invalid conditions: empty clause (leading, trailing or doubled "&")'],
      ['kind=1&&created_at<1713957000', 'invalid conditions: empty clause (leading, trailing or doubled "&")'],
      ['kind=01', 'invalid conditions: malformed number in clause "kind=01"'],
      ['kind= 1', 'invalid conditions: malformed number in clause "kind= 1"'],
      [' kind=1', 'invalid conditions: unsupported clause " kind=1"'],
      ['kind=1 ', 'invalid conditions: malformed number in clause "kind=1 "'],
      ['pubkey=abc', 'invalid conditions: unsupported clause "pubkey=abc"'],
      ['created_at<=5', 'invalid conditions: malformed number in clause "created_at<=5"'],
      ['kind=65536', 'invalid conditions: kind out of range in clause "kind=65536"'],
    ];
    for (const [conditions, reason] of cases) expect(verify(agentEvent([rawTag(conditions)])), conditions).toBe(reason);
  });

  it('self-attestation (owner == event.pubkey)', () => {
    expect(verify(agentEvent([rawTag('', AGENT_PK, AGENT_SK)]))).toBe('self-attestation: owner is the event author');
  });

  it('a well-formed tag on an event whose id or sig is invalid', () => {
    expect(verify(parsed({ ...EXAMPLE, content: 'tampered' }))).toBe('invalid event: event id does not match the event hash');
    const badSig = EXAMPLE.sig.slice(0, -1) + (EXAMPLE.sig.endsWith('f') ? 'e' : 'f');
    expect(verify(parsed({ ...EXAMPLE, sig: badSig }))).toBe('invalid event: signature verification failed');
  });

  it('an owner signature that does not cover this agent and these conditions', () => {
    // Conditions edited after signing.
    const [, owner, , sig] = rawTag('kind=1') as [string, string, string, string];
    expect(verify(agentEvent([['auth', owner, 'kind=1&created_at<1713957000', sig]]))).toBe('attestation signature verification failed');
    // Signed for another agent key.
    const other = '0000000000000000000000000000000000000000000000000000000000000003';
    const otherPk = bytesToHex(schnorr.getPublicKey(hexToBytes(other)));
    expect(verify(agentEvent([rawTag('', otherPk)]))).toBe('attestation signature verification failed');
    // The spec's tag copied onto an event by another key.
    expect(verify(agentEvent([EXAMPLE.tags[0]!], { sk: other }))).toBe('attestation signature verification failed');
  });
});

describe('NIP-OA clauses', () => {
  it('kind mismatch', () => {
    expect(verify(agentEvent([rawTag(CONDITIONS)], { kind: 0 }))).toBe('condition kind=1 does not hold for the event (kind 0)');
  });

  it('created_at< is exclusive', () => {
    const t = rawTag('created_at<1713957000');
    expect(verify(agentEvent([t], { created_at: 1713956999 }))).toBe(`owner ${OWNER_PK}`);
    expect(verify(agentEvent([t], { created_at: 1713957000 }))).toBe(
      'condition created_at<1713957000 does not hold for the event (created_at 1713957000)',
    );
  });

  it('created_at> is exclusive', () => {
    const t = rawTag('created_at>1713950000&kind=1');
    expect(verify(agentEvent([t], { created_at: 1713950001 }))).toBe(`owner ${OWNER_PK}`);
    expect(verify(agentEvent([t], { created_at: 1713950000 }))).toBe(
      'condition created_at>1713950000 does not hold for the event (created_at 1713950000)',
    );
  });

  it('checkClauses with contradictory clauses never holds', () => {
    const c = parseConditions('kind=1&kind=2');
    expect(c.ok).toBe(true);
    if (c.ok) expect(checkClauses(c.value, { kind: 1, created_at: 0 }).ok).toBe(false);
  });
});

describe('parseConditions', () => {
  it('accepts the grammar and its bounds', () => {
    expect(parseConditions('')).toEqual({ ok: true, value: [] });
    expect(parseConditions('kind=0&kind=65535&created_at>0&created_at<4294967295')).toEqual({
      ok: true,
      value: [
        { field: 'kind', op: '=', value: 0 },
        { field: 'kind', op: '=', value: 65535 },
        { field: 'created_at', op: '>', value: 0 },
        { field: 'created_at', op: '<', value: 4294967295 },
      ],
    });
  });

  it('rejects out-of-range and malformed values', () => {
    expect(parseConditions('created_at<4294967296')).toEqual({ ok: false, error: 'timestamp out of range in clause "created_at<4294967296"' });
    expect(parseConditions('created_at>99999999999999999999999').ok).toBe(false);
    expect(parseConditions('kind=-1').ok).toBe(false);
    expect(parseConditions('kind=1.0').ok).toBe(false);
    expect(parseConditions('kind=1e3').ok).toBe(false);
    expect(parseConditions('&').ok).toBe(false);
    expect(parseConditions('KIND=1').ok).toBe(false);
    expect(parseConditions('kind=1\n').ok).toBe(false);
 
  });

  it(`takes at most ${MAX_CLAUSES} clauses (what a relay keeps is bounded)`, () => {
    const clauses = (n: number) => Array.from({ length: n }, () => 'kind=22242').join('&');
    expect(parseConditions(clauses(MAX_CLAUSES)).ok).toBe(true);
    expect(parseConditions(clauses(MAX_CLAUSES + 1))).toEqual({ ok: false, error: `more than ${MAX_CLAUSES} clauses` });
    expect(parseConditions(clauses(10_000))).toEqual({ ok: false, error: `more than ${MAX_CLAUSES} clauses` });
  });
});

describe('timeClausesHold (a kept attestation checked later)', () => {
  const clauses = (c: string) => {
    const parsed = parseConditions(c);
    if (!parsed.ok) throw new Error(parsed.error);
    return parsed.value;
  };

  it('applies created_at bounds exclusively and ignores kind clauses', () => {
    expect([99, 100, 101].map((t) => timeClausesHold(clauses('created_at<100'), t))).toEqual([true, false, false]);
    expect([99, 100, 101].map((t) => timeClausesHold(clauses('created_at>100'), t))).toEqual([false, false, true]);
    expect([50, 150, 250].map((t) => timeClausesHold(clauses('kind=1&created_at>100&created_at<200'), t))).toEqual([false, true, false]);
    expect(timeClausesHold(clauses('kind=7'), 0)).toBe(true);
    expect(timeClausesHold([], 4294967295)).toBe(true);
  });
});
