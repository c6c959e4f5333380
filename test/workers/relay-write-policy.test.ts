// Declarative write-policy tests (strfry style): a table of events in, the survivors out.
import { describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/shared/event.js';
import { connect, freshOwner, keys, now, sign, type Keys } from './helpers.js';

interface Case {
  name: string;
  /** Builds the events to publish in order; `k` is the author, `x` another key. */
  events(k: Keys, x: Keys): Array<{ e: NostrEvent; label: string }>;
  survivors: string[];
  /** Expected OK messages by label (only those listed are checked). */
  answers?: Record<string, [boolean, string]>;
}

const t0 = now() - 1000;

const table: Case[] = [
  {
    name: 'replaceable: newer wins',
    events: (k) => [
      { label: 'old', e: sign(k, { kind: 0, created_at: t0, content: '{"name":"old"}' }) },
      { label: 'new', e: sign(k, { kind: 0, created_at: t0 + 10, content: '{"name":"new"}' }) },
    ],
    survivors: ['new'],
  },
  {
    name: 'replaceable: an older version arriving later is refused',
    events: (k) => [
      { label: 'new', e: sign(k, { kind: 10002, created_at: t0 + 10 }) },
      { label: 'old', e: sign(k, { kind: 10002, created_at: t0 }) },
    ],
    survivors: ['new'],
    answers: { old: [false, 'duplicate: a newer version of this event is already stored'] },
  },
  {
    name: 'replaceable: equal created_at keeps the lowest id (either arrival order)',
    events: (k) => {
      const a = sign(k, { kind: 3, created_at: t0, content: 'a' });
      const b = sign(k, { kind: 3, created_at: t0, content: 'b' });
      const [lo, hi] = a.id < b.id ? [a, b] : [b, a];
      return [
        { label: 'hi', e: hi },
        { label: 'lo', e: lo },
      ];
    },
    survivors: ['lo'],
  },
  {
    name: 'replaceable: per pubkey and kind',
    events: (k, x) => [
      { label: 'k0', e: sign(k, { kind: 0, created_at: t0 }) },
      { label: 'k3', e: sign(k, { kind: 3, created_at: t0 + 1 }) },
      { label: 'x0', e: sign(x, { kind: 0, created_at: t0 + 2, tags: [['p', k.pk]] }) },
    ],
    survivors: ['k0', 'k3', 'x0'],
  },
  {
    name: 'addressable: newest per d; missing d is the same as d=""',
    events: (k) => [
      { label: 'nod', e: sign(k, { kind: 30023, created_at: t0 }) },
      { label: 'empty', e: sign(k, { kind: 30023, created_at: t0 + 1, tags: [['d', '']] }) },
      { label: 'a1', e: sign(k, { kind: 30023, created_at: t0, tags: [['d', 'a']] }) },
      { label: 'a2', e: sign(k, { kind: 30023, created_at: t0 + 5, tags: [['d', 'a']] }) },
      { label: 'b', e: sign(k, { kind: 30023, created_at: t0, tags: [['d', 'b']] }) },
    ],
    survivors: ['empty', 'a2', 'b'],
  },
  {
    name: 'deletion by e removes the author’s event and it cannot be re-added',
    events: (k) => {
      const note = sign(k, { created_at: t0 });
      return [
        { label: 'note', e: note },
        { label: 'del', e: sign(k, { kind: 5, created_at: t0 + 1, tags: [['e', note.id]] }) },
        { label: 're-add', e: note },
      ];
    },
    survivors: ['del'],
    answers: { 're-add': [false, 'blocked: this event was deleted by its author'] },
  },
  {
    name: 'deletion by e of someone else’s event has no effect',
    events: (k, x) => {
      const theirs = sign(x, { created_at: t0, tags: [['p', k.pk]] });
      return [
        { label: 'theirs', e: theirs },
        { label: 'del', e: sign(k, { kind: 5, created_at: t0 + 1, tags: [['e', theirs.id]] }) },
      ];
    },
    survivors: ['theirs', 'del'],
  },
  {
    name: 'deletion arriving before the event still blocks it',
    events: (k) => {
      const note = sign(k, { created_at: t0 });
      return [
        { label: 'del', e: sign(k, { kind: 5, created_at: t0 + 1, tags: [['e', note.id]] }) },
        { label: 'note', e: note },
      ];
    },
    survivors: ['del'],
    answers: { note: [false, 'blocked: this event was deleted by its author'] },
  },
  {
    name: 'a-deletion removes older versions but not newer ones, and blocks re-adding older',
    events: (k) => {
      const v1 = sign(k, { kind: 30000, created_at: t0, tags: [['d', 'list']] });
      return [
        { label: 'v1', e: v1 },
        { label: 'del', e: sign(k, { kind: 5, created_at: t0 + 5, tags: [['a', `30000:${k.pk}:list`]] }) },
        { label: 'v-older', e: sign(k, { kind: 30000, created_at: t0 + 4, tags: [['d', 'list']] }) },
        { label: 'v-newer', e: sign(k, { kind: 30000, created_at: t0 + 6, tags: [['d', 'list']] }) },
        { label: 'other-d', e: sign(k, { kind: 30000, created_at: t0, tags: [['d', 'other']] }) },
      ];
    },
    survivors: ['del', 'v-newer', 'other-d'],
    answers: { 'v-older': [false, 'blocked: this event was deleted by its author'] },
  },
  {
    name: 'a-deletion naming another pubkey has no effect',
    events: (k, x) => [
      { label: 'theirs', e: sign(x, { kind: 30000, created_at: t0, tags: [['d', 'l'], ['p', k.pk]] }) },
      { label: 'del', e: sign(k, { kind: 5, created_at: t0 + 5, tags: [['a', `30000:${x.pk}:l`]] }) },
    ],
    survivors: ['theirs', 'del'],
  },
  {
    name: 'deleting a deletion has no effect',
    events: (k) => {
      const note = sign(k, { created_at: t0 });
      const del = sign(k, { kind: 5, created_at: t0 + 1, tags: [['e', note.id]] });
      return [
        { label: 'note', e: note },
        { label: 'del', e: del },
        { label: 'del-del', e: sign(k, { kind: 5, created_at: t0 + 2, tags: [['e', del.id]] }) },
        { label: 'note-again', e: note },
      ];
    },
    survivors: ['del', 'del-del'],
    answers: { 'note-again': [false, 'blocked: this event was deleted by its author'] },
  },
  {
    name: 'the p-tagged recipient may delete a gift wrap',
    events: (k, x) => {
      const wrap = sign(x, { kind: 1059, created_at: t0, tags: [['p', k.pk]], content: 'sealed' });
      return [
        { label: 'wrap', e: wrap },
        { label: 'del', e: sign(k, { kind: 5, created_at: t0 + 1, tags: [['e', wrap.id]] }) },
      ];
    },
    survivors: ['del'],
  },
  {
    name: 'ephemeral events are never stored',
    events: (k) => [
      { label: 'eph', e: sign(k, { kind: 20001 }) },
      { label: 'status', e: sign(k, { kind: 25800, tags: [['p', k.pk]] }) },
      { label: 'note', e: sign(k) },
    ],
    survivors: ['note'],
    answers: { eph: [true, ''] },
  },
];

describe('write policy table: events in → survivors out', () => {
  for (const c of table) {
    it(c.name, async () => {
      const owner = freshOwner();
      const other = keys();
      const s = await connect(`/r/${owner.pk}`);
      await s.auth(owner); // so that gift wraps addressed to the owner are readable
      const input = c.events(owner, other);
      for (const { e, label } of input) {
        const ok = await s.publish(e);
        const want = c.answers?.[label];
        if (want) expect([ok[2], ok[3]], label).toEqual(want);
      }
      const { events } = await s.req('all', { authors: [owner.pk, other.pk] });
      const labelOf = new Map(input.map(({ e, label }) => [e.id, label]));
      expect(events.map((e) => labelOf.get(e.id)).sort()).toEqual([...c.survivors].sort());
    });
  }
});
