// What a prompter learns from web_fetch's refusals (workers/agent/tools/web-fetch.ts): a refusal by
// the deployment's outbound policy is told to the model, and so to whoever prompted the agent, as
// one generic text, which names neither EDGESTR_OUTBOUND_ALLOW nor the ports it lists; the precise
// reason goes to the deployment's log and, as the tool result's `detail`, to the agent's owner
// alone (its NIP-AO `tool_detail` frame), never to the model. A vetted owner's public agent, its
// web_fetch allowed 127.0.0.1 and 127.0.0.2, under EDGESTR_OUTBOUND_ALLOW set on the agent's object
// (the test bindings list 127.0.0.1 on every port), prompted by a stranger.
import { env, runInDurableObject } from 'cloudflare:test';
import { afterEach, beforeEach, describe, expect, inject, it, vi, type MockInstance } from 'vitest';
import '../mcp/provided.js';
import { createTestAgent, NipXxClient, watchRunsEnded } from './agent-helpers.js';
import { keys } from './helpers.js';
import type { ObservedFrame } from '../../src/shared/ao-observer.js';

const FIXTURE = inject('toolsFixtureUrl');
const FIXTURE_PORT = new URL(FIXTURE).port;

/** A public agent with web_fetch on 127.0.0.1, its object run under EDGESTR_OUTBOUND_ALLOW=`allow`. */
async function agentUnder(allow: string): Promise<string> {
  const agent = await createTestAgent({ tools: ['web_fetch'], web_fetch_hosts: ['127.0.0.1', '127.0.0.2'] });
  await runInDurableObject(env.AGENT.get(env.AGENT.idFromName(agent)), (i) => {
    const o = i as unknown as { env: Record<string, unknown> };
    o.env = { ...o.env, EDGESTR_OUTBOUND_ALLOW: allow };
  });
  return agent;
}

/** What a stranger's run calling web_fetch on `url` shows it of the tool's result. */
async function strangersFetch(agent: string, url: string): Promise<Record<string, unknown> | undefined> {
  const stranger = await NipXxClient.open(agent, keys());
  try {
    const p = stranger.prompt({ ver: 1, message: `/tool web_fetch {"url":"${url}"}` });
    await stranger.send(p);
    const run = await stranger.collect(p.id);
    return run.tools.find((t) => t['phase'] === 'result');
  } finally {
    stranger.sock.close();
  }
}

const generic = (hostPort: string): string => `refused: ${hostPort} may not be fetched (the deployment's outbound policy; the agent's owner can see why)`;

describe("web_fetch: a stranger learns nothing of the deployment's outbound policy", () => {
  let warn: MockInstance<typeof console.warn>;
  beforeEach(() => {
    warn = vi.spyOn(console, 'warn');
  });
  afterEach(() => {
    warn.mockRestore();
  });
  const logged = (): string[] => warn.mock.calls.map((args) => args.join(' ')).filter((line) => line.startsWith('agent: web_fetch'));

  it('a listed host on another port: the generic text, not the ports EDGESTR_OUTBOUND_ALLOW lists; the reason is logged', async () => {
    const agent = await agentUnder('127.0.0.1');
    const result = await strangersFetch(agent, `${FIXTURE}/text`);
    expect(result).toMatchObject({ name: 'web_fetch', success: false, output: { stdout: '', stderr: generic(`127.0.0.1:${FIXTURE_PORT}`), exit_code: 1 } });
    expect(logged()).toEqual([
      `agent: web_fetch refused 127.0.0.1:${FIXTURE_PORT} (the deployment's outbound policy): EDGESTR_OUTBOUND_ALLOW lists 127.0.0.1 on its default port only, not ${FIXTURE_PORT}`,
    ]);
  });

  it('a host the operators did not list is told the same text: listed and unlisted hosts look alike', async () => {
    const agent = await agentUnder('127.0.0.1');
    const result = await strangersFetch(agent, `http://127.0.0.2:${FIXTURE_PORT}/text`);
    expect(result).toMatchObject({ name: 'web_fetch', success: false, output: { stderr: generic(`127.0.0.2:${FIXTURE_PORT}`) } });
    expect(logged()).toEqual([
      `agent: web_fetch refused 127.0.0.2:${FIXTURE_PORT} (the deployment's outbound policy): plain http:// is allowed only in development or for hosts in EDGESTR_OUTBOUND_ALLOW; use https://`,
    ]);
  });

  it('a redirect to a listed host on another port: the same generic text', async () => {
    const agent = await agentUnder(`127.0.0.1:${FIXTURE_PORT}`);
    const result = await strangersFetch(agent, `${FIXTURE}/redirect?to=${encodeURIComponent('http://127.0.0.1:1/')}`);
    expect(result).toMatchObject({ name: 'web_fetch', success: false, output: { stderr: `redirect ${generic('127.0.0.1:1')}` } });
    expect(logged()).toEqual([`agent: web_fetch refused 127.0.0.1:1 (the deployment's outbound policy): EDGESTR_OUTBOUND_ALLOW lists 127.0.0.1 on port ${FIXTURE_PORT} only, not 1`]);
  });
});

/** A stranger's run calling web_fetch on `url`, watched by the owner: the stranger's events, and the owner's frames of it. */
async function watchedFetch(agent: string, url: string): Promise<{ runId: string; run: Awaited<ReturnType<NipXxClient['collect']>>; frames: ObservedFrame[] }> {
  const watch = await watchRunsEnded([agent]);
  const stranger = await NipXxClient.open(agent, keys());
  try {
    const p = stranger.prompt({ ver: 1, message: `/tool web_fetch {"url":"${url}"}` });
    await stranger.send(p);
    const run = await stranger.collect(p.id);
    await watch.until(1);
    return { runId: p.id, run, frames: [...watch.frames] };
  } finally {
    stranger.sock.close();
    watch.stop();
  }
}

describe("web_fetch: the owner reads the outbound policy's reason, the model and the prompter do not", () => {
  it('the refusal’s reason is the tool result’s detail: in the owner’s tool_detail frame, in no other frame nor event of the run', async () => {
    const agent = await agentUnder('127.0.0.1');
    const { runId, run, frames } = await watchedFetch(agent, `${FIXTURE}/text`);
    const reason = `EDGESTR_OUTBOUND_ALLOW lists 127.0.0.1 on its default port only, not ${FIXTURE_PORT}`;
    const details = frames.filter((f) => f.frame.kind === 'tool_detail');
    expect(details.map((f) => f.frame.payload)).toEqual([{ run_id: runId, name: 'web_fetch', detail: `the deployment's outbound policy refuses 127.0.0.1:${FIXTURE_PORT}: ${reason}` }]);
    expect(details[0]?.frame).toMatchObject({ channelId: runId, turnId: runId });
    // The model's requests (acp_write), its output (acp_read) and the run's end carry the generic text only.
    const others = frames.filter((f) => f.frame.kind !== 'tool_detail');
    expect(others.map((f) => f.frame.kind)).toContain('acp_write');
    expect(JSON.stringify(others.map((f) => f.frame.payload))).not.toContain('EDGESTR_OUTBOUND_ALLOW');
    expect(JSON.stringify(others.map((f) => f.frame.payload))).toContain(generic(`127.0.0.1:${FIXTURE_PORT}`));
    // The stranger's events: the generic text, as the model read it.
    expect(run.terminal.payload['text']).toBe(`error: ${generic(`127.0.0.1:${FIXTURE_PORT}`)}`);
    expect(JSON.stringify(run)).not.toContain('EDGESTR_OUTBOUND_ALLOW');
  });

  it('a redirect hop refused: its reason is the detail', async () => {
    const agent = await agentUnder(`127.0.0.1:${FIXTURE_PORT}`);
    const { runId, run, frames } = await watchedFetch(agent, `${FIXTURE}/redirect?to=${encodeURIComponent('http://127.0.0.1:1/')}`);
    expect(frames.filter((f) => f.frame.kind === 'tool_detail').map((f) => f.frame.payload)).toEqual([
      { run_id: runId, name: 'web_fetch', detail: `the deployment's outbound policy refuses 127.0.0.1:1: EDGESTR_OUTBOUND_ALLOW lists 127.0.0.1 on port ${FIXTURE_PORT} only, not 1` },
    ]);
    expect(run.terminal.payload['text']).toBe(`error: redirect ${generic('127.0.0.1:1')}`);
  });

  it('a refusal the prompter may read whole (not in the allowlist) has no detail', async () => {
    const agent = await agentUnder('127.0.0.1');
    const { run, frames } = await watchedFetch(agent, `http://127.0.0.3:${FIXTURE_PORT}/text`);
    expect(frames.map((f) => f.frame.kind)).not.toContain('tool_detail');
    expect(run.terminal.payload['text']).toBe('error: refused: 127.0.0.3 is not in the allowlist');
  });
});
