import { newId } from '@verity/platform';
import { NewExecution, NewOperation, Queryable, hashApiKey, insertExecution } from '@verity/persistence';
import { VerificationMethod } from '@verity/status-model';

/** A charge as intake would store it (sandbox.payments, read back after write); `overrides` change any field. */
export function chargeOperation(overrides: Partial<NewOperation> = {}): NewOperation {
  return {
    id: newId('op'),
    key: 'charge',
    position: 0,
    connector: 'sandbox.payments',
    action: 'charge',
    params: { amount: 100, currency: 'EUR', reference: newId('op') },
    irreversible: true,
    requires_approval: false,
    verification_method: VerificationMethod.READ_AFTER_WRITE,
    expected_state: null,
    depends_on: [],
    approval: null,
    ...overrides,
  };
}

/**
 * Inserts an execution as intake would (by default of one charge), for tests that need rows to move: the statements
 * under test, not intake, are what such a test is about.
 */
export async function insertTestExecution(
  db: Queryable,
  tenantId: string,
  options: { execution?: Partial<NewExecution>; operations?: NewOperation[] } = {},
): Promise<string> {
  const executionId = newId('exe');
  await insertExecution(db, {
    id: executionId,
    tenantId,
    agentId: 'test-agent',
    intent: 'test',
    deadlineSeconds: 600,
    criteria: [],
    idempotencyKey: null,
    createdEventId: newId('evt'),
    operations: options.operations ?? [chargeOperation()],
    ...options.execution,
  });
  return executionId;
}

/** An execution of one charge (see insertTestExecution), with its operation's id. */
export async function insertChargeExecution(
  db: Queryable,
  tenantId: string,
  overrides: { execution?: Partial<NewExecution>; operation?: Partial<NewOperation> } = {},
): Promise<{ executionId: string; operationId: string }> {
  const operation = chargeOperation(overrides.operation);
  const executionId = await insertTestExecution(db, tenantId, {
    execution: overrides.execution,
    operations: [operation],
  });
  return { executionId, operationId: operation.id };
}

/** An http operation creating an order at a local server on `port`, read back from it (the held FAILED's source). */
export function orderAt(port: number, key: string) {
  return {
    key,
    connector: 'http',
    action: 'request',
    params: {
      method: 'POST',
      url: `http://127.0.0.1:${port}/orders`,
      body: { id: '{{operation_id}}' },
      read_back: {
        method: 'GET',
        url: `http://127.0.0.1:${port}/orders/{{operation_id}}`,
        field: '$.data.status',
        equals: 'created',
      },
    },
  };
}

/**
 * API key rows with these ids (of `tenantId`, admin role), for tests whose changes are recorded as made by a key: a
 * change is written only while the key that makes it stands (requireActiveKey). An id already there is kept.
 */
export async function insertStandingKeys(db: Queryable, tenantId: string, ids: readonly string[]): Promise<void> {
  for (const id of ids) {
    await db.query(
      `INSERT INTO api_keys (id, tenant_id, role, key_hash, key_prefix, label) VALUES ($1, $2, 'admin', $3, $4, 'test')
       ON CONFLICT DO NOTHING`,
      [id, tenantId, hashApiKey(`standing-key:${id}`), id.slice(0, 12)],
    );
  }
}

/** Marks an operation sent now (SENT, attempt 1) without the ledger: a send made before any spending cap. */
export async function markSentWithoutLedger(db: Queryable, operationId: string): Promise<void> {
  await db.query(`UPDATE operations SET status = 'SENT', attempt = 1, sent_at = now() WHERE id = $1`, [operationId]);
}

/** The operations in a tenant's spending ledger (connector_spend), in id order. */
export async function spendLedger(db: Queryable, tenantId: string): Promise<string[]> {
  const found = (await db.query(`SELECT operation_id FROM connector_spend WHERE tenant_id = $1 ORDER BY operation_id`, [
    tenantId,
  ])) as { operation_id: string }[];
  return found.map((r) => r.operation_id);
}
