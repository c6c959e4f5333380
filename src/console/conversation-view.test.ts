// The console's answer view (conversation-view.ts) in headless Chromium (test/e2e/console-browser.ts),
// the module bundled with esbuild into a blank page and fed deltas as a hostile agent added under
// "Other agent" sends them: hundreds of 60,000-character deltas with distinct seqs and no terminal.
// A MutationObserver counts the characters of every node put into the log, so the test measures
// what the view renders, not how fast the machine is (a time limit would be a timed test: see BENCHMARKS).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { build } from 'esbuild';
import type { Browser, Page } from 'playwright-core';
import { ANSWER_CUT } from '../shared/delta-order.js';
import { MAX_RUN_OUTPUT_CHARS } from '../shared/nip-xx.js';
import { launch } from '../../test/e2e/console-browser.js';

type Lib = typeof import('./conversation-view.js') & typeof import('./markdown.js');

let browser: Browser;
let page: Page;

beforeAll(async () => {
  const bundled = await build({
    stdin: { contents: "export { ConversationView } from './conversation-view.ts'; export { renderMarkdown } from './markdown.ts';", resolveDir: import.meta.dirname, loader: 'ts' },
    bundle: true,
    format: 'iife',
    globalName: 'edgestrConsole',
    platform: 'browser',
    target: 'es2022',
    write: false,
    logLevel: 'warning',
  });
  browser = await launch();
  page = await browser.newPage();
  await page.setContent('<div id="log" role="log" aria-label="Conversation" style="height: 600px; overflow: auto"></div>');
  await page.addScriptTag({ content: bundled.outputFiles[0]!.text });
}, 60_000);
afterAll(async () => {
  await browser?.close();
});

interface Flood {
  deltas: number;
  chars: number;
  /** 'paragraphs': markdown with a blank line every few lines; 'line': one endless line. */
  shape: 'paragraphs' | 'line';
  /** 'burst': one delta per task, as fast as they come; 'frames': one per animation frame, so that each is rendered. */
  pace: 'burst' | 'frames';
}

interface Flooded {
  /** Characters of the nodes put into the log. */
  rendered: number;
  /** The answer's text as shown: its length, its end, and whether it is the deltas' text cut at
   *  MAX_RUN_OUTPUT_CHARS and rendered whole, followed by the note. */
  shownChars: number;
  shownEnd: string;
  shownIsCutWithNote: boolean;
  sentChars: number;
}

/** Sends the deltas to a new answer, one per task (as WebSocket messages come) or per frame, then waits two frames. */
function flood(f: Flood): Promise<Flooded> {
  return page.evaluate(
    async ({ deltas, chars, shape, pace, giveUpAt, max, note }) => {
      const lib = (window as unknown as { edgestrConsole: Lib }).edgestrConsole;
      const log = document.getElementById('log')!;
      log.replaceChildren();
      let rendered = 0;
      const count = (records: MutationRecord[]): void => {
        for (const r of records) r.addedNodes.forEach((n) => (rendered += n.textContent?.length ?? 0));
      };
      const observer = new MutationObserver(count);
      observer.observe(log, { childList: true, subtree: true });
      const answer = new lib.ConversationView(log).answer();
      const textOf = (seq: number): string => {
        if (shape === 'line') return String.fromCharCode(97 + (seq % 26)).repeat(chars);
        let t = '';
        for (let i = 0; t.length < chars; i++) t += `${i % 8 === 7 ? '\n' : ''}p${seq}.${i} **bold** and \`code\` and *some* words\n`;
        return t.slice(0, chars);
      };
      const sent: string[] = [];
      await new Promise<void>((resolve) => {
        const channel = new MessageChannel();
        const next = (): void => (pace === 'burst' ? channel.port2.postMessage(0) : void requestAnimationFrame(() => channel.port2.postMessage(0)));
        let seq = 0;
        channel.port1.onmessage = () => {
          // Today's view would take minutes: stop once it has clearly rendered far too much.
          if (seq === deltas || rendered > giveUpAt) return resolve();
          const t = textOf(seq);
          sent.push(t);
          answer.delta(seq++, t);
          next();
        };
        next();
      });
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      count(observer.takeRecords());
      observer.disconnect();
      const whole = document.createElement('div');
      const all = sent.join('');
      whole.append(lib.renderMarkdown(all.slice(0, max)));
      const shown = log.querySelector('.msg.agent .body')?.textContent ?? '';
      return { rendered, shownChars: shown.length, shownEnd: shown.slice(-200), shownIsCutWithNote: shown === `${whole.textContent}${note}`, sentChars: all.length };
    },
    { ...f, giveUpAt: 10 * MAX_RUN_OUTPUT_CHARS, max: MAX_RUN_OUTPUT_CHARS, note: ANSWER_CUT },
  );
}

describe('AnswerView: a hostile agent streams without end', () => {
  const floods: Flood[] = [
    { deltas: 400, chars: 60_000, shape: 'paragraphs', pace: 'burst' },
    { deltas: 400, chars: 60_000, shape: 'line', pace: 'burst' },
    { deltas: 300, chars: 8_000, shape: 'paragraphs', pace: 'frames' },
    { deltas: 300, chars: 8_000, shape: 'line', pace: 'frames' },
  ];
  for (const f of floods) {
    it(`${f.deltas} deltas of ${f.chars} characters (${f.shape}, ${f.pace === 'burst' ? 'in a burst' : 'one per frame'}): cut at ${MAX_RUN_OUTPUT_CHARS} characters with the note, each character rendered about once (work linear in the answer, not its square)`, async () => {
      const result = await flood(f);
      expect(result.sentChars).toBeGreaterThan(MAX_RUN_OUTPUT_CHARS);
      expect(result.shownEnd.slice(-ANSWER_CUT.length)).toBe(ANSWER_CUT);
      expect(result.shownIsCutWithNote).toBe(true);
      expect(result.rendered).toBeLessThanOrEqual(2 * result.shownChars);
    }, 120_000);
  }
});

/** A new answer in an emptied log (window.answer), given `deltas` ([seq, text]) in that order. */
async function startAnswer(deltas: Array<[number, string]>): Promise<void> {
  await page.evaluate((given) => {
    const lib = (window as unknown as { edgestrConsole: Lib }).edgestrConsole;
    const log = document.getElementById('log')!;
    log.replaceChildren();
    const answer = new lib.ConversationView(log).answer();
    (window as unknown as { answer: typeof answer }).answer = answer;
    for (const [seq, text] of given) answer.delta(seq, text);
  }, deltas);
}

describe('AnswerView: deltas out of order', () => {
  it('shows deltas in seq order; a missing one is given up on after a second; the terminal text replaces them', async () => {
    await startAnswer([[2, 'c'], [1, 'b']]);
    const body = page.locator('.msg.agent .body');
    await page.waitForTimeout(300);
    expect(await body.textContent()).toBe('');
    await page.waitForFunction(() => document.querySelector('.msg.agent .body')?.textContent === 'bc', undefined, { timeout: 3_000 });
    await page.evaluate(() => {
      const { answer } = window as unknown as { answer: { delta(seq: number, text: string): void; final(text: string): void } };
      answer.delta(0, 'a'); // given up on: not shown
      answer.delta(3, 'd');
    });
    await page.waitForFunction(() => document.querySelector('.msg.agent .body')?.textContent === 'bcd', undefined, { timeout: 3_000 });
    await page.evaluate(() => (window as unknown as { answer: { final(text: string): void } }).answer.final('**the** answer'));
    expect(await body.textContent()).toBe('the answer');
  });
});

describe('AnswerView: an error ends the run', () => {
  it('keeps what was streamed, deltas waiting for a missing one too, a long block rendered as markdown, and shows CODE: message', async () => {
    await startAnswer([[0, `**bold** ${'x'.repeat(20_000)}`], [2, ' two']]);
    const body = page.locator('.msg.agent .body');
    // A block of over 16,384 characters still being written shows as plain text.
    await page.waitForFunction(() => document.querySelector('.msg.agent .body')?.textContent?.startsWith('**bold** xxx'), undefined, { timeout: 3_000 });
    await page.evaluate(() => (window as unknown as { answer: { error(code: string, message: string): void } }).answer.error('CANCELLED', 'the user stopped the run'));
    expect(await body.textContent()).toBe(`bold ${'x'.repeat(20_000)} two`);
    expect(await body.locator('strong').textContent()).toBe('bold');
    expect(await page.locator('.msg.agent > p').textContent()).toBe('CANCELLED: the user stopped the run');
  });
});

/** Tool cards of a new answer in an emptied log; the characters of the nodes put into the log, counted after each card. */
function toolCards(payload: { nest: number; arrays: number; text: string; times: number }): Promise<{ rendered: number; cards: string[]; pres: string[]; notes: string[] }> {
  return page.evaluate(({ nest, arrays, text, times }) => {
    const lib = (window as unknown as { edgestrConsole: Lib }).edgestrConsole;
    const log = document.getElementById('log')!;
    log.replaceChildren();
    let rendered = 0;
    const observer = new MutationObserver(() => undefined);
    observer.observe(log, { childList: true, subtree: true });
    const count = (): void => {
      for (const r of observer.takeRecords()) r.addedNodes.forEach((n) => (rendered += n.textContent?.length ?? 0));
    };
    const answer = new lib.ConversationView(log).answer();
    const output: Record<string, unknown> = { text };
    for (let i = 0; i < arrays; i++) output[`a${i}`] = JSON.parse(`${'['.repeat(nest)}${']'.repeat(nest)}`);
    for (let i = 0; i < times; i++) {
      answer.tool({ name: 'fetch', phase: 'result', arguments: { url: 'https://example.org/' }, output, success: true });
      count();
      // Today's view would take minutes (256,128,050 characters a card): stop once it has clearly rendered far too much.
      if (rendered > 50_000_000) break;
    }
    observer.disconnect();
    const texts = (sel: string): string[] => Array.from(log.querySelectorAll(sel), (n) => n.textContent ?? '');
    return { rendered, cards: texts('.tool-card'), pres: texts('.tool-card pre'), notes: texts('.msg.agent > .note') };
  }, payload);
}

describe('AnswerView: tool cards of a hostile agent', () => {
  it('64 KB of output nesting 8 arrays 4,000 deep, 100 times: compact, a note for what nests too deep, at most 64 cards, a few hundred KB in all', async () => {
    const r = await toolCards({ nest: 4000, arrays: 8, text: '', times: 100 });
    expect(r.rendered).toBeLessThan(300_000);
    expect(r.cards).toHaveLength(64);
    expect(r.cards[0]).toBe('tool fetch (result) ✓{"url":"https://example.org/"}(nests deeper than 64 levels: not shown)');
    expect(r.notes).toEqual(['the agent reported over 64 tool calls; the rest are not shown']);
  }, 120_000);

  it("a long output is shown compact, cut at 2,048 characters with the whole length", async () => {
    const r = await toolCards({ nest: 2, arrays: 1, text: 'x'.repeat(10_000), times: 1 });
    expect(r.pres).toEqual(['{"url":"https://example.org/"}', `{"text":"${'x'.repeat(2_039)}… (10021 characters in all)`]);
  }, 120_000);
});
