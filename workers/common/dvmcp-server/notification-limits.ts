// How many notification events (21316) a DVMCP server sends its clients for what upstream tells it.
// Each is an event to sign, and one for the shard to verify, so an upstream server (malicious or
// compromised) that answers one call with thousands of notifications must not become thousands of
// events (docs/BRIDGE.md "Limits"):
//   - list_changed: at most one per (server, client, list) per NOTIFY_WINDOW_MS; one that comes
//     while a window is open is held, and the last held is sent when the window ends (opening the
//     next one). resources/updated likewise per (server, client, uri).
//   - progress: at most one per PROGRESS_INTERVAL_MS per request, the latest kept (sent at the
//     interval's end); one still held when the answer comes is dropped (the answer says more).
//   - a bridge sends at most NOTIFICATIONS_PER_MINUTE notification events a minute (a fixed
//     one-minute window), shared among its servers: a server's share is half of what the other
//     servers left (and at most SERVER_NOTIFICATIONS_PER_MINUTE), so a server that floods its
//     clients spends at most half, two flooding at once a third each, and however many flood, the
//     quiet servers still find some left. Past its share a server's notifications are dropped,
//     logged once per window per server. (A server admitted while count + the bridge's total is
//     under the budget, so the total never passes it.)
//   - a notification that does not fit one event in its form (answer-fit.ts, the answers' rule) is
//     dropped before it takes any budget, logged once per server per window: never sent for the
//     relay to refuse (or, gift-wrapped, to fail to wrap).
// In memory: an evicted bridge starts with fresh windows.

import type { Form } from '../../../src/shared/dvmcp-wrap.js';
import type { EventTemplate } from '../../../src/shared/relay-types.js';
import { messageSize } from '../../../src/shared/dvmcp-size.js';

/** One list_changed per (server, client, list), one resources/updated per (server, client, uri), per this window. */
export const NOTIFY_WINDOW_MS = 1000;
/** One progress notification per request per this interval (4 a second). */
export const PROGRESS_INTERVAL_MS = 250;
/** Notification events a bridge sends in one minute, all clients, servers and kinds together. */
export const NOTIFICATIONS_PER_MINUTE = 1200;
/**
 * Notification events of one server's clients in one minute at most: half the bridge's. Less when
 * other servers spent some: half of what they left (NotificationBudget), so flooding servers (hostile
 * or compromised upstreams) cannot spend the quiet ones' notifications, however many they are.
 */
export const SERVER_NOTIFICATIONS_PER_MINUTE = NOTIFICATIONS_PER_MINUTE / 2;
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

interface ServerWindow {
  count: number;
  dropped: number;
  /** Whether a notification too large for one event was logged this window. */
  tooLargeTold: boolean;
}

/**
 * At most `perMinute` notification events a minute in all (fixed windows), each server at most half
 * of what the others left and at most `perServer`, each one that fits one event; a server's first
 * refusal in a window is logged.
 */
export class NotificationBudget {
  private window = { start: -Infinity, count: 0, servers: new Map<string, ServerWindow>() };
  now: () => number = () => Date.now();

  constructor(
    readonly perMinute: number,
    readonly perServer: number,
    private readonly log: (line: string) => void,
  ) {}

  /**
   * Whether notification `t` of server `serverId` goes out now in `form`: it fits one event, and
   * the bridge and the server are within their budgets (counted if so).
   */
  admit(serverId: string, t: EventTemplate, form: Form): boolean {
    const now = this.now();
    if (now - this.window.start >= MINUTE_MS) this.window = { start: now, count: 0, servers: new Map() };
    const w = this.window;
    let server = w.servers.get(serverId);
    if (!server) w.servers.set(serverId, (server = { count: 0, dropped: 0, tooLargeTold: false }));
    const { size, room } = messageSize(t, form);
    if (size > room) {
      if (!server.tooLargeTold) {
        const method = t.tags.find((tag) => tag[0] === 'method')?.[1] ?? 'a notification';
        this.log(`${method} of server ${serverId} dropped: ${size} bytes, one event carries at most ${room} (logged once a minute per server)`);
      }
      server.tooLargeTold = true;
      return false;
    }
    const share = Math.min(this.perServer, Math.floor((this.perMinute - (w.count - server.count)) / 2));
    if (server.count >= share) {
      const seconds = Math.max(1, Math.ceil((w.start + MINUTE_MS - now) / 1000));
      if (server.dropped++ === 0) {
        this.log(`server ${serverId} spent its notification share (${share} a minute: half of what the other servers left, at most ${this.perServer}): its notifications are dropped for ${seconds} s`);
      }
      return false;
    }
    w.count += 1;
    server.count += 1;
    return true;
  }
}
