import { createApiKey } from '@verity/persistence/api-keys';
import type { WireSchemas } from '@verity/sdk';
import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { type Op, getOperation, submit, waitForApprovalRequest } from './dispatcher-helpers';

type RetryResult = WireSchemas['RetryResult'];

const AT_ONCE = 8;

/**
 * The denial limit and `earlier_attempts` against callers at once, callers of the wrong role or tenant, and hostile
 * reasons: retries of one denied operation sent together make one retry whose earlier attempts list each denial once;
 * at the limit none is made, however many are sent; a key of another tenant or role moves nothing; a reason a reviewer
 * may not give is refused before anything is decided, and one that may be given is shown to the next reviewer exactly.
 */
describe('retries of a denied request: at once, from the wrong key, with hostile reasons', () => {
  let stack: Stack;
  let otherReviewer: string;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'red24-denial' });
    otherReviewer = (await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'reviewer' })).key;
  }, 60_000);
  afterAll(async () => stack?.stop());

  const retriesOf = async (opId: string) =>
    (
      (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM operations WHERE retry_of = $1`, [opId])) as {
        n: number;
      }[]
    )[0].n;
  const deny = (opId: string, reason: string, key = DEMO.reviewer) =>
    http<Op>(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, { key, body: { decision: 'deny', reason } });
  const retry = (opId: string, key = DEMO.agent) =>
    http<RetryResult>(stack.apiUrl, 'POST', `/v1/operations/${opId}/retry`, { key });

  /** A request submitted and denied, then retried and denied again, `denials` times in all: the last one denied. */
  async function deniedTimes(denials: number): Promise<string[]> {
    const created = await submit(stack, [charge(unique('red24-denied'), { requires_approval: true })]);
    let executionId = created.id;
    const ids = [created.operations[0].id];
    for (let denial = 1; ; denial++) {
      await waitForApprovalRequest(stack, executionId);
      expect((await deny(ids.at(-1)!, `no (${denial})`)).status).toBe(200);
      if (denial === denials) return ids;
      const retried = await retry(ids.at(-1)!);
      expect(retried.status).toBe(201);
      executionId = retried.body.execution.id;
      ids.push(retried.body.operation.id);
    }
  }

  it('retries of one denied operation sent at once: one is made, its earlier attempts each denial once; at the limit none', async () => {
    const ids = await deniedTimes(2);
    const answers = await Promise.all(Array.from({ length: AT_ONCE }, () => retry(ids[1])));
    const made = answers.filter((answer) => answer.status === 201);
    expect(made).toHaveLength(1);
    for (const answer of answers.filter((a) => a.status !== 201)) {
      expect(answer.status).toBe(409);
      expect(answer.body).toMatchObject({ type: 'https://verity.dev/problems/already-retried' });
    }
    expect(await retriesOf(ids[1])).toBe(1);
    const third = made[0].body.operation;
    // The two denials, nearest first, each once: nothing of another attempt, nothing counted twice.
    expect(third.earlier_attempts.map((attempt) => [attempt.operation_id, attempt.reason])).toEqual([
      [ids[1], 'no (2)'],
      [ids[0], 'no (1)'],
    ]);
    expect((await getOperation(stack, third.id)).earlier_attempts).toEqual(third.earlier_attempts);

    // Denied a third time: every retry sent at once is refused, naming three denials, and none is written.
    await waitForApprovalRequest(stack, made[0].body.execution.id);
    expect((await deny(third.id, 'no (3)')).status).toBe(200);
    const refused = await Promise.all(Array.from({ length: AT_ONCE }, () => retry(third.id)));
    for (const answer of refused) {
      expect(answer.status).toBe(409);
      expect(answer.body).toMatchObject({
        type: 'https://verity.dev/problems/denial-limit-reached',
        denials: 3,
        limit: 3,
      });
    }
    expect(await retriesOf(third.id)).toBe(0);
    expect((await getOperation(stack, third.id)).retry).toBe('forbidden');
  }, 120_000);

  it('a key of another tenant or of the wrong role moves nothing of the chain', async () => {
    const [first] = await deniedTimes(1);
    // Another tenant's agent: the operation is not found for it (as an id that names nothing), no retry made.
    const across = await retry(first, DEMO.otherAgent);
    expect(across.status).toBe(404);
    expect((await retry('op_doesnotexist000000000000', DEMO.otherAgent)).status).toBe(404);
    // A reviewer does not retry.
    expect((await retry(first, DEMO.reviewer)).status).toBe(403);
    expect(await retriesOf(first)).toBe(0);

    const retried = await retry(first);
    expect(retried.status).toBe(201);
    const second = retried.body.operation.id;
    await waitForApprovalRequest(stack, retried.body.execution.id);
    // An agent does not decide, and another tenant's reviewer does not find it: the approval still waits.
    expect((await deny(second, 'not mine', DEMO.agent)).status).toBe(403);
    expect((await deny(second, 'not mine', otherReviewer)).status).toBe(404);
    const waiting = await getOperation(stack, second);
    expect(waiting.approval).toMatchObject({ state: 'requested' });
    expect(waiting.earlier_attempts.map((attempt) => attempt.operation_id)).toEqual([first]);
  }, 120_000);

  it('a reason a reviewer may not give is refused before anything is decided; one that may be given is shown exactly', async () => {
    const created = await submit(stack, [charge(unique('red24-reason'), { requires_approval: true })]);
    const opId = created.operations[0].id;
    await waitForApprovalRequest(stack, created.id);
    for (const reason of [
      'no\u0007bell',
      'no \u001b[2Jcleared',
      'approved\u202e',
      'x'.repeat(2001),
      'a\u0000b',
      // Nothing that shows: the next reviewer would read a reason given (“ ”) where none was.
      '\u200b\u2060',
      '   ',
      '\u3164\n\t',
    ]) {
      const refused = await deny(opId, reason);
      expect(refused.status).toBe(400);
      expect(refused.body).toMatchObject({ type: 'https://verity.dev/problems/validation-error' });
    }
    // Nor is an execution cancelled with a reason that shows nothing (the same rule: the history shows the reason).
    const cancel = await http(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, {
      key: DEMO.agent,
      body: { reason: '\u200b' },
    });
    expect(cancel.status).toBe(400);
    expect((await getOperation(stack, opId)).approval).toMatchObject({ state: 'requested' });

    // The longest reason, of characters outside the BMP and of other scripts, on several lines.
    const reason = `${'🔒'.repeat(500)}\nнет, 不行\n${'x'.repeat(2000 - 1000 - 11)}`.slice(0, 2000);
    const denied = await deny(opId, reason);
    expect(denied.status).toBe(200);
    const retried = await retry(opId);
    expect(retried.status).toBe(201);
    expect(retried.body.operation.earlier_attempts).toEqual([expect.objectContaining({ operation_id: opId, reason })]);
  }, 120_000);
});
