import { createApiKey, revokeApiKey } from '@verity/persistence/api-keys';
import { DEMO, RunningApp, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import {
  Event,
  Op,
  events,
  expectLegalHistory,
  logLines,
  markedOperations,
  settle,
  submit,
  waitForOp,
  waitForApprovalRequest,
} from './dispatcher-helpers';

/**
 * An approval carries the authority of the key that gave it. Revoking a reviewer's key (removed for cause, a leaked
 * key) withdraws the approvals it gave that have not been used yet: the operation goes back to waiting for approval
 * (`approval.stale_authority`, `cause: "key_revoked"`, then `approval.requested`) and is sent only after a grant by a
 * key that stands. Before: the send guard asked only "granted and unexpired", so such a grant still sent for up to
 * the approval lifetime after the revocation.
 */
describe('dispatcher: a grant whose deciding key is revoked before it is used', () => {
  let stack: Stack;
  let dispatcher: RunningApp;

  beforeAll(async () => {
    // No sweeper pass re-advances an execution while its send waits at the pause below (stale after ten minutes):
    // another pass would judge the grant again before its SENT statement, around the refusal these cases are about.
    stack = await Stack.start({ label: 'grantkeyrev', dispatchers: 0, env: { STALE_EXECUTION_MS: '600000' } });
  });
  afterAll(async () => stack?.stop());

  const newReviewerKey = () =>
    createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role: 'reviewer', label: unique('grant-key') });

  async function decide(opId: string, key: string) {
    const res = await http<Op>(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
      key,
      body: { decision: 'approve', reason: 'checked by the test' },
    });
    expect(res.status).toBe(200);
    return res.body;
  }

  const waitForRequest = (executionId: string, times = 1) => waitForApprovalRequest(stack, executionId, times);

  const approvalTypes = (log: Event[]) =>
    log.filter((e) => e.type.startsWith('approval.') || e.to_status === 'SENT').map((e) => e.to_status ?? e.type);

  /** `requests`: how many times approval will have been asked for once the revoked key's grant is withdrawn. */
  async function sentOnlyAfterAFreshGrant(
    executionId: string,
    opId: string,
    reference: string,
    revokedKey: string,
    requests: number,
  ) {
    const { log } = await waitForRequest(executionId, requests);
    const stale = log.find((e) => e.type === 'approval.stale_authority')!;
    expect(stale.data).toMatchObject({ cause: 'key_revoked', previous_grant: { decided_by: revokedKey } });
    expect(log.some((e) => e.to_status === 'SENT')).toBe(false);
    expect((await stack.effects()).charges[reference]).toBeUndefined();

    await decide(opId, DEMO.reviewer);
    const done = await settle(stack, executionId);
    expect(done.operations[0].status).toBe('VERIFIED');
    const all = await events(stack, executionId);
    expectLegalHistory(all);
    expect(approvalTypes(all).slice(-5)).toEqual([
      'approval.decided',
      'approval.stale_authority',
      'approval.requested',
      'approval.decided',
      'SENT',
    ]);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  }

  it('revoked before the dispatcher takes the grant: not sent, back to waiting for approval', async () => {
    const reviewer = await newReviewerKey();
    const reference = unique('grant-revoked');
    // Granted while no dispatcher runs (the grant waits to be used, as it does behind a slow step), then revoked.
    const created = await submit(stack, [charge(reference, { requires_approval: true })]);
    const opId = created.operations[0].id;
    expect((await decide(opId, reviewer.key)).approval).toMatchObject({ state: 'granted', decided_by: reviewer.id });
    expect(await revokeApiKey(stack.db.dataSource.manager, reviewer.id)).toBe(true);
    // Every send waits before its SENT statement: the window in which the next cases see the marker and revoke the key.
    // 1.5 s was outlasted by a loaded machine, and the send went ahead on the grant (or release) before the revocation.
    dispatcher = await stack.startApp('dispatcher', { TEST_PAUSE_BEFORE_SENT_MS: '5000' });
    // An early grant: approval was never asked for, so the withdrawal's request is the first.
    await sentOnlyAfterAFreshGrant(created.id, opId, reference, reviewer.id, 1);
  });

  it('revoked while the send is being prepared: the SENT statement refuses it, and it goes back for approval', async () => {
    const reviewer = await newReviewerKey();
    const reference = unique('grant-revoked-mid');
    const created = await submit(stack, [charge(reference, { requires_approval: true })]);
    const { execution } = await waitForRequest(created.id, 1);
    const opId = execution.operations[0].id;
    const before = logLines(dispatcher).filter((l) => l.msg === 'paused before SENT' && l.operationId === opId).length;
    expect(before).toBe(0);
    await decide(opId, reviewer.key);
    // The sender has judged the grant (its key stood) and waits before its SENT statement.
    await waitFor(
      async () => markedOperations(dispatcher, 'paused before SENT'),
      (ids) => ids.includes(opId),
      30_000,
      20,
    );
    expect(await revokeApiKey(stack.db.dataSource.manager, reviewer.id)).toBe(true);
    await sentOnlyAfterAFreshGrant(created.id, opId, reference, reviewer.id, 2);
    const refusals = logLines(dispatcher).filter(
      (line) => line.msg === 'dispatch refused by the send guard' && line.operationId === opId,
    );
    expect(refusals).toEqual([expect.objectContaining({ reasons: ['approval_key_revoked'] })]);
  });
  it('a release recorded by a key revoked before the send is withdrawn, not sent: a reviewer decides again', async () => {
    const reviewer = await newReviewerKey();
    const reference = unique('release-revoked');
    // The source disagrees with what the agent expects: held for a reviewer (knowledge conflict), never sent.
    const created = await submit(stack, [charge(reference, { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    const released = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: reviewer.key,
      body: { status: 'SENT', evidence: 'checked by the test: release it' },
    });
    expect(released.status).toBe(200);
    // The release's send waits before its SENT statement; the reviewer's key is revoked meanwhile.
    await waitFor(
      async () => markedOperations(dispatcher, 'paused before SENT'),
      (ids) => ids.includes(held.id),
      30_000,
      20,
    );
    expect(await revokeApiKey(stack.db.dataSource.manager, reviewer.id)).toBe(true);
    const log = await waitFor(
      () => events(stack, created.id),
      (all) => all.some((e) => e.type === 'operation.release_withdrawn'),
      30_000,
      100,
    );
    expect(log.find((e) => e.type === 'operation.release_withdrawn')!.data).toMatchObject({
      reasons: ['release_key_revoked'],
      resolution: { status: 'SENT', by: reviewer.id },
    });
    const op = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(op.attempt).toBe(0);
    expect((op.recovery_obligation as { resolution?: unknown } | null)?.resolution).toBeUndefined();
    expect(log.some((e) => e.to_status === 'SENT')).toBe(false);
    expect((await stack.effects()).charges[reference]).toBeUndefined();
    expectLegalHistory(log);
  });
});
