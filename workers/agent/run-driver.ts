// One run of a validated prompt: the provider and the tools for it, the runtime's callbacks turned
// into output (NIP-XX run events through the outbox, or a DVMCP answer: RunOutput), the run time
// limit, the NIP-AO telemetry to the owner (turn_started once the run's tools are built, with their
// problems, `tool_problems`; the provider's wire; tool_detail for a tool call whose failure has a
// detail for the owner alone, ToolResult `detail`; session_resolved with the upstream detail, the
// run's usage and the owner's totals against its plan, sent once the terminal event went out, with
// `delivered: false` and why when the relay did not take it; each of these texts cut to one bound,
// told-to.ts ownerDetail, the problems as one text when together they pass it), the checks
// before each model call (the agent's token budget, then the owner's plan: the call's model and its
// token limits), the tokens spent and the conversation's new turn, and then the run's
// one terminal outcome, also logged as one `agent.run` line (agent-log.ts) and metered (metering.ts).
// A run stopped from outside with a reason of its own (RunStopped: its time limit, its owner no
// longer allowed) ends with that error rather than CANCELLED, its spend counted as any run's.
// What the run has spent is kept in storage after each model call and tool call (checkpoint), so
// that a restart during the run does not lose it (the watchdog records it, agent-do.ts).

import { NIPXX_VERSION, type Prompt } from '../../src/shared/nip-xx.js';
import { KIND } from '../../src/shared/kinds.js';
import type { OutboundEnv } from '../../src/shared/outbound-url.js';
import { ownerOutbound } from '../common/owner-outbound.js';
import type { OwnerEnv } from '../common/owners.js';
import type { AccountsBindings } from '../accounts/accounts-do.js';
import type { TelemetryEmitter } from '../../src/shared/ao-emitter.js';
import type { StoredAgent, StoredMcpServer } from './config.js';
import type { AgentBudget } from './budget.js';
import type { Delivery, Outbox } from './outbox.js';
import { providerFor, type ProviderEnv } from './providers/index.js';
import type { EffectiveAgent } from './effective.js';
import { allowedThinking, executeRun, type RunSink, type Terminal, type Usage } from './runtime.js';
import type { SessionKey, SessionStore } from './sessions.js';
import { buildToolRunner } from './tools/registry.js';
import { toolsConfig } from './mcp-headers.js';
import type { DvmcpToolOptions } from './tools/dvmcp.js';
import { err, errorMessage, ok, type Result } from '../../src/shared/errors.js';
import type { McpSessionCache } from '../common/mcp-session-cache.js';
import type { RunMeter, RunSpend } from './metering.js';
import { logAgent } from './agent-log.js';
import type { ModelCallAsk, OwnerUsage } from '../accounts/quota.js';
import type { Refusal } from './admission.js';
import { fitToolCall } from './event-fit.js';
import { ownerDetail } from './told-to.js';


/** Where a run's progress and its one terminal outcome go. */
/**
 * The least output room a model call needs (or its own bound, when lower): a call that the token
 * budget or the owner's plan leave less for is not made (RATE_LIMIT) rather than cut to a few tokens.
 */
export const MIN_ANSWER_TOKENS = 256;

/** The abort reason of a run stopped from outside: the run ends with `terminal` (not CANCELLED). */
export class RunStopped extends Error {
  constructor(readonly terminal: Extract<Terminal, { type: 'error' }>) {
    super(terminal.message);
  }
}

export interface RunOutput {
  sink: RunSink;
  /** Sends the run's terminal outcome: what became of it (undefined: not known here, e.g. a DVMCP answer sent after the run). */
  finish(terminal: Terminal): Promise<Delivery | undefined>;
}

/** A NIP-XX run's output: its events, encrypted and published by the outbox. */
export function outboxOutput(outbox: Outbox, runId: string, c: StoredAgent): RunOutput {
  return {
    sink: {
      status: (state, progress, info) => outbox.emit(runId, KIND.AI_STATUS, { ver: NIPXX_VERSION, state, progress, ...(info ? { info } : {}) }),
      delta: (text, seq) => outbox.emit(runId, KIND.AI_DELTA, { ver: NIPXX_VERSION, text, seq }),
      toolCall: (t) => {
        const tags = [
          ['tool', t.name],
          ['phase', t.phase],
        ];
        // The model reads the whole tool output; the client gets what fits one event, marked when cut.
        const payload = fitToolCall({ ver: NIPXX_VERSION, ...t, timestamp: Math.floor(Date.now() / 1000) }, outbox.room(runId, KIND.AI_TOOL_CALL, tags));
        return outbox.emit(runId, KIND.AI_TOOL_CALL, payload, tags);
      },
    },
    finish: (terminal) => outbox.deliver(runId, c, terminal),
  };
}

export interface RunDeps {
  /** The provider settings, and what the outbound policy of the owner's dials needs (owner-outbound.ts). */
  env: ProviderEnv & OutboundEnv & OwnerEnv & AccountsBindings;
  sessions: SessionStore;
  budget: AgentBudget;
  /** The NIP-AO emitter to the owner, when connected. */
  emitter: TelemetryEmitter | undefined;
  /** The clock (ms) of the token day. */
  now: () => number;
  /** The agent's DVMCP client, for its `dvmcp_servers` tools. */
  dvmcp: DvmcpToolOptions;
  /** The agent's MCP sessions and tool lists, kept across runs. */
  mcpSessions: McpSessionCache;
  /** Opens an MCP server's sealed headers (AgentStore.mcpHeaders), when the run connects to it. */
  mcpHeaders(s: StoredMcpServer): Promise<Record<string, string>>;
  /**
   * Called just before the run's terminal outcome goes out, with its metering record; answers the
   * owner's totals against its plan after this run (when known), for the owner's telemetry.
   */
  meter(r: RunMeter): OwnerUsage | undefined;
  /** Keeps what the run (started at `startedAt`, ms) has spent so far, until meter() records it (metering.ts checkpoint). */
  checkpoint(r: RunSpend, startedAt: number): void;
  /**
   * Before each model call: the owner's standing, then its plan for `sender` — the call's model
   * (`call.model`: the plans may have changed since the agent was made) and the token limits,
   * counting the runs in progress: the refusal of `call` (UNAUTHORIZED for an owner no longer
   * allowed, UNSUPPORTED_MODEL for a model the plan does not allow), else the tokens the limits
   * leave (undefined: the plan sets none).
   */
  planTokens(sender: string, call: ModelCallAsk): Result<number | undefined, Refusal>;
}

export async function runPrompt(d: RunDeps, out: RunOutput, runId: string, c: EffectiveAgent, prompt: Prompt, model: string, conversation: SessionKey, abort: AbortController): Promise<void> {
  const client = conversation.sender;
  const started = Date.now();
  /** The run's model tokens, as the provider reports them (executeRun adds to them), and its tool calls. */
  const tokens: Usage = { input_tokens: 0, output_tokens: 0 };
  let toolCalls = 0;
  const ids = { channelId: runId, sessionId: conversation.session, turnId: runId };
  const emitter = d.emitter;
  /**
   * Keeps what the run has spent so far, with the estimated input of a model call going out
   * (`callInput`, as CallTokens counts a call cut short): a restart before finish() leaves it for the
   * watchdog to record.
   */
  const checkpoint = (callInput = 0): void => {
    const estimated = tokens.estimated === true || callInput > 0;
    const spend = { input_tokens: tokens.input_tokens + callInput, output_tokens: tokens.output_tokens, ...(estimated ? { estimated } : {}) };
    d.checkpoint({ run_id: runId, sender: client, provider: c.provider, model, ...spend, tool_calls: toolCalls }, started);
  };
  let turnStarted = false;
  /**
   * Tells the owner the run started (once), with the problems of its tool set when it has any: as
   * they are, or, when together (as the owner reads them, joined with "; ") they pass ownerDetail's
   * bound, as that one text cut.
   */
  const startTurn = (toolProblems: readonly string[] = []): void => {
    if (turnStarted) return;
    turnStarted = true;
    const joined = toolProblems.join('; ');
    const shown = ownerDetail(joined);
    const problems = toolProblems.length === 0 ? {} : { tool_problems: shown === joined ? [...toolProblems] : [shown] };
    emitter?.turnStarted({ run_id: runId, model, client, ...problems }, ids);
  };
  /**
   * Logs the run, counts its tokens against the agent's daily budget and meters it (the owner's
   * plan), however it ended, answers the client, then tells the owner (NIP-AO session_resolved
   * with the run's usage and what became of the answer).
   */
  const finish = async (terminal: Terminal): Promise<void> => {
    startTurn();
    const outcome = terminal.type === 'response' ? 'response' : terminal.code;
    const duration_ms = Date.now() - started;
    const usage = { provider: c.provider, model, ...tokens, tool_calls: toolCalls, duration_ms };
    logAgent({ msg: 'agent.run', agent: c.pubkey, run: runId, ...usage, outcome });
    d.budget.settle(runId, tokens.input_tokens + tokens.output_tokens, d.now());
    const owner_usage = d.meter({ run_id: runId, sender: client, ...usage, outcome });
    const delivery = await out.finish(terminal);
    // A stranger gets the generic message; the owner also gets the upstream detail, and why its answer was not delivered.
    const undelivered = delivery?.delivered === false ? delivery.detail : undefined;
    const detail = ownerDetail([terminal.type === 'error' ? terminal.detail : undefined, undelivered].filter((x) => x !== undefined).join('; '));
    emitter?.sessionResolved({ run_id: runId, outcome, ...(undelivered ? { delivered: false } : {}), ...(detail ? { detail } : {}), usage, ...(owner_usage ? { owner_usage } : {}) }, ids);
  };
  const sink: RunSink = {
    ...out.sink,
    // A failure's detail goes to the owner alone (tool_detail), never into the run's events.
    toolCall: (t, detail) => {
      if (t.phase === 'start') {
        toolCalls++;
        checkpoint();
      }
      if (detail !== undefined) emitter?.toolDetail({ run_id: runId, name: t.name, detail: ownerDetail(detail) }, ids);
      return out.sink.toolCall(t);
    },
  };
  d.budget.track(runId, tokens); // settled in finish, however the run ends
  const overtime = new RunStopped({ type: 'error', code: 'MODEL_UNAVAILABLE', message: `the run exceeded ${c.limits.max_run_seconds} s`, retry_after: 30 });
  const timer = setTimeout(() => abort.abort(overtime), c.limits.max_run_seconds * 1000);
  let terminal: Terminal;
  const provider = providerFor(c.provider, d.env);
  if (!provider.ok) {
    clearTimeout(timer);
    terminal = { type: 'error', code: 'MODEL_UNAVAILABLE', message: 'the model provider is not available on this deployment', details: { provider: c.provider }, detail: provider.error };
    await finish(terminal);
    return;
  }
  try {
    // The owner's dials: EDGESTR_OUTBOUND_ALLOW only if the operators vetted it; never the deployment's own host.
    const policy = await ownerOutbound(d.env, c.owner, c.origin);
    const tools = await buildToolRunner(toolsConfig(c, d.mcpHeaders), { webFetch: { policy }, mcp: { policy, sessions: d.mcpSessions, scope: client }, dvmcp: d.dvmcp });
    startTurn(tools.problems);
    try {
      const result = await executeRun({
        prompt,
        model,
        thinking: allowedThinking(prompt.thinking, c.thinking),
        systemPrompt: c.system_prompt,
        history: d.sessions.load(conversation),
        provider: provider.value,
        tools,
        limits: c.limits,
        signal: abort.signal,
        observe: emitter && {
          request: (body) => void emitter.acpWrite({ request: body }, ids),
          response: (raw) => void emitter.acpRead({ data: raw }, ids),
        },
        sink,
        usage: tokens,
        // A call needs room for its estimated input and a short answer; it may use what the budget
        // and the plan leave, up to its own bound (answer and thinking). It counts by its estimated
        // input plus that output allowance until it ends (budget.calling), so that the other runs'
        // checks see it, and no call can pass a limit by its output.
        beforeModelCall: (estimatedInput, outputBound) => {
          const call = { input: estimatedInput, answer: Math.min(MIN_ANSWER_TOKENS, outputBound), model: { provider: c.provider, name: model } };
          const refusal = d.budget.dailyTokensRefusal(c.limits, d.now(), call);
          if (refusal) return err(refusal);
          const plan = d.planTokens(client, call);
          if (!plan.ok) return plan;
          const room = Math.min(d.budget.dailyTokensRoom(c.limits, d.now()), plan.value ?? Infinity) - estimatedInput;
          const output = Math.min(outputBound, room);
          d.budget.calling(runId, estimatedInput + output);
          checkpoint(estimatedInput);
          return ok(output);
        },
        afterModelCall: () => {
          d.budget.callEnded(runId);
          checkpoint();
        },
      });
      terminal = result.terminal;
      if (terminal.type === 'error' && terminal.code === 'CANCELLED' && abort.signal.reason instanceof RunStopped) terminal = abort.signal.reason.terminal;
      if (terminal.type === 'response') d.sessions.append(conversation, runId, result.transcript, { maxTokens: c.limits.max_context_tokens, owner: c.owner });
    } finally {
      await tools.close();
    }
  } catch (e) {
    const detail = errorMessage(e);
    console.error('agent: run failed', runId, detail);
    terminal = { type: 'error', code: 'INTERNAL_ERROR', message: 'unexpected agent failure; please retry', retry_after: 5, detail };
  } finally {
    clearTimeout(timer);
  }
  await finish(terminal);
}
