// DropSummary (drop-summary.ts): one line per kind a minute, whatever a stranger sends: the first at
// once, the rest counted by reason (at most MAX_REASONS of them, each cut) until the minute has
// passed and the next drop or a flush writes them; kinds are counted apart.
import { describe, expect, it } from 'vitest';
import { DROP_LOG_WINDOW_MS, DROPS, DropSummary, MAX_REASON_CHARS, MAX_REASONS } from './drop-summary.js';

function summary(): { drops: DropSummary; lines: string[]; tick: (ms: number) => void } {
  const lines: string[] = [];
  const drops = new DropSummary((line) => lines.push(line));
  let clock = 1_000_000;
  drops.now = () => clock;
  return { drops, lines, tick: (ms) => void (clock += ms) };
}

describe('DropSummary', () => {
  it('writes the first drop of a kind at once and the rest in one line once the minute has passed, by the next drop or a flush', () => {
    const { drops, lines, tick } = summary();
    for (let n = 0; n < 1000; n++) drops.drop(DROPS.giftWrap, n % 3 === 0 ? 'invalid seal' : 'cannot decrypt gift wrap: invalid MAC');
    expect(lines).toEqual(['1 gift wrap refused since the last report (1 "invalid seal"); reported at most once a minute']);
    tick(DROP_LOG_WINDOW_MS - 1);
    drops.flush();
    expect(lines).toHaveLength(1);
    tick(1);
    drops.flush();
    expect(lines.slice(1)).toEqual(['999 gift wraps refused since the last report (666 "cannot decrypt gift wrap: invalid MAC", 333 "invalid seal"); reported at most once a minute']);
    drops.flush();
    tick(DROP_LOG_WINDOW_MS);
    drops.flush();
    expect(lines).toHaveLength(2);
    drops.drop(DROPS.notAlone);
    expect(lines.slice(2)).toEqual(['1 event not addressed to it alone (exactly one p tag, naming it) dropped since the last report; reported at most once a minute']);
  });

  it('counts each kind apart: one line each', () => {
    const { drops, lines } = summary();
    for (let n = 0; n < 50; n++) {
      drops.drop(DROPS.zapReceipt, 'the receipt is not for an invoice of this bridge');
      drops.drop(DROPS.encryptionOff, 'server a');
    }
    expect(lines).toEqual([
      '1 zap receipt ignored since the last report (1 "the receipt is not for an invoice of this bridge"); reported at most once a minute',
      '1 encrypted request to a server with encryption off not answered since the last report (1 "server a"); reported at most once a minute',
    ]);
  });

  it(`names at most ${MAX_REASONS} reasons, each cut to ${MAX_REASON_CHARS} characters and quoted; the others are counted together`, () => {
    const { drops, lines, tick } = summary();
    drops.drop(DROPS.refusedByRelay, 'first');
    for (let n = 0; n < 100; n++) drops.drop(DROPS.refusedByRelay, `ws://relay/: rate-limited: retry in ${n} s\n${'x'.repeat(MAX_REASON_CHARS)}`);
    tick(DROP_LOG_WINDOW_MS);
    drops.flush();
    const reason = (n: number) => JSON.stringify(`ws://relay/: rate-limited: retry in ${n} s\n${'x'.repeat(MAX_REASON_CHARS)}`.slice(0, MAX_REASON_CHARS));
    const named = Array.from({ length: MAX_REASONS }, (_, n) => `1 ${reason(n)}`);
    expect(lines[1]).toBe(`100 events to a client refused by the relay since the last report (${100 - MAX_REASONS} "other reasons", ${named.join(', ')}); reported at most once a minute`);
  });
});
