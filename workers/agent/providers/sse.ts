// Server-sent events (the WHATWG `text/event-stream` format) read from a fetch body: an incremental
// parser (eventsource-parser, with the end-of-stream rule below around it) and an async reader over
// a ReadableStream<Uint8Array>. It knows nothing about providers: the caller says which record is
// terminal, and a stream that ends before that record is reported as truncated (an item, not an
// exception).
//
// eventsource-parser applies the WHATWG rules (CRLF, LF or CR line ends, also split across chunks;
// `:comment` lines ignored; one leading space of a value dropped; `data` lines joined with "\n";
// an event without `data` not dispatched). Around it:
// - bytes are decoded as UTF-8 in streaming mode (a code point split across chunks is kept) and a
//   leading BOM is dropped; `id` and `retry` are ignored (no reconnects);
// - the parser is fed whole lines only: at the end of the stream an unterminated last line is
//   discarded (it may be cut off), while an event whose lines were all terminated but whose blank
//   line never came is still dispatched;
// - one event is at most MAX_SSE_EVENT_CHARS characters (UTF-16 units): a line that does not end
//   within it, data lines of one event that add up to more (eventsource-parser's maxBufferSize) or
//   a complete event over it (fed in one piece) ends the stream with `{type: 'oversized'}`, and the
//   records after it are not read (a hostile server cannot grow the agent's memory with one line).

import { createParser, type EventSourceParser } from 'eventsource-parser';

/** Longest event (or line) read, in characters: far above any provider's (docs/AGENTS.md, "Provider limits"). */
export const MAX_SSE_EVENT_CHARS = 1_048_576;

export interface SseRecord {
  /** The `event:` field, when the event had one (Anthropic names every event; OpenAI never does). */
  event?: string;
  /** The `data:` lines joined with "\n". */
  data: string;
}

export type SseItem =
  | { type: 'record'; record: SseRecord }
  /** The body ended (cleanly) before a terminal record: always the last item. */
  | { type: 'truncated' }
  /** An event or a line over `maxChars`: always the last item (the body is cancelled). */
  | { type: 'oversized'; maxChars: number };

/**
 * Incremental parser: feed decoded text with push(), finish with end(). Once an event or a line is
 * over `maxChars`, `oversized` is true and nothing more is returned (records before it are).
 */
export class SseParser {
  private out: SseRecord[] = [];
  private tooLarge = false;
  private readonly parser: EventSourceParser;
  /** Text after the last line break seen: held back until its line ends. */
  private tail = '';
  private started = false;

  constructor(readonly maxChars: number = MAX_SSE_EVENT_CHARS) {
    this.parser = createParser({
      maxBufferSize: maxChars,
      onEvent: ({ event, data }) => {
        if (data.length > maxChars) this.tooLarge = true;
        if (this.tooLarge) return;
        this.out.push(event === undefined ? { data } : { event, data });
      },
      // Only the buffer limit ends the stream; unknown fields and bad retry values are ignored (WHATWG).
      onError: (e) => {
        if (e.type === 'max-buffer-size-exceeded') this.tooLarge = true;
      },
    });
  }

  /** Whether an event or a line went over `maxChars` (the parser then takes nothing more). */
  get oversized(): boolean {
    return this.tooLarge;
  }

  push(text: string): SseRecord[] {
    if (text === '' || this.tooLarge) return [];
    let input = text;
    if (!this.started) {
      this.started = true;
      if (input.startsWith('\uFEFF')) input = input.slice(1);
    }
    const lineEnd = Math.max(input.lastIndexOf('\n'), input.lastIndexOf('\r')) + 1;
    if (lineEnd === 0) {
      this.tail += input;
      this.checkTail();
      return [];
    }
    this.parser.feed(this.tail + input.slice(0, lineEnd));
    this.tail = input.slice(lineEnd);
    this.checkTail();
    return this.take();
  }

  /** End of input: drops an unterminated last line, dispatches a complete but undispatched event. */
  end(): SseRecord[] {
    this.tail = '';
    if (this.tooLarge) return this.take();
    // The fed text ends with a line break (a CR may still wait for its LF): "\n\n" ends that line
    // if needed and is then a blank line, which dispatches a pending event.
    this.parser.feed('\n\n');
    return this.take();
  }

  private checkTail(): void {
    if (this.tail.length <= this.maxChars) return;
    this.tooLarge = true;
    this.tail = '';
  }

  private take(): SseRecord[] {
    const records = this.out;
    this.out = [];
    return records;
  }
}

export interface ReadSseOptions {
  /** The record after which the stream is complete; reading stops there and the body is cancelled. */
  isTerminal: (record: SseRecord) => boolean;
  /** When it fires, the body is cancelled and the reader throws the signal's reason. */
  signal?: AbortSignal;
}

/**
 * Reads SSE records from a byte stream. Yields each record, stops after the terminal one, or
 * yields `{type: 'truncated'}` when the body ends first, `{type: 'oversized'}` when an event or a
 * line is over MAX_SSE_EVENT_CHARS. Read errors (a reset connection) and an
 * abort are thrown; the body is always released (cancelled) when iteration stops early.
 */
export async function* readSse(body: ReadableStream<Uint8Array>, options: ReadSseOptions): AsyncGenerator<SseItem> {
  const { isTerminal, signal } = options;
  const reader = body.getReader();
  const decoder = new TextDecoder('utf-8');
  const parser = new SseParser();
  const onAbort = (): void => {
    reader.cancel(signal?.reason).catch(() => undefined);
  };
  signal?.addEventListener('abort', onAbort);
  try {
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      const { done, value } = await reader.read();
      if (signal?.aborted) throw signal.reason;
      const records = done
        ? [...parser.push(decoder.decode()), ...parser.end()]
        : parser.push(decoder.decode(value, { stream: true }));
      for (const record of records) {
        yield { type: 'record', record };
        if (isTerminal(record)) return;
      }
      if (parser.oversized) {
        yield { type: 'oversized', maxChars: parser.maxChars };
        return;
      }
      if (done) {
        yield { type: 'truncated' };
        return;
      }
    }
  } finally {
    signal?.removeEventListener('abort', onAbort);
    // After a terminal record the server may still hold the connection open; after an early stop
    // (consumer break, abort, error) the body must be released so the connection closes.
    reader.cancel().catch(() => undefined);
  }
}
