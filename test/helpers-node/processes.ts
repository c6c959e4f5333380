// Node-side helpers for test global setups that start local servers: a free loopback port, sleep.

import { createServer } from 'node:net';

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => (port ? resolve(port) : reject(new Error('no free port'))));
    });
  });
}
