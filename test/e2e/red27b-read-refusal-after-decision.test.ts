import type { ProblemDetails as Problem } from '@verity/sdk';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http } from '../support/http';
import { orderAt } from '../support/fixtures';
import { type Op, events, submit, waitForOp, waitForResolutionPermitted } from './dispatcher-helpers';
import { allowLoopbackPort, orderTargetHoldingReads } from './connectors-support';

/**
 * A reviewer's FAILED reads the source before it is written. When another reviewer decides the hold while that read is
 * on its way, the FAILED lost the decision (I13): it is told who decided what (409 already-decided), whatever its read
 * answers — not "not permitted yet, ask again" of a hold that is no longer there to decide.
 */
describe('a FAILED whose source read answers after another reviewer decided the hold', () => {
  let stack: Stack;
  beforeAll(async () => {
    // No scheduled re-check reads the source during the test: every read is a reviewer's.
    stack = await Stack.start({ label: 'red27b-read-refusal', env: { RECHECK_BACKOFF_MS: '600000' } });
  });
  afterAll(async () => stack?.stop());

  it('is 409 already-decided naming the winner, though its read could not be made', async () => {
    const { port, heldReads, target, close } = await orderTargetHoldingReads();
    const resolve = (opId: string, status: string, evidence: string) =>
      http<Partial<Op> & Partial<Problem>>(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
        key: DEMO.reviewer,
        body: { status, evidence },
      });
    try {
      await allowLoopbackPort(stack, port);
      const created = await submit(stack, [orderAt(port, 'order')]);
      const held = await waitForOp(stack, created.id, 'order', (o) => o.status === 'MANUAL_REVIEW');
      await waitForResolutionPermitted(stack, held.id, 'FAILED');
      target.holdReads = true;
      const failed = resolve(held.id, 'FAILED', 'the order is not in their dashboard');
      await waitFor(
        async () => heldReads.length,
        (n) => n >= 1,
      );
      // Another reviewer, who saw the order at the target, resolves the hold VERIFIED meanwhile.
      const verified = await resolve(held.id, 'VERIFIED', 'their dashboard shows the order');
      expect(verified.status).toBe(200);
      const log = await events(stack, created.id);
      const decision = log.find((e) => e.type === 'operation.resolved')!;

      // The FAILED's read then fails: the source cannot be read.
      for (const res of heldReads.splice(0)) {
        res.writeHead(503, { 'content-type': 'application/json' });
        res.end('{"error":{"code":"maintenance"}}');
      }
      const lost = await failed;
      expect({ status: lost.status, retryAfter: lost.headers.get('retry-after'), body: lost.body }).toMatchObject({
        status: 409,
        retryAfter: null,
        body: {
          type: 'https://verity.dev/problems/already-decided',
          decision: 'VERIFIED',
          decided_by: (decision.data as { by: string }).by,
          current_status: 'VERIFIED',
        },
      });
      expect(await events(stack, created.id)).toHaveLength(log.length);
    } finally {
      await close();
    }
  });
});
