import type { SecretsRead, TenantConnectors } from '@verity/connectors';
import {
  type ExecutionEntity,
  type SecretsHeld,
  findExecutionWithSecretsHeld,
  readSnapshot,
} from '@verity/persistence';
import type { DataSource, EntityManager } from 'typeorm';

/**
 * What `read` finds of the tenant's rows for an answer (an execution, an operation, a page of them), its statement
 * telling on the way whether the tenant holds any secret for the connectors that take them (the persistence reads
 * "…WithSecretsHeld": `secretConnectors` is what they probe for). When it holds none — found rows or not: a 404, an empty
 * page — that is kept as a read of its secrets begun at `begun` (by default now, before the statement is sent), so the
 * answer is given as it is: no round trip to confirm the values kept, no read of them. A tenant holding secrets is
 * answered as before (its values kept, or read, and confirmed once for the request). `begun` must be taken after the
 * request arrived and before the statement's snapshot is (for a read in a snapshot's transaction begun before it, before
 * the transaction begins).
 */
export async function readForAnswer<T>(
  connectors: TenantConnectors,
  tenantId: string,
  read: (secretConnectors: readonly string[]) => Promise<SecretsHeld<T>>,
  begun: SecretsRead = connectors.secretsReadBegins(),
): Promise<T> {
  const { found, holdsSecrets } = await read(connectors.secretsAccess().connectors);
  if (!holdsSecrets) connectors.noSecretsFound(tenantId, begun);
  return found;
}

/**
 * The tenant's execution `id` (null: none), read for an answer of it (the execution's read, its events, its stream;
 * readForAnswer): the same statement tells whether the tenant holds any secret.
 */
export function findExecutionForAnswer(
  db: EntityManager,
  connectors: TenantConnectors,
  id: string,
  tenantId: string,
  begun?: SecretsRead,
): Promise<ExecutionEntity | null> {
  return readForAnswer(connectors, tenantId, (held) => findExecutionWithSecretsHeld(db, id, tenantId, held), begun);
}

/**
 * `work` on one snapshot (readSnapshot) whose reads for an answer (readForAnswer) take `begun`: the read of the tenant's
 * secrets, begun before the snapshot's transaction begins, as readForAnswer asks.
 */
export function readSnapshotForAnswer<T>(
  dataSource: DataSource,
  connectors: TenantConnectors,
  work: (db: EntityManager, begun: SecretsRead) => Promise<T>,
): Promise<T> {
  const begun = connectors.secretsReadBegins();
  return readSnapshot(dataSource, (db) => work(db, begun));
}
