// The hosted agent's DVMCP answers to requests it cannot read (workers/agent/dvmcp-server.ts, before
// the dispatcher) are held to one DVMCP message in the request's form, as every other answer
// (workers/common/dvmcp-server/answer-fit.ts `errorAnswer`): an error echoing what the client sent
// (a `method` tag that differs from the content's method) is cut, with the note. Before, the agent
// built it whole: a plain answer over the relay's 131,072 characters of content was refused, a
// gift-wrapped one over what the seal and the wrap carry could not be made; the client got nothing.
// The agent's announcements (31316, 31317) are bounded by its settings: name, about and, as a
// bridge server's, a picture of at most 2048 characters (a longer one made a 31316 the relay refused).
import { describe, expect, it } from 'vitest';
import { RPC } from '../../src/shared/dvmcp.js';
import type { Form } from '../../src/shared/dvmcp-wrap.js';
import { answerNote } from '../../workers/common/dvmcp-server/answer-fit.js';
import { PLAIN_MESSAGE_MAX_BYTES } from '../../src/shared/dvmcp-size.js';
import { createTestAgent } from './agent-helpers.js';
import { api } from './api-helpers.js';
import { announcements, DvmcpClient } from './bridge-helpers.js';
import { TEST_OWNER, TEST_OWNER_SK } from './test-keys.js';

const OWNER_SHARD = `/r/${TEST_OWNER}`;

/** An agent with its DVMCP server on, listening; a stranger's client on the owner's shard. */
async function agentAndClient(): Promise<{ agent: string; c: DvmcpClient }> {
  const agent = await createTestAgent({ dvmcp: { enabled: true } });
  const c = await DvmcpClient.open(agent, OWNER_SHARD);
  // The agent listens once it published its ai.info.
  await announcements(agent, [31340], (es) => es.length > 0, OWNER_SHARD);
  return { agent, c };
}

describe('the agent’s answer to a request it cannot read fits one DVMCP message', () => {
  // plain: 140,000 characters of tag, an answer beyond the relay's content limit; gift-wrapped:
  // 12,000 quotes (4 bytes each once the answer is in its rumor), beyond the ~40,500 bytes a wrap carries.
  it.each<[Form, string]>([
    ['plain', 'x'.repeat(140_000)],
    ['wrapped', '"'.repeat(12_000)],
  ])('%s: a huge method tag that differs from the content is answered -32600, the message cut with the note', async (form, methodTag) => {
    const { agent, c } = await agentAndClient();
    const request = c.request('tools/list', undefined, { tags: [['p', agent], ['method', methodTag]] });
    const id = await c.send(request, form);
    const answer = await c.answer(id, 10_000);
    const full = `Invalid request: method tag "${methodTag}" differs from content method "tools/list"`;
    expect(answer.result.ok).toBe(false);
    if (answer.result.ok) return;
    const { code, message } = answer.result.error;
    expect(code).toBe(RPC.INVALID_REQUEST);
    const shown = Number(/the first (\d+) of \d+ bytes\]$/.exec(message)?.[1]);
    expect(shown).toBeGreaterThan(form === 'plain' ? 100_000 : 9_000);
    expect(message).toBe(full.slice(0, shown) + answerNote(shown, full.length));
    expect(answer.tags).toEqual(expect.arrayContaining([['e', id], ['p', c.k.pk]]));
    if (form === 'plain') expect(new TextEncoder().encode(answer.content).length).toBeLessThanOrEqual(PLAIN_MESSAGE_MAX_BYTES);
    else expect(answer.event.kind).toBe(1059);
    c.close();
  });
});

describe('the agent’s announcements fit one event', () => {
  it('a picture over 2048 characters is refused 422 (it would make a 31316 over the relay’s 256 KiB messages)', async () => {
    const picture = `https://example.com/${'p'.repeat(262_000)}`;
    const r = await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'x', provider: 'echo', dvmcp: { enabled: true }, picture });
    expect(r).toEqual({ status: 422, json: { error: 'invalid agent', issues: [{ path: 'picture', message: 'Too big: expected string to have <=2048 characters' }] } });
    const longest = `https://example.com/${'p'.repeat(2048 - 20)}`;
    expect((await api(TEST_OWNER_SK, 'POST', '/api/agents', { name: 'x', provider: 'echo', picture: longest })).status).toBe(201);
  });
});
