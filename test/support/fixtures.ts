import { newId } from '@verity/platform';
import { NewExecution, NewOperation, Queryable, insertExecution } from '@verity/persistence';
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
