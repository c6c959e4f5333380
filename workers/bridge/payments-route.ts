// POST /api/bridge/pay {invoice}: the development and test way to pay a local invoice (see
// payments-local.ts for the format). Answers 404 {error: "not found"} outside EDGESTR_ENV
// development or test, as if the route did not exist. No NIP-98: whoever holds a local invoice may
// pay it (as with a Lightning invoice). 200 {paid: true, sats, request_id}; 413 for a body over
// 4096 bytes (cut while it streams); 422 for a body that is not {invoice: string} or an invoice that is not local; 404 unknown invoice; 409 already paid;
// 410 cancelled (its request was cancelled, so it would never run) or expired; 503 when this
// bridge takes no local payments (a Lightning address is configured).

import { Hono } from 'hono';
import { z } from 'zod';
import type { Result } from '../../src/shared/errors.js';
import { localMode } from '../../src/shared/env-mode.js';
import { readBoundedBody } from '../api/body.js';
import { parseLocalInvoice } from './payments-local.js';
import type { PaymentEnv } from './payments.js';

/** The Bridge Durable Object of an owner, as far as this route needs it. */
export interface LocalPayee {
  payLocalInvoice(invoice: string): Promise<Result<{ sats: number; request_id: string }, string>>;
}

const BodySchema = z.object({ invoice: z.string().min(1).max(1000) });
const MAX_BODY = 4096;

const STATUS: Record<string, 404 | 409 | 410 | 503> = {
  'unknown invoice': 404,
  'invoice already paid': 409,
  'invoice cancelled': 410,
  'invoice expired': 410,
  'local payments are off': 503,
};

export function localPayRoutes<E extends PaymentEnv>(bridgeOf: (env: E, owner: string) => LocalPayee) {
  const app = new Hono<{ Bindings: E }>();
  app.post('/', async (c) => {
    if (localMode(c.env) === undefined) return c.json({ error: 'not found' }, 404);
    const bytes = await readBoundedBody(c.req.raw, MAX_BODY);
    if (!bytes.ok) return c.json({ error: bytes.error }, 413);
    let raw: unknown;
    try {
      raw = JSON.parse(new TextDecoder().decode(bytes.value));
    } catch {
      raw = undefined;
    }
    const body = BodySchema.safeParse(raw);
    if (!body.success) return c.json({ error: 'the body must be {"invoice": "<local invoice>"}' }, 422);
    const local = parseLocalInvoice(body.data.invoice);
    if (!local.ok) return c.json({ error: local.error }, 422);
    const paid = await bridgeOf(c.env, local.value.owner).payLocalInvoice(body.data.invoice);
    if (!paid.ok) return c.json({ error: paid.error }, STATUS[paid.error] ?? 422);
    return c.json({ paid: true, ...paid.value });
  });
  return app;
}
