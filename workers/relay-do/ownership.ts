// The shard's record of which agent keys belong to which owner: learned from authenticated proofs
// (a NIP-OA `auth` tag on the agent's AUTH event or stored kind 0) or from edgestr's own
// provisioning of hosted agents. Kept in the shard's SQLite so it survives hibernation and restarts.

export type OwnershipSource = 'auth' | 'kind0' | 'provisioned';

export class OwnershipRegistry {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(`CREATE TABLE IF NOT EXISTS agent_owners (
      agent TEXT NOT NULL,
      owner TEXT NOT NULL,
      source TEXT NOT NULL,
      recorded_at INTEGER NOT NULL,
      PRIMARY KEY (agent, owner, source)
    ) WITHOUT ROWID`);
  }

  record(agent: string, owner: string, source: OwnershipSource, now: number): void {
    this.sql.exec(
      `INSERT INTO agent_owners (agent, owner, source, recorded_at) VALUES (?, ?, ?, ?)
       ON CONFLICT (agent, owner, source) DO UPDATE SET recorded_at = excluded.recorded_at`,
      agent,
      owner,
      source,
      now,
    );
  }

  /** Forgets a proof of one source (or every source) for agent → owner. */
  revoke(agent: string, owner: string, source?: OwnershipSource): void {
    if (source) this.sql.exec('DELETE FROM agent_owners WHERE agent = ? AND owner = ? AND source = ?', agent, owner, source);
    else this.sql.exec('DELETE FROM agent_owners WHERE agent = ? AND owner = ?', agent, owner);
  }

  isAgentOwner(agent: string, owner: string): boolean {
    return this.sql.exec('SELECT 1 FROM agent_owners WHERE agent = ? AND owner = ? LIMIT 1', agent, owner).toArray().length > 0;
  }

  ownersOf(agent: string, source: OwnershipSource): string[] {
    return this.sql
      .exec<{ owner: string }>('SELECT owner FROM agent_owners WHERE agent = ? AND source = ?', agent, source)
      .toArray()
      .map((r) => r.owner);
  }

  agentsOf(owner: string, source: OwnershipSource): string[] {
    return this.sql
      .exec<{ agent: string }>('SELECT agent FROM agent_owners WHERE owner = ? AND source = ? ORDER BY recorded_at, agent', owner, source)
      .toArray()
      .map((r) => r.agent);
  }
}
