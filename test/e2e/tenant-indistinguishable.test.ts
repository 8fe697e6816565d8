import { createApiKey } from '@verity/persistence/api-keys';
import { charge, http, submission, unique } from '../support/http';
import { DEMO, Stack } from '../support/stack';
import { waitForApprovalRequest } from './dispatcher-helpers';

/**
 * Another tenant's resources look exactly like ones that do not exist, on the paths the isolation matrix of
 * api-auth.test.ts judges by status alone or does not reach: the admin webhook endpoints (a tenant's endpoint and its
 * delivery log, named by another tenant's admin) and the MCP tools and resources (which call /v1 with the caller's
 * key). Every answer is compared, byte for byte once the id is swapped, with the answer for an id nobody has.
 */
const GHOST = {
  exe: 'exe_01m0000000ghost000000000000',
  op: 'op_01m0000000ghost000000000000',
  whk: 'whk_01m0000000ghost000000000000',
  msg: 'msg_01m0000000ghost000000000000',
};

/** The answer with the id named replaced by the ghost's, and the request-specific `instance` dropped. */
const comparable = (text: string, id: string, ghost: string) =>
  text.replaceAll(id, ghost).replace(/"instance":"[^"]*",?/g, '');

/** Everything an answer says, less what differs between any two requests (its time, its request id, its length). */
const said = (res: { status: number; headers: Headers; text: string }, id: string, ghost: string) =>
  JSON.stringify({
    status: res.status,
    headers: [...res.headers].filter(([name]) => !['date', 'x-request-id', 'content-length'].includes(name)),
    body: comparable(res.text, id, ghost),
  });

describe('another tenant’s resources answer as missing ones do', () => {
  let stack: Stack;
  let otherAdmin: string;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'tenant-indistinguishable' });
    otherAdmin = (await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'admin' })).key;
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('answers another tenant’s admin on a webhook endpoint exactly as on one that does not exist', async () => {
    const allowed = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: '127.0.0.1', ports: [9], allow_private: true }] },
    });
    expect(allowed.status).toBe(200);
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      key: DEMO.admin,
      body: { url: 'http://127.0.0.1:9/hook', events: ['webhook.disabled'] },
    });
    expect(created.status).toBe(201);
    const id = created.body.id;

    const paths: [string, string][] = [
      ['GET', ''],
      ['GET', '/deliveries'],
      ['GET', '/deliveries?limit=5'],
      ['POST', '/enable'],
      ['POST', `/deliveries/${GHOST.msg}/redeliver`],
      ['DELETE', ''],
    ];
    const wrong: string[] = [];
    for (const [method, tail] of paths) {
      const theirs = await http(stack.apiUrl, method, `/v1/admin/webhooks/${id}${tail}`, { key: otherAdmin });
      const none = await http(stack.apiUrl, method, `/v1/admin/webhooks/${GHOST.whk}${tail}`, { key: otherAdmin });
      if (
        theirs.status !== 404 ||
        theirs.status !== none.status ||
        comparable(theirs.text, id, GHOST.whk) !== comparable(none.text, GHOST.whk, GHOST.whk)
      ) {
        wrong.push(`${method} ${tail || '/'}: ${theirs.status} ${theirs.text} vs ${none.status} ${none.text}`);
      }
    }
    expect(wrong).toEqual([]);
    // Nothing the other tenant tried removed or changed the endpoint.
    const still = await http<{ id: string; disabled: boolean }>(stack.apiUrl, 'GET', `/v1/admin/webhooks/${id}`, {
      key: DEMO.admin,
    });
    expect(still.status).toBe(200);
    expect(still.body).toMatchObject({ id, disabled: false });
  });

  it('answers another tenant’s MCP tools and resources exactly as for ids that do not exist', async () => {
    const created = await http<{ id: string; operations: { id: string }[] }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('order'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    const exe = created.body.id;
    const op = created.body.operations[0].id;

    const rpc = async (key: string, method: string, params: unknown) => {
      const res = await http(stack.apiUrl, 'POST', '/mcp', {
        key,
        body: { jsonrpc: '2.0', id: 1, method, params },
        headers: { accept: 'application/json, text/event-stream' },
      });
      expect(res.status).toBe(200);
      // One answer, as JSON or as the one event of a stream.
      const data = res.text.startsWith('{') ? res.text : /^data: (.*)$/m.exec(res.text)?.[1];
      expect(data).toBeDefined();
      return JSON.stringify(JSON.parse(data!));
    };
    const tools: [string, string, string, string][] = [
      ['get_execution', 'execution_id', exe, GHOST.exe],
      ['cancel_execution', 'execution_id', exe, GHOST.exe],
      ['wait_for_execution', 'execution_id', exe, GHOST.exe],
      ['get_operation', 'operation_id', op, GHOST.op],
    ];
    const toolCall = (name: string, arg: string, id: string) => ({
      name,
      arguments: { [arg]: id, ...(name === 'wait_for_execution' ? { timeout_seconds: 1 } : {}) },
    });
    const calls = tools.map(([name, arg, id, ghost]) => ({
      name,
      method: 'tools/call',
      theirs: toolCall(name, arg, id) as unknown,
      none: toolCall(name, arg, ghost) as unknown,
      id,
      ghost,
    }));
    calls.push({
      name: 'resources/read',
      method: 'resources/read',
      theirs: { uri: `verity://executions/${exe}` },
      none: { uri: `verity://executions/${GHOST.exe}` },
      id: exe,
      ghost: GHOST.exe,
    });

    const wrong: string[] = [];
    for (const call of calls) {
      const theirs = await rpc(DEMO.otherAgent, call.method, call.theirs);
      const none = await rpc(DEMO.otherAgent, call.method, call.none);
      if (
        !/not.found|404/i.test(theirs) ||
        comparable(theirs, call.id, call.ghost) !== comparable(none, call.ghost, call.ghost)
      ) {
        wrong.push(`${call.name}: ${theirs} vs ${none}`);
      }
    }
    expect(wrong).toEqual([]);
    // The other tenant's cancel changed nothing.
    const after = await http<{ status: string; operations: { status: string }[] }>(
      stack.apiUrl,
      'GET',
      `/v1/executions/${exe}`,
      { key: DEMO.agent },
    );
    expect(after.body.status).not.toBe('cancelled');
    expect(after.body.operations[0].status).toBe('PREPARED');
  });

  it('answers another tenant’s keys of every role on an operation’s and an execution’s decisions as on missing ones, headers included', async () => {
    const created = await http<{ id: string; operations: { id: string }[] }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('decide'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    const exe = created.body.id;
    const op = created.body.operations[0].id;
    const shown = await http(stack.apiUrl, 'GET', `/v1/operations/${op}`, { key: DEMO.reviewer });
    // The version this tenant's reviewer was shown: an outsider who learned it is told no more than with any other.
    const etag = shown.headers.get('etag')!;
    const otherReviewer = (
      await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'reviewer' })
    ).key;
    type Ask = { body?: unknown; headers?: Record<string, string> };
    const asks: [string, string, Ask][] = [
      ['GET', `/v1/operations/{op}`, {}],
      ['POST', `/v1/operations/{op}/approval`, { body: { decision: 'approve' }, headers: { 'if-match': etag } }],
      ['POST', `/v1/operations/{op}/approval`, { body: { decision: 'deny', requested_at: '2026-01-01T00:00:00Z' } }],
      [
        'POST',
        `/v1/operations/{op}/resolve`,
        { body: { status: 'FAILED', evidence: 'x' }, headers: { 'if-match': etag } },
      ],
      ['POST', `/v1/operations/{op}/resolve`, { body: { status: 'MANUAL_REVIEW', evidence: 'x', due_in_seconds: 5 } }],
      ['POST', `/v1/operations/{op}/recheck`, { headers: { 'if-match': etag } }],
      ['POST', `/v1/operations/{op}/retry`, {}],
      ['GET', `/v1/executions/{exe}/events?after=999`, {}],
      ['POST', `/v1/executions/{exe}/cancel`, { body: { reason: 'x' } }],
      ['POST', `/v1/executions/{exe}/cancel`, { headers: { 'if-match': '*' } }],
    ];
    // What a request of another tenant could leave behind without an event or a status: a re-check request recorded
    // (its job may run later), an execution made (a retry's). Counted in every tenant, the asker's too: a row written
    // under the asker's tenant for this tenant's operation is as wrong, and nothing else writes these meanwhile.
    const written = async () =>
      (await stack.db.dataSource.query(
        `SELECT (SELECT count(*)::int FROM recheck_requests WHERE tenant_id = $1) AS tenant_recheck_requests,
                (SELECT count(*)::int FROM executions WHERE tenant_id = $1) AS tenant_executions,
                (SELECT count(*)::int FROM recheck_requests) AS recheck_requests,
                (SELECT count(*)::int FROM executions) AS executions`,
        ['demo'],
      )) as Record<string, number>[];
    const writtenBefore = await written();
    const wrong: string[] = [];
    for (const key of [DEMO.otherAgent, otherReviewer, otherAdmin]) {
      for (const [method, path, ask] of asks) {
        const [id, ghost] = path.includes('{exe}') ? [exe, GHOST.exe] : [op, GHOST.op];
        const at = (target: string) => path.replace(/\{op\}|\{exe\}/, target);
        const theirs = await http(stack.apiUrl, method, at(id), { key, ...ask });
        const none = await http(stack.apiUrl, method, at(ghost), { key, ...ask });
        if (![403, 404].includes(theirs.status) || said(theirs, id, ghost) !== said(none, ghost, ghost)) {
          wrong.push(`${method} ${path}: ${theirs.status} ${theirs.text} vs ${none.status} ${none.text}`);
        }
      }
    }
    expect(wrong).toEqual([]);
    // Nothing any of them asked for was written: no re-check request, no execution, no decision in the history, the
    // approval not decided.
    expect(await written()).toEqual(writtenBefore);
    const log = await http(stack.apiUrl, 'GET', `/v1/executions/${exe}/events`, { key: DEMO.agent });
    expect(log.text).not.toMatch(/approval\.decided|operation\.resolved|operation\.still_unknown|cancelled_by_caller/);
    const after = await http<{ status: string; approval: { state: string } | null }>(
      stack.apiUrl,
      'GET',
      `/v1/operations/${op}`,
      { key: DEMO.reviewer },
    );
    expect(after.body.status).toBe('PREPARED');
    expect(after.body.approval?.state ?? 'none').not.toMatch(/granted|denied/);
  });

  it('answers another tenant’s agent on an execution’s reads, its stream and its conditional writes as on missing ones', async () => {
    const created = await http<{ id: string; operations: { id: string }[] }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('reads'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    const exe = created.body.id;
    const op = created.body.operations[0].id;
    const log = async () =>
      (await http<{ data: { id: string }[] }>(stack.apiUrl, 'GET', `/v1/executions/${exe}/events`, { key: DEMO.agent }))
        .body.data;
    // At rest: waiting for its approval, so nothing but a request below could add to its log.
    await waitForApprovalRequest(stack, exe);
    const before = await log();
    const event = before[0].id;
    const asks: [string, string, Record<string, string>][] = [
      ['GET', '/v1/executions/{exe}', {}],
      ['HEAD', '/v1/executions/{exe}', {}],
      ['GET', '/v1/executions/{exe}/events', {}],
      ['GET', `/v1/executions/{exe}/events?after=${event}&limit=5`, {}],
      ['GET', '/v1/executions/{exe}/stream', {}],
      ['GET', '/v1/executions/{exe}/stream', { 'last-event-id': event }],
      ['GET', '/v1/executions/{exe}/stream?after=1', {}],
      ['HEAD', '/v1/executions/{exe}/stream', {}],
      ['POST', '/v1/executions/{exe}/cancel', { 'if-none-match': '"a-version"' }],
      ['POST', '/v1/executions/{exe}/cancel', { 'if-none-match': '*' }],
      ['GET', '/v1/operations/{op}', {}],
      ['HEAD', '/v1/operations/{op}', {}],
      ['POST', '/v1/operations/{op}/retry', { 'if-none-match': '*' }],
    ];
    const wrong: string[] = [];
    for (const [method, path, headers] of asks) {
      const [id, ghost] = path.includes('{exe}') ? [exe, GHOST.exe] : [op, GHOST.op];
      const at = (target: string) => path.replace(/\{op\}|\{exe\}/, target);
      const theirs = await http(stack.apiUrl, method, at(id), { key: DEMO.otherAgent, headers });
      const none = await http(stack.apiUrl, method, at(ghost), { key: DEMO.otherAgent, headers });
      if (![404, 412].includes(theirs.status) || said(theirs, id, ghost) !== said(none, ghost, ghost)) {
        wrong.push(`${method} ${path}: ${theirs.status} ${theirs.text} vs ${none.status} ${none.text}`);
      }
    }
    expect(wrong).toEqual([]);
    // Nothing was cancelled or retried: the log is as it was (the approval still waits), no execution was added.
    expect(await log()).toEqual(before);
  });
});
