import { createApiKey } from '@verity/persistence/api-keys';
import { Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { events, submit, waitForOp } from './dispatcher-helpers';
import type { RetryResult } from '@verity/sdk';

/**
 * Who asked for an effect is on its record: an execution's `execution.created` event names the key that submitted it,
 * and a retry's names the key that asked for the retry — a person's decision to make again an effect that failed, as
 * an approval, a resolution or a cancel names theirs. The key that submitted the original is not the one named.
 */
describe('the history names who asked for an execution', () => {
  let stack: Stack;
  let agent: { id: string; key: string };
  let admin: { id: string; key: string };
  beforeAll(async () => {
    stack = await Stack.start({ label: 'audit-requested-by', reconcilers: 0 });
    agent = await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role: 'agent' });
    admin = await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role: 'admin' });
  });
  afterAll(async () => stack?.stop());

  it('a submission names its key, and a retry names the key that asked for it', async () => {
    const original = await submit(stack, [charge(`decline-${unique('requested-by')}`)], {}, agent.key);
    const created = (await events(stack, original.id, agent.key)).find((e) => e.type === 'execution.created');
    expect(created?.data).toEqual({ operations: 1, by: agent.id });

    const failed = await waitForOp(stack, original.id, 'charge', (o) => o.status === 'FAILED');
    const retried = await http<RetryResult>(stack.apiUrl, 'POST', `/v1/operations/${failed.id}/retry`, {
      key: admin.key,
    });
    expect(retried.status).toBe(201);
    const retryCreated = (await events(stack, retried.body.execution.id, agent.key)).find(
      (e) => e.type === 'execution.created',
    );
    expect(retryCreated?.data).toEqual({ operations: 1, by: admin.id });
  });
});
