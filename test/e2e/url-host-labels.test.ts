import { DEMO, Stack } from '../support/stack';
import { http, submission } from '../support/http';
import type { FieldError } from '@verity/sdk';

/**
 * A host name DNS cannot carry — an empty label (`a..example.com`, `..example.com`) or a label longer than 63
 * characters — can never be called: every delivery to such a webhook endpoint fails until the endpoint is disabled
 * "for failures", which no receiver caused (the reason port 0 is refused), and every http operation to it fails. The
 * wildcard entry `*.example.com` matched `..example.com` too. Refused where a URL is taken, as port 0 is.
 */
describe('host names no DNS lookup can carry', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'url-host-labels', dispatchers: 0, reconcilers: 0 });
    const put = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: '*.example.com' }] },
    });
    expect(put.status).toBe(200);
  }, 120_000);
  afterAll(async () => stack?.stop());

  const uncallable = [
    'http://a..example.com/hook',
    'http://..example.com/hook',
    `http://${'a'.repeat(64)}.example.com/hook`,
  ];

  it.each(uncallable)('a webhook endpoint at %s is refused (400 url invalid_format), nothing written', async (url) => {
    const created = await http<{ errors: FieldError[] }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      key: DEMO.admin,
      body: { url, events: ['execution.finished'] },
    });
    expect(created.status).toBe(400);
    expect(created.body.errors).toEqual([expect.objectContaining({ field: 'url', rule: 'invalid_format' })]);
    const list = await http<{ data: unknown[] }>(stack.apiUrl, 'GET', '/v1/admin/webhooks', { key: DEMO.admin });
    expect(list.body.data).toEqual([]);
  });

  it.each(uncallable)('an http operation to %s is refused (400 naming params.url), nothing written', async (url) => {
    const created = await http<{ errors: FieldError[] }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([{ key: 'call', connector: 'http', action: 'request', params: { method: 'POST', url } }]),
    });
    expect(created.status).toBe(400);
    expect(created.body.errors).toEqual([expect.objectContaining({ field: 'operations[0].params.url' })]);
    const list = await http<{ data: unknown[] }>(stack.apiUrl, 'GET', '/v1/executions', { key: DEMO.agent });
    expect(list.body.data).toEqual([]);
  });

  it(`takes a label of 63 characters, and the wildcard's own hosts`, async () => {
    for (const url of [`http://${'a'.repeat(63)}.example.com/hook`, 'http://hooks.example.com/hook']) {
      const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
        key: DEMO.admin,
        body: { url, events: ['execution.finished'] },
      });
      expect(created.status).toBe(201);
      expect(
        (await http(stack.apiUrl, 'DELETE', `/v1/admin/webhooks/${created.body.id}`, { key: DEMO.admin })).status,
      ).toBe(204);
    }
  });
});
