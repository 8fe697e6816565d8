import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { events, submit, waitForApprovalRequest, waitForOp } from './dispatcher-helpers';

/**
 * If-None-Match on the writes of the admin settings, whose ETag is their version (RFC 9110 §13.1.2): `*` holds only if
 * there is no current version — the policy and a connector's settings always have one — and a list of tags only if the
 * current version is none of them (compared weakly). When it does not hold the write is 412 `precondition-failed`,
 * nothing written and nothing recorded, as with an If-Match that does not hold. A client that sends `If-None-Match: *`
 * to set a connector's caps only if nobody has ("create if absent") must not replace another admin's. An operation's
 * decisions compare it with the operation's version (its ETag) likewise; a write whose resource has no ETag (a cancel, a
 * retry, a submission, a webhook endpoint's) is refused for `*` only, the resource being there (412), and its header
 * must be entity tags as everywhere (400 otherwise).
 */
describe('If-None-Match on writes', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'adminnonematch' });
  });
  afterAll(async () => stack?.stop());

  interface Problem {
    type: string;
    status: number;
    current_etag?: string;
    errors?: { field: string; rule: string }[];
  }
  const call = <T>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
    http<T>(stack.apiUrl, method, path, { key: DEMO.admin, body, headers });
  const changes = async () =>
    (await call<{ data: { id: string }[] }>('GET', '/v1/admin/changes?limit=200')).body.data.map((c) => c.id);
  const SETTINGS = '/v1/admin/connector-settings/sandbox.sms';

  it('is 412 with * or the current version (strong or weak), nothing written; with an older version the write is made', async () => {
    const set = await call('PUT', SETTINGS, { spending_caps: [{ period: 'day', max_operations: 7 }] });
    expect(set.status).toBe(200);
    const etag = set.headers.get('etag')!;
    const policy = await call<{ obligation_owner: string }>('GET', '/v1/admin/policy');
    const policyEtag = policy.headers.get('etag')!;
    const recorded = await changes();

    const refusals: [string, string, unknown, string][] = [
      ['PUT', SETTINGS, { spending_caps: [{ period: 'day', max_operations: 1 }] }, '*'],
      ['PUT', SETTINGS, { spending_caps: [{ period: 'day', max_operations: 1 }] }, etag],
      ['PUT', SETTINGS, { spending_caps: [{ period: 'day', max_operations: 1 }] }, `"older", W/${etag}`],
      ['DELETE', SETTINGS, undefined, '*'],
      ['DELETE', SETTINGS, undefined, etag],
      ['PUT', '/v1/admin/policy', { obligation_owner: 'someone-else' }, '*'],
      ['PUT', '/v1/admin/policy', { obligation_owner: 'someone-else' }, policyEtag],
    ];
    for (const [method, path, body, ifNoneMatch] of refusals) {
      const res = await call<Problem>(method, path, body, { 'if-none-match': ifNoneMatch });
      expect([
        method,
        path,
        ifNoneMatch,
        res.status,
        res.headers.get('content-type')?.split(';')[0],
        res.body.type,
      ]).toEqual([
        method,
        path,
        ifNoneMatch,
        412,
        'application/problem+json',
        'https://verity.dev/problems/precondition-failed',
      ]);
    }
    // Nothing written, nothing recorded.
    const after = await call<{ spending_caps: unknown[] }>('GET', SETTINGS);
    expect(after.headers.get('etag')).toBe(etag);
    expect(after.body.spending_caps).toEqual([{ period: 'day', max_operations: 7 }]);
    expect((await call('GET', '/v1/admin/policy')).headers.get('etag')).toBe(policyEtag);
    expect(await changes()).toEqual(recorded);

    // A version that is not the current one: the condition holds, the write is made.
    const made = await call<{ spending_caps: unknown[] }>(
      'PUT',
      SETTINGS,
      { spending_caps: [{ period: 'day', max_operations: 8 }] },
      { 'if-none-match': '"not-the-current-version"' },
    );
    expect(made.status).toBe(200);
    expect(made.body.spending_caps).toEqual([{ period: 'day', max_operations: 8 }]);
  });

  it('a header that is no entity tag is 400 naming If-None-Match, nothing written', async () => {
    const before = await call('GET', SETTINGS);
    for (const malformed of ['no-quotes', '"open', '*, "x"']) {
      const res = await call<Problem>('PUT', SETTINGS, { spending_caps: [] }, { 'if-none-match': malformed });
      expect([malformed, res.status]).toEqual([malformed, 400]);
      expect(res.body.errors).toEqual([expect.objectContaining({ field: 'If-None-Match', rule: 'invalid_format' })]);
    }
    expect((await call('GET', SETTINGS)).headers.get('etag')).toBe(before.headers.get('etag'));
  });

  /** A write refused for its If-None-Match: 412 precondition-failed, problem+json. */
  const expectRefused = (label: string, res: { status: number; headers: Headers; body: unknown }) =>
    expect([label, res.status, res.headers.get('content-type')?.split(';')[0], (res.body as Problem).type]).toEqual([
      label,
      412,
      'application/problem+json',
      'https://verity.dev/problems/precondition-failed',
    ]);
  const as = <T>(key: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
    http<T>(stack.apiUrl, method, path, { key, body, headers });
  const count = async (table: string) =>
    ((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM ${table}`)) as { n: number }[])[0].n;

  it('an operation’s decisions and re-check: 412 with * or its current version, nothing written; an older version is decided', async () => {
    const waiting = await submit(stack, [charge(unique('inm-approval'), { requires_approval: true })]);
    await waitForApprovalRequest(stack, waiting.id);
    // Held before it was sent (a knowledge conflict): resolvable, and a re-check of it is judged.
    const heldExecution = await submit(stack, [charge(unique('inm-held'), { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, heldExecution.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    const approvalPath = `/v1/operations/${waiting.operations[0].id}`;
    const heldPath = `/v1/operations/${held.id}`;
    const approvalEtag = (await as(DEMO.reviewer, 'GET', approvalPath)).headers.get('etag')!;
    const heldEtag = (await as(DEMO.reviewer, 'GET', heldPath)).headers.get('etag')!;
    const logs = async () => [await events(stack, waiting.id), await events(stack, heldExecution.id)];
    const logsBefore = await logs();
    const recheckRequests = await count('recheck_requests');

    const refusals: [string, unknown, string][] = [
      [`${approvalPath}/approval`, { decision: 'deny', reason: 'not this one' }, '*'],
      [`${approvalPath}/approval`, { decision: 'approve' }, approvalEtag],
      [`${approvalPath}/approval`, { decision: 'deny' }, `"older", W/${approvalEtag}`],
      [`${heldPath}/resolve`, { status: 'CANCELLED', evidence: 'called the customer' }, '*'],
      [`${heldPath}/resolve`, { status: 'SENT', evidence: 'called the customer' }, heldEtag],
      [`${heldPath}/resolve`, { status: 'MANUAL_REVIEW', evidence: 'still looking' }, '*'],
      [`${heldPath}/recheck`, undefined, '*'],
    ];
    for (const [path, body, ifNoneMatch] of refusals) {
      expectRefused(
        `${path} ${ifNoneMatch}`,
        await as(DEMO.reviewer, 'POST', path, body, { 'if-none-match': ifNoneMatch }),
      );
    }
    // Nothing decided, nothing recorded, nothing asked of the reconciler; the versions are those shown.
    expect(await logs()).toEqual(logsBefore);
    expect(await count('recheck_requests')).toBe(recheckRequests);
    expect((await as(DEMO.reviewer, 'GET', approvalPath)).headers.get('etag')).toBe(approvalEtag);
    expect((await as(DEMO.reviewer, 'GET', heldPath)).headers.get('etag')).toBe(heldEtag);

    // A header that is no entity tag: 400 naming it.
    const malformed = await as<Problem>(
      DEMO.reviewer,
      'POST',
      `${approvalPath}/approval`,
      { decision: 'deny' },
      {
        'if-none-match': 'no-quotes',
      },
    );
    expect(malformed.status).toBe(400);
    expect(malformed.body.errors).toEqual([
      expect.objectContaining({ field: 'If-None-Match', rule: 'invalid_format' }),
    ]);

    // A version the operation is not at: the condition holds, the decision is made.
    const decided = await as<{ approval: { state: string } }>(
      DEMO.reviewer,
      'POST',
      `${approvalPath}/approval`,
      { decision: 'deny', reason: 'not this one' },
      { 'if-none-match': '"not-the-current-version"' },
    );
    expect(decided.status).toBe(200);
    expect(decided.body.approval.state).toBe('denied');
  });

  it('writes with no ETag: * is 412 (the resource is there), nothing written; a list of tags holds', async () => {
    const open = await submit(stack, [charge(unique('inm-cancel'), { requires_approval: true })]);
    await waitForApprovalRequest(stack, open.id);
    const allowed = await call('PUT', '/v1/admin/connector-settings/http', {
      allow_hosts: [{ host: '127.0.0.1', ports: [9], allow_private: true }],
    });
    expect(allowed.status).toBe(200);
    const hook = await call<{ id: string }>('POST', '/v1/admin/webhooks', {
      url: 'http://127.0.0.1:9/inm',
      events: ['execution.finished'],
    });
    expect(hook.status).toBe(201);
    const log = await events(stack, open.id);
    const [executions, endpoints, recorded] = [
      await count('executions'),
      await count('webhook_endpoints'),
      await changes(),
    ];

    const any = { 'if-none-match': '*' };
    const refusals: [string, string, string, unknown][] = [
      [DEMO.agent, 'POST', `/v1/executions/${open.id}/cancel`, { reason: 'no longer needed' }],
      [DEMO.agent, 'POST', '/v1/executions', { agent_id: 'a', intent: 'b', operations: [charge(unique('inm-new'))] }],
      [DEMO.admin, 'POST', '/v1/admin/webhooks', { url: 'http://127.0.0.1:9/inm-2', events: ['execution.finished'] }],
      [DEMO.admin, 'POST', `/v1/admin/webhooks/${hook.body.id}/enable`, undefined],
      [DEMO.admin, 'DELETE', `/v1/admin/webhooks/${hook.body.id}`, undefined],
    ];
    for (const [key, method, path, body] of refusals) {
      expectRefused(`${method} ${path}`, await as(key, method, path, body, any));
    }
    const malformed = await as<Problem>(DEMO.agent, 'POST', `/v1/executions/${open.id}/cancel`, undefined, {
      'if-none-match': '"open',
    });
    expect(malformed.status).toBe(400);
    expect(malformed.body.errors).toEqual([
      expect.objectContaining({ field: 'If-None-Match', rule: 'invalid_format' }),
    ]);
    // Nothing cancelled, created, enabled or deleted.
    expect(await events(stack, open.id)).toEqual(log);
    expect([await count('executions'), await count('webhook_endpoints'), await changes()]).toEqual([
      executions,
      endpoints,
      recorded,
    ]);

    // Tags: none can be the current version of what has none, so the condition holds and the write is made.
    const cancelled = await as<{ status: string; operations: { id: string }[] }>(
      DEMO.agent,
      'POST',
      `/v1/executions/${open.id}/cancel`,
      undefined,
      { 'if-none-match': '"some-version"' },
    );
    expect(cancelled.status).toBe(200);
    expect(cancelled.body.status).toBe('cancelled');
    // Its operation, CANCELLED, could now be retried: not with `*`.
    expectRefused(
      'retry *',
      await as(DEMO.agent, 'POST', `/v1/operations/${cancelled.body.operations[0].id}/retry`, undefined, any),
    );
    expect(await count('executions')).toBe(executions);
  });

  it('* on a write naming an id that does not exist is 404, not 412: with no current representation `*` holds', async () => {
    const allowed = await call('PUT', '/v1/admin/connector-settings/http', {
      allow_hosts: [{ host: '127.0.0.1', ports: [9], allow_private: true }],
    });
    expect(allowed.status).toBe(200);
    const hook = await call<{ id: string }>('POST', '/v1/admin/webhooks', {
      url: 'http://127.0.0.1:9/inm-missing',
      events: ['execution.finished'],
    });
    expect(hook.status).toBe(201);
    const any = { 'if-none-match': '*' };
    const writes: [string, string, string, unknown][] = [
      [DEMO.agent, 'POST', '/v1/executions/exe_nosuchexecution/cancel', undefined],
      [DEMO.agent, 'POST', '/v1/operations/op_nosuchoperation/retry', undefined],
      [DEMO.reviewer, 'POST', '/v1/operations/op_nosuchoperation/approval', { decision: 'deny' }],
      [DEMO.reviewer, 'POST', '/v1/operations/op_nosuchoperation/recheck', undefined],
      [DEMO.admin, 'POST', '/v1/admin/webhooks/whk_nosuchendpoint/enable', undefined],
      [DEMO.admin, 'DELETE', '/v1/admin/webhooks/whk_nosuchendpoint', undefined],
      [DEMO.admin, 'POST', '/v1/admin/webhooks/whk_nosuchendpoint/deliveries/msg_nosuchdelivery/redeliver', undefined],
      [DEMO.admin, 'POST', `/v1/admin/webhooks/${hook.body.id}/deliveries/msg_nosuchdelivery/redeliver`, undefined],
    ];
    const answers = [];
    for (const [key, method, path, body] of writes) {
      const res = await as<Problem>(key, method, path, body, any);
      answers.push([method, path, res.status, res.body.type]);
    }
    expect(answers).toEqual(
      writes.map(([, method, path]) => [method, path, 404, 'https://verity.dev/problems/not-found']),
    );
  });
});
