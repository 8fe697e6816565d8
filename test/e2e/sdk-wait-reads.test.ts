import { randomUUID } from 'node:crypto';
import { ExecutionStatus, OperationStatus, SubmissionRequest, Verity, isExecutionSettled } from '@verity/sdk';
import { DEMO, METRICS_TOKEN, Stack } from '../support/stack';

/** GET /v1/executions/{id} answered by the API so far, from its own request metrics (every status). */
async function executionReads(stack: Stack): Promise<number> {
  const res = await fetch(`${stack.apiUrl}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  expect(res.status).toBe(200);
  const text = await res.text();
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith('verity_http_request_duration_seconds_count{')) continue;
    if (!line.includes('method="GET"') || !line.includes('route="/v1/executions/:id"')) continue;
    total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

function submission(operation: 'charge' | 'sms'): SubmissionRequest {
  const ref = `reads-${randomUUID()}`;
  return {
    agent_id: 'sdk-wait-reads',
    intent: 'count the reads of a wait',
    operations: [
      operation === 'charge'
        ? {
            key: 'charge',
            connector: 'sandbox.payments',
            action: 'charge',
            params: { amount: 1250, currency: 'EUR', reference: ref },
          }
        : {
            key: 'notify',
            connector: 'sandbox.sms',
            action: 'send',
            params: { to: '+15550100', body: 'hi', client_ref: ref },
          },
    ],
  };
}

describe('waitForSettled against the running API: how often it reads the execution', () => {
  let stack: Stack;
  let dx: Verity;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'sdkwaitreads' });
    dx = new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.agent });
  }, 120_000);
  afterAll(async () => stack?.stop());

  it('reads each execution at most twice: at the start, and after the event that ends it', async () => {
    const kinds = ['charge', 'sms', 'charge', 'charge', 'sms', 'charge'] as const;
    const before = await executionReads(stack);
    for (const kind of kinds) {
      const created = await dx.executions.create(submission(kind));
      const settled = await dx.waitForSettled(created.id, { timeoutMs: 30_000 });
      expect(settled.status).toBe(ExecutionStatus.COMPLETED);
      expect(isExecutionSettled(settled)).toBe(true);
      expect(settled.operations[0].status).toBe(
        kind === 'charge' ? OperationStatus.VERIFIED : OperationStatus.ACKNOWLEDGED,
      );
    }
    const reads = (await executionReads(stack)) - before;
    // Reading after each status event took three or four per execution (a charge tells seven or more).
    expect(reads).toBeGreaterThanOrEqual(kinds.length);
    expect(reads).toBeLessThanOrEqual(2 * kinds.length);
  });
});
