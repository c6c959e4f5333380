// The agent's DVMCP announcements and when their deletion is due (workers/agent/dvmcp-profile.ts),
// without an Agent: every change of the setting, and what the ask tool and initialize declare.
import { describe, expect, it } from 'vitest';
import type { DvmcpSettings } from './config.js';
import { askTool, dvmcpAnnouncements, dvmcpDeletion, initializeInfo } from './dvmcp-profile.js';

const AGENT = 'a'.repeat(64);
const on = (over: Partial<DvmcpSettings> = {}): { dvmcp: DvmcpSettings } => ({ dvmcp: { enabled: true, server_id: 'agent', public: true, encryption: true, ...over } });
const agent = { name: 'Helper', about: 'answers', picture: 'https://example.com/p.png' };

describe('dvmcpAnnouncements', () => {
  it('a public enabled server: 31316 then 31317 with one cap ask', () => {
    const [server, tools, ...rest] = dvmcpAnnouncements({ ...agent, ...on({ encryption: false }) });
    expect(rest).toEqual([]);
    expect(server!.kind).toBe(31316);
    expect(server!.tags).toEqual([['d', 'agent'], ['k', '25910'], ['name', 'Helper'], ['about', 'answers'], ['picture', 'https://example.com/p.png'], ['support_encryption', 'false']]);
    expect(tools!.kind).toBe(31317);
    expect(tools!.tags).toEqual([['d', 'agent/tools/list'], ['s', 'agent'], ['cap', 'ask']]);
  });

  it('nothing when disabled, private or unset', () => {
    expect(dvmcpAnnouncements({ ...agent, ...on({ enabled: false }) })).toEqual([]);
    expect(dvmcpAnnouncements({ ...agent, ...on({ public: false }) })).toEqual([]);
    expect(dvmcpAnnouncements(agent)).toEqual([]);
  });

  it('without about: no instructions, a generic tool description', () => {
    expect(initializeInfo({ name: 'X' })).toEqual({ protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 'X', version: '1.0.0' } });
    expect(askTool({ name: 'X' }).description).toBe('Ask X, a hosted AI agent, and get its answer.');
  });
});

describe('dvmcpDeletion', () => {
  const coords = (e: ReturnType<typeof dvmcpDeletion>) => e?.tags.filter((t) => t[0] === 'a').map((t) => t[1]);
  it('is due when an announced server is disabled, made private, renamed or its agent removed', () => {
    expect(dvmcpDeletion(AGENT, on(), on({ enabled: false }))?.content).toBe('DVMCP server disabled');
    expect(dvmcpDeletion(AGENT, on(), on({ public: false }))?.content).toBe('server made private or renamed');
    const renamed = dvmcpDeletion(AGENT, on(), on({ server_id: 'new' }));
    expect(coords(renamed)?.[0]).toBe(`31316:${AGENT}:agent`);
    expect(dvmcpDeletion(AGENT, on(), undefined)?.content).toBe('agent deleted');
    expect(dvmcpDeletion(AGENT, on(), {})?.content).toBe('DVMCP server disabled');
  });

  it('is not due when nothing announced changes, or nothing was announced', () => {
    expect(dvmcpDeletion(AGENT, on(), on({ encryption: false }))).toBeUndefined();
    expect(dvmcpDeletion(AGENT, on({ public: false }), on({ enabled: false }))).toBeUndefined();
    expect(dvmcpDeletion(AGENT, {}, on())).toBeUndefined();
    expect(dvmcpDeletion(AGENT, on({ enabled: false }), undefined)).toBeUndefined();
  });
});
