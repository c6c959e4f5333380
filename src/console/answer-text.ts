// The text of an answer being streamed, for rendering it at a cost linear in its length: the text
// is appended to (never joined again), read line by line once (markdown.ts afterLine), and cut
// where every block has ended. What comes before such a cut is settled: handed out once, to be
// rendered once and kept. What comes after it, the tail, is the block still being written.

import { afterLine } from './markdown.js';

export class AnswerText {
  #text = '';
  /** text[0, #settled) is handed out; text[#settled, #cut) is settled and not yet handed out. */
  #settled = 0;
  #cut = 0;
  /** Where the first line not read yet starts, whether it is inside a code block, and where to look for its newline. */
  #line = 0;
  #inCode = false;
  #search = 0;

  get length(): number {
    return this.#text.length;
  }

  append(text: string): void {
    this.#text += text;
  }

  /** The settled text not handed out before (handed out now), and the tail after it. */
  take(): { settled: string; tail: string } {
    for (let nl = this.#text.indexOf('\n', this.#search); nl >= 0; nl = this.#text.indexOf('\n', this.#line)) {
      const after = afterLine(this.#text.slice(this.#line, nl), this.#inCode);
      this.#inCode = after.inCode;
      this.#line = nl + 1;
      if (after.endsBlocks) this.#cut = this.#line;
    }
    this.#search = this.#text.length;
    const settled = this.#text.slice(this.#settled, this.#cut);
    this.#settled = this.#cut;
    return { settled, tail: this.#text.slice(this.#cut) };
  }
}
