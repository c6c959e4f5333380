// Server-sent events (the WHATWG `text/event-stream` format) read from a fetch body: a pure
// incremental parser and an async reader over a ReadableStream<Uint8Array>. It knows nothing about
// providers: the caller says which record is terminal, and a stream that ends before that record
// is reported as truncated (an item, not an exception).
//
// Parsing rules (WHATWG HTML, "Interpreting an event stream"):
// - lines end with CRLF, LF or CR, and a CRLF split across two chunks counts once;
// - bytes are decoded as UTF-8 in streaming mode, so a code point split across chunks is kept;
// - a leading BOM is dropped; `:comment` lines are ignored; `field: value` loses one leading space;
// - several `data` lines of one event are joined with "\n"; a blank line dispatches the event;
//   an event with no `data` line is not dispatched; `id` and `retry` are ignored (no reconnects);
// - at the end of the stream, an unterminated last line is discarded (it may be cut off), while
//   an event whose lines were all terminated but whose blank line never came is still dispatched.

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

const LINE_BREAK = /\r\n|\r|\n/g;

/** Incremental parser: feed decoded text with push(), finish with end(). */
export class SseParser {
  private buffer = '';
  private data: string[] = [];
  private event: string | undefined;
  private started = false;
  /** The previous chunk ended with CR: a LF at the start of the next one belongs to it. */
  private skipLeadingLf = false;

  push(text: string): SseRecord[] {
    if (text === '') return [];
    let input = text;
    if (this.skipLeadingLf) {
      this.skipLeadingLf = false;
      if (input.startsWith('\n')) input = input.slice(1);
    }
    if (!this.started && input !== '') {
      this.started = true;
      if (input.startsWith('\uFEFF')) input = input.slice(1);
    }
    const buf = this.buffer + input;
    const out: SseRecord[] = [];
    let pos = 0;
    LINE_BREAK.lastIndex = 0;
    for (let m = LINE_BREAK.exec(buf); m !== null; m = LINE_BREAK.exec(buf)) {
      this.line(buf.slice(pos, m.index), out);
      pos = m.index + m[0].length;
      if (m[0] === '\r' && pos === buf.length) this.skipLeadingLf = true;
    }
    this.buffer = buf.slice(pos);
    return out;
  }

  /** End of input: drops an unterminated last line, dispatches a complete but undispatched event. */
  end(): SseRecord[] {
    this.buffer = '';
    const out: SseRecord[] = [];
    this.dispatch(out);
    return out;
  }

  private line(line: string, out: SseRecord[]): void {
    if (line === '') {
      this.dispatch(out);
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
  }

  private dispatch(out: SseRecord[]): void {
    if (this.data.length > 0) {
      const record: SseRecord = { data: this.data.join('\n') };
      if (this.event !== undefined && this.event !== '') record.event = this.event;
      out.push(record);
    }
    this.data = [];
    this.event = undefined;
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
