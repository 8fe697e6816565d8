import { Stack } from '../support/stack';
import { charge, sms, unique } from '../support/http';
import { events, expectLegalHistory, resetSandbox, settle, statusPath, submit } from './dispatcher-helpers';

/**
 * The contract's §2 outcome classification, row by row, driven by the sandbox's faults against the real processes.
 * Ambiguity after the request was written is UNKNOWN (never FAILED) and the reconciler settles it from the source.
 */
describe('dispatcher: outcome classification of one send', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'dclassify' });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  it.each(['timeout_after_commit', 'reset_after_commit', 'error_after_commit'])(
    '%s → UNKNOWN (never FAILED), exactly one effect, then reconciled to VERIFIED',
    async (fault) => {
      await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/charges', fault, count: 1 }] });
      const reference = unique(`cls-${fault}`);
      const created = await submit(stack, [charge(reference)]);
      const execution = await settle(stack, created.id);
      const [op] = execution.operations;
      expect(op.status).toBe('VERIFIED');
      expect(op.evidence).toMatchObject({ method: 'read_after_write', record: { reference, amount: 1250 } });

      const log = await events(stack, created.id);
      expectLegalHistory(log);
      const path = statusPath(log, op.id);
      expect(path).toEqual(['PREPARED', 'SENT', 'UNKNOWN', 'RECONCILING', 'VERIFIED']);
      expect(path).not.toContain('FAILED');
      const unknown = log.find((e) => e.operation_id === op.id && e.to_status === 'UNKNOWN')!;
      expect(unknown.from_status).toBe('SENT');
      expect(unknown.data.reason).toBe('CONNECTOR_ERROR');

      const effects = await stack.effects();
      expect(effects.charges[reference].count).toBe(1);
      expect(effects.duplicates).toEqual([]);
    },
  );

  it('reject → FAILED / CONNECTOR_REJECTED with no effect', async () => {
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/charges', fault: 'reject', count: 1 }] });
    const reference = unique('cls-reject');
    const created = await submit(stack, [charge(reference)]);
    const execution = await settle(stack, created.id);
    expect(execution.operations[0]).toMatchObject({ status: 'FAILED', terminal_reason: 'CONNECTOR_REJECTED' });
    expect(execution.operations[0].evidence).toMatchObject({
      method: 'send_outcome',
      provider_error: { code: 'rejected' },
    });
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, execution.operations[0].id)).toEqual(['PREPARED', 'SENT', 'FAILED']);
    expect((await stack.effects()).charges[reference]).toBeUndefined();
  });

  it('a decline- reference → FAILED / CONNECTOR_REJECTED with no effect', async () => {
    const reference = unique('decline-cls');
    const created = await submit(stack, [charge(reference)]);
    const execution = await settle(stack, created.id);
    expect(execution.operations[0]).toMatchObject({ status: 'FAILED', terminal_reason: 'CONNECTOR_REJECTED' });
    expect(execution.operations[0].evidence).toMatchObject({ provider_error: { code: 'card_declined' } });
    expect(statusPath(await events(stack, created.id), execution.operations[0].id)).toEqual([
      'PREPARED',
      'SENT',
      'FAILED',
    ]);
    expect((await stack.effects()).charges[reference]).toBeUndefined();
  });

  it('an SMS error_after_commit → UNKNOWN, one message, held for a human (no read-back), never re-sent', async () => {
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/messages', fault: 'error_after_commit', count: 1 }] });
    const clientRef = unique('cls-sms');
    const created = await submit(stack, [sms(clientRef)]);
    const execution = await settle(stack, created.id);
    const [op] = execution.operations;
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'CONNECTOR_ERROR' });
    expect(statusPath(await events(stack, created.id), op.id)).toEqual([
      'PREPARED',
      'SENT',
      'UNKNOWN',
      'MANUAL_REVIEW',
    ]);
    expect((await stack.effects()).messages[clientRef].count).toBe(1);
  });

  // Last: the provider is stopped for good in this stack.
  it('provider down (connection refused) → FAILED / SOURCE_UNREACHABLE, nothing sent', async () => {
    const before = await stack.effects();
    for (const app of stack.running('sandbox-provider')) await stack.kill(app, 'SIGTERM');
    const reference = unique('cls-down');
    const clientRef = unique('cls-down-sms');
    const created = await submit(stack, [charge(reference), sms(clientRef)]);
    const execution = await settle(stack, created.id);
    for (const op of execution.operations) {
      expect(op).toMatchObject({ status: 'FAILED', terminal_reason: 'SOURCE_UNREACHABLE' });
      expect(String(op.evidence?.detail)).toContain('ECONNREFUSED');
    }
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    for (const op of execution.operations) expect(statusPath(log, op.id)).toEqual(['PREPARED', 'SENT', 'FAILED']);
    // The charge's context read could not reach the source either: recorded, not hidden.
    expect(log.some((e) => e.type === 'context.unavailable' && e.operation_id === execution.operations[0].id)).toBe(
      true,
    );
    expect(execution.status).toBe('completed');
    expect(execution.effects.summary).toBe('none');
    expect(before.charges[reference]).toBeUndefined();
  });
});
