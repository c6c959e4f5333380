// The client address of a request, as the key of every per-address limit (relay connections and
// event rates, the /mcp gateway, sign-up): CF-Connecting-IP, which Cloudflare sets on every request
// from the internet, with an IPv6 address cut to its /64. One subscriber is usually given a whole
// /64, so keying by the full address would hand an attacker 2^64 keys; an IPv4 address is its own key.

/** The key of a request that carries no CF-Connecting-IP (never the case on Cloudflare's network: local runs, tests). */
export const UNKNOWN_ADDRESS = 'unknown';
/** The key of the relay connections of edgestr's own hosted agents (INTERNAL_HEADER), which per-address limits leave alone. */
export const INTERNAL_ADDRESS = 'internal';
/** Longest key: what is not an address (not from Cloudflare) is cut to it. */
const MAX_KEY = 64;

/** Whether an address key is this machine's (loopback: local runs; never a client on Cloudflare). */
export const isLoopbackKey = (key: string): boolean => key.startsWith('127.') || key === addressKey('::1');

/** The per-address key of a request (see the header). */
export function clientAddress(request: Request): string {
  const ip = request.headers.get('CF-Connecting-IP');
  return ip === null || ip.trim() === '' ? UNKNOWN_ADDRESS : addressKey(ip.trim());
}

/**
 * The key of one address: an IPv4 address as it is; an IPv6 address as its /64 prefix
 * (`2001:db8:1:2::/64`, hextets without leading zeros); an IPv4-mapped IPv6 address as its IPv4
 * address. Anything else (not an address) is its own key: its first 64 characters.
 */
export function addressKey(ip: string): string {
  if (!ip.includes(':')) return ip.slice(0, MAX_KEY);
  const hextets = ipv6Hextets(ip.toLowerCase().replace(/%.*$/, ''));
  if (hextets === undefined) return ip.slice(0, MAX_KEY);
  if (hextets.slice(0, 5).every((h) => h === 0) && hextets[5] === 0xffff) {
    return [hextets[6]! >> 8, hextets[6]! & 0xff, hextets[7]! >> 8, hextets[7]! & 0xff].join('.');
  }
  return `${hextets.slice(0, 4).map((h) => h.toString(16)).join(':')}::/64`;
}

const HEXTET = /^[0-9a-f]{1,4}$/;
const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/** The eight 16-bit groups of an IPv6 address (with `::` and a trailing dotted IPv4 part), or undefined when it is not one. */
function ipv6Hextets(ip: string): number[] | undefined {
  const halves = ip.split('::');
  if (halves.length > 2) return undefined;
  const groups = (half: string | undefined): string[] => (half ? half.split(':') : []);
  const head = groups(halves[0]);
  const tail = groups(halves[1]);
  const parts = [...head, ...tail];
  // A dotted IPv4 part may end the address (::ffff:192.0.2.1): it stands for two groups.
  const last = parts.at(-1);
  const v4 = last === undefined ? null : IPV4.exec(last);
  const v4Groups: number[] = [];
  if (v4) {
    const bytes = v4.slice(1).map(Number);
    if (bytes.some((b) => b > 255)) return undefined;
    v4Groups.push((bytes[0]! << 8) | bytes[1]!, (bytes[2]! << 8) | bytes[3]!);
    (tail.length > 0 ? tail : head).pop();
  }
  if (![...head, ...tail].every((g) => HEXTET.test(g))) return undefined;
  const given = head.length + tail.length + v4Groups.length;
  const missing = 8 - given;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return undefined;
  const zeros = halves.length === 2 ? Array.from({ length: missing }, () => 0) : [];
  const hex = (g: string) => parseInt(g, 16);
  return [...head.map(hex), ...zeros, ...tail.map(hex), ...v4Groups];
}
