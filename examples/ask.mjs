// Ask an agent one question and stream the answer as it arrives.
//   EDGESTR_URL=http://127.0.0.1:8787 node examples/ask.mjs [agent] [prompt]
// The agent defaults to the local demo agent (`demo`); a fresh key is used for the conversation.
import { AgentConversation, findAgent, newKeyPair } from 'edgestr/client';

const url = process.env.EDGESTR_URL ?? 'http://127.0.0.1:8787';
const [agent = 'demo', prompt = 'Hello from edgestr/client'] = process.argv.slice(2);

const target = await findAgent(url, agent);
if (!target.ok) throw new Error(target.error.message);

const conversation = await AgentConversation.open(target.value.relay, target.value.pubkey, newKeyPair());
if (!conversation.ok) throw new Error(conversation.error);

const run = await conversation.value.prompt(prompt, {
  onDelta: (text) => process.stdout.write(text),
  onStatus: (status) => process.stderr.write(`[${status.state}]\n`),
});
if (!run.ok) throw new Error(run.error);

const outcome = await run.value.done;
process.stdout.write('\n');
conversation.value.close();
if (outcome.kind !== 'response') {
  console.error(outcome.kind === 'error' ? `error ${outcome.code}: ${outcome.message}` : 'timed out');
  process.exitCode = 1;
}
