// One run per key at a time: a call made while a run for its key is in flight joins that run
// instead of starting another. The agents' and the bridge's relay links set up each opened
// connection (authenticate, subscribe) through it: the connection's open event and the caller that
// opened it both ask, and two setups would each send their own REQ.

export class SingleFlight<K> {
  readonly #running = new Map<K, Promise<void>>();

  run(key: K, start: () => Promise<void>): Promise<void> {
    const running = this.#running.get(key);
    if (running) return running;
    const run = start().finally(() => this.#running.delete(key));
    this.#running.set(key, run);
    return run;
  }
}
