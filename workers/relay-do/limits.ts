// The relay's limits: one object that NIP-11 advertises and the shard enforces. Operators may
// override any field with the RELAY_LIMITS variable (JSON).
//
// One rule reads RELAY_LIMITS (parseRelayLimits), for the shards and for `npm run deploy`
// (scripts/deploy-check.mjs bundles this file), which refuses whatever it reports. A key an earlier
// version named otherwise (RENAMED_LIMITS) is read under its new name. At run time a value that is
// still wrong does not take the relay down: its wrong fields (unknown keys, bad values; all of them
// when it is not a JSON object) are ignored, those limits keep their defaults, and each isolate logs
// what is wrong once per value (limitsFromEnv). NIP-11 advertises the limits in force.

import { z } from 'zod';

export const RelayLimitsSchema = z.strictObject({
  max_message_length: z.number().int().positive().default(262_144),
  max_subscriptions: z.number().int().positive().default(32),
  /**
   * Open WebSocket connections of one shard; an upgrade past it gets 503. With max_subscriptions
   * it keeps a full shard within a Durable Object's 128 MB (docs/OPERATIONS.md "Memory of a shard").
   */
  max_connections: z.number().int().positive().default(300),
  /**
   * Open WebSocket connections of one shard from one client address (with edge objects, every
   * connection of an address lands on the same edge, workers/common/edges.ts, so this holds per shard)
   * (client-address.ts: an IPv4 address, an IPv6 /64); an upgrade past it gets 429. Without it one
   * stranger could hold all `max_connections` of a shard. Requests without CF-Connecting-IP (never on
   * Cloudflare's network) and edgestr's own agents are not counted.
   */
  max_connections_per_ip: z.number().int().positive().default(30),
  /**
   * Open WebSocket connections of one owner's hosted agents and bridges (INTERNAL_HEADER, counted by
   * INTERNAL_OWNER_HEADER) on a shard that is not that owner's (the public shard: every owner's); an
   * upgrade past it gets 429. Without it one owner's agents, each listing the shard's URL under
   * many spellings, could hold all `max_connections` of another tenant's shard or of the public one.
   * With edge objects every connection of one owner's components lands on the same edge
   * (workers/common/relay-sockets.ts), so this holds per shard.
   */
  max_agent_connections_per_owner: z.number().int().positive().default(30),
  /**
   * Open WebSocket connections of the hosted agents and bridges of all owners other than the
   * shard's (the public shard: of every owner) together, on one shard (with edge objects: on one
   * edge, like `max_connections`); an upgrade past it gets 503. The rest of `max_connections` is
   * kept for the shard owner's side: its clients (CLI, console), its own agents and bridges, and
   * outside clients (on the public shard: everyone's clients and the deployment's own components).
   */
  max_agent_connections: z.number().int().positive().default(150),
  /**
   * New WebSocket connections one client address may open to a shard (with edge objects: to the one
   * edge its connections land on): `connections_burst_per_ip` at once, then this many per second,
   * whether or not the earlier ones are still open; an upgrade past it gets 429. Without it one
   * address could open and close sockets as fast as it can send upgrades (each one a socket
   * accepted, a connection set up and torn down by the shard's one thread) while never holding more
   * than `max_connections_per_ip`. Not counted: no address known, edgestr's own agents, and
   * loopback (local runs, whose tools and test suites reconnect freely; never a client on Cloudflare).
   */
  connections_per_second_per_ip: z.number().positive().default(2),
  connections_burst_per_ip: z.number().int().positive().default(60),
  max_filters: z.number().int().positive().default(16),
  /**
   * Estimated memory (subscription-memory.ts) the filters of one connection's open subscriptions
   * may hold; a REQ past it gets CLOSED `rate-limited:`. Five follow feeds of 1,000 authors fit.
   */
  max_subscription_memory_per_connection: z.number().int().positive().default(2_097_152),
  /**
   * The same for all connections of a shard together (with edge objects: of one edge); a REQ past it
   * gets CLOSED `error:`. With max_connections it keeps a full shard within a Durable Object's
   * 128 MB (docs/OPERATIONS.md "Memory of a shard").
   */
  max_subscription_memory: z.number().int().positive().default(8_388_608),
  max_limit: z.number().int().positive().default(500),
  default_limit: z.number().int().positive().default(500),
  max_subid_length: z.number().int().positive().max(256).default(64),
  max_event_tags: z.number().int().positive().default(2000),
  /** Values in one filter, counted over ids, authors, kinds and every #tag list together (duplicates count once). */
  max_filter_values: z.number().int().positive().default(1000),
  /**
   * Events one COUNT counts at most (NIP-45; all its filters together). Past it the answer is the
   * number counted so far with `approximate: true`: a lower bound. A COUNT's work is then bounded
   * whatever the shard holds.
   */
  max_count: z.number().int().positive().default(100_000),
  /** Bytes of stored events one REQ may return; past it the relay stops early and sends EOSE (NIP-01 allows fewer than `limit`). */
  max_query_bytes: z.number().int().positive().default(4_194_304),
  /**
   * Stored bytes (as owner-plan.ts `countedBytes` counts them: the events' JSON and the copies of
   * their tag values the indexes keep) one shard holds at most. The public shard's bound: clients
   * may fill all but RESERVED_SHARE of it, the rest is kept for edgestr's own connections (its agents
   * and bridges, an operator's import). An owner shard's stored_bytes when its plan sets none, or
   * more: events from others then hold at most INBOX_SHARE of it. A Durable Object holds 10 GB; what
   * a stored event takes on disk is 1 to 3.3 times what is counted (its id and key are in five
   * indexes: docs/OPERATIONS.md "Storage of a shard"), so the default keeps even the worst case
   * under it, with room for the shard's other tables.
   */
  max_stored_bytes: z.number().int().positive().default(2_147_483_648),
  /** `e` and `a` tags of one kind 5 deletion. */
  max_deletion_targets: z.number().int().positive().default(500),
  /** Distinct pubkeys one connection may authenticate as (NIP-42); more are refused with `restricted:`. */
  max_auth_pubkeys_per_connection: z.number().int().positive().max(16).default(8),
  max_content_length: z.number().int().positive().default(131_072),
  /** Events older than now - this many seconds are refused. */
  created_at_lower_limit: z.number().int().positive().default(94_608_000),
  /** Events newer than now + this many seconds are refused. */
  created_at_upper_limit: z.number().int().positive().default(900),
  /** Token buckets: sustained rate per second and burst, per connection. */
  events_per_second_per_connection: z.number().positive().default(20),
  events_burst_per_connection: z.number().int().positive().default(100),
  reqs_per_second_per_connection: z.number().positive().default(20),
  reqs_burst_per_connection: z.number().int().positive().default(100),
  /** Kind 24200 frames skip the buckets above (NIP-AO has its own limits); this guards unverified frame floods. */
  frames_per_second_per_connection: z.number().positive().default(500),
  frames_burst_per_connection: z.number().int().positive().default(1000),
  /** AUTH messages per connection (each costs a signature verification). */
  auths_per_second_per_connection: z.number().positive().default(2),
  auths_burst_per_connection: z.number().int().positive().default(10),
  /**
   * Per author pubkey, shared by all its connections to a shard: spent only by an event new to the
   * shard published on a connection authenticated (NIP-42) as its author (anyone may send again an
   * event another key signed: write-rules.ts `eventRateLimits`).
   */
  events_per_second_per_pubkey: z.number().positive().default(20),
  events_burst_per_pubkey: z.number().int().positive().default(200),
  /**
   * Per client address (client-address.ts), shared by all its connections to a shard (with edge
   * objects: kept by the one edge they all land on), taken before the signature is verified, so that one address cannot
   * spend more of a shard's verification than this: EVENTs other than kind 24200, and kind 24200
   * frames (NIP-AO telemetry is frequent, and has its own per-agent limit too).
   */
  events_per_second_per_ip: z.number().positive().default(50),
  events_burst_per_ip: z.number().int().positive().default(500),
  frames_per_second_per_ip: z.number().positive().default(500),
  frames_burst_per_ip: z.number().int().positive().default(1000),
  /**
   * Bytes of stored events REQs may return to one client address (client-address.ts), shared by
   * its connections: a budget of `read_bytes_burst_per_ip` refilled at this rate. An answer is
   * charged once sent (it may take the budget below zero); a REQ from an address in debt gets CLOSED
   * `rate-limited:` with the seconds to wait. Without it, one address could make a shard read and
   * send `max_query_bytes` per REQ as fast as its request buckets allow.
   */
  read_bytes_per_second_per_ip: z.number().int().positive().default(1_048_576),
  read_bytes_burst_per_ip: z.number().int().positive().default(16_777_216),
  /**
   * Characters of WebSocket messages one client address may send a shard (with edge objects: kept by
   * the one edge its connections land on), shared by its connections: a budget of `inbound_bytes_burst_per_ip` refilled at this
   * rate, charged before a message is parsed. A message from an address in debt is not parsed: an
   * EVENT gets OK false `rate-limited:` (its id read without parsing), anything else a NOTICE. Without
   * it, messages that fail to parse cost a parse each and no bucket.
   */
  inbound_bytes_per_second_per_ip: z.number().int().positive().default(4_194_304),
  inbound_bytes_burst_per_ip: z.number().int().positive().default(16_777_216),
  /**
   * Live events (EVENT frames of open subscriptions) a shard sends one client address (with edge
   * objects: the one edge its connections land on), shared by its connections: a burst of
   * `deliveries_burst_per_ip`, then this many per second. Each is a socket write on the shard's one
   * thread, and one event is sent once per matching subscription: without it one address holding
   * 30 connections × 32 subscriptions of everything made every event cost 960 writes. Past it, a
   * subscription that would get an event is closed with CLOSED `rate-limited:` (the client may
   * subscribe again, with `since`, later). Edgestr's own agents are not counted.
   */
  deliveries_per_second_per_ip: z.number().positive().default(2_000),
  /**
   * Stored rows the queries of one client address may read (its REQs and COUNTs, with edge objects
   * too: the primary reports what each read), shared by its connections: a budget of
   * `scan_rows_burst_per_ip` refilled at this rate. A query is charged what SQLite read for it
   * (index and table rows, returned or not), so a filter that walks many rows to return few (rows
   * hidden from the reader, a tag list driving a rare kind) costs its address what it costs the
   * shard; a REQ or COUNT from an address in debt gets CLOSED `rate-limited:` with the seconds to
   * wait. At ~0.2–0.6 µs a row, the rate is about a tenth of a shard's thread at most.
   */
  scan_rows_per_second_per_ip: z.number().int().positive().default(200_000),
  scan_rows_burst_per_ip: z.number().int().positive().default(2_000_000),
  deliveries_burst_per_ip: z.number().int().positive().default(10_000),
  /**
   * Batched ingest (ingest-queue.ts): verified EVENTs are stored together, in one transaction, when
   * this many are queued or `ingest_batch_window_ms` after the first, whichever comes first (and
   * before any REQ, COUNT, CLOSE or AUTH). 1, or a window of 0, stores each event on its own.
   */
  ingest_batch_max: z.number().int().positive().max(1000).default(64),
  ingest_batch_window_ms: z.number().int().nonnegative().max(1000).default(2),
  /**
   * With edge objects (RELAY_EDGES): bytes of accepted events the primary holds for one edge that is
   * slower than the shard's writes. Past it the held events are dropped and the edge closes the
   * subscriptions that may have missed them (docs/SCALING.md "Lost deliveries"). The events are
   * shared by all edges' queues, so this bounds the primary's memory for fan-out as a whole.
   */
  edge_delivery_queue_bytes: z.number().int().positive().default(8_388_608),
  /**
   * With edge objects: bytes of operations (events, filters) an edge holds for its primary while a
   * batch is on its way there. Past it, the edge answers EVENT, REQ and COUNT at once with `error:`
   * (EDGE_OVERLOADED in edge-link.ts), in their turn, rather than hold them: a flood faster than the
   * primary writes cannot grow an edge's memory (docs/SCALING.md "Edge → primary").
   */
  edge_pending_bytes: z.number().int().positive().default(4_194_304),
  /**
   * With edge objects: REQs and COUNTs one client address (edgestr's own connections, and those of
   * no known address: one connection) may have waiting at its edge for the primary's answers. Past
   * it a REQ or COUNT gets CLOSED `rate-limited:` at once (EDGE_QUERIES_WAITING in edge-link.ts).
   * Without it one address's cheap queries, sent without waiting (30 connections × 100 COUNTs that
   * read nothing, so no budget runs out), queued ahead of everything else its edge sends the primary.
   * As many as one connection's request burst (`reqs_burst_per_connection`).
   */
  edge_queries_per_ip: z.number().int().positive().default(100),
});

export type RelayLimits = z.infer<typeof RelayLimitsSchema>;

export const DEFAULT_LIMITS: RelayLimits = RelayLimitsSchema.parse({});

/**
 * Keys of RELAY_LIMITS that earlier versions named otherwise, with their names now: an operator's
 * value under the old name still sets the limit after an upgrade.
 */
export const RENAMED_LIMITS: Readonly<Record<string, keyof RelayLimits>> = {
  max_connections_per_address: 'max_connections_per_ip', // renamed in dc5defe
};

/** What RELAY_LIMITS sets: the limits in force, the renamed keys it used, and what is wrong in it (each such field at its default). */
export interface ParsedLimits {
  limits: RelayLimits;
  renamed: string[];
  problems: string[];
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Reads RELAY_LIMITS (see the header): never throws; `problems` names each field ignored, as `RELAY_LIMITS.<field>: <reason>`. */
export function parseRelayLimits(raw: string | undefined): ParsedLimits {
  if (raw === undefined || raw.trim() === '') return { limits: DEFAULT_LIMITS, renamed: [], problems: [] };
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    return { limits: DEFAULT_LIMITS, renamed: [], problems: ['RELAY_LIMITS is not JSON'] };
  }
  const renamed: string[] = [];
  const fields = isObject(json) ? { ...json } : json;
  if (isObject(fields)) {
    for (const [old, now] of Object.entries(RENAMED_LIMITS)) {
      if (!Object.hasOwn(fields, old)) continue;
      if (Object.hasOwn(fields, now)) renamed.push(`RELAY_LIMITS.${old} is now named ${now}, which is set too: its value is ignored; remove it from your configuration`);
      else {
        fields[now] = fields[old];
        renamed.push(`RELAY_LIMITS.${old} is now named ${now}: its value is used as ${now}; rename it in your configuration`);
      }
      delete fields[old];
    }
  }
  const parsed = RelayLimitsSchema.safeParse(fields);
  if (parsed.success) return { limits: parsed.data, renamed, problems: [] };
  const problems = parsed.error.issues.map((i) => `RELAY_LIMITS${i.path.length === 0 ? '' : `.${i.path.join('.')}`}: ${i.message}`);
  if (!isObject(fields)) return { limits: DEFAULT_LIMITS, renamed, problems };
  // The wrong fields left out: unknown keys, and the known ones whose value the schema refused.
  const wrong = new Set(parsed.error.issues.flatMap((i) => (i.code === 'unrecognized_keys' ? i.keys : i.path.slice(0, 1).map(String))));
  const kept = RelayLimitsSchema.safeParse(Object.fromEntries(Object.entries(fields).filter(([k]) => !wrong.has(k))));
  return { limits: kept.success ? kept.data : DEFAULT_LIMITS, renamed, problems };
}

/** The last RELAY_LIMITS this isolate read, and its limits: read, and logged, once per value. */
let read: { raw: string | undefined; limits: RelayLimits } | undefined;

/** The limits RELAY_LIMITS sets, for a shard or the API (see the header: what is wrong is logged, never thrown). */
export function limitsFromEnv(raw: string | undefined): RelayLimits {
  if (read && read.raw === raw) return read.limits;
  const { limits, renamed, problems } = parseRelayLimits(raw);
  for (const r of renamed) console.warn(`relay limits: ${r}`);
  if (problems.length > 0) {
    console.error(`relay limits: ${problems.join('; ')}; what is wrong is ignored: those limits keep their defaults until RELAY_LIMITS is fixed (npm run deploy refuses such a value)`);
  }
  read = { raw, limits };
  return limits;
}
