// Which browser pages (Origin headers) development and test mode serve: loopback pages over http(s)
// on any port, in test mode also .test hosts; no Origin at all (not a browser); nothing else.
import { describe, expect, it } from 'vitest';
import { localHostRefusal, localOriginRefusal } from './local-mode.js';

const dev = (o: string) => `development mode accepts browser requests only from loopback pages (Origin ${o})`;
const test = (o: string) => `test mode accepts browser requests only from loopback and .test pages (Origin ${o})`;

describe('localOriginRefusal', () => {
  it.each([
    [null],
    ['http://127.0.0.1:8787'],
    ['https://127.0.0.1'],
    ['http://127.255.3.4:9000'],
    ['http://localhost'],
    ['http://localhost:5173'],
    ['http://[::1]:8787'],
  ])('serves %s in both modes', (origin) => {
    expect(localOriginRefusal('development', origin)).toBeUndefined();
    expect(localOriginRefusal('test', origin)).toBeUndefined();
  });

  it.each([['http://relay.test'], ['http://other.test:8787'], ['https://a.b.test']])('serves %s in test mode only', (origin) => {
    expect(localOriginRefusal('test', origin)).toBeUndefined();
    expect(localOriginRefusal('development', origin)).toBe(dev(origin));
  });

  it.each([
    ['https://evil.example'],
    ['http://evil.example:8787'],
    ['null'],
    [''],
    ['http://127.0.0.1.nip.io'],
    ['http://localhost.evil.example'],
    ['http://128.0.0.1'],
    ['http://[::2]'],
    ['http://[::ffff:127.0.0.1]'],
    ['https://relay.test.example'],
    ['chrome-extension://abcdef'],
    ['file://'],
    ['ws://127.0.0.1:8787'],
    ['http://127.0.0.1:8787, https://evil.example'],
  ])('refuses %s in both modes, naming it', (origin) => {
    expect(localOriginRefusal('development', origin)).toBe(dev(origin));
    expect(localOriginRefusal('test', origin)).toBe(test(origin));
  });

  it('shows at most 200 characters of the Origin', () => {
    const long = `https://${'a'.repeat(300)}.example`;
    expect(localOriginRefusal('development', long)).toBe(dev(`${long.slice(0, 200)}…`));
  });
});

describe('localHostRefusal', () => {
  it.each([['http://127.0.0.1:8787/'], ['http://127.0.0.2:8787/'], ['http://127.255.3.4/'], ['http://localhost/'], ['http://[::1]:8787/']])('serves loopback %s in both modes', (url) => {
    expect(localHostRefusal('development', new URL(url))).toBeUndefined();
    expect(localHostRefusal('test', new URL(url))).toBeUndefined();
  });

  it.each([['http://relay.test/'], ['http://a.b.test:8787/']])('serves %s in test mode only', (url) => {
    expect(localHostRefusal('test', new URL(url))).toBeUndefined();
    expect(localHostRefusal('development', new URL(url))).toBe('development mode serves only loopback hosts; unset EDGESTR_ENV');
  });

  it.each([['https://edgestr.example/'], ['http://192.168.1.5:8787/'], ['http://128.0.0.1/'], ['http://127.0.0.1.example/']])('refuses %s in both modes', (url) => {
    expect(localHostRefusal('development', new URL(url))).toBe('development mode serves only loopback hosts; unset EDGESTR_ENV');
    expect(localHostRefusal('test', new URL(url))).toBe('test mode serves only loopback and .test hosts; unset EDGESTR_ENV');
  });
});
