import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import type { WireSchemas } from '@verity/sdk';

type Execution = WireSchemas['Execution'];
type RetryResult = WireSchemas['RetryResult'];

/**
 * A retry answers 201 with what it wrote: a new PREPARED operation in a new `created` execution, as a submission answers
 * with the execution it committed. The answer used to be read back after the execution's job was enqueued, so a
 * dispatcher quick enough had already moved it (`SENT`, `running`) by the time the API read it, and the answer showed
 * a state the retry did not write — some of the time.
 */
describe('the answer of a retry', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'retryanswer' });
  });
  afterAll(async () => stack?.stop());

  it('is the new operation as written (PREPARED in a created execution), however fast the dispatcher takes it', async () => {
    // Declined charges: each ends FAILED (CONNECTOR_REJECTED), retry `safe`, and each retry is declined again.
    const operations = Array.from({ length: 12 }, (_, i) => ({ ...charge(unique('decline-answer')), key: `c${i}` }));
    const submitted = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission(operations, { deadline_seconds: 3600 }),
    });
    expect(submitted.status).toBe(201);
    const failed = await waitFor(
      () => http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${submitted.body.id}`, { key: DEMO.agent }),
      (r) => r.body.operations.every((op) => op.status === 'FAILED'),
      45_000,
      150,
    );

    const answers: { status: number; operation: string; execution: string }[] = [];
    for (const op of failed.body.operations) {
      const retried = await http<RetryResult>(stack.apiUrl, 'POST', `/v1/operations/${op.id}/retry`, {
        key: DEMO.agent,
      });
      expect([retried.status, retried.body.operation.retry_of]).toEqual([201, op.id]);
      answers.push({
        status: retried.status,
        operation: retried.body.operation.status,
        execution: retried.body.execution.status,
      });
    }
    expect(answers).toEqual(answers.map(() => ({ status: 201, operation: 'PREPARED', execution: 'created' })));
  }, 90_000);
});
