// ApiState: the management API's own state, one SQLite Durable Object per caller pubkey. Today it
// holds the NIP-98 replay ids: an authorization event id is remembered until its event stops being
// valid, so it cannot be used twice by any isolate. Only callers the allow-list admits get one
// (nip98-auth.ts checks the list first).

import { DurableObject } from 'cloudflare:workers';

export interface ApiStateBindings {
  API_STATE: DurableObjectNamespace<ApiState>;
}

/** The state object of the caller `pubkey`. */
export const apiStateStub = (env: ApiStateBindings, pubkey: string): DurableObjectStub<ApiState> =>
  env.API_STATE.get(env.API_STATE.idFromName(pubkey));

export class ApiState extends DurableObject<object> {
  constructor(ctx: DurableObjectState, env: object) {
    super(ctx, env);
    ctx.storage.sql.exec('CREATE TABLE IF NOT EXISTS http_auth_seen (id TEXT PRIMARY KEY, expires_at INTEGER NOT NULL) WITHOUT ROWID');
  }

  /**
   * Records a NIP-98 authorization event id until `expiresAt` (unix seconds); false when it was
   * already used. Ids past their expiry are forgotten first.
   */
  consumeAuthorization(id: string, expiresAt: number): boolean {
    const sql = this.ctx.storage.sql;
    sql.exec('DELETE FROM http_auth_seen WHERE expires_at < ?', Math.floor(Date.now() / 1000));
    if (sql.exec('SELECT 1 FROM http_auth_seen WHERE id = ?', id).toArray().length) return false;
    sql.exec('INSERT INTO http_auth_seen (id, expires_at) VALUES (?, ?)', id, expiresAt);
    return true;
  }
}
