// Create an agent (attested by its owner, NIP-OA), watch its telemetry (NIP-AO) while asking it
// something, cancel a slow run, and delete it — the management API and a run from a program.
//   EDGESTR_URL=… EDGESTR_KEY=<owner nsec or hex> node examples/manage-agents.mjs
// The key must be allowed to own agents on the deployment (EDGESTR_OWNERS).
import { AgentConversation, ManagementClient, keyPair, newKeyPair, observeAgents, parseSecretKey, wsUrl } from 'edgestr/client';

const url = process.env.EDGESTR_URL ?? 'http://127.0.0.1:8787';
const secret = parseSecretKey(process.env.EDGESTR_KEY ?? '');
if (!secret.ok) throw new Error(`EDGESTR_KEY: ${secret.error}`);
const owner = keyPair(secret.value);
const api = new ManagementClient(url, owner);

const models = process.env.EXAMPLE_MODELS?.split(','); // e.g. "gpt-4o-mini,gpt-4o" (the first is the default)
const created = await api.createAgent({ name: 'example agent', provider: process.env.EXAMPLE_PROVIDER ?? 'echo', ...(models ? { models } : {}) });
if (!created.ok) throw new Error(`create: ${created.error.message}`);
const agent = created.value.pubkey;
console.log(`created ${created.value.npub} (attested: ${created.value.oa_auth[0]})`);

const frames = [];
const watching = await observeAgents(url, owner, [agent], { onFrame: (f) => frames.push(f.frame.kind) });
if (!watching.ok) throw new Error(watching.error);

const conversation = await AgentConversation.open(wsUrl(url, `/r/${owner.pk}`), agent, newKeyPair());
if (!conversation.ok) throw new Error(conversation.error);
const run = await conversation.value.prompt('What is edgestr?');
if (!run.ok) throw new Error(run.error);
const outcome = await run.value.done;
console.log(`answer: ${outcome.kind === 'response' ? outcome.text : outcome.kind}`);

// A cancel: the run ends with CANCELLED (with a model slow enough to still be running, one of EXAMPLE_MODELS).
const slowModel = process.env.EXAMPLE_SLOW_MODEL;
if (slowModel) {
  let cancel; // set once the prompt is out; the first delta after that sends the cancel (25806)
  const slow = await conversation.value.prompt('Count slowly', {
    model: slowModel,
    onDelta: () => {
      cancel?.();
      cancel = undefined;
    },
  });
  if (!slow.ok) throw new Error(slow.error);
  cancel = slow.value.cancel;
  const end = await slow.value.done;
  console.log(`cancelled run: ${end.kind === 'error' ? end.code : end.kind}`);
}

await new Promise((r) => setTimeout(r, 500));
console.log(`telemetry frames: ${[...new Set(frames)].join(', ')}`);
conversation.value.close();
watching.value.stop();

const listed = await api.listAgents();
console.log(`agents: ${listed.ok ? listed.value.length : listed.error.message}`);
const deleted = await api.deleteAgent(agent);
console.log(deleted.ok ? `deleted ${agent}` : `delete: ${deleted.error.message}`);
