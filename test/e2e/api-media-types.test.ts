import { DEMO, Stack } from '../support/stack';
import { http, submission, charge, unique } from '../support/http';

/**
 * A body the JSON parser does not read (its media type is not application/json or application/*+json) is a 415, on
 * every route that takes one. `application/json-seq` and a list (`application/json, text/plain`) passed the routes'
 * own media-type test (`json\b`) while the parser left the body unread: the caller was told its body was missing (400
 * "expected object, received undefined"). Over /mcp every such body, `text/plain` too, was "no JSON-RPC message" (400),
 * though the route documents a 415 for it.
 */
describe('media types the JSON parser does not read', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'api-media-types', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const types = ['application/json-seq', 'application/jsonx', 'application/json, text/plain', 'application/json5'];

  it.each(types)('POST /v1/executions as %s: 415 unsupported-media-type, nothing written', async (type) => {
    const sent = await http<{ type: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      rawBody: JSON.stringify(submission([charge(unique('media'))])),
      headers: { 'content-type': type },
    });
    expect({ status: sent.status, type: sent.body.type }).toEqual({
      status: 415,
      type: 'https://verity.dev/problems/unsupported-media-type',
    });
    const [{ n }] = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions`)) as { n: number }[];
    expect(n).toBe(0);
  });

  it.each(types)('PUT /v1/admin/policy as %s: 415, the policy unchanged', async (type) => {
    const before = await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin });
    const sent = await http<{ type: string }>(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      rawBody: JSON.stringify({ obligation_owner: 'ops' }),
      headers: { 'content-type': type },
    });
    expect(sent.status).toBe(415);
    expect((await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin })).text).toBe(before.text);
  });

  it.each([...types, 'text/plain'])('POST /mcp as %s: 415, not "no JSON-RPC message"', async (type) => {
    const sent = await http<{ error?: { code: number; message: string } }>(stack.apiUrl, 'POST', '/mcp', {
      key: DEMO.agent,
      rawBody: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
      headers: { 'content-type': type, accept: 'application/json, text/event-stream' },
    });
    expect(sent.status).toBe(415);
    expect(sent.body.error?.message).toMatch(/Content-Type/);
  });
});
