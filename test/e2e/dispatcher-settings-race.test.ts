import { DEMO, RunningApp, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import {
  events,
  expectLegalHistory,
  logLines,
  statusPath,
  submit,
  waitForMarkers,
  waitForOp,
} from './dispatcher-helpers';

/**
 * A send is prepared from the tenant's settings as the sender read them; the SENT statement commits it only while they
 * are still the stored ones (the send guard's `settings_changed`). Here a reviewer's release — a dispatch job — reads
 * the settings (no caps), and the admin sets a cap before its SENT statement: the statement changes nothing, the job
 * reads again and meets the cap. Nothing reaches the provider.
 */
describe('dispatcher: settings changed between the sender’s read and its SENT statement', () => {
  let stack: Stack;
  let dispatcher: RunningApp;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'setrace', dispatchers: 0 });
    // Every send waits after its reads, right before the SENT statement (a hold is no send: it does not wait).
    dispatcher = await stack.startApp('dispatcher', { TEST_PAUSE_BEFORE_SENT_MS: '1500' });
  });
  afterAll(async () => stack?.stop());

  it('a reviewer’s release prepared before a new cap is refused, then prepared again and cancelled by the cap', async () => {
    const reference = unique('setrace');
    const created = await submit(stack, [charge(reference, { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held).toMatchObject({ terminal_reason: 'KNOWLEDGE_CONFLICT', attempt: 0 });
    const released = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'SENT', evidence: 'checked by the test: release it' },
    });
    expect(released.status).toBe(200);

    // The release's dispatch job has read the operation and the settings (no caps) and waits before SENT.
    await waitForMarkers(dispatcher, 'paused before SENT');
    const capped = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/sandbox.payments', {
      key: DEMO.admin,
      body: { spending_caps: [{ period: 'day', max_amount: 100, amount_field: 'amount' }] },
    });
    expect(capped.status).toBe(200);

    const done = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'CANCELLED');
    expect(done).toMatchObject({ attempt: 0, evidence: { method: 'spending_cap', rule: 'max_amount' } });
    expect((await stack.effects()).charges[reference]).toBeUndefined();
    const refusals = logLines(dispatcher).filter(
      (line) => line.msg === 'dispatch refused by the send guard' && line.operationId === held.id,
    );
    expect(refusals).toEqual([expect.objectContaining({ reasons: ['settings_changed'] })]);
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, held.id)).toEqual(['PREPARED', 'MANUAL_REVIEW', 'CANCELLED']);
  });
});
