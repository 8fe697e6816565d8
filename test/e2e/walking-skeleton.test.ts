import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, sms, submission, unique } from '../support/http';
import type { Execution } from '@verity/sdk';

/** One payment from intake to VERIFIED through all three apps, each a separate process. */
describe('walking skeleton (api, dispatcher, reconciler, sandbox as separate processes)', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'skeleton' });
  });
  afterAll(async () => stack?.stop());

  async function submitAndSettle(operations: unknown[]): Promise<Execution> {
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission(operations),
    });
    expect(created.status).toBe(201);
    expect(created.body.status).toBe('created');
    // No OTEL_* variable is set here: traces are off, and the execution names no trace.
    expect(created.body.trace_id).toBeNull();
    return waitFor(
      async () =>
        (await http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${created.body.id}`, { key: DEMO.agent })).body,
      (e) => ['completed', 'failed', 'cancelled', 'expired'].includes(e.status),
    );
  }

  it('charges once and ends VERIFIED with read-back evidence; the execution completes all_verified', async () => {
    const reference = unique('order');
    const execution = await submitAndSettle([charge(reference)]);
    expect(execution.status).toBe('completed');
    expect(execution.effects.summary).toBe('all_verified');
    expect(execution.trace_id).toBeNull();
    const [op] = execution.operations;
    expect(op.status).toBe('VERIFIED');
    expect(op.verification_method).toBe('read_after_write');
    expect(op.evidence).toMatchObject({
      method: 'read_after_write',
      record: { reference, amount: 1250, currency: 'EUR', status: 'succeeded' },
    });
    expect(typeof op.evidence?.as_of_version).toBe('number');
    expect(op.evidence?.source).toContain('/v1/charges?reference=');
    const effects = await stack.effects();
    expect(effects.charges[reference].count).toBe(1);
  });

  it('ends FAILED with CONNECTOR_REJECTED for a decline- reference, with no effect', async () => {
    const reference = unique('decline-order');
    const execution = await submitAndSettle([charge(reference)]);
    expect(execution.operations[0]).toMatchObject({ status: 'FAILED', terminal_reason: 'CONNECTOR_REJECTED' });
    expect(execution.status).toBe('completed');
    expect(execution.effects.summary).toBe('none');
    const effects = await stack.effects();
    expect(effects.charges[reference]).toBeUndefined();
  });

  it('ends an SMS ACKNOWLEDGED with an empty verification_method (no read-back, so never VERIFIED)', async () => {
    const clientRef = unique('sms');
    const execution = await submitAndSettle([sms(clientRef)]);
    expect(execution.operations[0]).toMatchObject({ status: 'ACKNOWLEDGED', verification_method: '' });
    expect(execution.effects.summary).toBe('unverified');
    const effects = await stack.effects();
    expect(effects.messages[clientRef].count).toBe(1);
    expect(effects.duplicates).toEqual([]);
  });

  it('sends a dependent SMS only after the charge is VERIFIED', async () => {
    const reference = unique('order');
    const clientRef = unique('sms');
    const execution = await submitAndSettle([charge(reference), sms(clientRef, { depends_on: ['charge'] })]);
    expect(execution.operations.map((o) => o.status)).toEqual(['VERIFIED', 'ACKNOWLEDGED']);
    const events = await http<{ data: { operation_id: string | null; to_status: string | null; seq: number }[] }>(
      stack.apiUrl,
      'GET',
      `/v1/executions/${execution.id}/events`,
      { key: DEMO.agent },
    );
    const [chargeOp, smsOp] = execution.operations;
    const verifiedAt = events.body.data.find((e) => e.operation_id === chargeOp.id && e.to_status === 'VERIFIED')!.seq;
    const smsSentAt = events.body.data.find((e) => e.operation_id === smsOp.id && e.to_status === 'SENT')!.seq;
    expect(smsSentAt).toBeGreaterThan(verifiedAt);
  });
});
