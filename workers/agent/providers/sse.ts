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
//   line never came is still dispatched.

import { createParser, type EventSourceParser } from 'eventsource-parser';

export interface SseRecord {
  /** The `event:` field, when the event had one (Anthropic names every event; OpenAI never does). */
  event?: string;
  /** The `data:` lines joined with "\n". */
  data: string;
}

export type SseItem =
  | { type: 'record'; record: SseRecord }
  /** The body ended (cleanly) before a terminal record: always the last item. */
  | { type: 'truncated' };

/** Incremental parser: feed decoded text with push(), finish with end(). */
export class SseParser {
  private out: SseRecord[] = [];
  private readonly parser: EventSourceParser = createParser({
    onEvent: ({ event, data }) => {
      this.out.push(event === undefined ? { data } : { event, data });
    },
  });
  /** Text after the last line break seen: held back until its line ends. */
  private tail = '';
  private started = false;

  push(text: string): SseRecord[] {
    if (text === '') return [];
    let input = text;
    if (!this.started) {
      this.started = true;
      if (input.startsWith('\uFEFF')) input = input.slice(1);
    }
    const lineEnd = Math.max(input.lastIndexOf('\n'), input.lastIndexOf('\r')) + 1;
    if (lineEnd === 0) {
      this.tail += input;
      return [];
    }
    this.parser.feed(this.tail + input.slice(0, lineEnd));
    this.tail = input.slice(lineEnd);
    return this.take();
  }

  /** End of input: drops an unterminated last line, dispatches a complete but undispatched event. */
  end(): SseRecord[] {
    this.tail = '';
    // The fed text ends with a line break (a CR may still wait for its LF): "\n\n" ends that line
    // if needed and is then a blank line, which dispatches a pending event.
    this.parser.feed('\n\n');
    return this.take();
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
 * yields `{type: 'truncated'}` when the body ends first. Read errors (a reset connection) and an
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
