import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Op, events, getOperation, resetSandbox, submit, waitForOp } from './dispatcher-helpers';
import { DeliveryView, startReceiver, subscribedReceiver } from './webhook-receiver';

/**
 * A person's resolution of a hold is announced as the operation now stands: the `terminal_reason` GET shows, the one
 * its status event carries (the stream's and the console's) and the one the `operation.settled` webhook reports are one
 * value. Before, the row kept the hold's reason (STALE_REPLICA) while the event and the webhook said null.
 */
describe('webhooks: a resolved hold names one terminal reason everywhere', () => {
  let stack: Stack;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    receiver = await startReceiver(() => ({ status: 204 }));
    // A send whose reads stay inconclusive is held after three reads.
    stack = await Stack.start({
      label: 'resolved-reason',
      env: { RECONCILE_BUDGET: '3', WEBHOOK_SCAN_INTERVAL_MS: '100' },
    });
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });
  afterEach(async () => resetSandbox(stack));

  it('a STALE_REPLICA hold resolved VERIFIED: GET, the status event and the webhook agree', async () => {
    const { deliveries } = await subscribedReceiver(stack, receiver.port, `${receiver.base}/settled`, [
      'operation.settled',
    ]);
    // A replica lagging past the verification budget: held STALE_REPLICA (the provider acknowledged the charge).
    await stack.setFaults({ replica_lag_ms: 60_000 });
    const created = await submit(stack, [charge(unique('resolved-reason'))]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held.terminal_reason).toBe('STALE_REPLICA');

    const resolved = await http<Op>(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: 'charge found on the provider dashboard' },
    });
    expect(resolved.status).toBe(200);

    const shown = await getOperation(stack, held.id);
    const move = (await events(stack, created.id)).find(
      (e) => e.type === 'operation.status_changed' && e.operation_id === held.id && e.to_status === 'VERIFIED',
    );
    const announced = await waitFor(
      async () =>
        (await deliveries()).find(
          (d: DeliveryView) => d.payload.data.operation_id === held.id && d.payload.data.status === 'VERIFIED',
        ),
      (d) => d !== undefined,
      45_000,
    );
    const said = {
      get: shown.terminal_reason,
      event: move?.data.reason,
      webhook: announced!.payload.data.terminal_reason,
    };
    // One value, and the resolution's own: a person's VERIFIED names no terminal reason (the hold's is on its record).
    expect(said).toEqual({ get: null, event: null, webhook: null });
    expect(shown.status).toBe('VERIFIED');
    expect(shown.recovery_obligation?.reason).toBe('STALE_REPLICA');
  }, 120_000);
});
