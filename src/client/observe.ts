// The owner's live NIP-AO telemetry: the shared observer (src/shared/ao-observer.ts) on the owner's
// shard, authenticated as the owner, for the given agents; cancel_turn through the same connection.
import { err, ok, type Result } from '../shared/errors.js';
import { Observer, type ObserverOptions } from '../shared/ao-observer.js';
import type { RelayClient } from '../shared/relay-client.js';
import type { KeyPair } from './keys.js';
import { relayClient } from './relay.js';
import { wsUrl } from './http.js';

export type ObserveHandlers = Pick<ObserverOptions, 'onFrame' | 'onGap' | 'onDropReport' | 'onRejected' | 'onClosed'>;

export interface Observation {
  observer: Observer;
  relay: RelayClient;
  stop(): void;
}

/** Watches `agents` of `owner` on the owner's shard of the deployment at `base`. */
export async function observeAgents(base: string, owner: KeyPair, agents: string[], handlers: ObserveHandlers): Promise<Result<Observation, string>> {
  const relay = relayClient(wsUrl(base, `/r/${owner.pk}`), owner, { reconnect: true });
  const connected = await relay.connect();
  if (!connected.ok) {
    relay.close();
    return err(`cannot connect to ${relay.url}: ${connected.message}`);
  }
  const authed = await relay.authenticate();
  if (!authed.ok) {
    relay.close();
    return err(`authentication refused by ${relay.url}: ${authed.message}`);
  }
  const observer = new Observer({
    ownerSecretKey: owner.sk,
    agents,
    subscribe: (filters, opts) => relay.subscribe(filters, opts),
    publish: (e) => relay.publish(e),
    ...handlers,
  });
  observer.start();
  return ok({
    observer,
    relay,
    stop: () => {
      observer.stop();
      relay.close();
    },
  });
}
