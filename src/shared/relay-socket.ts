// The platform-facing side of the relay client: the part of a WebSocket it uses (web API, workerd
// and `ws` all fit), reading a frame's text, closing without throwing, and the reconnect backoff.

/** WebSocket readyState values (identical in the web API, workerd and `ws`). */
export const READY_STATE = { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 } as const;

/** The fields of open/message/close/error events that the client reads. */
export interface SocketEvent {
  readonly type?: string;
  readonly data?: unknown;
  readonly code?: number;
  readonly reason?: string;
}

/** The part of a WebSocket the client uses: the web API, workerd's WebSocket and `ws` all fit. */
export interface SocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: 'open' | 'message' | 'close' | 'error', listener: (event: SocketEvent) => void): void;
}

/**
 * Opens the client's socket: the only platform-specific piece. A socket that is already OPEN when
 * the factory returns (an accepted workerd socket) is used as is.
 *   Node 20:   new RelayClient({ url, socket: (u) => new WebSocket(u) })        // `ws` package
 *   workerd:   new RelayClient({ url, socket: (u) => new WebSocket(u) })        // global WebSocket
 *   workerd:   new RelayClient({ url, socket: async (u) => {                    // fetch upgrade
 *                const res = await fetch(u.replace(/^ws/, 'http'), { headers: { Upgrade: 'websocket' } });
 *                const ws = res.webSocket; if (!ws) throw new Error(`no upgrade: ${res.status}`);
 *                ws.accept(); return ws; } })                                     // already open
 */
export type SocketFactory = (url: string) => SocketLike | Promise<SocketLike>;

export interface BackoffOptions {
  /** Delay before the first reconnect attempt (before jitter). */
  initialDelayMs: number;
  /** Upper bound of any delay. */
  maxDelayMs: number;
  /** Growth per failed attempt. */
  factor: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { initialDelayMs: 250, maxDelayMs: 30_000, factor: 2 };

/**
 * Delay before reconnect attempt `attempt` (0-based): exponential, capped at maxDelayMs, with
 * "equal jitter" (half fixed, half random) so clients dropped together do not return together.
 * `random` returns a number in [0, 1).
 */
export function backoffDelay(attempt: number, o: BackoffOptions, random: () => number): number {
  const capped = Math.min(o.maxDelayMs, o.initialDelayMs * o.factor ** Math.max(0, attempt));
  return Math.round(capped / 2 + (capped / 2) * Math.min(1, Math.max(0, random())));
}

/** The text of a message event's data (a string, or UTF-8 bytes); undefined for anything else. */
export function messageText(data: unknown): string | undefined {
  if (typeof data === 'string') return data;
  if (data instanceof ArrayBuffer) return new TextDecoder().decode(data);
  if (ArrayBuffer.isView(data)) return new TextDecoder().decode(data);
  return undefined;
}

/** Closes a socket that is connecting or open; never throws. */
export function safeClose(socket: SocketLike, code: number, reason: string): void {
  try {
    if (socket.readyState === READY_STATE.CONNECTING || socket.readyState === READY_STATE.OPEN) socket.close(code, reason);
  } catch {
    // already closing or closed
  }
}
