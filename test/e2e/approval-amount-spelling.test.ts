import { Stack, waitFor } from '../support/stack';
import { unique } from '../support/http';
import {
  Call,
  Execution,
  TargetServer,
  allowLoopbackPort,
  approvalAboveFifty,
  httpOp,
  recordingClient,
  startTarget,
} from './connectors-support';

/**
 * An approval threshold on `http` reads `body.amount`, one exact spelling. A target that binds member names ignoring
 * case (Go's encoding/json, ASP.NET) reads `AMOUNT` or `Amount` as its amount.
 * Such a body, with no `amount` of that exact spelling, is not "an operation with no amount" (a GET): its amount is
 * there in another spelling, and cannot be compared with the threshold, so it needs approval (fail safe), never goes
 * out at once.
 */
describe('an approval threshold and an amount spelled in another case', () => {
  let stack: Stack;
  let call: Call;
  let target: TargetServer;

  const posts = () => target.seen.filter((s) => s.method === 'POST').length;
  const submit = (body: Record<string, unknown>) =>
    call<Execution>('POST', '/v1/executions', {
      body: {
        agent_id: 'a',
        intent: 'pay',
        operations: [httpOp('pay', { method: 'POST', url: `${target.base}/orders`, body })],
      },
    });
  /** Until the execution waits for approval or settles: whichever comes first is the answer. */
  const firstStop = (id: string) =>
    waitFor(
      async () => (await call<Execution>('GET', `/v1/executions/${id}`)).body,
      (e) => ['waiting_for_approval', 'completed', 'failed', 'cancelled', 'expired'].includes(e.status),
      30_000,
      100,
    );

  beforeAll(async () => {
    target = await startTarget();
    stack = await Stack.start({ label: 'amountcase' });
    ({ call } = recordingClient(stack));
    await allowLoopbackPort(call, target.port);
    await approvalAboveFifty(call);
  });
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  it.each([
    ['AMOUNT', { AMOUNT: 1_000_000 }],
    ['Amount', { Amount: 1_000_000 }],
  ])('%s alone: waits for approval, not sent', async (_, amount) => {
    const created = await submit({ id: unique('pay'), ...amount });
    expect(created.status).toBe(201);
    const stop = await firstStop(created.body.id);
    expect(stop.status).toBe('waiting_for_approval');
    expect(stop.operations[0].approval?.state).toBe('requested');
    expect(posts()).toBe(0);
  });

  it('an amount of the exact spelling under the threshold still goes out at once', async () => {
    const before = posts();
    const created = await submit({ id: unique('pay'), amount: 20, amount_note: 'x', AmountNote: 'y' });
    expect(created.status).toBe(201);
    const stop = await firstStop(created.body.id);
    expect(stop.status).toBe('completed');
    expect(posts()).toBe(before + 1);
  });
});
