import type { ProblemDetails as Problem } from '@verity/sdk';
import { createApiKey } from '@verity/persistence/api-keys';
import { DEMO, DEMO_SANDBOX_ACCOUNT, Stack, freePort, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Event, events, expectLegalHistory, getOperation, settle, submit } from './dispatcher-helpers';

/**
 * A reviewer's approval decision answers the request they were shown. The dispatcher asks for approval again when a
 * grant turns stale (the source changed since the reviewer saw it, it expired): before, a click from a page opened on
 * the first request — another reviewer's, made while the first one's grant was being withdrawn — approved the new
 * request unseen, and its operation was sent on a source nobody had approved. With `requested_at` (the request as
 * shown; the console sends it), such a decision is refused and nothing is written.
 */
describe('api: an approval decision answers the request that was shown', () => {
  let stack: Stack;
  let secondReviewer: string;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'apprshown' });
    secondReviewer = (
      await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role: 'reviewer', label: 'second reviewer' })
    ).key;
  });
  afterAll(async () => stack?.stop());

  const decide = (opId: string, key: string, body: Record<string, unknown>) =>
    http<Problem & { errors?: { field: string }[] }>(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
      key,
      body,
    });

  /** Until the operation waits for approval with its `times`-th request; that request's requested_at. */
  async function request(executionId: string, opId: string, times: number): Promise<string> {
    let log: Event[] = [];
    const op = await waitFor(
      async () => {
        log = await events(stack, executionId);
        return getOperation(stack, opId);
      },
      (o) =>
        o.status === 'PREPARED' &&
        o.approval?.state === 'requested' &&
        log.filter((e) => e.type === 'approval.requested').length >= times,
      30_000,
      100,
    );
    return (op.approval as { requested_at: string }).requested_at;
  }

  it('a decision on a request whose grant was withdrawn since is 409 already-decided, not a decision on the new one', async () => {
    const reference = unique('shown');
    const created = await submit(stack, [charge(reference, { requires_approval: true })]);
    const opId = created.operations[0].id;
    const shown = await request(created.id, opId, 1);
    // The second reviewer's page, with its version (ETag) as a page sends it back (If-Match).
    const page = await http(stack.apiUrl, 'GET', `/v1/operations/${opId}`, { key: secondReviewer });
    const shownTag = page.headers.get('etag')!;
    expect(shownTag).toMatch(/^"/);
    // Both reviewers open the request ({charged: false}). Then someone else charges the reference, and the first
    // reviewer approves: the dispatcher finds the source changed and asks again (stale baseline).
    const direct = await stack.sandbox('/v1/charges', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': unique('elsewhere'), ...DEMO_SANDBOX_ACCOUNT },
      body: JSON.stringify({ amount: 999, currency: 'EUR', reference }),
    });
    expect(direct.status).toBe(201);
    const first = await decide(opId, DEMO.reviewer, { decision: 'approve', requested_at: shown });
    expect(first.status).toBe(200);
    const again = await request(created.id, opId, 2);
    expect(again).not.toBe(shown);

    // Sent with that page's If-Match but without requested_at: the version does not say which request the page
    // showed (the earlier request's is not kept), so this is 412 precondition-failed, not the 409 naming the grant that
    // a decision naming its request gets (docs/api.md). With requested_at beside If-Match: 409 naming it.
    const tagOnly = await http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
      key: secondReviewer,
      body: { decision: 'approve' },
      headers: { 'if-match': shownTag },
    });
    expect(tagOnly.status).toBe(412);
    expect(tagOnly.body).toMatchObject({ type: 'https://verity.dev/problems/precondition-failed' });
    const tagAndRequest = await http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
      key: secondReviewer,
      body: { decision: 'approve', requested_at: shown },
      headers: { 'if-match': shownTag },
    });
    expect(tagAndRequest.status).toBe(409);
    expect(tagAndRequest.body).toMatchObject({
      type: 'https://verity.dev/problems/already-decided',
      decision: 'approve',
    });
    // The second reviewer's click, from the page that shows the first request: refused, nothing written.
    const late = await decide(opId, secondReviewer, { decision: 'approve', requested_at: shown });
    expect(late.status).toBe(409);
    expect(late.body).toMatchObject({
      type: 'https://verity.dev/problems/already-decided',
      decision: 'approve',
      approval: 'requested',
      requested_at: again,
      current_status: 'PREPARED',
    });
    const op = await getOperation(stack, opId);
    expect(op.approval).toMatchObject({ state: 'requested', requested_at: again });
    const log = await events(stack, created.id);
    expect(log.filter((e) => e.type === 'approval.decided')).toHaveLength(1);
    expect((await stack.effects()).charges[reference]).toMatchObject({ count: 1, amounts: [999] });

    // Named as it is now, the decision is taken (here: denied, the charge exists already).
    const denied = await decide(opId, secondReviewer, {
      decision: 'deny',
      reason: 'charged elsewhere',
      requested_at: again,
    });
    expect(denied.status).toBe(200);
    const done = await settle(stack, created.id);
    expect(done.operations[0].status).toBe('CANCELLED');
    expectLegalHistory(await events(stack, created.id));
    expect((await stack.effects()).charges[reference]).toMatchObject({ count: 1, amounts: [999] });
  });

  /**
   * An API whose grants expire as they are written (APPROVAL_TTL_MS is read where the grant is written), and two more
   * reviewers' keys of the demo tenant.
   */
  async function shortGrantsAndTwoReviewers() {
    const port = await freePort();
    await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', APPROVAL_TTL_MS: '1' });
    const db = stack.db.dataSource.manager;
    const [first, second] = await Promise.all(
      ['first', 'second'].map((label) => createApiKey(db, { tenantId: 'demo', role: 'reviewer', label })),
    );
    return { shortGrantApi: `http://127.0.0.1:${port}`, first, second };
  }

  it('a decision on a request whose grant was withdrawn, and a later request’s too, names the grant of the request shown', async () => {
    // An API whose grants expire at once (APPROVAL_TTL_MS is read where the grant is written): the dispatcher withdraws
    // each grant it writes and asks again, so one operation goes through several requests, each decided.
    const { shortGrantApi, first, second } = await shortGrantsAndTwoReviewers();
    const created = await submit(stack, [charge(unique('shown-twice'), { requires_approval: true })]);
    const opId = created.operations[0].id;
    const shown = await request(created.id, opId, 1);
    for (const [times, reviewer] of [
      [1, first],
      [2, second],
    ] as const) {
      const requestedAt = times === 1 ? shown : await request(created.id, opId, times);
      const granted = await http(shortGrantApi, 'POST', `/v1/operations/${opId}/approval`, {
        key: reviewer.key,
        body: { decision: 'approve', requested_at: requestedAt },
      });
      expect(granted.status).toBe(200);
    }
    const again = await request(created.id, opId, 3);
    const [onShown, onNext] = (await events(stack, created.id)).filter((e) => e.type === 'approval.decided');
    expect(onShown.data).toMatchObject({ by: first.id });
    expect(onNext.data).toMatchObject({ by: second.id });

    // A third reviewer's click from the page that showed the first request: the first reviewer's grant of that request
    // won, not the second reviewer's of the request after it.
    const late = await decide(opId, DEMO.reviewer, { decision: 'approve', requested_at: shown });
    expect(late.status).toBe(409);
    expect(late.body).toMatchObject({
      type: 'https://verity.dev/problems/already-decided',
      decision: 'approve',
      decided_by: first.id,
      decided_at: onShown.created_at,
      approval: 'requested',
      requested_at: again,
      current_status: 'PREPARED',
    });
    expect(late.body.detail).toContain(`by ${first.id} at ${onShown.created_at}`);
    expect((await events(stack, created.id)).filter((e) => e.type === 'approval.decided')).toHaveLength(2);
    await http(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, { key: DEMO.agent, body: {} });
  });

  it('a decision on a request whose grant was withdrawn, the request after it granted and sent, names the grant of the request shown', async () => {
    // The first grant expires at once (an API with APPROVAL_TTL_MS=1), so the dispatcher asks again; the second reviewer
    // grants that request through the ordinary API, and the charge is sent on it.
    const { shortGrantApi, first, second } = await shortGrantsAndTwoReviewers();
    const created = await submit(stack, [charge(unique('shown-sent'), { requires_approval: true })]);
    const opId = created.operations[0].id;
    const shown = await request(created.id, opId, 1);
    const expiring = await http(shortGrantApi, 'POST', `/v1/operations/${opId}/approval`, {
      key: first.key,
      body: { decision: 'approve', requested_at: shown },
    });
    expect(expiring.status).toBe(200);
    const next = await request(created.id, opId, 2);
    expect((await decide(opId, second.key, { decision: 'approve', requested_at: next })).status).toBe(200);
    const done = await settle(stack, created.id);
    expect(done.operations[0]).toMatchObject({
      status: 'VERIFIED',
      approval: { state: 'granted', decided_by: second.id },
    });
    const [onShown] = (await events(stack, created.id)).filter((e) => e.type === 'approval.decided');

    // A third reviewer's click from the page that showed the first request: the first reviewer's grant of that request
    // won it, not the second reviewer's grant of the request after it (which the operation shows now).
    const late = await decide(opId, DEMO.reviewer, { decision: 'deny', requested_at: shown });
    expect(late.status).toBe(409);
    expect(late.body).toMatchObject({
      type: 'https://verity.dev/problems/already-decided',
      decision: 'approve',
      decided_by: first.id,
      decided_at: onShown.created_at,
      approval: 'granted',
      requested_at: next,
      current_status: 'VERIFIED',
    });
    expect(late.body.detail).toContain(`by ${first.id} at ${onShown.created_at}`);
    expect((await events(stack, created.id)).filter((e) => e.type === 'approval.decided')).toHaveLength(2);
  });

  it('a request that was never asked for is 412 precondition-failed with the one that waits; without it, as before', async () => {
    const created = await submit(stack, [charge(unique('shown-412'), { requires_approval: true })]);
    const opId = created.operations[0].id;
    const waiting = await request(created.id, opId, 1);
    const refused = await decide(opId, DEMO.reviewer, { decision: 'approve', requested_at: '2020-01-01T00:00:00Z' });
    expect(refused.status).toBe(412);
    expect(refused.body).toMatchObject({
      type: 'https://verity.dev/problems/precondition-failed',
      requested_at: waiting,
      current_status: 'PREPARED',
    });
    expect((await getOperation(stack, opId)).approval).toMatchObject({ state: 'requested', requested_at: waiting });
    expect((await events(stack, created.id)).filter((e) => e.type === 'approval.decided')).toHaveLength(0);
    // Not a date-time: 400 naming it.
    const malformed = await decide(opId, DEMO.reviewer, { decision: 'approve', requested_at: 'yesterday' });
    expect(malformed.status).toBe(400);
    expect(malformed.body.errors).toEqual([expect.objectContaining({ field: 'requested_at' })]);
    // Date-times the database's timestamps cannot hold (year 0; one an offset carries into year 10000) name no request
    // either: 412, never a failed statement.
    for (const never of ['0000-01-01T00:00:00Z', '9999-12-31T23:59:59-01:00']) {
      const outside = await decide(opId, DEMO.reviewer, { decision: 'approve', requested_at: never });
      expect({ never, status: outside.status, type: outside.body.type }).toEqual({
        never,
        status: 412,
        type: 'https://verity.dev/problems/precondition-failed',
      });
    }
    expect((await events(stack, created.id)).filter((e) => e.type === 'approval.decided')).toHaveLength(0);
    // The same instant in another offset names the same request; no requested_at at all decides whatever waits.
    const offset = waiting.replace('Z', '+00:00');
    expect((await decide(opId, DEMO.reviewer, { decision: 'approve', requested_at: offset })).status).toBe(200);
    const done = await settle(stack, created.id);
    expect(done.operations[0].status).toBe('VERIFIED');
  });
});
