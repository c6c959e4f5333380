// `edgestr signup`: POST /api/signup signed with NIP-98 by the key in use (DESIGN.md: where sign-up
// is open, the signer becomes an owner on the default plan). main() against a deployment stand-in at
// the network boundary that checks the NIP-98 header with the shared verifier (src/shared/nip98.ts)
// and answers as workers/api/signup.ts does: 201 {pubkey, plan, suspended}, 409 for a key that
// owns already, 403 when sign-up is closed.
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { runCli } from '../../test/helpers-node/run-cli.js';
import { bytesToHex } from '../shared/hex.js';
import { toNpub } from '../shared/keys.js';
import { MemoryReplayGuard, verifyHttpAuth } from '../shared/nip98.js';
import { nobleVerifier } from '../shared/verify.js';

let open = true;
let requests = 0;
const owners = new Set<string>();
const replay = new MemoryReplayGuard();
let server: Server;
let base = '';
beforeAll(async () => {
  server = createServer((req, res) => {
    requests++;
    const answer = (status: number, body: unknown): void => void res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    if (req.method !== 'POST' || req.url !== '/api/signup') return answer(404, { error: 'not found' });
    if (!open) return answer(403, { error: 'sign-up is not open on this deployment (EDGESTR_SIGNUP)' });
    const auth = verifyHttpAuth({ authorization: req.headers.authorization ?? null, url: `${base}/api/signup`, method: 'POST' }, { verifier: nobleVerifier, now: Math.floor(Date.now() / 1000), replay });
    if (!auth.ok) return answer(401, { error: auth.error.reason });
    if (owners.has(auth.value.pubkey)) return answer(409, { error: 'this key is already an owner on this deployment' });
    owners.add(auth.value.pubkey);
    answer(201, { pubkey: auth.value.pubkey, plan: 'free', suspended: false });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(() => new Promise((resolve) => server.close(resolve)));

describe('edgestr signup', () => {
  it('signs POST /api/signup with the key in use: the key becomes an owner (exit 0); again: already an owner (exit 2)', async () => {
    const sk = generateSecretKey();
    const pk = getPublicKey(sk);
    const env = { EDGESTR_KEY: bytesToHex(sk) };
    expect(await runCli(['signup', '--url', base], env)).toEqual({ code: 0, stdout: `signed up ${toNpub(pk)} as an owner on ${base} (plan free)\n`, stderr: '' });
    expect(owners.has(pk)).toBe(true);
    expect(await runCli(['signup', '--url', base], env)).toEqual({ code: 2, stdout: '', stderr: 'edgestr: signup: this key is already an owner on this deployment\n' });
  });

  it('--json: the answer as one line', async () => {
    const sk = generateSecretKey();
    const r = await runCli(['signup', '--url', base, '--json'], { EDGESTR_KEY: bytesToHex(sk) });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ pubkey: getPublicKey(sk), plan: 'free', suspended: false });
  });

  it('closed sign-up: exit 5 with the reason; no key: exit 5, nothing sent', async () => {
    open = false;
    try {
      expect(await runCli(['signup', '--url', base], { EDGESTR_KEY: bytesToHex(generateSecretKey()) })).toEqual({
        code: 5,
        stdout: '',
        stderr: 'edgestr: not allowed (signup): sign-up is not open on this deployment (EDGESTR_SIGNUP)\n',
      });
    } finally {
      open = true;
    }
    const before = requests;
    expect(await runCli(['signup', '--url', base, '--key', '/nonexistent/edgestr-key'])).toEqual({ code: 5, stdout: '', stderr: 'edgestr: no key file at /nonexistent/edgestr-key\n' });
    expect(requests).toBe(before);
  });
});
