import type { ServerResponse } from 'node:http';
import type { ProblemDetails as Problem } from '@verity/sdk';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http } from '../support/http';
import { orderAt } from '../support/fixtures';
import { type Op, events, getOperation, submit, waitForOp, waitForResolutionPermitted } from './dispatcher-helpers';
import { allowLoopbackPort, orderTargetHoldingReads } from './connectors-support';

/**
 * Two reviewers resolve one held, never-acknowledged send FAILED at once. The first one's read of the source finds
 * nothing and its FAILED is written; the second one's read, made on the hold as it stood before, answers after that
 * FAILED — and shows the effect. The second is refused (409 effect-exists), and what its read showed must stand
 * against the FAILED, as a re-check's read that showed the effect after a FAILED does: the FAILED refuted (its retry
 * refused), never "no effect exists, a retry is safe" of an effect the source has just shown.
 */
describe('a FAILED resolution whose read shows the effect after another reviewer’s FAILED was written', () => {
  let stack: Stack;
  beforeAll(async () => {
    // No scheduled re-check reads the source during the test: every read is a reviewer's.
    stack = await Stack.start({ label: 'red27b-failed-read', env: { RECHECK_BACKOFF_MS: '600000' } });
  });
  afterAll(async () => stack?.stop());

  it('refutes the FAILED: the read is recorded against it, and a retry is refused', async () => {
    const { port, heldReads, target, close } = await orderTargetHoldingReads();
    const resolveFailed = (evidence: string) =>
      http<Partial<Op> & Partial<Problem>>(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'FAILED', evidence },
      });
    const answer = (res: ServerResponse, status: number, value: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(value));
    };
    let held: Op = undefined as never;
    try {
      await allowLoopbackPort(stack, port);
      const created = await submit(stack, [orderAt(port, 'order')]);
      held = await waitForOp(stack, created.id, 'order', (o) => o.status === 'MANUAL_REVIEW');
      await waitForResolutionPermitted(stack, held.id, 'FAILED');
      target.holdReads = true;

      // The second reviewer's FAILED reads the source first; its read is held.
      const late = resolveFailed('the order is not in their dashboard');
      await waitFor(
        async () => heldReads.length,
        (n) => n >= 1,
      );
      // The first reviewer's FAILED reads the source, which answers that the order does not exist: it is written.
      const first = resolveFailed('their support says no order was made');
      await waitFor(
        async () => heldReads.length,
        (n) => n >= 2,
      );
      answer(heldReads[1], 404, { error: { code: 'not_found' } });
      const written = await first;
      expect(written.status).toBe(200);
      expect(written.body.status).toBe('FAILED');

      // Now the held read answers: the order is there.
      answer(heldReads[0], 200, { data: { status: 'created' } });
      const refused = await late;
      expect(refused.status).toBe(409);
      expect(refused.body).toMatchObject({ type: 'https://verity.dev/problems/effect-exists' });

      // What the source showed stands against the FAILED: the read is in the history and on the row, and a retry that
      // could make the order a second time is refused.
      const retry = await http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${held.id}/retry`, { key: DEMO.agent });
      expect({ status: retry.status, type: retry.body.type }).toEqual({
        status: 409,
        type: 'https://verity.dev/problems/effect-exists',
      });
      const log = await events(stack, created.id);
      expect(log.filter((e) => e.type === 'operation.rechecked' && e.data.after === 'FAILED')).toEqual([
        expect.objectContaining({
          operation_id: held.id,
          data: expect.objectContaining({ result: 'found', after: 'FAILED', requested_by: expect.any(String) }),
        }),
      ]);
      const after = await getOperation(stack, held.id);
      expect(after).toMatchObject({ status: 'FAILED', retry: 'forbidden' });
    } finally {
      await close();
    }
  });
});
