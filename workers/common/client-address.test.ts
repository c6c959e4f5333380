// The per-address key: IPv4 as it is, IPv6 by its /64, IPv4-mapped IPv6 as IPv4, junk cut short.
import { describe, expect, it } from 'vitest';
import { addressKey, clientAddress, isLoopbackKey, UNKNOWN_ADDRESS } from './client-address.js';

describe('addressKey', () => {
  it.each([
    ['203.0.113.7', '203.0.113.7'],
    ['2001:db8:1:2::1', '2001:db8:1:2::/64'],
    ['2001:0DB8:0001:0002:ffff:ffff:ffff:ffff', '2001:db8:1:2::/64'],
    ['2001:db8::', '2001:db8:0:0::/64'],
    ['2001:db8:1:2:3:4:5:6%eth0', '2001:db8:1:2::/64'],
    ['::1', '0:0:0:0::/64'],
    ['::', '0:0:0:0::/64'],
    ['::ffff:192.0.2.1', '192.0.2.1'],
    ['64:ff9b::192.0.2.1', '64:ff9b:0:0::/64'],
  ])('%s → %s', (ip, key) => expect(addressKey(ip)).toBe(key));

  it('addresses of one /64 share a key; the next /64 does not', () => {
    expect(addressKey('2001:db8:1:2:aaaa::1')).toBe(addressKey('2001:db8:1:2:bbbb:cccc:dddd:eeee'));
    expect(addressKey('2001:db8:1:3::1')).not.toBe(addressKey('2001:db8:1:2::1'));
  });

  it.each(['not an ip', '1:2:3', '1::2::3', '1:2:3:4:5:6:7:8:9', 'g::1', '::ffff:300.1.1.1', '1:2:3:4:5:6:7::8'])('%s is not an address: its own key', (junk) =>
    expect(addressKey(junk)).toBe(junk),
  );

  it('a key is at most 64 characters', () => expect(addressKey('x'.repeat(300))).toBe('x'.repeat(64)));

  it('clientAddress reads CF-Connecting-IP; without it the address is unknown', () => {
    expect(clientAddress(new Request('http://x/', { headers: { 'CF-Connecting-IP': ' 2001:db8:9:9::5 ' } }))).toBe('2001:db8:9:9::/64');
    expect(clientAddress(new Request('http://x/'))).toBe(UNKNOWN_ADDRESS);
  });

  it('loopback keys are this machine\'s', () => {
    expect(['127.0.0.1', '127.8.9.10', '::1'].map((ip) => isLoopbackKey(addressKey(ip)))).toEqual([true, true, true]);
    expect(['192.0.2.1', '2001:db8::1', '128.0.0.1'].map((ip) => isLoopbackKey(addressKey(ip)))).toEqual([false, false, false]);
  });
});
