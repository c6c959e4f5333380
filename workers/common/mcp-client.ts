// The one upstream MCP client of the Workers (the agent's MCP tools and the DVMCP bridge), on the
// official @modelcontextprotocol/sdk Client.
//
// openMcpSession({url, headers?}, options) initializes a session: Streamable HTTP first (the SDK
// negotiates the protocol revision, 2025-11-25 down to 2024-10-07; the transport keeps
// Mcp-Session-Id and MCP-Protocol-Version, reads JSON or SSE answers, accepts 202 for
// notifications, sends DELETE on close). When that initialize is answered 400, 404 or 405 the
// server is taken for a legacy HTTP+SSE one (MCP spec, backwards compatibility) and the SDK's
// SSEClientTransport is tried on the same URL (its GET stream carries every answer, so a legacy
// session holds one open subrequest for its whole life).
// McpSession.request(method, params) sends any MCP request and returns the raw result object
// (a passthrough schema: unknown fields survive). Failures are values (McpFailure):
//   {kind: 'protocol', code, message, data?}  a JSON-RPC error from upstream;
//   {kind: 'transport', message, status?}     unreachable, refused by the outbound policy,
//                                             "timed out after <n> ms", "aborted", "session is closed";
//                                             `status` when upstream answered an HTTP error (its
//                                             message then carries upstream's text: "Streamable HTTP
//                                             error (HTTP <status>): Error POSTing to endpoint: <body>",
//                                             "Error POSTing to endpoint (HTTP <status>): <body>",
//                                             "SSE error: Non-200 status code (<status>)").
// openMcpSession fails with the transport kind (a failed open is never upstream's protocol answer).
// Messages are cut at 1,000 characters.
// onProgress receives the request's progress notifications (the SDK sets _meta.progressToken;
// each one restarts the timeout, `maxTotalMs` bounds the whole). Aborting the signal, or a
// timeout, sends notifications/cancelled upstream and aborts the request's own fetch (its POST
// waiting for answer headers, or its SSE answer stream: the upstream connection closes with the
// call, RequestFetches). Every other POST (a notification) must get its answer headers within
// connectTimeoutMs, and the legacy transport's start (its GET and `endpoint` event) too.
// Session loss: a request answered 404, or 400 naming the session, while a session id was sent
// (the server forgot it) re-initializes once and is sent again; a session whose connection
// closed is re-opened by the next request. A legacy event stream that ends or fails closes its
// connection (the requests waiting on it fail with "the server ended its event stream"): the
// EventSource is not left to dial again by itself (after the server's `retry:`, which may be 0),
// so a server cannot make a session re-dial it; the next request opens a new connection.
// Notifications from upstream (list_changed, resources/updated, logging) go to onNotification;
// they arrive only on SSE answers, on the legacy transport's stream, or on the standalone GET
// stream of Streamable HTTP, which is opened only with `standaloneGet` (a never-ending
// subrequest keeps a Durable Object from hibernating and holds one of the Worker's few
// simultaneous connections; without it our fetch answers that GET 405, "not offered").
// Every fetch goes through safeFetch under the deployment's OutboundPolicy: the URL is checked
// before anything is sent, redirects are followed by hand and each hop is checked again.
// Answers are read up to MAX_UPSTREAM_ANSWER_BYTES (4 MiB): a JSON body in all, an SSE stream per
// event (a legacy session's stream lives as long as the session). Past it the body is cancelled
// (the connection closes), and the request fails with the transport failure "sent an answer over
// 4194304 bytes"; an SSE stream over the cap also closes its connection (every request waiting on
// it fails so), and the next request opens a new one.
// workerd: the SDK Client's default JSON Schema validator (Ajv) generates code, which workerd
// forbids; the code-free CfWorkerJsonSchemaValidator is passed instead (the generic request
// never validates tool output, so it is not used on the request path).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport, SseError } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { CfWorkerJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/cfworker';
import { z } from 'zod';
import { err, errorMessage, ok, type Result } from '../../src/shared/errors.js';
import { LruMap } from '../../src/shared/lru.js';
import { checkOutboundUrl, safeFetch, STRICT_OUTBOUND, type OutboundPolicy } from '../../src/shared/outbound-url.js';

export interface McpServerEndpoint {
  /** The MCP endpoint, http(s) (Streamable HTTP, or the legacy SSE endpoint). */
  url: string;
  /** Extra request headers (e.g. Authorization), sent with every request. */
  headers?: Record<string, string>;
}

/** A notification from upstream, as received (method and params). */
export interface McpNotification {
  method: string;
  params?: Record<string, unknown>;
}

export interface McpOpenOptions {
  /** The deployment's outbound policy (default: strict production). */
  policy?: OutboundPolicy;
  /** initialize, in milliseconds (default 10,000); also bounds a re-initialize. */
  connectTimeoutMs?: number;
  /** Cancels the initialize. */
  signal?: AbortSignal;
  /** Open the standalone GET SSE stream of Streamable HTTP (default false; see the header). */
  standaloneGet?: boolean;
  /** Try the legacy HTTP+SSE transport when Streamable HTTP is refused (default true). */
  legacySse?: boolean;
  /** Upstream notifications (other than progress, which goes to the request's onProgress). */
  onNotification?: (notification: McpNotification) => void;
  /** Our clientInfo in initialize (default edgestr). */
  clientInfo?: { name: string; version: string };
}

export interface McpRequestOptions {
  signal?: AbortSignal;
  /** Without a progress notification, in milliseconds (default 30,000). */
  timeoutMs?: number;
  /** The whole request, whatever the progress, in milliseconds (default: no bound). */
  maxTotalMs?: number;
  onProgress?: (progress: McpProgress) => void;
}

export interface McpProgress {
  progress: number;
  total?: number;
  message?: string;
}

/** A transport failure; `status` is the HTTP status upstream answered with, when the failure is such an answer. */
export interface McpTransportFailure {
  kind: 'transport';
  message: string;
  status?: number;
}

export type McpFailure = { kind: 'protocol'; code: number; message: string; data?: unknown } | McpTransportFailure;

export type McpTransportKind = 'streamable-http' | 'sse';

/** What the server said in its initialize result. */
export interface McpServerIdentity {
  serverInfo: { name: string; version: string; [k: string]: unknown };
  capabilities: Record<string, unknown>;
  protocolVersion: string;
  instructions?: string;
  transport: McpTransportKind;
}

export interface McpSession {
  /** The initialize result of the current connection (changes after a re-initialize). */
  readonly identity: McpServerIdentity;
  readonly closed: boolean;
  /** The Mcp-Session-Id of the current connection (Streamable HTTP, when the server gave one). */
  readonly sessionId: string | undefined;
  request(method: string, params?: Record<string, unknown>, options?: McpRequestOptions): Promise<Result<unknown, McpFailure>>;
  /** A client notification (e.g. notifications/roots/list_changed). */
  notify(method: string, params?: Record<string, unknown>): Promise<Result<void, McpFailure>>;
  /** Ends the session (DELETE with the session id, bounded, best effort) and releases the transport. */
  close(): Promise<void>;
}

export const MCP_CLIENT_DEFAULTS = {
  connectTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  closeTimeoutMs: 2_000,
} as const;

const CLIENT_INFO = { name: 'edgestr', version: '1.0.0' };
/** Any result object, unknown fields kept. */
const RawResult = z.looseObject({});
const validator = new CfWorkerJsonSchemaValidator();

/** Longest failure message kept (an upstream's error page can be large). */
const MAX_MESSAGE_CHARS = 1_000;
const clip = (text: string): string => (text.length > MAX_MESSAGE_CHARS ? `${text.slice(0, MAX_MESSAGE_CHARS)}…` : text);
const transportFailure = (message: string, status?: number): McpTransportFailure =>
  status === undefined ? { kind: 'transport', message: clip(message) } : { kind: 'transport', message: clip(message), status };

/** An error of ours that carries the HTTP status of the failure it describes (an open that failed on both transports). */
class StatusError extends Error {
  constructor(
    message: string,
    readonly status: number | undefined,
  ) {
    super(message);
  }
}

const httpStatus = (code: number | undefined): number | undefined => (code !== undefined && code >= 100 && code <= 599 ? code : undefined);
/** The legacy transport's failed POST (the SDK's text; the status is only in it). */
const LEGACY_POST_FAILED = /^Error POSTing to endpoint \(HTTP (\d{3})\)/;

/**
 * A thrown transport error as a failure: the HTTP status when upstream answered one (a
 * StreamableHTTPError's, whose text then says it, an SseError's, a legacy POST's), else none.
 */
function transportFailureOf(e: unknown): McpTransportFailure {
  if (e instanceof StatusError) return transportFailure(e.message, e.status);
  if (e instanceof StreamableHTTPError) {
    const status = httpStatus(e.code);
    const prefix = 'Streamable HTTP error: ';
    const message = status !== undefined && e.message.startsWith(prefix) ? `Streamable HTTP error (HTTP ${status}): ${e.message.slice(prefix.length)}` : e.message;
    return transportFailure(message, status);
  }
  if (e instanceof SseError) return transportFailure(e.message, httpStatus(e.code));
  const message = errorMessage(e);
  const legacy = LEGACY_POST_FAILED.exec(message);
  return transportFailure(message, legacy ? httpStatus(Number(legacy[1])) : undefined);
}

/** Longest upstream answer read, in bytes: a JSON body, or one event of an SSE stream. */
export const MAX_UPSTREAM_ANSWER_BYTES = 4 * 1024 * 1024;
const tooLargeMessage = (maxBytes: number): string => `sent an answer over ${maxBytes} bytes`;
/** What the requests of a legacy connection fail with when the server ended its event stream. */
const STREAM_ENDED = 'the server ended its event stream';

const LF = 0x0a;
const CR = 0x0d;

/**
 * `response` with a body that errors (and cancels the upstream body) once more than `maxBytes`
 * arrived: in all, or for an SSE stream (text/event-stream) in one event (bytes since the last
 * blank line). `onTooLarge` is called then, before the error reaches the reader. `onEnd` is called
 * when the body was read to its end, passed the cap, or there is none.
 */
export function cappedResponse(response: Response, maxBytes: number, onTooLarge: (sse: boolean) => void, onEnd?: () => void): Response {
  if (response.body === null) {
    onEnd?.();
    return response;
  }
  const sse = (response.headers.get('content-type') ?? '').toLowerCase().includes('text/event-stream');
  let bytes = 0;
  let lineBytes = 0;
  let last = -1;
  const counted = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      if (!sse) bytes += chunk.byteLength;
      else {
        for (const b of chunk) {
          bytes += 1;
          if (b === LF && last === CR) {
            // the LF of a CRLF: the line already ended at its CR
          } else if (b === LF || b === CR) {
            if (lineBytes === 0) bytes = 0; // a blank line ends the event
            lineBytes = 0;
          } else lineBytes += 1;
          last = b;
        }
      }
      if (bytes > maxBytes) {
        onTooLarge(sse);
        onEnd?.();
        controller.error(new Error(tooLargeMessage(maxBytes)));
        return;
      }
      controller.enqueue(chunk);
    },
    flush() {
      onEnd?.();
    },
  });
  return new Response(response.body.pipeThrough(counted), { status: response.status, statusText: response.statusText, headers: response.headers });
}

/** Request POSTs tracked per connection (see RequestFetches); beyond it the oldest is forgotten (its fetch then ends with the session). */
const MAX_TRACKED_REQUESTS = 256;

/** The JSON-RPC message a transport POSTs (a string body), as far as RequestFetches needs it. */
function postedMessage(init: RequestInit | undefined): { id?: unknown; method?: unknown; params?: { requestId?: unknown } } | undefined {
  if ((init?.method ?? 'GET').toUpperCase() !== 'POST' || typeof init?.body !== 'string') return undefined;
  try {
    const message: unknown = JSON.parse(init.body);
    return typeof message === 'object' && message !== null && !Array.isArray(message) ? message : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The fetches of one connection's requests in flight, by JSON-RPC id. The SDK passes no per-request
 * signal to the transport, and a timed-out or aborted request only ends the wait for it; but it
 * then sends notifications/cancelled naming the request, and that POST aborts the request's own
 * fetch here (a POST still waiting for its answer headers, or its SSE answer stream), so that its
 * upstream connection closes with the call. A request whose answer was read to its end (or came
 * without a body, e.g. 202 on the legacy transport) is forgotten.
 */
class RequestFetches {
  private readonly byId = new LruMap<string, AbortController>(MAX_TRACKED_REQUESTS);

  /** The signal of request `id`'s fetch, and the call that forgets it once its answer ended. */
  start(id: unknown): { signal: AbortSignal; done: () => void } {
    const key = JSON.stringify(id);
    const controller = new AbortController();
    this.byId.set(key, controller);
    return {
      signal: controller.signal,
      done: () => {
        if (this.byId.peek(key) === controller) this.byId.delete(key);
      },
    };
  }

  /** Request `id` was cancelled: its fetch is aborted. */
  cancel(id: unknown): void {
    const key = JSON.stringify(id);
    this.byId.peek(key)?.abort(new Error('cancelled'));
    this.byId.delete(key);
  }
}

/**
 * fetch for the transports: through safeFetch; GET answered 405 unless allowed (see the header);
 * answers capped (cappedResponse), `onTooLarge` told when an SSE stream passes the cap. A request's
 * POST is aborted when the request is cancelled (RequestFetches); any other POST (a notification, an
 * answer to the server) must have its answer headers within `headersTimeoutMs`.
 */
function transportFetch(policy: OutboundPolicy, allowGet: boolean, onTooLarge: () => void, headersTimeoutMs: number) {
  const requests = new RequestFetches();
  return async (url: string | URL, init?: RequestInit): Promise<Response> => {
    if (!allowGet && (init?.method ?? 'GET').toUpperCase() === 'GET') {
      return new Response(null, { status: 405, statusText: 'Method Not Allowed' });
    }
    const message = postedMessage(init);
    if (message?.method === 'notifications/cancelled') requests.cancel(message.params?.requestId);
    const request = message !== undefined && typeof message.method === 'string' && message.id !== undefined ? requests.start(message.id) : undefined;
    const deadline = message !== undefined && request === undefined ? new AbortController() : undefined;
    const timer = deadline && setTimeout(() => deadline.abort(new Error(`no answer in ${headersTimeoutMs} ms`)), headersTimeoutMs);
    const own = request?.signal ?? deadline?.signal;
    const signal = own && init?.signal ? AbortSignal.any([init.signal, own]) : (own ?? init?.signal);
    let fetched: Awaited<ReturnType<typeof safeFetch>>;
    try {
      fetched = await safeFetch(url, { ...init, ...(signal ? { signal } : {}) }, policy);
    } catch (e) {
      request?.done();
      if (signal?.aborted) throw e;
      // workerd: "Network connection lost." for a refused connection. workerd also logs that as
      // "Uncaught (in promise)" from its own fetch, even when caught as here; no rejection reaches
      // the isolate (test/workers/mcp-client-rejections.test.ts).
      throw new Error(`unreachable: ${errorMessage(e)}`);
    } finally {
      clearTimeout(timer);
    }
    if (!fetched.ok) {
      request?.done();
      throw new Error(fetched.error);
    }
    return cappedResponse(fetched.value.response, MAX_UPSTREAM_ANSWER_BYTES, (sse) => sse && onTooLarge(), request?.done);
  };
}

/**
 * The legacy transport, remembering the negotiated protocol version (the SDK keeps it private).
 * workerd's EventTarget also calls an `on<type>` property from dispatchEvent, and the
 * `eventsource` package both calls its `onmessage` and dispatches the event: every message
 * (progress, notifications) would arrive twice. The SDK's handler is moved to a listener.
 * Its start (the GET, then the `endpoint` event) must end within `startTimeoutMs`, else the
 * transport is closed (the GET with it). Once started, an error of the EventSource is its stream
 * ending or failing: the `eventsource` package would dial again by itself, after the `retry:` the
 * server chose (0 included), for as long as the session exists, and the SDK does not close the
 * transport; it is closed here instead (the connection is lost: the next request opens a new one).
 */
class LegacySseTransport extends SSEClientTransport {
  negotiated: string | undefined;
  /** Closed because its event stream ended or failed after the start. */
  ended = false;

  constructor(
    url: URL,
    options: ConstructorParameters<typeof SSEClientTransport>[1],
    private readonly startTimeoutMs: number,
  ) {
    super(url, options);
  }

  override setProtocolVersion(version: string): void {
    this.negotiated = version;
    super.setProtocolVersion(version);
  }

  override async start(): Promise<void> {
    const started = super.start(); // creates the EventSource synchronously
    const source = (this as unknown as { _eventSource?: EventSource })._eventSource;
    const handler = source?.onmessage;
    if (source && handler) {
      source.onmessage = null;
      source.addEventListener('message', handler);
    }
    // Started once the `endpoint` event came (the SDK's own listener, added first, resolves the start);
    // an error before it fails the start.
    let opened = false;
    source?.addEventListener('endpoint', () => {
      opened = true;
    });
    source?.addEventListener('error', () => {
      if (!opened) return;
      this.ended = true;
      void this.close();
    });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${this.startTimeoutMs} ms`)), this.startTimeoutMs);
    });
    try {
      await Promise.race([started, deadline]);
    } catch (e) {
      await this.close();
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }
}

interface Connection {
  client: Client;
  transport: StreamableHTTPClientTransport | LegacySseTransport;
  identity: McpServerIdentity;
  /** Set when the transport closed under us (the next request opens a new connection). */
  lost: boolean;
  /** Why it closed, when an SSE stream passed the answer cap or a legacy stream ended (what its waiting requests fail with). */
  failure?: string;
}

/** Whether the server answered that our session does not exist (any more). */
function sessionLost(e: unknown): boolean {
  if (!(e instanceof StreamableHTTPError)) return false;
  return e.code === 404 || (e.code === 400 && /session/i.test(e.message));
}

/** Streamable HTTP refused at initialize: try the legacy transport (MCP spec, backwards compatibility). */
const legacyHint = (e: unknown): boolean => e instanceof StreamableHTTPError && [400, 404, 405].includes(e.code ?? 0);

/** A thrown SDK/transport error as an McpFailure; our own stops by their fixed messages. */
function failureOf(e: unknown, stop: { timedOutMs?: number; aborted: boolean }): McpFailure {
  if (stop.aborted) return transportFailure('aborted');
  if (e instanceof McpError) {
    const data: unknown = e.data;
    if (e.code === ErrorCode.RequestTimeout && typeof data === 'object' && data !== null && ('timeout' in data || 'maxTotalTimeout' in data)) {
      const d = data as { timeout?: unknown; maxTotalTimeout?: unknown };
      const ms = typeof d.maxTotalTimeout === 'number' ? d.maxTotalTimeout : typeof d.timeout === 'number' ? d.timeout : stop.timedOutMs;
      return transportFailure(`timed out after ${ms} ms`);
    }
    if (e.code === ErrorCode.ConnectionClosed && e.message === `MCP error ${ErrorCode.ConnectionClosed}: Connection closed`) {
      return transportFailure('connection closed');
    }
    const prefix = `MCP error ${e.code}: `;
    const message = clip(e.message.startsWith(prefix) ? e.message.slice(prefix.length) : e.message);
    return data === undefined ? { kind: 'protocol', code: e.code, message } : { kind: 'protocol', code: e.code, message, data };
  }
  return transportFailureOf(e);
}

const identityOf = (client: Client, protocolVersion: string | undefined, transport: McpTransportKind): McpServerIdentity => {
  const info = client.getServerVersion();
  const instructions = client.getInstructions();
  return {
    serverInfo: info ? { ...info } : { name: 'unknown', version: 'unknown' },
    capabilities: { ...(client.getServerCapabilities() ?? {}) },
    protocolVersion: protocolVersion ?? 'unknown',
    ...(instructions === undefined ? {} : { instructions }),
    transport,
  };
};

class Session implements McpSession {
  private connection: Connection | undefined;
  private opening: Promise<Connection> | undefined;
  private legacy = false;
  /** The identity of the latest connection (kept after close). */
  private identified: McpServerIdentity | undefined;
  closed = false;

  constructor(
    private readonly server: McpServerEndpoint,
    private readonly url: URL,
    private readonly options: McpOpenOptions,
  ) {}

  get identity(): McpServerIdentity {
    if (!this.identified) throw new Error('the session is not open');
    return this.identified;
  }

  get sessionId(): string | undefined {
    const transport = this.connection?.transport;
    return transport instanceof StreamableHTTPClientTransport ? transport.sessionId : undefined;
  }

  /**
   * The open connection, opening one (once for concurrent callers) when there is none. Only the
   * first open takes the caller's signal; a re-open is shared and bounded by connectTimeoutMs.
   */
  async current(signal?: AbortSignal): Promise<Connection> {
    if (this.closed) throw new Error('session is closed');
    if (this.connection && !this.connection.lost) return this.connection;
    this.opening ??= this.open(signal).finally(() => {
      this.opening = undefined;
    });
    return this.opening;
  }

  private async open(signal?: AbortSignal): Promise<Connection> {
    const stale = this.connection;
    this.connection = undefined;
    await stale?.client.close().catch(() => undefined);
    let connection: Connection;
    if (this.legacy) {
      connection = await this.connect('sse', signal);
    } else {
      try {
        connection = await this.connect('streamable-http', signal);
      } catch (e) {
        if (this.options.legacySse === false || !legacyHint(e)) throw e;
        try {
          connection = await this.connect('sse', signal);
        } catch (sse) {
          const stop = { aborted: signal?.aborted === true };
          const first = failureOf(e, stop);
          throw new StatusError(`${first.message} (legacy HTTP+SSE: ${failureOf(sse, stop).message})`, first.kind === 'transport' ? first.status : undefined);
        }
        this.legacy = true;
      }
    }
    if (this.closed) {
      await connection.client.close().catch(() => undefined);
      throw new Error('session is closed');
    }
    this.connection = connection;
    this.identified = connection.identity;
    return connection;
  }

  private async connect(kind: McpTransportKind, signal?: AbortSignal): Promise<Connection> {
    const policy = this.options.policy ?? STRICT_OUTBOUND;
    const requestInit = this.server.headers ? { headers: { ...this.server.headers } } : undefined;
    // An SSE stream over the answer cap: the connection is closed, failing the requests that wait on it.
    const tooLarge = { hit: false };
    const onTooLarge = (): void => {
      tooLarge.hit = true;
      client.close().catch(() => undefined);
    };
    const timeout = this.options.connectTimeoutMs ?? MCP_CLIENT_DEFAULTS.connectTimeoutMs;
    const transport =
      kind === 'sse'
        ? new LegacySseTransport(this.url, { fetch: transportFetch(policy, true, onTooLarge, timeout), requestInit }, timeout)
        : new StreamableHTTPClientTransport(this.url, {
            fetch: transportFetch(policy, this.options.standaloneGet === true, onTooLarge, timeout),
            requestInit,
          });
    const client = new Client(this.options.clientInfo ?? CLIENT_INFO, { capabilities: {}, jsonSchemaValidator: validator });
    const onNotification = this.options.onNotification;
    if (onNotification) {
      client.fallbackNotificationHandler = async (n) => {
        onNotification({ method: n.method, ...(n.params ? { params: { ...n.params } } : {}) });
      };
    }
    // Transport errors also reject the pending request; this hook only keeps them from being unhandled.
    transport.onerror = () => undefined;
    const streamEnded = (): boolean => transport instanceof LegacySseTransport && transport.ended;
    try {
      await client.connect(transport as Transport, { signal, timeout });
    } catch (e) {
      await client.close().catch(() => undefined);
      throw streamEnded() ? new Error(STREAM_ENDED) : e;
    }
    const protocolVersion = transport instanceof LegacySseTransport ? transport.negotiated : transport.protocolVersion;
    const connection: Connection = { client, transport, identity: identityOf(client, protocolVersion, kind), lost: false };
    client.onclose = () => {
      connection.lost = true;
      if (tooLarge.hit) connection.failure = tooLargeMessage(MAX_UPSTREAM_ANSWER_BYTES);
      else if (streamEnded()) connection.failure = STREAM_ENDED;
    };
    return connection;
  }

  async request(method: string, params?: Record<string, unknown>, options: McpRequestOptions = {}): Promise<Result<unknown, McpFailure>> {
    const signal = options.signal;
    if (signal?.aborted) return err(transportFailure('aborted'));
    if (this.closed) return err(transportFailure('session is closed'));
    const timeoutMs = options.timeoutMs ?? MCP_CLIENT_DEFAULTS.requestTimeoutMs;
    const sdkOptions = {
      signal,
      timeout: timeoutMs,
      resetTimeoutOnProgress: options.onProgress !== undefined,
      ...(options.maxTotalMs === undefined ? {} : { maxTotalTimeout: options.maxTotalMs }),
      ...(options.onProgress ? { onprogress: options.onProgress } : {}),
    };
    const send = async (connection: Connection): Promise<unknown> =>
      connection.client.request(params === undefined ? { method } : { method, params }, RawResult, sdkOptions);
    const stop = (): { timedOutMs: number; aborted: boolean } => ({ timedOutMs: timeoutMs, aborted: signal?.aborted === true });
    let connection: Connection;
    try {
      connection = await this.current();
    } catch (e) {
      return err(failureOf(e, stop()));
    }
    try {
      return ok(await send(connection));
    } catch (e) {
      if (connection.failure !== undefined && !signal?.aborted) return err(transportFailure(connection.failure));
      const hadSession = connection.transport instanceof StreamableHTTPClientTransport && connection.transport.sessionId !== undefined;
      if (!hadSession || !sessionLost(e) || this.closed || signal?.aborted) return err(failureOf(e, stop()));
    }
    // The server forgot the session: a new one (once for concurrent callers), one retry.
    if (this.connection === connection) connection.lost = true;
    try {
      return ok(await send(await this.current()));
    } catch (e) {
      return err(failureOf(e, stop()));
    }
  }

  async notify(method: string, params?: Record<string, unknown>): Promise<Result<void, McpFailure>> {
    try {
      const connection = await this.current();
      await connection.client.notification(params === undefined ? { method } : { method, params });
      return ok(undefined);
    } catch (e) {
      return err(failureOf(e, { aborted: false }));
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const connection = this.connection;
    this.connection = undefined;
    if (!connection) return;
    const transport = connection.transport;
    if (transport instanceof StreamableHTTPClientTransport && transport.sessionId && !connection.lost) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const deadline = new Promise<void>((r) => {
        timer = setTimeout(r, MCP_CLIENT_DEFAULTS.closeTimeoutMs);
      });
      await Promise.race([transport.terminateSession().catch(() => undefined), deadline]);
      clearTimeout(timer);
    }
    await connection.client.close().catch(() => undefined);
  }
}

/** Opens a session with an MCP server (see the header); failures as transport failures. */
export async function openMcpSession(server: McpServerEndpoint, options: McpOpenOptions = {}): Promise<Result<McpSession, McpTransportFailure>> {
  const checked = checkOutboundUrl(server.url, 'http', options.policy ?? STRICT_OUTBOUND);
  if (!checked.ok) return err(transportFailure(checked.error));
  if (options.signal?.aborted) return err(transportFailure('aborted'));
  const session = new Session(server, checked.value, options);
  try {
    await session.current(options.signal);
  } catch (e) {
    await session.close();
    const timeout = options.connectTimeoutMs ?? MCP_CLIENT_DEFAULTS.connectTimeoutMs;
    const failure = failureOf(e, { timedOutMs: timeout, aborted: options.signal?.aborted === true });
    return err(failure.kind === 'transport' ? failure : transportFailure(failure.message));
  }
  return ok(session);
}
