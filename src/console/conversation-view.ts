// The Conversation log: user messages, the agent's answers (streamed deltas rendered as markdown,
// replaced by the final text), tool-call cards (25804) and errors (25805 code and message).
// Everything is built from text nodes (see markdown.ts).

import { el, scrollToEnd } from './dom.js';
import { renderMarkdown } from './markdown.js';

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

/** One agent answer in the log. */
export class AnswerView {
  readonly #box: HTMLElement;
  readonly #body: HTMLElement;
  readonly #log: HTMLElement;
  readonly #deltas = new Map<number, string>();
  #final = false;

  constructor(log: HTMLElement) {
    this.#log = log;
    this.#box = el('div', 'msg agent');
    this.#box.setAttribute('aria-busy', 'true');
    this.#body = el('div', 'body');
    this.#box.append(this.#body);
    log.append(this.#box);
    scrollToEnd(log);
  }

  /** A streamed fragment; fragments are shown in seq order (duplicates ignored). */
  delta(seq: number, text: string): void {
    if (this.#final || this.#deltas.has(seq)) return;
    this.#deltas.set(seq, text);
    const joined = [...this.#deltas.entries()].sort((a, b) => a[0] - b[0]).map(([, t]) => t).join('');
    this.#body.replaceChildren(renderMarkdown(joined));
    scrollToEnd(this.#log);
  }

  tool(call: ToolCallView): void {
    const card = el('div', 'tool-card');
    const title = call.name ? `tool ${call.name}${call.phase ? ` (${call.phase})` : ''}` : 'tool';
    const outcome = call.success === undefined ? '' : call.success ? ' ✓' : ' ✗';
    const took = call.duration_ms !== undefined ? ` ${call.duration_ms} ms` : '';
    card.append(el('strong', undefined, `${title}${outcome}${took}`));
    if (call.text) card.append(el('div', undefined, call.text));
    if (call.arguments) card.append(el('pre', undefined, JSON.stringify(call.arguments, null, 2)));
    if (call.output) card.append(el('pre', undefined, JSON.stringify(call.output, null, 2)));
    this.#box.insertBefore(card, this.#body);
    scrollToEnd(this.#log);
  }

  /** The terminal answer (25803): replaces the streamed text. */
  final(text: string): void {
    this.#final = true;
    this.#box.removeAttribute('aria-busy');
    this.#body.replaceChildren(renderMarkdown(text));
    scrollToEnd(this.#log);
  }

  /** The terminal error (25805), or a failure of the console itself. */
  error(code: string, message: string): void {
    this.#final = true;
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
