import { RETRY_CHAIN_DEPTH } from '@verity/persistence';
import { chargeOperation, insertTestExecution } from '../support/fixtures';
import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import type { WireSchemas } from '@verity/sdk';
import { type Op, getExecution, getOperation, submit, waitForApprovalRequest } from './dispatcher-helpers';

type RetryResult = WireSchemas['RetryResult'];
type EarlierAttempt = Op['earlier_attempts'][number];

/**
 * A reviewer denies an approval (the operation ends CANCELLED, DENIED); the agent retries it, and the retry asks for
 * approval again. The reviewer asked then saw only "retry of op_…" — nothing of the denial a colleague made minutes
 * before — and deny → retry → ask again had no end. Every read of a retry now shows its earlier attempts (who denied
 * each, when and why), and a request denied DENIAL_LIMIT (3) times is not retried again.
 */
describe('a retry of a denied operation', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'retrydenied' });
  });
  afterAll(async () => stack?.stop());

  const retriesOf = async (opId: string) =>
    (
      (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM operations WHERE retry_of = $1`, [opId])) as {
        n: number;
      }[]
    )[0].n;

  it('shows the denials up its chain (who, when, why) on the operation, its execution, the review queue and the retry’s answer', async () => {
    const created = await submit(stack, [charge(unique('denied-retry'), { requires_approval: true })]);
    let executionId = created.id;
    let opId = created.operations[0].id;
    // Nearest first, as the operation shows them.
    const earlier: EarlierAttempt[] = [];
    for (let denial = 1; ; denial++) {
      await waitForApprovalRequest(stack, executionId);
      // The reviewer asked sees what colleagues denied before: on the operation, its execution, and the review queue.
      expect((await getOperation(stack, opId)).earlier_attempts).toEqual(earlier);
      expect((await getExecution(stack, executionId)).operations[0].earlier_attempts).toEqual(earlier);
      const queue = await http<{ data: { operation: Op }[] }>(stack.apiUrl, 'GET', '/v1/review/approvals', {
        key: DEMO.reviewer,
      });
      expect(queue.status).toBe(200);
      expect(queue.body.data.find((entry) => entry.operation.id === opId)?.operation.earlier_attempts).toEqual(earlier);

      const denied = await http<Op>(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
        key: DEMO.reviewer,
        body: { decision: 'deny', reason: `not this one (${denial})` },
      });
      expect(denied.status).toBe(200);
      expect(denied.body).toMatchObject({ status: 'CANCELLED', terminal_reason: 'DENIED' });
      earlier.unshift({
        operation_id: opId,
        execution_id: executionId,
        status: 'CANCELLED',
        terminal_reason: 'DENIED',
        denied_by: denied.body.approval!.decided_by!,
        denied_at: denied.body.approval!.decided_at!,
        reason: `not this one (${denial})`,
      });
      if (denial === 2) break;
      expect(denied.body.retry).toBe('safe');

      const retried = await http<RetryResult>(stack.apiUrl, 'POST', `/v1/operations/${opId}/retry`, {
        key: DEMO.agent,
      });
      expect(retried.status).toBe(201);
      expect(retried.body.operation).toMatchObject({ retry_of: opId, earlier_attempts: earlier });
      expect(retried.body.execution.operations[0].earlier_attempts).toEqual(earlier);
      executionId = retried.body.execution.id;
      opId = retried.body.operation.id;
    }
  }, 120_000);

  it('refuses a retry of a request denied three times: 409 denial-limit-reached naming the rule, nothing written', async () => {
    const created = await submit(stack, [charge(unique('denied-thrice'), { requires_approval: true })]);
    let executionId = created.id;
    let opId = created.operations[0].id;
    for (let denial = 1; ; denial++) {
      await waitForApprovalRequest(stack, executionId);
      const denied = await http<Op>(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
        key: DEMO.reviewer,
        body: { decision: 'deny', reason: `no (${denial})` },
      });
      expect(denied.status).toBe(200);
      if (denial === 3) break;
      const retried = await http<RetryResult>(stack.apiUrl, 'POST', `/v1/operations/${opId}/retry`, {
        key: DEMO.agent,
      });
      expect(retried.status).toBe(201);
      executionId = retried.body.execution.id;
      opId = retried.body.operation.id;
    }

    // Denied three times: the operation says no retry is allowed, and the retry is refused naming the rule.
    expect((await getOperation(stack, opId)).retry).toBe('forbidden');
    const refused = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/retry`, { key: DEMO.agent });
    expect(refused.status).toBe(409);
    expect(refused.headers.get('content-type')).toContain('application/problem+json');
    expect(refused.body).toMatchObject({
      type: 'https://verity.dev/problems/denial-limit-reached',
      rule: 'denial_limit',
      retry: 'forbidden',
      current_status: 'CANCELLED',
      denials: 3,
      limit: 3,
    });
    expect(await retriesOf(opId)).toBe(0);
  }, 120_000);

  it('refuses a retry of a chain longer than its denials are counted over: padding it with retries cancelled unsent does not push the denials out', async () => {
    // Denied three times, then retried and cancelled unsent until the denials lie past the RETRY_CHAIN_DEPTH links walked:
    // an agent key can make such a chain (a retry, then a cancel of its execution, each time) without asking a reviewer.
    const ids: string[] = [];
    for (let i = 0; i < RETRY_CHAIN_DEPTH + 2; i++) {
      const op = chargeOperation({ params: { amount: 100, currency: 'EUR', reference: unique('padded') } });
      await insertTestExecution(stack.db.dataSource.manager, 'demo', { operations: [op] });
      const denied = i < 3;
      await stack.db.dataSource.query(
        `UPDATE operations SET status = 'CANCELLED', terminal_reason = $3, retry_of = $2, approval = $4 WHERE id = $1`,
        [
          op.id,
          ids.at(-1) ?? null,
          denied ? 'DENIED' : null,
          denied ? { state: 'denied', decided_by: 'key_r', decided_at: new Date().toISOString(), reason: 'no' } : null,
        ],
      );
      ids.push(op.id);
    }
    const last = ids.at(-1)!;
    expect((await getOperation(stack, last)).retry).toBe('forbidden');
    const refused = await http(stack.apiUrl, 'POST', `/v1/operations/${last}/retry`, { key: DEMO.agent });
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({
      type: 'https://verity.dev/problems/denial-limit-reached',
      rule: 'denial_limit',
      retry: 'forbidden',
      limit: 3,
    });
    expect(await retriesOf(last)).toBe(0);
  }, 120_000);

  it('shows no earlier attempts on an operation that is no retry', async () => {
    const created = await submit(stack, [charge(unique('no-retry'))]);
    expect((await getOperation(stack, created.operations[0].id)).earlier_attempts).toEqual([]);
  }, 60_000);
});
