import { Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { DEMO } from '../support/stack';
import { resetSandbox, settle, submit, waitForOp } from './dispatcher-helpers';

interface EventList {
  data: { type: string; operation_id: string | null; to_status: string | null; data: { detail?: string } }[];
}

/**
 * A second execution charging a reference the first one already charged is sent when its context read cannot see that
 * charge yet (a lagging replica). The provider answers with the FIRST charge (an Idempotency-Key replay,
 * `Idempotent-Replayed: true`) whatever the second asked for. The record says what the provider said: the same charge is
 * the effect asked for, made once, by the earlier request; another amount is this request refused — no charge of it
 * exists — never an integrity violation of a charge this request did not make (found by a red-team pass).
 */
describe('a send the provider answers by replaying an earlier request’s charge', () => {
  let stack: Stack;
  beforeAll(async () => {
    // A larger read budget: the first operation stays ACKNOWLEDGED (stale reads) until the replica catches up.
    stack = await Stack.start({ label: 'replayed-charge', env: { RECONCILE_BUDGET: '60' } });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  /** The first charge committed at the provider, not yet visible to reads: the second execution's context read finds nothing. */
  async function firstChargeUnseen(reference: string) {
    await stack.setFaults({ replica_lag_ms: 4000 });
    const first = await submit(stack, [charge(reference)]);
    await waitForOp(stack, first.id, 'charge', (o) => o.status === 'ACKNOWLEDGED');
    return first;
  }

  it('same amount: VERIFIED against the one charge, and the record says the provider replayed it', async () => {
    const reference = unique('replay-same');
    const first = await firstChargeUnseen(reference);
    const second = await submit(stack, [charge(reference)]);
    await waitForOp(stack, second.id, 'charge', (o) => o.status === 'ACKNOWLEDGED');
    await stack.setFaults({ replica_lag_ms: 0 });
    const [a] = (await settle(stack, first.id)).operations;
    const [b] = (await settle(stack, second.id)).operations;
    expect((await stack.effects()).charges[reference].count).toBe(1);
    expect(a).toMatchObject({ status: 'VERIFIED', commit: 'committed' });
    expect(b).toMatchObject({ status: 'VERIFIED', commit: 'committed' });
    const events = await http<EventList>(stack.apiUrl, 'GET', `/v1/executions/${second.id}/events`, {
      key: DEMO.agent,
    });
    const acknowledged = events.body.data.find((e) => e.to_status === 'ACKNOWLEDGED');
    expect(acknowledged?.data.detail).toMatch(/replaying the charge of an earlier request .*no new charge/);
  });

  it('another amount: FAILED, the provider’s answer refusing it, not held as a mismatch of a charge it never made', async () => {
    const reference = unique('replay-other');
    const first = await firstChargeUnseen(reference);
    // Asks for 2000; the provider replays the 1250 charge (its key alone decides) and charges nothing.
    const second = await submit(stack, [charge(reference, { params: { amount: 2000, currency: 'EUR', reference } })]);
    const failed = await waitForOp(stack, second.id, 'charge', (o) => o.status !== 'PREPARED' && o.status !== 'SENT');
    expect(failed).toMatchObject({ status: 'FAILED', terminal_reason: 'CONNECTOR_REJECTED', commit: 'rejected' });
    await stack.setFaults({ replica_lag_ms: 0 });
    await settle(stack, first.id);
    const settled = await settle(stack, second.id);
    expect(settled.operations[0]).toMatchObject({
      status: 'FAILED',
      failure: { code: 'connector_rejected', category: 'provider_rejected', retryable: false },
    });
    // Every operation settled: the execution completes; that its work was not done is the operation's failure.
    expect(settled.status).toBe('completed');
    // The refusal names the charge the provider answered with, so a person can find it.
    const [firstCharge] = (await settle(stack, first.id)).operations;
    const log = await http<EventList>(stack.apiUrl, 'GET', `/v1/executions/${second.id}/events`, { key: DEMO.agent });
    const refusal = log.body.data.find((e) => e.to_status === 'FAILED');
    expect(refusal?.data.detail).toMatch(
      /earlier request for this reference \(ch_\w+, 1250 EUR\), not this request's 2000 EUR/,
    );
    expect(firstCharge.status).toBe('VERIFIED');
    const effects = await stack.effects();
    expect(effects.charges[reference]).toMatchObject({ count: 1, amounts: [1250] });
  });
});
