import type { SecretsRead, TenantConnectors } from '@verity/connectors';
import { type ExecutionEntity, findExecutionWithSecretsHeld } from '@verity/persistence';
import type { EntityManager } from 'typeorm';

/**
 * The tenant's execution `id` (null: none), read for an answer of it (the execution's read, its events, its stream):
 * the same statement tells whether the tenant holds any secret for the connectors that take them. When it holds none,
 * that is kept as a read of its secrets begun at `read` (by default now, before the statement is sent), so the answer
 * is given as it is — no round trip to confirm the values kept, no read of them. A tenant holding secrets is answered
 * as before (its values kept, or read, and confirmed once for the request). `read` must be begun after the request
 * arrived and before the statement's snapshot is taken.
 */
export async function findExecutionForAnswer(
  db: EntityManager,
  connectors: TenantConnectors,
  id: string,
  tenantId: string,
  read: SecretsRead = connectors.secretsReadBegins(),
): Promise<ExecutionEntity | null> {
  const found = await findExecutionWithSecretsHeld(db, id, tenantId, connectors.secretsAccess().connectors);
  if (found && !found.holdsSecrets) connectors.noSecretsFound(tenantId, read);
  return found?.execution ?? null;
}
