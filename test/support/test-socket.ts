// A relay connection as tests see it (frames collected, awaited by predicate, NIP-42 auth) and the
// sentinel that proves "nothing was delivered" without a timeout. Runtime-neutral: it takes any
// accepted WebSocket (test/workers/helpers.ts opens them through the Worker).

import type { NostrEvent } from '../../src/shared/event.js';
import { randomHex, sign, type Keys } from './nostr.js';

export type Frame = unknown[];

export class TestSocket {
  readonly frames: Frame[] = [];
  private waiters: Array<() => void> = [];
  closed: { code: number; reason: string } | undefined;
  challenge = '';

  constructor(
    readonly ws: WebSocket,
    readonly url: string,
  ) {
    ws.addEventListener('message', (m) => {
      const frame = JSON.parse(m.data as string) as Frame;
      if (frame[0] === 'AUTH') this.challenge = frame[1] as string;
      this.frames.push(frame);
      for (const w of this.waiters.splice(0)) w();
    });
    ws.addEventListener('close', (c) => {
      this.closed = { code: c.code, reason: c.reason };
      for (const w of this.waiters.splice(0)) w();
    });
  }

  send(frame: unknown): void {
    this.ws.send(typeof frame === 'string' ? frame : JSON.stringify(frame));
  }

  /**
   * Waits for (and removes) the first frame matching `pred`. A hang detector, not a speed check: past
   * `timeoutMs` (generous) it throws, naming `awaited` (what the frame is, e.g. "the OK of <id>"), so
   * a frame that never comes fails its test with a reason instead of running into the test's timeout.
   */
  async next(pred: (f: Frame) => boolean = () => true, timeoutMs = 10_000, awaited = 'any frame matching the predicate'): Promise<Frame> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const i = this.frames.findIndex(pred);
      if (i >= 0) return this.frames.splice(i, 1)[0]!;
      if (this.closed) throw new Error(`socket closed (${this.closed.code}) while waiting for ${awaited}; frames: ${JSON.stringify(this.frames)}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for a frame: ${awaited}, none within ${timeoutMs} ms on ${this.url}; have: ${JSON.stringify(this.frames).slice(0, 2000)}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** Publishes an event and returns its OK frame. */
  async publish(e: NostrEvent | Record<string, unknown>): Promise<[string, string, boolean, string]> {
    this.send(['EVENT', e]);
    const id = (e as { id?: string }).id;
    return (await this.next((f) => f[0] === 'OK' && f[1] === id, undefined, `the OK of event ${id}`)) as [string, string, boolean, string];
  }

  /** Sends a REQ and collects events until EOSE (or CLOSED, returned as `closed`). */
  async req(subId: string, ...filters: object[]): Promise<{ events: NostrEvent[]; closed?: string }> {
    this.send(['REQ', subId, ...filters]);
    const events: NostrEvent[] = [];
    for (;;) {
      const f = await this.next((x) => (x[0] === 'EVENT' || x[0] === 'EOSE' || x[0] === 'CLOSED') && x[1] === subId, undefined, `the EOSE or CLOSED of REQ ${subId} (${events.length} events so far)`);
      if (f[0] === 'EVENT') events.push(f[2] as NostrEvent);
      else if (f[0] === 'CLOSED') return { events, closed: f[2] as string };
      else return { events };
    }
  }

  /** Authenticates as `k` with NIP-42. */
  async auth(k: Keys, overrides: { relay?: string; challenge?: string; created_at?: number } = {}) {
    if (!this.challenge) await this.next((f) => f[0] === 'AUTH', undefined, 'the NIP-42 challenge');
    const e = sign(k, {
      kind: 22242,
      content: '',
      created_at: overrides.created_at,
      tags: [
        ['relay', overrides.relay ?? this.url],
        ['challenge', overrides.challenge ?? this.challenge],
      ],
    });
    this.send(['AUTH', e]);
    return (await this.next((f) => f[0] === 'OK' && f[1] === e.id, undefined, `the OK of AUTH ${e.id}`)) as [string, string, boolean, string];
  }

  /**
   * "Nothing matching `pred` was delivered", without a timeout: fires `sentinel` (an event this
   * socket must receive, published after the action that must not deliver) and waits for it. The
   * shard sends one socket's frames in the order it processed the events, so a wrong delivery,
   * however slow, arrives before the sentinel. `pred` must not match the sentinel itself.
   */
  async silence(pred: (f: Frame) => boolean, sentinel: Sentinel): Promise<boolean> {
    await sentinel.fire();
    return !this.frames.some(pred);
  }

  close(): void {
    this.ws.close(1000, 'done');
  }
}

/** A frame predicate: the EVENT frame carrying the event with `id` (on any subscription). */
export const eventFrame =
  (id: string) =>
  (f: Frame): boolean =>
    f[0] === 'EVENT' && (f[2] as { id?: string } | undefined)?.id === id;

const SENTINEL_KIND = 20999;

/**
 * An event that `watcher` must receive: `watcher` subscribes to ephemeral kind 20999 by `author`
 * on its own subscription; `fire()` publishes one through `publisher` (after the action under
 * test, so the shard processes it later) and waits until the watcher has it. On an owner shard,
 * `author` must be allowed to write there (the owner does).
 */
export class Sentinel {
  private constructor(
    private readonly watcher: TestSocket,
    private readonly publisher: TestSocket,
    private readonly author: Keys,
    private readonly subId: string,
  ) {}

  static async arm(watcher: TestSocket, publisher: TestSocket, author: Keys): Promise<Sentinel> {
    const subId = `sentinel-${randomHex(4)}`;
    const res = await watcher.req(subId, { kinds: [SENTINEL_KIND], authors: [author.pk] });
    if (res.closed !== undefined || res.events.length > 0) throw new Error(`sentinel subscription refused: ${JSON.stringify(res)}`);
    return new Sentinel(watcher, publisher, author, subId);
  }

  async fire(): Promise<void> {
    const e = sign(this.author, { kind: SENTINEL_KIND, content: `sentinel ${randomHex(4)}` });
    const ok = await this.publisher.publish(e);
    if (!ok[2]) throw new Error(`sentinel refused: ${JSON.stringify(ok)}`);
    await this.watcher.next((f) => f[0] === 'EVENT' && f[1] === this.subId && (f[2] as NostrEvent).id === e.id, undefined, `the sentinel ${e.id} on ${this.subId}`);
  }
}
