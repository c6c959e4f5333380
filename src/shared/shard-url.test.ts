// Every spelling of one shard of a deployment names that shard's one URL; anything else names none.
import { describe, expect, it } from 'vitest';
import { npubEncode } from 'nostr-tools/nip19';
import { shardOfPath, shardUrlOf } from './shard-url.js';

const hex = 'ab'.repeat(32);

describe('shardUrlOf', () => {
  it.each([
    [`wss://relay.example/r/${hex}`],
    [`wss://relay.example/r/${hex}/`],
    [`wss://relay.example/r/${hex.toUpperCase()}`],
    [`wss://relay.example/r/${npubEncode(hex)}`],
    [`wss://RELAY.Example/r/${hex}`],
    [`wss://relay.example:443/r/${hex}`],
    [`ws://relay.example/r/${hex}`],
  ])('%s is the shard wss://relay.example/r/<hex>', (relay) => expect(shardUrlOf('https://relay.example', relay)).toBe(`wss://relay.example/r/${hex}`));

  it('/ with or without its slash is the public shard', () => {
    expect(shardUrlOf('https://relay.example', 'wss://relay.example')).toBe('wss://relay.example/');
    expect(shardUrlOf('http://127.0.0.1:8787', 'ws://127.0.0.1:8787/')).toBe('ws://127.0.0.1:8787/');
  });

  it.each([
    ['another host', `wss://other.example/r/${hex}`],
    ['another port', `wss://relay.example:8443/r/${hex}`],
    ['a path that names no shard', 'wss://relay.example/api/agents'],
    ['a malformed key', 'wss://relay.example/r/npub1nope'],
    ['not a URL', 'not a url'],
  ])('%s names none', (_what, relay) => expect(shardUrlOf('https://relay.example', relay)).toBeUndefined());

  it('shardOfPath: / is the public shard (null), /r/<key> an owner', () => {
    expect([shardOfPath('/'), shardOfPath(''), shardOfPath(`/r/${npubEncode(hex)}/`), shardOfPath('/r/')]).toEqual([null, null, hex, undefined]);
  });
});
