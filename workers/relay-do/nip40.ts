// NIP-40 on the relay: an expired event is refused on publish, and a stored event with an
// expiration schedules the shard's alarm (which purges expired events, store.ts `purgeExpired`).
// Queries never return an expired event (query-sql.ts). A kind kept for good has no expiration in a
// restore (store.ts `keptForGood`), nor once stored (`heldExpiration`).

import { expirationOf } from '../../src/shared/event.js';
import { reject } from '../../src/shared/errors.js';
import type { OnEventSavedHook, RejectEventHook } from './policy.js';
import { heldExpiration } from './store.js';
import { wakeNoLaterThan } from '../common/alarms.js';

export const notExpired: RejectEventHook = (e, { now, restoring }) => {
  const exp = restoring ? heldExpiration(e) : expirationOf(e);
  return exp !== null && exp <= now ? reject('invalid', 'event has expired') : undefined;
};

/** Brings the shard's alarm forward to a stored event's expiration. */
export const scheduleExpiry =
  (storage: DurableObjectStorage): OnEventSavedHook =>
  async (e) => {
    const exp = heldExpiration(e);
    if (exp === null) return;
    await wakeNoLaterThan(storage, exp * 1000);
  };
