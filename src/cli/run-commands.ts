// `edgestr ask` and `edgestr chat`: prompts to an agent over its relay (edgestr/client's
// AgentConversation), deltas streamed to stdout as they arrive, status and tool calls on stderr
// (a failed call with its reason, its output's stderr on one line).
// What a turn ends with on stdout is the agent's answer (the 25803's text; NIP-XX: "Final render
// MUST be taken from ai.response text, not from the delta stream"): the rest of it when the stream
// was its beginning, else (a delta lost, an answer cut to fit an event) a note on stderr and all of it.
// Ctrl-C (SIGINT) cancels the running turn with a 25806; in chat, Ctrl-D (end of input) leaves.
// A turn whose relay ended its subscription for good ends at once with the relay's words (exit 5).
import { nestsWithin, NOT_SHOWN } from '../shared/json-depth.js';
import { createInterface } from 'node:readline';
import { bytesToHex } from '../shared/hex.js';
import { findAgent } from '../client/agents.js';
import { AgentConversation, type RunHandlers, type RunOutcome, type ToolCall } from '../client/run.js';
import { secondsOption } from './args.js';
import { Context, EXIT, Failure } from './context.js';
import { terminalSafe } from './terminal-safe.js';

const DEFAULT_TIMEOUT_MS = 120_000;

async function connect(ctx: Context, agent: string): Promise<AgentConversation> {
  const found = await findAgent(ctx.url, agent);
  if (!found.ok) throw new Failure(found.error.reason === 'usage' ? EXIT.USAGE : EXIT.CONNECT, found.error.message);
  const key = await ctx.keyOrFresh();
  const conv = await AgentConversation.open(found.value.relay, found.value.pubkey, key);
  if (!conv.ok) throw new Failure(EXIT.CONNECT, conv.error);
  return conv.value;
}

function timeoutOf(ctx: Context): number {
  const t = secondsOption(ctx.string('timeout'), 'timeout');
  if (!t.ok) throw new Failure(EXIT.USAGE, t.error);
  return t.value ?? DEFAULT_TIMEOUT_MS;
}

/** Said on stderr when the answer is not the continuation of the streamed text, before the answer. */
const STREAM_DIFFERS = "[the streamed text differs from the agent's answer; the answer follows]\n";

/** Why a tool call failed, shown on its line: the `stderr` of its output (where agents put the reason), trimmed, on one line. */
function failureReason(t: ToolCall): string | undefined {
  if (t.success !== false) return undefined;
  const reason = t.output?.['stderr'];
  return typeof reason === 'string' && reason.trim() ? terminalSafe(reason.trim(), { singleLine: true }) : undefined;
}

/**
 * Writes a run's deltas, status and tool calls (shown escaped by ctx.out/err: they are the agent's
 * words); `streamed` is the text of the deltas written (at most MAX_RUN_OUTPUT_CHARS, DeltaOrder's
 * bound), `tail` a CR held back from the last one.
 */
function printer(ctx: Context, runId: () => string): RunHandlers & { streamed: () => string; tail: () => string } {
  let streamed = '';
  // A delta's last CR waits for the next delta: CRLF split between two deltas stays a line end,
  // a lone CR (which would overwrite the line) is shown escaped.
  let heldCr = '';
  return {
    streamed: () => streamed,
    tail: () => heldCr,
    onDelta: (text, seq) => {
      streamed += text;
      if (ctx.json) return ctx.emit({ type: 'delta', run: runId(), seq, text }, '');
      const t = heldCr + text;
      heldCr = t.endsWith('\r') ? '\r' : '';
      ctx.out(heldCr ? t.slice(0, -1) : t);
    },
    onStatus: (s) => {
      if (ctx.json) ctx.emit({ type: 'status', run: runId(), ...s }, '');
      else ctx.err(`[${s.state}${s.progress !== undefined ? ` ${s.progress}%` : ''}${s.info ? `: ${terminalSafe(s.info, { singleLine: true })}` : ''}]\n`);
    },
    onToolCall: (t) => {
      if (ctx.json) ctx.emit({ type: 'tool_call', run: runId(), ...t }, '');
      else {
        const name = terminalSafe(t.name ?? '', { singleLine: true });
        const reason = failureReason(t);
        ctx.err(`[tool ${name}${t.phase ? ` ${t.phase}` : ''}${t.arguments ? ` ${nestsWithin(t.arguments) ? JSON.stringify(t.arguments) : NOT_SHOWN}` : ''}${t.success === false ? ' failed' : ''}${reason ? `: ${reason}` : ''}${t.text ? `: ${t.text}` : ''}]\n`);
      }
    },
  };
}

/**
 * Prints the end of a run and returns its exit code (`streamed`: the deltas' text written, `tail`: a
 * CR held back from the last delta). A response's text is shown whole: its rest after `streamed`,
 * or, when `streamed` is not its beginning, STREAM_DIFFERS and all of it on a line of its own.
 */
function finish(ctx: Context, runId: string, outcome: RunOutcome, streamed: string, tail: string, timeoutMs: number): number {
  switch (outcome.kind) {
    case 'response':
      if (ctx.json) ctx.emit({ type: 'response', run: runId, text: outcome.text, ...(outcome.usage ? { usage: outcome.usage } : {}) }, '');
      else if (outcome.text.startsWith(streamed)) ctx.out(`${tail}${outcome.text.slice(streamed.length)}\n`);
      else {
        ctx.out(`${tail}\n`);
        ctx.err(STREAM_DIFFERS);
        ctx.out(`${outcome.text}\n`);
      }
      return EXIT.OK;
    case 'error':
      if (ctx.json) ctx.emit({ type: 'error', run: runId, code: outcome.code, message: outcome.message }, '');
      else if (streamed) ctx.out(`${tail}\n`);
      ctx.err(`error ${outcome.code}: ${outcome.message}\n`);
      return EXIT.AGENT_ERROR;
    case 'timeout':
      if (streamed && !ctx.json) ctx.out(`${tail}\n`);
      ctx.err(`timed out after ${timeoutMs / 1000} s waiting for the agent's answer\n`);
      return EXIT.TIMEOUT;
    case 'closed':
      if (streamed && !ctx.json) ctx.out(`${tail}\n`);
      ctx.err(`edgestr: ${outcome.message}\n`);
      return EXIT.CONNECT;
  }
}

async function readAll(stream: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(typeof c === 'string' ? Buffer.from(c) : (c as Buffer));
  return Buffer.concat(chunks).toString('utf8');
}

/** Runs one turn; SIGINT while it runs sends the cancel. */
async function turn(ctx: Context, conv: AgentConversation, message: string, session: string | undefined, timeoutMs: number): Promise<number> {
  let id = '';
  const p = printer(ctx, () => id);
  const model = ctx.string('model');
  const handle = await conv.prompt(message, { ...p, timeoutMs, ...(session ? { session } : {}), ...(model ? { model } : {}) });
  if (!handle.ok) throw new Failure(EXIT.CONNECT, handle.error);
  id = handle.value.id;
  const onSigint = (): void => {
    ctx.err('\n[cancelling]\n');
    void handle.value.cancel().then((r) => {
      if (!r.ok) ctx.err(`cancel refused: ${r.message}\n`);
    });
  };
  process.on('SIGINT', onSigint);
  try {
    return finish(ctx, id, await handle.value.done, p.streamed(), p.tail(), timeoutMs);
  } finally {
    process.off('SIGINT', onSigint);
  }
}

export async function askCommand(ctx: Context, args: string[]): Promise<number> {
  const timeoutMs = timeoutOf(ctx);
  const message = (args[1] ?? (await readAll(ctx.io.stdin))).replace(/\r?\n$/, '');
  if (!message.trim()) throw new Failure(EXIT.USAGE, 'ask needs a prompt (as an argument or on stdin)');
  const conv = await connect(ctx, args[0]!);
  try {
    return await turn(ctx, conv, message, ctx.string('session'), timeoutMs);
  } finally {
    conv.close();
  }
}

export async function chatCommand(ctx: Context, args: string[]): Promise<number> {
  const timeoutMs = timeoutOf(ctx);
  const conv = await connect(ctx, args[0]!);
  const session = ctx.string('session') ?? `chat:${bytesToHex(crypto.getRandomValues(new Uint8Array(8)))}`;
  const tty = ctx.io.stdin.isTTY === true;
  ctx.err(`chat with ${conv.agent} (session ${session}; resume with --session ${session}). Ctrl-C cancels a turn, Ctrl-D leaves.\n`);
  const rl = createInterface({ input: ctx.io.stdin, output: tty ? ctx.io.stdout : undefined, terminal: tty, historySize: 500 });
  let idle = true;
  // At the prompt, Ctrl-C leaves like Ctrl-D; during a turn, turn() cancels the run.
  const onIdleSigint = (): void => {
    if (idle) rl.close();
  };
  rl.on('SIGINT', () => (idle ? rl.close() : process.emit('SIGINT')));
  process.on('SIGINT', onIdleSigint);
  try {
    rl.setPrompt('> ');
    if (tty) rl.prompt();
    for await (const input of rl) {
      const message = input.trim();
      if (message) {
        idle = false;
        await turn(ctx, conv, message, session, timeoutMs); // each turn's outcome is shown; chat goes on
        idle = true;
      }
      if (tty) rl.prompt();
    }
  } finally {
    process.off('SIGINT', onIdleSigint);
    rl.close();
    conv.close();
  }
  return EXIT.OK;
}
