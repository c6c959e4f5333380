// The `web_fetch` tool: GET an http(s) URL on an allowlisted host and return its text.
//
// Rules, in the order they are checked (each failure is an error value with this exact text):
//   invalid arguments: ...                                     (the registry, see args.ts)
//   web_fetch is disabled: no allowed hosts are configured     (empty allowlist)
//   max_bytes must be a positive integer
//   url too long (max 2048 characters) / invalid URL
//   refused: only http and https URLs are allowed / URLs with credentials are not allowed
//   refused: <host> is not in the allowlist   (the owner's allowlist, before the outbound policy)
//   refused: <outbound policy reason>  src/shared/outbound-url.ts: plain http:// is allowed only
//                                    in development or for hosts in EDGESTR_OUTBOUND_ALLOW; use
//                                    https:// / <host class> (private, loopback, link-local,
//                                    CGNAT, multicast, unspecified, reserved addresses, local
//                                    names) / <host> is this deployment's own host (a loop)
//   refused: <host>:<port> may not be fetched (the deployment's outbound policy; the agent's
//            owner can see why)      instead of the policy's reason (the loop's aside) when the
//                                    operators' EDGESTR_OUTBOUND_ALLOW applies to the agent (a
//                                    vetted owner's, the list not empty): the model tells whoever
//                                    prompted the agent, and the policy's reasons ("…lists
//                                    10.0.0.5 on its default port only, not 9200", or a rule's
//                                    reason for a host not listed) would map what the operators
//                                    listed. The reason is logged (console.warn "agent: web_fetch
//                                    refused <host>:<port> (the deployment's outbound policy):
//                                    <reason>") and is the result's `detail`, "the deployment's
//                                    outbound policy refuses <host>:<port>: <reason>", which the
//                                    owner alone reads (its NIP-AO tool_detail frame; types.ts).
//   redirect refused: <same reasons> every redirect hop (301/302/303/307/308 with Location) is
//                                    checked again (safeFetch); at most 5 hops, then
//   too many redirects (max 5)
//   timed out after <n> ms / aborted / fetch failed: <message>
//   unsupported content type: <type>  only text/*, application/json, application/xml and
//                                    */*+json, */*+xml; "(none)" when the header is missing
//                                    (a missing type is fine for an empty answer: 204, 205, 304
//                                    or Content-Length: 0)
// Success: stdout = the body decoded with its charset (UTF-8 by default), at most max_bytes
// bytes (default and ceiling 256 KiB; a larger max_bytes is lowered to the ceiling; a cut
// multi-byte character is dropped); stderr = "HTTP <status>", plus " from <final URL>" after
// redirects and "\ntruncated at <n> bytes" when the body was longer; exit_code = 1 when the
// status is >= 400, else 0. The timeout (default 10 s) covers redirects and reading the body,
// and the caller's signal aborts the whole call.
//
// `policy` is the outbound policy of the agent owner's dials (workers/common/owner-outbound.ts:
// EDGESTR_OUTBOUND_ALLOW only for a vetted owner); without it, the strict production policy applies.
// The allowlist (`web_fetch_hosts`) only narrows it: its entries take no port (the ports are
// EDGESTR_OUTBOUND_ALLOW's: a bare host there is its default port only).
// The model's definition names the allowed hosts; the description ai.info publishes
// (`published_description`) names none: the hosts may be a vetted owner's internal ones.

import { hostAllowed, parseAllowlist, portOf, urlAllowed, type HostPattern } from '../../../src/shared/host-policy.js';
import { outboundRefusal, safeFetch, STRICT_OUTBOUND, urlShapeRefusal, type OutboundPolicy } from '../../../src/shared/outbound-url.js';
import { z } from 'zod';
import { inputSchemaOf } from './args.js';
import { fail, succeed } from './result.js';
import type { Tool, ToolDefinition, ToolResult } from './types.js';
import { errorMessage } from '../../../src/shared/errors.js';

export const WEB_FETCH_DEFAULTS = {
  timeoutMs: 10_000,
  maxBytes: 256 * 1024,
  maxRedirects: 5,
  maxUrlChars: 2048,
  userAgent: 'edgestr-web-fetch/1.0',
} as const;

export interface WebFetchOptions {
  /** Exact hosts ("example.com") and subdomain patterns ("*.example.com"); empty = disabled. */
  allowlist: readonly string[];
  /** Whole-call timeout in milliseconds (default 10,000). */
  timeoutMs?: number;
  /** Largest body returned, in bytes (default 262,144); also the ceiling for `max_bytes`. */
  maxBytes?: number;
  /** Redirect hops followed (default 5). */
  maxRedirects?: number;
  userAgent?: string;
  /** The deployment's outbound policy (default: strict production). */
  policy?: OutboundPolicy;
}

/** The arguments; `max_bytes` and the URL are checked by the tool (see the header). */
const WebFetchArgs = z.object({
  url: z.string().describe('http:// or https:// URL'),
  max_bytes: z.number().describe('Largest body to return, in bytes').optional(),
});
export type WebFetchArgs = z.infer<typeof WebFetchArgs>;

const EMPTY_STATUSES = new Set([204, 205, 304]);

/** Whether a Content-Type is text we return: text/*, JSON and XML (incl. +json / +xml). */
export function isTextContentType(contentType: string): boolean {
  const essence = (contentType.split(';')[0] ?? '').trim().toLowerCase();
  const slash = essence.indexOf('/');
  if (slash <= 0) return false;
  const type = essence.slice(0, slash);
  const subtype = essence.slice(slash + 1);
  if (type === 'text') return subtype !== '';
  return (
    (type === 'application' && (subtype === 'json' || subtype === 'xml')) ||
    subtype.endsWith('+json') ||
    subtype.endsWith('+xml')
  );
}

function charsetOf(contentType: string): string {
  const match = /;\s*charset\s*=\s*"?([^";\s]+)"?/i.exec(contentType);
  return match?.[1]?.toLowerCase() ?? 'utf-8';
}

function decoderFor(contentType: string): TextDecoder {
  try {
    return new TextDecoder(charsetOf(contentType));
  } catch {
    return new TextDecoder('utf-8'); // an unknown or unsupported label
  }
}

/** Why a URL is refused: as the model is told it, and (the outbound policy's reason) as the owner alone is. */
interface Refusal {
  text: string;
  detail?: string;
}

/** Why the call stopped early: our timeout, or the caller's signal. */
class Stop {
  constructor(readonly reason: 'timeout' | 'aborted') {}
}

/** Reads at most `limit` bytes of `body`, cancelling the rest; rejects with a Stop on abort. */
async function readLimited(
  body: ReadableStream<Uint8Array>,
  limit: number,
  signal: AbortSignal,
  stopOf: () => Stop,
): Promise<{ bytes: Uint8Array; truncated: boolean }> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  let truncated = false;
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(stopOf());
    signal.addEventListener('abort', onAbort, { once: true });
  });
  aborted.catch(() => undefined); // handled by the race below
  try {
    if (signal.aborted) throw stopOf();
    for (;;) {
      const { done, value } = await Promise.race([reader.read(), aborted]);
      if (done) break;
      if (size + value.byteLength > limit) {
        chunks.push(value.subarray(0, limit - size));
        size = limit;
        truncated = true;
        break;
      }
      chunks.push(value);
      size += value.byteLength;
    }
  } catch (e) {
    reader.cancel().catch(() => undefined);
    throw e;
  } finally {
    if (onAbort) signal.removeEventListener('abort', onAbort);
  }
  if (truncated) reader.cancel().catch(() => undefined);
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const c of chunks) {
    bytes.set(c, offset);
    offset += c.byteLength;
  }
  return { bytes, truncated };
}

export class WebFetchTool implements Tool<WebFetchArgs> {
  readonly definition: ToolDefinition;
  /** Allowlist entries that are not valid host patterns (ignored; reported by the registry). */
  readonly invalidAllowlistEntries: readonly string[];
  private readonly patterns: readonly HostPattern[];
  private readonly timeoutMs: number;
  private readonly maxBytes: number;
  private readonly maxRedirects: number;
  private readonly userAgent: string;
  private readonly policy: OutboundPolicy;

  constructor(options: WebFetchOptions) {
    const { patterns, invalid } = parseAllowlist(options.allowlist);
    this.patterns = patterns;
    this.invalidAllowlistEntries = invalid;
    this.timeoutMs = options.timeoutMs ?? WEB_FETCH_DEFAULTS.timeoutMs;
    this.maxBytes = options.maxBytes ?? WEB_FETCH_DEFAULTS.maxBytes;
    this.maxRedirects = options.maxRedirects ?? WEB_FETCH_DEFAULTS.maxRedirects;
    this.userAgent = options.userAgent ?? WEB_FETCH_DEFAULTS.userAgent;
    this.policy = options.policy ?? STRICT_OUTBOUND;
    const hosts = patterns.map((p) => p.pattern).join(', ');
    const what = 'Fetch a URL over HTTP(S) with GET and return the response body as text (HTML, plain text, JSON or XML). ';
    const limit = ` max_bytes limits the returned body (at most ${this.maxBytes}).`;
    this.definition = {
      name: 'web_fetch',
      description: what + (hosts === '' ? 'Disabled: no hosts are allowed.' : `Allowed hosts: ${hosts}.`) + limit,
      // ai.info goes to every relay: the hosts (an owner's internal ones too) are the model's to know only.
      published_description: `${what}Only hosts the agent’s owner allows can be fetched.${limit}`,
      schema_version: 1,
      requires_approval: false,
      input_schema: inputSchemaOf(WebFetchArgs),
    };
  }

  /**
   * Why `url` may not be fetched, or undefined when it may: its shape (scheme, credentials), the
   * owner's allowlist, then the outbound policy (a host the owner did not list never reaches the
   * policy, so a prompt cannot learn from its reasons which hosts the operators listed).
   */
  private refusal(url: URL): Refusal | undefined {
    const told = urlShapeRefusal(url, 'http');
    return told === undefined ? this.hopRefusal(url) : { text: told };
  }

  /** Why a hop to `url` may not be followed: the owner's allowlist, then the outbound policy. */
  private hopRefusal(url: URL): Refusal | undefined {
    return hostAllowed(url.hostname, this.patterns) ? this.policyRefusal(url) : { text: `${url.hostname} is not in the allowlist` };
  }

  /**
   * Why the outbound policy refuses `url`, as the model is told it: the generic text when the
   * operators' list applies to this agent, the policy's reason logged and in `detail` (see the
   * header); the loop refusal as it is (the deployment's own host, which no list lifts, is refused
   * before any is read).
   */
  private policyRefusal(url: URL): Refusal | undefined {
    const reason = outboundRefusal(url, 'http', this.policy);
    if (reason === undefined) return undefined;
    const listApplies = this.policy.vetted && this.policy.allow.length > 0;
    if (!listApplies || urlAllowed(url, this.policy.self)) return { text: reason };
    const at = `${url.hostname}:${portOf(url)}`;
    console.warn(`agent: web_fetch refused ${at} (the deployment's outbound policy): ${reason}`);
    return { text: `${at} may not be fetched (the deployment's outbound policy; the agent's owner can see why)`, detail: `the deployment's outbound policy refuses ${at}: ${reason}` };
  }

  async run({ url: rawUrl, max_bytes }: WebFetchArgs, ctx: { signal: AbortSignal }): Promise<ToolResult> {
    if (this.patterns.length === 0) return fail('web_fetch is disabled: no allowed hosts are configured');
    if (max_bytes !== undefined && (!Number.isInteger(max_bytes) || max_bytes < 1)) {
      return fail('max_bytes must be a positive integer');
    }
    const limit = Math.min(max_bytes ?? this.maxBytes, this.maxBytes);
    if (rawUrl.length > WEB_FETCH_DEFAULTS.maxUrlChars) {
      return fail(`url too long (max ${WEB_FETCH_DEFAULTS.maxUrlChars} characters)`);
    }
    let url: URL;
    try {
      url = new URL(rawUrl);
    } catch {
      return fail('invalid URL');
    }
    const refused = this.refusal(url);
    if (refused) return fail(`refused: ${refused.text}`, refused.detail);
    if (ctx.signal.aborted) return fail('aborted');

    const timer = new AbortController();
    const timeout = setTimeout(() => timer.abort(new Stop('timeout')), this.timeoutMs);
    const signal = AbortSignal.any([ctx.signal, timer.signal]);
    const stopOf = (): Stop => (timer.signal.aborted ? new Stop('timeout') : new Stop('aborted'));
    try {
      return await this.fetchFollowing(url, limit, signal, stopOf);
    } catch (e) {
      if (e instanceof Stop || signal.aborted) {
        const stop = e instanceof Stop ? e : stopOf();
        return fail(stop.reason === 'timeout' ? `timed out after ${this.timeoutMs} ms` : 'aborted');
      }
      return fail(`fetch failed: ${errorMessage(e)}`);
    } finally {
      clearTimeout(timeout);
    }
  }

  private async fetchFollowing(start: URL, limit: number, signal: AbortSignal, stopOf: () => Stop): Promise<ToolResult> {
    /** The owner's detail of the latest hop checked (a refused hop is the last one). */
    let hopDetail: string | undefined;
    const check = (url: URL): string | undefined => {
      const refused = this.hopRefusal(url);
      hopDetail = refused?.detail;
      return refused?.text;
    };
    const fetched = await safeFetch(
      start,
      {
        method: 'GET',
        signal,
        headers: {
          accept: 'text/html, text/plain;q=0.9, application/json;q=0.9, application/xml;q=0.8, text/*;q=0.7',
          'user-agent': this.userAgent,
        },
      },
      this.policy,
      // safeFetch asks `check` before the policy: every hop's refusal is as the model may read it.
      { maxRedirects: this.maxRedirects, check },
    );
    if (!fetched.ok) return fail(fetched.error, hopDetail);
    const { response, url, hops } = fetched.value;
    return this.readResponse(response, url, hops, limit, signal, stopOf);
  }

  private async readResponse(
    response: Response,
    url: URL,
    hops: number,
    limit: number,
    signal: AbortSignal,
    stopOf: () => Stop,
  ): Promise<ToolResult> {
    const contentType = response.headers.get('content-type');
    const emptyAnswer = EMPTY_STATUSES.has(response.status) || response.headers.get('content-length') === '0';
    if (contentType === null ? !emptyAnswer : !isTextContentType(contentType)) {
      await response.body?.cancel().catch(() => undefined);
      return fail(`unsupported content type: ${contentType ?? '(none)'}`);
    }
    const { bytes, truncated } = response.body
      ? await readLimited(response.body, limit, signal, stopOf)
      : { bytes: new Uint8Array(0), truncated: false };
    // stream: true keeps a multi-byte character cut by the limit out of the text.
    const text = decoderFor(contentType ?? '').decode(bytes, { stream: truncated });
    const from = hops > 0 ? ` from ${url.href}` : '';
    const stderr = `HTTP ${response.status}${from}${truncated ? `\ntruncated at ${limit} bytes` : ''}`;
    return succeed(text, stderr, response.status >= 400 ? 1 : 0);
  }
}
