// The Conversation log: user messages, the agent's answers (streamed deltas rendered as markdown,
// replaced by the final text), tool-call cards (25804) and errors (25805 code and message).
// Everything is built from text nodes (see markdown.ts).
//
// An answer costs work in proportion to what it shows, whatever an agent sends (any agent can be
// added under "Other agent"): deltas are put in seq order by DeltaOrder (src/shared/delta-order.ts:
// at most 256 wait for an earlier one, at most MAX_RUN_OUTPUT_CHARS characters in all; past that
// they are dropped and the answer ends with the note `the agent sent over 2097152 characters; the
// rest of the answer is not shown`), a missing delta is given up on after GAP_WAIT_MS, and the
// text is rendered at most once per animation frame: complete blocks once (answer-text.ts), the
// block still being written again each frame while it has at most LIVE_MARKDOWN_CHARS characters,
// past that as plain text, appended in blocks of PLAIN_BLOCK_CHARS, until it ends (or the run ends
// with an error: the text stays, rendered whole, all deltas that came shown; a response replaces it).
// A tool card shows its title, text, arguments and output each cut to TOOL_CARD_CHARS, the JSON
// compact and only within MAX_JSON_DEPTH (src/shared/json-depth.ts: pretty-printing grows with the
// square of the depth, 64 KB nested 4,000 deep would be 256 MB in one card); an answer shows at
// most MAX_TOOL_CARDS cards, then the note `the agent reported over 64 tool calls; the rest are not shown`.

import { DeltaOrder, type DeltasTaken } from '../shared/delta-order.js';
import { cutChars, shownJson } from '../shared/json-depth.js';
import { AnswerText } from './answer-text.js';
import { el, scrollToEnd } from './dom.js';
import { renderMarkdown } from './markdown.js';

/** The block being streamed is rendered as markdown up to this many characters, past it as plain text until it ends. */
const LIVE_MARKDOWN_CHARS = 16_384;
/** Plain text goes into blocks of about this many characters: the browser lays a block out again
 *  whole when text is added to it, so one block growing each frame would cost its whole length each time. */
const PLAIN_BLOCK_CHARS = 16_384;
/** How long deltas after a missing one wait for it before they are shown without it, in ms. */
const GAP_WAIT_MS = 1_000;
/** Characters of a tool card's title, text, arguments and output shown at most (each). */
const TOOL_CARD_CHARS = 2_048;
/** Tool cards shown of one answer at most (a run of the default limits makes up to 8 steps of 16 calls: the first ones are shown). */
const MAX_TOOL_CARDS = 64;

const plainBlock = (): HTMLElement => {
  const block = el('p');
  block.style.whiteSpace = 'pre-wrap';
  return block;
};

/** A tool-call payload as the agent reports it (kind 25804). */
export interface ToolCallView {
  name?: string | undefined;
  phase?: string | undefined;
  text?: string | undefined;
  arguments?: Record<string, unknown> | undefined;
  output?: Record<string, unknown> | undefined;
  success?: boolean | undefined;
  duration_ms?: number | undefined;
}

/** The tail shown as plain text: how many of its characters are shown, its last block and that block's characters. */
interface PlainTail {
  chars: number;
  block: HTMLElement;
  blockChars: number;
}

/** One agent answer in the log. */
export class AnswerView {
  readonly #box: HTMLElement;
  readonly #body: HTMLElement;
  readonly #log: HTMLElement;
  readonly #order = new DeltaOrder();
  readonly #text = new AnswerText();
  /** The block being streamed (after the settled ones in the body), and the note once cut. */
  readonly #tail: HTMLElement;
  #note: HTMLElement | undefined;
  #plain: PlainTail | undefined;
  /** Characters of the text rendered so far; a render is scheduled; the gap timer. */
  #rendered = 0;
  #frame = false;
  #gap: ReturnType<typeof setTimeout> | undefined;
  #final = false;
  #toolCards = 0;

  constructor(log: HTMLElement) {
    this.#log = log;
    this.#box = el('div', 'msg agent');
    this.#box.setAttribute('aria-busy', 'true');
    this.#body = el('div', 'body');
    this.#tail = el('div');
    this.#body.append(this.#tail);
    this.#box.append(this.#body);
    log.append(this.#box);
    scrollToEnd(log);
  }

  /** A streamed fragment; fragments are shown in seq order from 0 (repeats ignored). */
  delta(seq: number, text: string): void {
    if (this.#final) return;
    this.#took(this.#order.push(seq, text));
  }

  #took(taken: DeltasTaken): void {
    for (const { text } of taken.ready) this.#text.append(text);
    if (this.#order.full && !this.#note) {
      this.#note = el('p', 'note', taken.dropped);
      this.#body.append(this.#note);
    }
    this.#watchGap();
    if (this.#frame || this.#text.length === this.#rendered) return;
    this.#frame = true;
    requestAnimationFrame(() => this.#render());
  }

  /** While deltas wait for a missing one, gives up on it after GAP_WAIT_MS without progress. */
  #watchGap(): void {
    if (this.#gap !== undefined || this.#order.waiting === 0) return;
    const expected = this.#order.next;
    this.#gap = setTimeout(() => {
      this.#gap = undefined;
      if (this.#final) return;
      if (this.#order.next === expected) this.#took(this.#order.skip());
      else this.#watchGap();
    }, GAP_WAIT_MS);
  }

  /** Renders what came since the last time; `whole`: the tail as markdown whatever its length (the last time). */
  #render(whole = false): void {
    this.#frame = false;
    if (this.#final) return;
    this.#rendered = this.#text.length;
    const { settled, tail } = this.#text.take();
    if (settled) {
      this.#body.insertBefore(renderMarkdown(settled), this.#tail);
      this.#plain = undefined;
    }
    if (whole || tail.length <= LIVE_MARKDOWN_CHARS) {
      this.#plain = undefined;
      this.#tail.replaceChildren(renderMarkdown(tail));
    } else {
      if (!this.#plain) {
        this.#plain = { chars: 0, block: plainBlock(), blockChars: 0 };
        this.#tail.replaceChildren(this.#plain.block);
      }
      this.#appendPlain(this.#plain, tail.slice(this.#plain.chars));
      this.#plain.chars = tail.length;
    }
    scrollToEnd(this.#log);
  }

  #appendPlain(plain: PlainTail, text: string): void {
    let rest = text;
    if (plain.blockChars >= PLAIN_BLOCK_CHARS) {
      // The next block starts after a newline when the text has one, so that no line is cut in two.
      const nl = rest.lastIndexOf('\n') + 1;
      if (nl > 0) plain.block.append(rest.slice(0, nl));
      rest = rest.slice(nl);
      plain.block = plainBlock();
      plain.blockChars = 0;
      this.#tail.append(plain.block);
    }
    plain.block.append(rest);
    plain.blockChars += rest.length;
  }

  /** A tool call (25804): a card before the answer's text, the first MAX_TOOL_CARDS of them (see the header). */
  tool(call: ToolCallView): void {
    if (this.#toolCards > MAX_TOOL_CARDS) return;
    this.#toolCards++;
    if (this.#toolCards > MAX_TOOL_CARDS) {
      this.#box.insertBefore(el('p', 'note', `the agent reported over ${MAX_TOOL_CARDS} tool calls; the rest are not shown`), this.#body);
      return;
    }
    const card = el('div', 'tool-card');
    const title = call.name ? `tool ${call.name}${call.phase ? ` (${call.phase})` : ''}` : 'tool';
    const outcome = call.success === undefined ? '' : call.success ? ' ✓' : ' ✗';
    const took = call.duration_ms !== undefined ? ` ${call.duration_ms} ms` : '';
    card.append(el('strong', undefined, cutChars(`${title}${outcome}${took}`, TOOL_CARD_CHARS)));
    if (call.text) card.append(el('div', undefined, cutChars(call.text, TOOL_CARD_CHARS)));
    if (call.arguments) card.append(el('pre', undefined, shownJson(call.arguments, TOOL_CARD_CHARS)));
    if (call.output) card.append(el('pre', undefined, shownJson(call.output, TOOL_CARD_CHARS)));
    this.#box.insertBefore(card, this.#body);
    scrollToEnd(this.#log);
  }

  /** The terminal answer (25803): replaces the streamed text. */
  final(text: string): void {
    this.#final = true;
    clearTimeout(this.#gap);
    this.#box.removeAttribute('aria-busy');
    this.#body.replaceChildren(renderMarkdown(text));
    scrollToEnd(this.#log);
  }

  /** The terminal error (25805), or a failure of the console itself: below what was streamed, all of it shown now. */
  error(code: string, message: string): void {
    if (!this.#final) {
      for (const { text } of this.#order.skip().ready) this.#text.append(text);
      this.#render(true);
    }
    this.#final = true;
    clearTimeout(this.#gap);
    this.#box.removeAttribute('aria-busy');
    this.#box.classList.add('error');
    this.#box.append(el('p', undefined, `${code}: ${message}`));
    scrollToEnd(this.#log);
  }
}

export class ConversationView {
  readonly #log: HTMLElement;

  constructor(log: HTMLElement) {
    this.#log = log;
  }

  clear(): void {
    this.#log.replaceChildren();
  }

  user(text: string): void {
    const box = el('div', 'msg user');
    box.append(renderMarkdown(text));
    this.#log.append(box);
    scrollToEnd(this.#log);
  }

  answer(): AnswerView {
    return new AnswerView(this.#log);
  }
}
