import { createApiKey } from '@verity/persistence';
import { charge, http, submission, unique } from '../support/http';
import { DEMO, Stack } from '../support/stack';

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
});
