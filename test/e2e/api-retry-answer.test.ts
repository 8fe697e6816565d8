import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import type { WireSchemas } from '@verity/sdk';
import { type Op, getOperation, submit, waitForOp } from './dispatcher-helpers';

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
  /** A declined charge: it ends FAILED (the provider said no), retry `safe`. */
  async function declined(): Promise<{ executionId: string; opId: string }> {
    const created = await submit(stack, [charge(unique('decline-refuted'))]);
    const failed = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'FAILED');
    return { executionId: created.id, opId: failed.id };
  }

  /** The provider's 2xx of a FAILED came back late (as the dispatcher records it): its "no effect" is refuted. */
  const acknowledgeLate = (opId: string) =>
    stack.db.dataSource.query(`UPDATE operations SET acknowledged_at = now() WHERE id = $1 AND status = 'FAILED'`, [
      opId,
    ]);

  const retriesOf = async (opId: string) =>
    (
      (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM operations WHERE retry_of = $1`, [opId])) as {
        n: number;
      }[]
    )[0].n;

  it('is refused (409 effect-exists, nothing written) where a FAILED up the chain of retries was contradicted since', async () => {
    const original = await declined();
    const first = await http<RetryResult>(stack.apiUrl, 'POST', `/v1/operations/${original.opId}/retry`, {
      key: DEMO.agent,
    });
    expect(first.status).toBe(201);
    const retried = await waitForOp(stack, first.body.execution.id, 'charge', (o) => o.status === 'FAILED');
    expect(retried.retry).toBe('safe');
    await acknowledgeLate(original.opId);
    // It shows what its retry would meet, on its own and in its execution.
    expect((await getOperation(stack, retried.id)).retry).toBe('forbidden');
    const page = await http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${first.body.execution.id}`, {
      key: DEMO.agent,
    });
    expect(page.body.operations[0]).toMatchObject({ id: retried.id, retry: 'forbidden' });

    // The retry's own retry rests on the original's word too: the send guard would cancel it (retry_refuted).
    const again = await http(stack.apiUrl, 'POST', `/v1/operations/${retried.id}/retry`, { key: DEMO.agent });
    expect(again.status).toBe(409);
    expect(again.headers.get('content-type')).toContain('application/problem+json');
    expect(again.body).toMatchObject({
      type: expect.stringContaining('effect-exists'),
      current_status: 'FAILED',
      retry: 'forbidden',
    });
    expect(await retriesOf(retried.id)).toBe(0);
  }, 90_000);

  it('a held, never-sent retry of a FAILED contradicted since is not offered the release, which would be withdrawn', async () => {
    const original = await declined();
    // A retry held before it was sent (the agent expected the charge made: a knowledge conflict), of that FAILED.
    const created = await submit(stack, [charge(unique('held-retry'), { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held).toMatchObject({ attempt: 0, terminal_reason: 'KNOWLEDGE_CONFLICT' });
    await stack.db.dataSource.query(`UPDATE operations SET retry_of = $2 WHERE id = $1`, [held.id, original.opId]);
    expect((await getOperation(stack, held.id)).permitted_resolutions).toContain('SENT');

    await acknowledgeLate(original.opId);
    const shown = await getOperation(stack, held.id);
    expect(shown.permitted_resolutions).not.toContain('SENT');
    expect(shown.permitted_resolutions).toContain('CANCELLED');
    expect(shown.resolution_options).toContainEqual(
      expect.objectContaining({ status: 'SENT', permitted: false, why: expect.stringContaining('contradicted') }),
    );
    const released = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'SENT', evidence: 'the conflict is understood; send it' },
    });
    expect(released.status).toBe(409);
    expect(released.body).toMatchObject({ type: expect.stringContaining('resolution-not-permitted') });
    expect((await getOperation(stack, held.id)).status).toBe('MANUAL_REVIEW');
  }, 90_000);

  it('the ETag of a retry changes when its chain is contradicted: a resolve made on the page shown before is 412', async () => {
    const original = await declined();
    const created = await submit(stack, [charge(unique('etag-retry'), { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    await stack.db.dataSource.query(`UPDATE operations SET retry_of = $2 WHERE id = $1`, [held.id, original.opId]);
    const show = () => http<Op>(stack.apiUrl, 'GET', `/v1/operations/${held.id}`, { key: DEMO.reviewer });
    const before = await show();
    expect(before.body.permitted_resolutions).toContain('SENT');
    const shownTag = before.headers.get('etag')!;
    expect(shownTag).toMatch(/^"/);

    // The FAILED it retries is contradicted: the page now shows no release, and its version says it changed.
    await acknowledgeLate(original.opId);
    const after = await show();
    expect(after.body.permitted_resolutions).not.toContain('SENT');
    expect(after.headers.get('etag')).not.toBe(shownTag);

    // A reviewer who decided on the page shown before is told it is stale, as for any other change; nothing written.
    const resolve = (tag: string) =>
      http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'CANCELLED', evidence: 'not wanted any more' },
        headers: { 'if-match': tag },
      });
    const stale = await resolve(shownTag);
    expect(stale.status).toBe(412);
    expect(stale.body).toMatchObject({ type: expect.stringContaining('precondition-failed') });
    expect((await getOperation(stack, held.id)).status).toBe('MANUAL_REVIEW');
    // On the page as it now stands, the same resolution is carried out.
    const current = await resolve(after.headers.get('etag')!);
    expect(current.status).toBe(200);
    expect((await getOperation(stack, held.id)).status).toBe('CANCELLED');
  }, 90_000);
});
