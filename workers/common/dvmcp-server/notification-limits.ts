// How many notification events (21316) a DVMCP server sends its clients for what upstream tells it.
// Each is an event to sign, and one for the shard to verify, so an upstream server (malicious or
// compromised) that answers one call with thousands of notifications must not become thousands of
// events (docs/BRIDGE.md "Limits"):
//   - list_changed: at most one per (server, client, list) per NOTIFY_WINDOW_MS; one that comes
//     while a window is open is held, and the last held is sent when the window ends (opening the
//     next one). resources/updated likewise per (server, client, uri).
//   - progress: at most one per PROGRESS_INTERVAL_MS per request, the latest kept (sent at the
//     interval's end); one still held when the answer comes is dropped (the answer says more).
//   - every notification event of a bridge counts against NOTIFICATIONS_PER_MINUTE (a fixed
//     one-minute window); past it they are dropped, logged once per window.
// In memory: an evicted bridge starts with fresh windows.

/** One list_changed per (server, client, list), one resources/updated per (server, client, uri), per this window. */
export const NOTIFY_WINDOW_MS = 1000;
/** One progress notification per request per this interval (4 a second). */
export const PROGRESS_INTERVAL_MS = 250;
/** Notification events a bridge sends in one minute, all clients, servers and kinds together. */
export const NOTIFICATIONS_PER_MINUTE = 1200;
/**
 * Keys with a window open at once (memory: one timer each); a notification for another key is
 * dropped while they are all open. Above NOTIFICATIONS_PER_MINUTE, so that the budget binds first.
 */
export const MAX_COALESCED_KEYS = 4096;

const MINUTE_MS = 60_000;

/**
 * At most one value per key per `windowMs`: the first is emitted at once and opens the key's window;
 * later ones replace the one held, which is emitted when the window ends (and opens the next).
 */
export class Coalescer<K, V> {
  private readonly open = new Map<K, { held?: { value: V }; timer: ReturnType<typeof setTimeout> }>();

  constructor(
    private readonly windowMs: number,
    private readonly emit: (key: K, value: V) => void,
    private readonly maxKeys = MAX_COALESCED_KEYS,
  ) {}

  /** Keys with a window open. */
  get size(): number {
    return this.open.size;
  }

  /** Offers `value` for `key`: emitted now, held for the window's end, or (too many keys open) dropped: false. */
  offer(key: K, value: V): boolean {
    const w = this.open.get(key);
    if (w) {
      w.held = { value };
      return true;
    }
    if (this.open.size >= this.maxKeys) return false;
    this.arm(key);
    this.emit(key, value);
    return true;
  }

  /** Forgets `key`: its held value is dropped and its window closed. */
  cancel(key: K): void {
    const w = this.open.get(key);
    if (!w) return;
    clearTimeout(w.timer);
    this.open.delete(key);
  }

  private arm(key: K): void {
    const w: { held?: { value: V }; timer: ReturnType<typeof setTimeout> } = {
      timer: setTimeout(() => {
        if (this.open.get(key) !== w) return;
        this.open.delete(key);
        if (w.held === undefined) return;
        this.arm(key);
        this.emit(key, w.held.value);
      }, this.windowMs),
    };
    this.open.set(key, w);
  }
}

/** At most `perMinute` notification events a minute (fixed windows); the first refusal of a window is logged. */
export class NotificationBudget {
  private window = { start: -Infinity, count: 0, dropped: 0 };
  now: () => number = () => Date.now();

  constructor(
    readonly perMinute: number,
    private readonly log: (line: string) => void,
  ) {}

  /** Whether one more notification event may go out now (counted if so). */
  take(): boolean {
    const now = this.now();
    if (now - this.window.start >= MINUTE_MS) this.window = { start: now, count: 0, dropped: 0 };
    if (this.window.count < this.perMinute) {
      this.window.count += 1;
      return true;
    }
    if (this.window.dropped++ === 0) {
      const seconds = Math.max(1, Math.ceil((this.window.start + MINUTE_MS - now) / 1000));
      this.log(`notification budget spent (${this.perMinute} a minute): notifications are dropped for ${seconds} s`);
    }
    return false;
  }
}
