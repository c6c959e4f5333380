// Small DOM helpers for the console: element lookup that fails loudly when the page and the code
// disagree, and element creation with text only (untrusted text is never parsed as HTML).

/** The element with this id; throws when the page lacks it (a bug in page.ts, not user input). */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`console page has no #${id}`);
  return el as T;
}

/** A new element with optional class and text content (set as text, never as HTML). */
export function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** A button with a visible label (its accessible name) and a click handler. */
export function button(label: string, onClick: () => void, cls?: string): HTMLButtonElement {
  const b = el('button', cls, label);
  b.type = 'button';
  b.addEventListener('click', onClick);
  return b;
}

/** Keeps a scrollable log pinned to its end after new content. */
export const scrollToEnd = (log: HTMLElement): void => {
  log.scrollTop = log.scrollHeight;
};

/** Lines a console log keeps: the oldest go first (a server or agent may send a line for as long as it runs). */
export const MAX_LOG_LINES = 500;

/** Appends a line to a log, drops the oldest beyond MAX_LOG_LINES and keeps the log pinned to its end. */
export const appendLogLine = (log: HTMLElement, line: HTMLElement): void => {
  log.append(line);
  while (log.childElementCount > MAX_LOG_LINES) log.firstElementChild?.remove();
  scrollToEnd(log);
};

/** A short form of a 64-hex key for display. */
export const short = (hex: string): string => `${hex.slice(0, 8)}…${hex.slice(-4)}`;
