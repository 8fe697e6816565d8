import { Webhook } from 'standardwebhooks';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { openStream } from './api-sse';
import { startReceiver } from './webhook-receiver';

/** Written in plain before the tenant made it a secret: in an operation's params, the intent, a webhook URL. */
const VALUE = 'value-x-Kq83vW';
const PLACEHOLDER = '{{secret:late_token}}';

/** `answer` as it was before the secret was set, with the value replaced by the placeholder: the same shape. */
function redacted<T>(answer: T): T {
  return JSON.parse(JSON.stringify(answer).replaceAll(VALUE, PLACEHOLDER)) as T;
}

/**
 * `after` as far as it holds what `before` did: the history of admin changes has grown since (each secret set is a
 * change), so only the entries it had are compared.
 */
function sameEntries(path: string, after: unknown, before: unknown): unknown {
  if (path !== '/v1/admin/changes') return after;
  const had = new Set((before as { data: { id: string }[] }).data.map((entry) => entry.id));
  const { data, ...rest } = after as { data: { id: string }[] };
  return { ...rest, data: data.filter((entry) => had.has(entry.id)) };
}

/**
 * Secret values are never returned: a value stored in plain before the tenant made it a secret (an intake that had no
 * secret to look for, a webhook URL written then) is replaced by `{{secret:NAME}}` in every answer read after, and the
 * answer keeps its shape (only string values are rewritten, never the JSON around them).
 */
describe('a value stored in plain, then made a secret, is returned as its placeholder', () => {
  let stack: Stack;
  let executionId: string;
  let operationId: string;
  let webhookId: string;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let signingSecret: string;
  const before: Record<string, unknown> = {};
  const get = (path: string, key = DEMO.admin) => http(stack.apiUrl, 'GET', path, { key });

  beforeAll(async () => {
    receiver = await startReceiver(() => ({ status: 204 }));
    // No reconciler yet: the execution's webhook delivery is made only once the secret is set.
    stack = await Stack.start({
      label: 'secretlater',
      dispatchers: 0,
      reconcilers: 0,
      env: { WEBHOOK_SCAN_INTERVAL_MS: '100' },
    });
    const allow = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: {
        allow_hosts: [
          { host: 'hooks.example.com' },
          { host: '127.0.0.1', ports: [receiver.port], allow_private: true },
        ],
      },
    });
    expect(allow.status).toBe(200);
    const delivered = await http<{ secret: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      key: DEMO.admin,
      body: { url: `${receiver.base}/in`, events: ['execution.finished'] },
    });
    expect(delivered.status).toBe(201);
    signingSecret = delivered.body.secret;
    const created = await http<{ id: string; operations: { id: string }[] }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      headers: { 'idempotency-key': unique('later') },
      body: submission([charge(`order-${VALUE}`)], { intent: `pay the order ${VALUE}`, agent_id: `agent-${VALUE}` }),
    });
    expect(created.status).toBe(201);
    executionId = created.body.id;
    operationId = created.body.operations[0].id;
    const hook = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      key: DEMO.admin,
      body: { url: `https://hooks.example.com/in/${VALUE}`, events: ['execution.finished'] },
    });
    expect(hook.status).toBe(201);
    webhookId = hook.body.id;
    const policy = await http(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      body: { obligation_owner: `ops team ${VALUE}` },
    });
    expect(policy.status).toBe(200);
    // The cancel's reason is in the execution's events.
    const cancelled = await http(stack.apiUrl, 'POST', `/v1/executions/${executionId}/cancel`, {
      key: DEMO.agent,
      body: { reason: `customer asked, ref ${VALUE}` },
    });
    expect(cancelled.status).toBe(200);
    for (const path of [
      `/v1/executions/${executionId}`,
      `/v1/operations/${operationId}`,
      `/v1/executions/${executionId}/events`,
      `/v1/admin/webhooks`,
      `/v1/admin/webhooks/${webhookId}`,
      '/v1/admin/policy',
      // The history of admin changes: the webhook URL and the policy as written.
      '/v1/admin/changes',
    ]) {
      const answer = await get(path);
      expect(answer.status).toBe(200);
      expect(answer.text).toContain(VALUE);
      before[path] = answer.body;
    }
    const secret = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { late_token: VALUE } },
    });
    expect(secret.status).toBe(200);
  }, 60_000);
  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  it('GET of the execution, its operation, its events, the webhook endpoints, the policy, the admin history: the placeholder, same shape', async () => {
    for (const [path, answer] of Object.entries(before)) {
      const after = await get(path);
      expect({ path, status: after.status }).toEqual({ path, status: 200 });
      expect(after.text).not.toContain(VALUE);
      expect(after.text).toContain(PLACEHOLDER);
      expect(sameEntries(path, after.body, answer)).toEqual(redacted(answer));
    }
    // The stored rows are not rewritten: history is append-only, and the answer is redacted as it is read.
    const [row] = (await stack.db.dataSource.query('SELECT params FROM operations WHERE id = $1', [operationId])) as {
      params: { reference: string };
    }[];
    expect(row.params.reference).toBe(`order-${VALUE}`);
  });

  it('the list of executions (the console reads it too) and an agent key read the placeholder', async () => {
    const list = await get('/v1/executions', DEMO.agent);
    expect(list.status).toBe(200);
    expect(list.text).not.toContain(VALUE);
    expect(list.text).toContain(PLACEHOLDER);
  });

  it('the event stream sends the placeholder', async () => {
    const events = before[`/v1/executions/${executionId}/events`] as { data: unknown[] };
    const stream = await openStream(`${stack.apiUrl}/v1/executions/${executionId}/stream`, DEMO.agent);
    try {
      expect(stream.status).toBe(200);
      const frames = await stream.waitFor((sent) => sent.length >= events.data.length, 15_000);
      const sent = frames.slice(0, events.data.length).map((frame) => JSON.parse(frame.data) as unknown);
      expect(sent).toEqual(redacted(events.data));
      expect(frames.some((frame) => frame.data.includes(VALUE))).toBe(false);
    } finally {
      stream.abort();
    }
  });

  it('MCP get_execution answers the placeholder', async () => {
    const res = await http(stack.apiUrl, 'POST', '/mcp', {
      key: DEMO.agent,
      body: {
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'get_execution', arguments: { execution_id: executionId } },
      },
      headers: { accept: 'application/json, text/event-stream' },
    });
    expect(res.status).toBe(200);
    const data = res.text.startsWith('{') ? res.text : /^data: (.*)$/m.exec(res.text)?.[1];
    expect(data).toBeDefined();
    const answer = JSON.parse(data!) as { result: { content: { text: string }[] } };
    const text = answer.result.content.map((item) => item.text).join('\n');
    expect(text).toContain(executionId);
    expect(text).not.toContain(VALUE);
    expect(text).toContain(PLACEHOLDER);
  });

  it('a webhook delivery made after the secret was set carries the placeholder, signed as sent', async () => {
    await stack.startApp('reconciler');
    const [sent] = await waitFor(
      async () => receiver.seen.filter((r) => r.path === '/in'),
      (seen) => seen.length > 0,
      30_000,
      100,
    );
    expect(sent.body).not.toContain(VALUE);
    const body = new Webhook(signingSecret).verify(sent.body, sent.headers as Record<string, string>) as {
      type: string;
      data: { execution_id: string; agent_id: string };
    };
    expect(body).toMatchObject({
      type: 'execution.finished',
      data: { execution_id: executionId, agent_id: `agent-${PLACEHOLDER}` },
    });
  });

  it('a secret value that is JSON punctuation or a member name leaves every answer valid JSON of the same shape', async () => {
    const settings = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { punct: '","reference":"', member: 'currency' } },
    });
    expect(settings.status).toBe(200);
    for (const [path, answer] of Object.entries(before)) {
      const after = await get(path);
      expect({ path, status: after.status }).toEqual({ path, status: 200 });
      expect(() => JSON.parse(after.text) as unknown).not.toThrow();
      expect(sameEntries(path, after.body, answer)).toEqual(redacted(answer));
    }
  });
});
