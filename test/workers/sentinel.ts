// "Nothing arrived" without a timer: a sentinel event that the watcher may read is published after
// the action under test; the shard sends a connection's frames in order, so anything the action
// delivered to the watcher is there before the sentinel.

import type { NostrEvent } from '../../src/shared/event.js';
import type { TestSocket } from './helpers.js';

/**
 * Whether no frame matching `pred` reached `watcher` before `sentinel` (published now by
 * `publisher`); deliveries of the sentinel itself, to any subscription, are not counted.
 */
export async function noneBefore(
  watcher: TestSocket,
  pred: (f: unknown[]) => boolean,
  publisher: TestSocket,
  sentinel: NostrEvent,
): Promise<boolean> {
  const sid = `sentinel-${sentinel.id.slice(0, 8)}`;
  const before = await watcher.req(sid, { ids: [sentinel.id] });
  if (before.closed !== undefined || before.events.length > 0) throw new Error(`sentinel subscription: ${JSON.stringify(before)}`);
  const ok = await publisher.publish(sentinel);
  if (ok[2] !== true) throw new Error(`the sentinel was refused: ${ok[3]}`);
  await watcher.next((f) => f[0] === 'EVENT' && f[1] === sid);
  const isSentinel = (f: unknown[]) => f[0] === 'EVENT' && (f[2] as { id?: unknown } | undefined)?.id === sentinel.id;
  return !watcher.frames.some((f) => pred(f) && !isSentinel(f));
}
