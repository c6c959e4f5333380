// edgestr/client: the client library for programs talking to an edgestr deployment — keys, NIP-98
// signed management calls, prompt runs with streamed deltas and cancel, the owner's NIP-AO
// telemetry, and DVMCP tools. The `edgestr` command (src/cli) is built on exactly this.
export { defaultKeyPath, describeKey, keyPair, newKeyPair, parseSecretKey, readKeyFile, writeKeyFile, type KeyPair } from './keys.js';
export { deploymentUrl, health, httpBase, nip98Header, relayInfo, requestJson, wsUrl, type Health, type HttpError } from './http.js';
export { ManagementClient, type AgentInput, type AgentView, type BridgeServerInput, type BridgeServerView, type CreatedAgent } from './api.js';
export { agentRelay, findAgent, type AgentTarget, type FindError } from './agents.js';
export { AgentConversation, type PromptOptions, type RunHandle, type RunHandlers, type RunOutcome, type ToolCall } from './run.js';
export { observeAgents, type Observation, type ObserveHandlers } from './observe.js';
export { callTool, findServer, listTools, lookupServer, payLocalInvoice, type CallOptions, type LookupFailure } from './tools.js';
export { fetchEvents, relayClient } from './relay.js';
export type { ObservedFrame, SeqGap } from '../shared/ao-observer.js';
export type { Catalog, CatalogServer, CatalogTool } from '../shared/dvmcp-discovery.js';
export type { Result } from '../shared/errors.js';
