// NIP-11 relay information document of a shard: built from the same limits object the shard
// enforces, so what is advertised is what is enforced.

import type { RelayLimits } from './limits.js';
import { AO_TELEMETRY_RATE } from '../../src/shared/nip-ao.js';
import { nip11Retention, type RetentionRule } from './retention.js';

export const SOFTWARE = 'https://github.com/edgestr/edgestr';
export const VERSION = '0.1.0';

/** NIPs this relay implements, exactly. */
export const SUPPORTED_NIPS = [1, 9, 11, 40, 42, 45, 62, 70] as const;

/**
 * The document of a shard with these limits, owner (null: the public shard) and retention rules
 * (retention.ts). The public shard's also names this deployment's DVMCP bridges (`bridgeProviders`):
 * not a standard NIP-11 field, `bridge_providers`, so that clients list their servers first and
 * refuse a name a stranger's server claims too (docs/BRIDGE.md "Announcements").
 */
export function relayInformation(limits: RelayLimits, owner: string | null, retention: readonly RetentionRule[] = [], bridgeProviders: readonly string[] = []) {
  return {
    name: owner ? `edgestr shard of ${owner.slice(0, 12)}…` : 'edgestr public shard',
    description: owner
      ? "Owner shard: accepts events from its owner and the owner's agents, and events addressed to them."
      : 'Public shard of an edgestr deployment: open to everyone within the advertised limits.',
    ...(owner ? { pubkey: owner } : { bridge_providers: [...bridgeProviders] }),
    software: SOFTWARE,
    version: VERSION,
    supported_nips: [...SUPPORTED_NIPS],
    limitation: {
      max_message_length: limits.max_message_length,
      max_subscriptions: limits.max_subscriptions,
      /** Not a standard NIP-11 field: open connections of this shard (an upgrade past it gets 503). */
      max_connections: limits.max_connections,
      /** Not a standard NIP-11 field: open connections from one client address (an IPv6 /64); an upgrade past it gets 429. */
      max_connections_per_ip: limits.max_connections_per_ip,
      /**
       * Not standard NIP-11 fields: open connections of one owner's hosted agents and bridges on
       * another owner's shard (429 past it; not on the public shard, where an owner has as many as
       * its plan gives it), and of all other owners' together (503 past it).
       */
      ...(owner ? { max_agent_connections_per_owner: limits.max_agent_connections_per_owner } : {}),
      max_agent_connections: limits.max_agent_connections,
      /** Not standard NIP-11 fields: new connections one client address may open at once, then per second (429 past them). */
      connections_per_second_per_ip: limits.connections_per_second_per_ip,
      connections_burst_per_ip: limits.connections_burst_per_ip,
      max_filters: limits.max_filters,
      /** Not standard NIP-11 fields: estimated bytes the filters of one connection's subscriptions, and of all of them, may hold. */
      max_subscription_memory_per_connection: limits.max_subscription_memory_per_connection,
      max_subscription_memory: limits.max_subscription_memory,
      max_limit: limits.max_limit,
      default_limit: limits.default_limit,
      max_subid_length: limits.max_subid_length,
      max_event_tags: limits.max_event_tags,
      max_filter_values: limits.max_filter_values,
      max_query_bytes: limits.max_query_bytes,
      /** Not a standard NIP-11 field: events one COUNT counts at most; past it the answer is `approximate` (NIP-45). */
      max_count: limits.max_count,
      max_deletion_targets: limits.max_deletion_targets,
      max_auth_pubkeys_per_connection: limits.max_auth_pubkeys_per_connection,
      max_content_length: limits.max_content_length,
      /**
       * Not a standard NIP-11 field: bytes of stored events this shard holds at most (their JSON,
       * and each single-letter tag value twice more, an addressable event's `d` four times more: the
       * copies its indexes keep); an owner's plan may allow less. Past it a stored event gets
       * `restricted: storage quota: …`.
       */
      max_stored_bytes: limits.max_stored_bytes,
      created_at_lower_limit: limits.created_at_lower_limit,
      created_at_upper_limit: limits.created_at_upper_limit,
      min_pow_difficulty: 0,
      auth_required: false,
      payment_required: false,
      restricted_writes: owner !== null,
    },
    ...(retention.length > 0 ? { retention: nip11Retention(retention) } : {}),
    /** edgestr's rate limits (not part of NIP-11's standard fields). */
    rate_limits: {
      events_per_second_per_connection: limits.events_per_second_per_connection,
      events_burst_per_connection: limits.events_burst_per_connection,
      reqs_per_second_per_connection: limits.reqs_per_second_per_connection,
      reqs_burst_per_connection: limits.reqs_burst_per_connection,
      auths_per_second_per_connection: limits.auths_per_second_per_connection,
      auths_burst_per_connection: limits.auths_burst_per_connection,
      frames_per_second_per_connection: limits.frames_per_second_per_connection,
      frames_burst_per_connection: limits.frames_burst_per_connection,
      nip_ao_telemetry_frames_per_second_per_agent: AO_TELEMETRY_RATE,
      events_per_second_per_pubkey: limits.events_per_second_per_pubkey,
      events_burst_per_pubkey: limits.events_burst_per_pubkey,
      events_per_second_per_ip: limits.events_per_second_per_ip,
      read_bytes_per_second_per_ip: limits.read_bytes_per_second_per_ip,
      read_bytes_burst_per_ip: limits.read_bytes_burst_per_ip,
      inbound_bytes_per_second_per_ip: limits.inbound_bytes_per_second_per_ip,
      inbound_bytes_burst_per_ip: limits.inbound_bytes_burst_per_ip,
      deliveries_per_second_per_ip: limits.deliveries_per_second_per_ip,
      deliveries_burst_per_ip: limits.deliveries_burst_per_ip,
      scan_rows_per_second_per_ip: limits.scan_rows_per_second_per_ip,
      scan_rows_burst_per_ip: limits.scan_rows_burst_per_ip,
      events_burst_per_ip: limits.events_burst_per_ip,
      frames_per_second_per_ip: limits.frames_per_second_per_ip,
      frames_burst_per_ip: limits.frames_burst_per_ip,
    },
  };
}

export const NIP11_CORS_HEADERS = {
  'Access-Control-Allow-Origin': '*',
  'Access-Control-Allow-Headers': '*',
  'Access-Control-Allow-Methods': 'GET, OPTIONS',
};

export const wantsRelayInformation = (accept: string | null): boolean =>
  !!accept && accept.split(',').some((part) => part.trim().toLowerCase().startsWith('application/nostr+json'));
