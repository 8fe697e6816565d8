import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { findActiveKey, hashApiKey } from '@verity/persistence';
import { DataSource } from 'typeorm';
import type { Principal } from './principal';

/** How long a found key is trusted without asking Postgres again, while revocations arrive by NOTIFY. */
const POSITIVE_TTL_MS = 10_000;
const NEGATIVE_TTL_MS = 2_000;

/**
 * Looks up API keys by hash. Lookups are cached briefly; a revocation NOTIFYs every API process, which drops its
 * cache at once (EventNotifier), so a revoked key stops working immediately, open streams included. While the
 * LISTEN connection is down no notification can arrive, so found keys are then not cached at all.
 */
@Injectable()
export class ApiKeyService {
  private cache = new Map<string, { principal: Principal | null; until: number }>();
  private readonly revokedListeners = new Set<() => void>();
  private revocationsLive = false;

  constructor(@InjectDataSource() private readonly db: DataSource) {}

  async authenticate(key: string): Promise<Principal | null> {
    const hash = hashApiKey(key);
    const cached = this.cache.get(hash);
    if (cached && cached.until > Date.now() && (cached.principal === null || this.revocationsLive)) {
      return cached.principal;
    }
    const found = await findActiveKey(this.db.manager, key);
    const principal = found ? { keyId: found.id, tenantId: found.tenantId, role: found.role } : null;
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(hash, { principal, until: Date.now() + (principal ? POSITIVE_TTL_MS : NEGATIVE_TTL_MS) });
    return principal;
  }

  async isStillValid(principal: Principal): Promise<boolean> {
    const rows: unknown[] = await this.db.query(`SELECT 1 FROM api_keys WHERE id = $1 AND revoked_at IS NULL`, [
      principal.keyId,
    ]);
    return rows.length === 1;
  }

  /** Called by the EventNotifier: whether revocation notifications can currently reach this process. */
  setRevocationsLive(live: boolean): void {
    this.revocationsLive = live;
    if (!live) this.cache = new Map();
  }

  invalidateAll(): void {
    this.cache = new Map();
    for (const listener of this.revokedListeners) listener();
  }

  onRevocation(listener: () => void): () => void {
    this.revokedListeners.add(listener);
    return () => this.revokedListeners.delete(listener);
  }
}
