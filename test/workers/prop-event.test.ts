// Property: event validation (src/shared/event.ts) refuses every mutation of a valid event with an
// `invalid:` reason, with both verifiers (the relay's Wasm one and noble), and never throws, also on
// arbitrary JSON values.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { parseEvent, validateEvent, type NostrEvent } from '../../src/shared/event.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import { relayVerifier } from '../../workers/common/verifier.js';
import { keys, sign } from './helpers.js';
import { PROP, stringMutation, weirdValue } from '../support/prop.js';

const FIELDS = ['id', 'pubkey', 'created_at', 'kind', 'tags', 'content', 'sig'] as const;
type Field = (typeof FIELDS)[number];

const base: NostrEvent = sign(keys(), { kind: 1, content: 'property base', tags: [['p', 'a'.repeat(64)], ['t', 'x']] });

/** One mutation of an event as a JSON object: a field's value changed, removed, or a field added. */
type Json = Record<string, unknown>;
interface Mutation {
  what: string;
  apply: (e: Json) => Json;
}
const mutation = (what: string, apply: (e: Json) => Json): Mutation => ({ what, apply });

const eventMutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.tuple(fc.constantFrom(...FIELDS), weirdValue).map(([f, v]) => mutation(`${f} := ${String(v)}`, (e) => ({ ...e, [f]: v }))),
  fc.tuple(fc.constantFrom<Field>('id', 'pubkey', 'sig', 'content'), stringMutation).map(([f, m]) => mutation(`${f} string mutated`, (e) => ({ ...e, [f]: m(e[f] as string) }))),
  fc.tuple(fc.constantFrom<Field>('created_at', 'kind'), fc.integer({ min: -5, max: 5 }).filter((d) => d !== 0)).map(([f, d]) => mutation(`${f} += ${d}`, (e) => ({ ...e, [f]: (e[f] as number) + d }))),
  fc.tuple(fc.nat(), fc.nat(), stringMutation).map(([t, i, m]) =>
    mutation('a tag element mutated', (e) => {
      const tags = (e.tags as string[][]).map((x) => [...x]);
      const tag = tags[t % tags.length]!;
      tag[i % tag.length] = m(tag[i % tag.length]!);
      return { ...e, tags };
    }),
  ),
  fc.constantFrom<Field>(...FIELDS).map((f) =>
    mutation(`${f} removed`, (e) => {
      const { [f]: _gone, ...rest } = e;
      return rest;
    }),
  ),
  fc.tuple(fc.string({ minLength: 1, maxLength: 10 }).filter((k) => !(FIELDS as readonly string[]).includes(k) && k !== '__proto__'), weirdValue).map(([k, v]) => mutation(`extra field ${k}`, (e) => ({ ...e, [k]: v }))),
);

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

describe('event validation (property)', () => {
  it('the base event is valid with both verifiers', async () => {
    const wasm = await relayVerifier();
    expect(validateEvent(base, wasm)).toEqual({ ok: true, value: base });
    expect(validateEvent(base, nobleVerifier)).toEqual({ ok: true, value: base });
  });

  it('every mutation of a valid event is refused with invalid: (never a throw), unless it changed nothing', async () => {
    const wasm = await relayVerifier();
    fc.assert(
      fc.property(eventMutation, ({ apply }) => {
        const mutated = apply({ ...base });
        for (const v of [wasm, nobleVerifier]) {
          const r = validateEvent(mutated, v);
          if (r.ok) {
            // A mutation that leaves the same JSON (e.g. -0 for 0 is not JSON-distinct) may pass.
            expect(same(r.value, base)).toBe(true);
          } else {
            expect(r.error.prefix).toBe('invalid');
            expect(r.error.reason.length).toBeGreaterThan(0);
          }
        }
      }),
      PROP,
    );
  });

  it('arbitrary values are refused with invalid:, never a throw', () => {
    fc.assert(
      fc.property(weirdValue, (v) => {
        const r = parseEvent(v);
        expect(r.ok).toBe(false);
        if (!r.ok) expect(r.error.prefix).toBe('invalid');
      }),
      PROP,
    );
  });

  it('a valid event re-signed after a mutation of its content or tags is accepted (the refusals above are about integrity, not shape)', () => {
    const k = keys();
    fc.assert(
      fc.property(fc.string({ maxLength: 200 }), fc.array(fc.array(fc.string({ maxLength: 20 }), { minLength: 1, maxLength: 4 }), { maxLength: 5 }), (content, tags) => {
        const e = sign(k, { kind: 1, content, tags });
        expect(validateEvent(e, nobleVerifier)).toEqual({ ok: true, value: e });
      }),
      { ...PROP, numRuns: 40 },
    );
  });
});
