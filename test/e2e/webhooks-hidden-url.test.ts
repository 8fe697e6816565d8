import { randomBytes } from 'node:crypto';
import { DEMO, Stack } from '../support/stack';
import { http } from '../support/http';
import type { FieldError } from '@verity/sdk';

/**
 * A webhook endpoint's URL is what an operator reads to know where a tenant's events go (the endpoint list, the
 * history of changes, a log). A bidi control (U+202E, U+2066–U+2069) reorders what is shown, and an invisible
 * character (U+200B, U+FEFF, U+00AD…) makes one URL read as another: `/hooks/\u202Ekcatta` is shown as `/hooks/attack`.
 * Tools show a path's and a query's percent-escapes decoded (a browser's address bar, many log viewers), so the same
 * characters percent-encoded are refused too. The rule is the one an API key's label obeys (a key's label is read to
 * decide which key to revoke). Refused as the URL's other spellings are: 400, field `url`, rule `invalid_format`, and
 * nothing written.
 */
describe('a webhook URL holding characters that hide or reorder what is shown', () => {
  let stack: Stack;
  const port = 8080;
  const base = `http://127.0.0.1:${port}`;

  beforeAll(async () => {
    stack = await Stack.start({
      label: 'webhook-hidden-url',
      dispatchers: 0,
      reconcilers: 0,
      env: { SECRETS_KEY: randomBytes(32).toString('base64') },
    });
    const put = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: '127.0.0.1', ports: [port], allow_private: true }] },
    });
    expect(put.status).toBe(200);
  }, 120_000);
  afterAll(async () => stack?.stop());

  const written = async () =>
    (
      (await stack.db.dataSource.query(
        `SELECT (SELECT count(*) FROM webhook_endpoints)::int AS endpoints,
                (SELECT count(*) FROM admin_changes WHERE kind = 'webhook_endpoint')::int AS changes,
                (SELECT count(*) FROM idempotency_keys WHERE route LIKE '%webhooks%')::int AS keys`,
      )) as { endpoints: number; changes: number; keys: number }[]
    )[0];

  const create = (url: string, headers: Record<string, string> = {}) =>
    http<{ id: string; url: string; errors: FieldError[] }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      key: DEMO.admin,
      body: { url, events: ['execution.finished'] },
      headers,
    });

  it.each([
    ['U+202E in the path', `${base}/hooks/\u202Ekcatta`],
    ['U+2066 in the path', `${base}/hooks/\u2066a\u2069`],
    ['U+2067 in the query', `${base}/hook?to=\u2067x`],
    ['U+2068 in the query', `${base}/hook?\u2068to=x`],
    ['U+2069 in the path', `${base}/hooks\u2069/x`],
    ['U+200B in the path', `${base}/ho\u200Boks`],
    ['U+FEFF in the query', `${base}/hook?a=\uFEFF`],
    ['U+00AD (soft hyphen) in the path', `${base}/ho\u00ADoks`],
    ['U+2028 (line separator) in the query', `${base}/hook?a=\u2028b`],
    ['U+0085 (a C1 control) in the path', `${base}/hook\u0085`],
    ['U+E0041 (a tag character) in the path', `${base}/hook\u{E0041}`],
    ['%E2%80%AE (U+202E encoded) in the path', `${base}/hooks/%E2%80%AEkcatta`],
    ['%e2%80%ae (lower case) in the query', `${base}/hook?to=%e2%80%aex`],
    ['%E2%81%A6 (U+2066 encoded) in the path', `${base}/%E2%81%A6hook`],
    ['%E2%80%8B (U+200B encoded) in the path', `${base}/ho%E2%80%8Boks`],
    ['%0A (a line feed encoded) in the query', `${base}/hook?a=1%0Ab=2`],
    ['%00 (NUL encoded) in the path', `${base}/hook%00`],
  ])('%s is refused (400 url invalid_format naming it), nothing written', async (_what, url) => {
    const before = await written();
    const refused = await create(url, { 'idempotency-key': `hidden-${randomBytes(6).toString('hex')}` });
    expect(refused.status).toBe(400);
    expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(refused.body.errors).toEqual([
      { field: 'url', rule: 'invalid_format', message: expect.stringMatching(/U\+[0-9A-F]{4,5}/) },
    ]);
    expect(await written()).toEqual(before);
  });

  it('takes URLs whose characters are all shown: other non-ASCII text and its escapes, a space escaped, other escapes', async () => {
    for (const url of [
      `${base}/h\u00e9ros?q=caf\u00e9`,
      `${base}/h%C3%A9ros?q=caf%C3%A9`,
      `${base}/hook?q=a%20b`,
      `${base}/hook?sig=%2B%2F%3D`,
      // Bytes that are no UTF-8 text are shown as escapes (or a replacement character), never as something else.
      `${base}/hook?raw=%FF%FE`,
    ]) {
      const created = await create(url);
      expect({ url, status: created.status }).toEqual({ url, status: 201 });
      expect(created.body.url).toBe(url);
      expect(
        (await http(stack.apiUrl, 'DELETE', `/v1/admin/webhooks/${created.body.id}`, { key: DEMO.admin })).status,
      ).toBe(204);
    }
  });
});
