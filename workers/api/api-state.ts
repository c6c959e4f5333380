// ApiState: the management API's own state, one SQLite Durable Object per caller pubkey. Today it
// holds the NIP-98 replay ids: an authorization event id is remembered until its event stops being
// valid, so it cannot be used twice by any isolate. A caller gets one once nip98-auth.ts has checked
// its header and the allow-list; with EDGESTR_SIGNUP=open that is any key that signs a sign-up,
// refused or not (the sign-up caps are checked after). So an object keeps nothing for good: an
// alarm at its latest expiry forgets the ids past theirs and, none left, deletes the object's whole
// storage (a refused key's object then holds nothing: no rows, no alarm).

import { DurableObject } from 'cloudflare:workers';

export interface ApiStateBindings {
  API_STATE: DurableObjectNamespace<ApiState>;
}

/** The state object of the caller `pubkey`. */
export const apiStateStub = (env: ApiStateBindings, pubkey: string): DurableObjectStub<ApiState> =>
  env.API_STATE.get(env.API_STATE.idFromName(pubkey));

export class ApiState extends DurableObject<object> {
  /**
   * Records a NIP-98 authorization event id until `expiresAt` (unix seconds); false when it was
   * already used. Ids past their expiry are forgotten first; the alarm is set to the latest expiry.
   */
  async consumeAuthorization(id: string, expiresAt: number): Promise<boolean> {
    const sql = this.seen();
    if (sql.exec('SELECT 1 FROM http_auth_seen WHERE id = ?', id).toArray().length) return false;
    sql.exec('INSERT INTO http_auth_seen (id, expires_at) VALUES (?, ?)', id, expiresAt);
    await this.wakeAtLatestExpiry();
    return true;
  }

  /** Forgets the ids past their expiry; none left, deletes the object's storage, else comes back at the latest expiry. */
  override async alarm(): Promise<void> {
    this.seen();
    await this.wakeAtLatestExpiry();
  }

  /** The SQL storage with the table of ids (made again after a deleteAll), the ids past their expiry forgotten. */
  private seen(): SqlStorage {
    const sql = this.ctx.storage.sql;
    sql.exec('CREATE TABLE IF NOT EXISTS http_auth_seen (id TEXT PRIMARY KEY, expires_at INTEGER NOT NULL) WITHOUT ROWID');
    sql.exec('DELETE FROM http_auth_seen WHERE expires_at < ?', Math.floor(Date.now() / 1000));
    return sql;
  }

  /** The alarm at the second after the latest expiry (an id is kept through its expires_at second); no id: no storage at all. */
  private async wakeAtLatestExpiry(): Promise<void> {
    const latest = this.ctx.storage.sql.exec<{ latest: number | null }>('SELECT max(expires_at) AS latest FROM http_auth_seen').one().latest;
    if (latest !== null) return this.ctx.storage.setAlarm((latest + 1) * 1000);
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
  }
}
