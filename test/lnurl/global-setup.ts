// vitest globalSetup (Node, outside workerd): starts the local LNURL-pay server (test/lnurl/server.ts)
// for the payment tests and provides its URL (inject('lnurlUrl')); reachable from workerd on 127.0.0.1.

import type { TestProject } from 'vitest/node';
import { startLnurlServer } from './server.js';
import './provided.js';

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const server = await startLnurlServer();
  project.provide('lnurlUrl', server.url);
  return () => server.close();
}
