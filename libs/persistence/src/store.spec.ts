import { randomBytes } from 'node:crypto';
import { newId } from '@verity/platform';
import { useTestDatabase } from '../../../test/support/test-database';
import {
  eventSeqOf,
  findExecution,
  findExecutionForWorker,
  findExecutionWithOperations,
  findLastStatusChanges,
  findOperation,
  findOperationForWorker,
  findOperations,
  findOperationsOf,
  findOperationToSend,
  listEvents,
  listExecutions,
} from './store';
import { chargeOperation, insertTestExecution } from '../../../test/support/fixtures';
import { upsertConnectorSettings, writeConnectorSecret } from './connector-settings.repository';
import { SecretsCipher } from './secrets-cipher';

describe('reads reachable from the API are scoped to the tenant (real Postgres)', () => {
  const db = useTestDatabase('tenantreads', ['acme', 'other']);
  const executionId = newId('exe');
  const operationId = newId('op');
  const eventId = newId('evt');

  beforeAll(async () => {
    await insertTestExecution(db.dataSource.manager, 'acme', {
      execution: { id: executionId, createdEventId: eventId },
      operations: [chargeOperation({ id: operationId })],
    });
  });

  it("finds the tenant's own rows", async () => {
    const m = db.dataSource.manager;
    expect((await findExecution(m, executionId, 'acme'))?.id).toBe(executionId);
    expect((await findOperation(m, operationId, 'acme'))?.id).toBe(operationId);
    expect((await findOperations(m, executionId, 'acme')).map((o) => o.id)).toEqual([operationId]);
    expect((await findOperationsOf(m, [executionId], 'acme')).map((o) => o.id)).toEqual([operationId]);
    expect((await findExecutionWithOperations(m, executionId, 'acme'))?.operations.map((o) => o.id)).toEqual([
      operationId,
    ]);
    expect((await listEvents(m, executionId, 'acme', 0, 10)).map((e) => e.id)).toEqual([eventId]);
    expect(await eventSeqOf(m, executionId, 'acme', eventId)).toBe(1);
    expect((await listExecutions(m, 'acme', { limit: 10 })).map((e) => e.id)).toEqual([executionId]);
    expect((await listExecutions(m, 'acme', { limit: 10, status: 'created' as never })).length).toBe(1);
    expect((await listExecutions(m, 'acme', { limit: 10, before: executionId })).length).toBe(0);
    expect((await listExecutions(m, 'acme', { limit: 10, status: 'running' as never, before: 'exe_~' })).length).toBe(
      0,
    );
  });

  it("finds nothing of another tenant's", async () => {
    const m = db.dataSource.manager;
    expect(await findExecution(m, executionId, 'other')).toBeNull();
    expect(await findOperation(m, operationId, 'other')).toBeNull();
    expect(await findOperations(m, executionId, 'other')).toEqual([]);
    expect(await findOperationsOf(m, [executionId], 'other')).toEqual([]);
    expect(await findExecutionWithOperations(m, executionId, 'other')).toBeNull();
    expect(await listEvents(m, executionId, 'other', 0, 10)).toEqual([]);
    expect(await eventSeqOf(m, executionId, 'other', eventId)).toBeNull();
    expect((await findLastStatusChanges(m, [operationId], 'other')).size).toBe(0);
    expect(await listExecutions(m, 'other', { limit: 10 })).toEqual([]);
  });

  it('lets the workers read across tenants through the …ForWorker functions', async () => {
    const m = db.dataSource.manager;
    expect((await findExecutionForWorker(m, executionId))?.tenantId).toBe('acme');
    expect((await findOperationForWorker(m, operationId))?.tenantId).toBe('acme');
  });
});

describe("an operation read to send carries its tenant's settings for its connector (real Postgres)", () => {
  const db = useTestDatabase('sendread', ['acme']);
  const cipher = new SecretsCipher(randomBytes(32).toString('base64'));
  const executionId = newId('exe');
  const operationId = newId('op');

  beforeAll(async () => {
    await insertTestExecution(db.dataSource.manager, 'acme', {
      execution: { id: executionId },
      operations: [chargeOperation({ id: operationId })],
    });
  });

  it('reads none when the tenant has set none', async () => {
    const found = await findOperationToSend(db.dataSource.manager, operationId, { connectors: [], cipher });
    expect(found?.operation.id).toBe(operationId);
    // No row: and the version read says so (a row written later is a change the send guard sees).
    expect(found?.settings).toEqual({
      allowHosts: [],
      spendingCaps: [],
      secrets: {},
      readBackBinding: 'declared',
      version: null,
    });
  });

  it('reads the allowlist and caps, and opens the secrets only of a connector that declares them', async () => {
    const m = db.dataSource.manager;
    const connector = chargeOperation({ id: operationId }).connector as string;
    const caps = [{ period: 'day' as const, max_operations: 3 }];
    await upsertConnectorSettings(m, 'acme', connector, {
      allowHosts: [{ host: 'a.example' }],
      spendingCaps: caps,
      by: 'k',
    });
    await writeConnectorSecret(m, cipher, 'acme', connector, 'token', 's3cret', 'k');

    const declared = await findOperationToSend(m, operationId, { connectors: [connector], cipher });
    expect(declared?.settings).toEqual({
      allowHosts: [{ host: 'a.example' }],
      spendingCaps: caps,
      secrets: { token: 's3cret' },
      readBackBinding: 'declared',
      // The row's version (its updated_at in microseconds), which the send guard compares.
      version: expect.stringMatching(/^\d+$/),
    });
    // The version moves with a change of the allowlist or caps, not with a write of the same values.
    const versionNow = async () =>
      (await findOperationToSend(m, operationId, { connectors: [], cipher }))?.settings.version;
    const version = await versionNow();
    await upsertConnectorSettings(m, 'acme', connector, {
      allowHosts: [{ host: 'a.example' }],
      spendingCaps: caps,
      by: 'k',
    });
    expect(await versionNow()).toBe(version);
    await upsertConnectorSettings(m, 'acme', connector, { allowHosts: [{ host: 'b.example' }], by: 'k' });
    expect(await versionNow()).not.toBe(version);
    await upsertConnectorSettings(m, 'acme', connector, { allowHosts: [{ host: 'a.example' }], by: 'k' });
    const undeclared = await findOperationToSend(m, operationId, { connectors: ['http'], cipher });
    expect(undeclared?.settings.secrets).toEqual({});
    expect(undeclared?.settings.allowHosts).toEqual([{ host: 'a.example' }]);
    expect(await findOperationToSend(m, newId('op'), { connectors: [connector], cipher })).toBeNull();
  });
});
