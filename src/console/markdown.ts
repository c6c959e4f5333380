// The markdown subset of agent answers, rendered as DOM nodes built from text (no innerHTML, so
// nothing in an answer can become markup or script): fenced code blocks (```lang), paragraphs,
// "- " / "* " / "1. " list items, headings (#…), and inline `code`, **bold** and *italic*.
// `afterLine` tells where a text can be cut into parts that render as the whole does (for an
// answer being streamed: its complete blocks are rendered once, answer-text.ts).

import { el } from './dom.js';

const FENCE_OPEN = /^```\s*([\w+-]*)\s*$/;
const FENCE_CLOSE = /^```\s*$/;
const INLINE = /(`[^`\n]+`|\*\*[^*\n]+\*\*|\*[^*\s][^*\n]*\*)/g;

function inline(parent: HTMLElement, text: string): void {
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    const at = m.index ?? 0;
    if (at > last) parent.append(text.slice(last, at));
    const tok = m[0];
    if (tok.startsWith('`')) parent.append(el('code', undefined, tok.slice(1, -1)));
    else if (tok.startsWith('**')) parent.append(el('strong', undefined, tok.slice(2, -2)));
    else parent.append(el('em', undefined, tok.slice(1, -1)));
    last = at + tok.length;
  }
  if (last < text.length) parent.append(text.slice(last));
}

/** Renders `text` into a fragment; an unclosed code fence (while streaming) runs to the end. */
export function renderMarkdown(text: string): DocumentFragment {
  const out = document.createDocumentFragment();
  const lines = text.split('\n');
  let para: string[] = [];
  let list: HTMLUListElement | HTMLOListElement | undefined;
  const flush = (): void => {
    if (para.length > 0) {
      const p = el('p');
      inline(p, para.join('\n'));
      out.append(p);
      para = [];
    }
    list = undefined;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? '';
    const fence = FENCE_OPEN.exec(line);
    if (fence) {
      flush();
      const code: string[] = [];
      for (i++; i < lines.length && !FENCE_CLOSE.test(lines[i] ?? ''); i++) code.push(lines[i] ?? '');
      const pre = el('pre');
      const c = el('code', undefined, code.join('\n'));
      if (fence[1]) c.dataset.lang = fence[1];
      pre.append(c);
      out.append(pre);
      continue;
    }
    const item = /^\s*(?:([-*])|(\d+)\.)\s+(.*)$/.exec(line);
    if (item) {
      if (para.length > 0) flush();
      const ordered = item[2] !== undefined;
      if (!list || (list.tagName === 'OL') !== ordered) {
        list = ordered ? el('ol') : el('ul');
        out.append(list);
      }
      const li = el('li');
      inline(li, item[3] ?? '');
      list.append(li);
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    if (heading) {
      flush();
      const strong = el('p');
      const b = el('strong');
      inline(b, heading[2] ?? '');
      strong.append(b);
      out.append(strong);
      continue;
    }
    if (line.trim() === '') flush();
    else {
      list = undefined;
      para.push(line);
    }
  }
  flush();
  return out;
}

/**
 * Follows renderMarkdown line by line: `inCode` is whether `line` (without its newline) is inside a
 * code block, and the answer whether the next line is, and whether `line` ends every block (a blank
 * line outside code, or a code block's closing fence): then nothing is left open, and the text cut
 * just after the line's newline renders, part by part, as it does whole.
 */
export function afterLine(line: string, inCode: boolean): { inCode: boolean; endsBlocks: boolean } {
  if (inCode) return FENCE_CLOSE.test(line) ? { inCode: false, endsBlocks: true } : { inCode: true, endsBlocks: false };
  if (FENCE_OPEN.test(line)) return { inCode: true, endsBlocks: false };
  return { inCode: false, endsBlocks: line.trim() === '' };
}
