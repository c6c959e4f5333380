// What a live subscription costs a shard's memory, estimated from its filters, so that the filters
// a connection and a shard hold can be capped (`max_subscription_memory_per_connection`,
// `max_subscription_memory`, limits.ts). A held subscription keeps its filters, the matcher's
// compiled sets (filters.ts) and one fan-out index entry per value of the list it is filed under
// (fanout-index.ts); measured in V8, a list value costs 80 (kinds) to 350 (hex ids, authors, tags)
// bytes besides its text, and long strings about their length (docs/OPERATIONS.md "Memory of a
// shard"). The estimate is the filters' JSON length plus BYTES_PER_VALUE per value.

import { filterValueCount, type Filter } from '../../src/shared/filters.js';

/** Memory a held filter value costs besides its text (the most a value was measured to cost: 349 bytes). */
export const BYTES_PER_VALUE = 350;

/** Estimated bytes of memory a subscription with these filters holds. */
export function subscriptionMemory(filters: readonly Filter[]): number {
  let values = 0;
  for (const f of filters) values += filterValueCount(f);
  return JSON.stringify(filters).length + values * BYTES_PER_VALUE;
}
