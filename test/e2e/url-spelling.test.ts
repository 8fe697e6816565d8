import { randomBytes } from 'node:crypto';
import { DEMO, Stack } from '../support/stack';
import { http, submission } from '../support/http';
import type { FieldError } from '@verity/sdk';

/**
 * A target URL must be written as it will be called. The URL parser (WHATWG, as Node's http client uses it) reads a
 * backslash as "/" in http(s) URLs, takes `http:host` and `http:/host` as `http://host`, and drops an empty user info
 * (`http://@host`): `http://hooks.example\@127.0.0.1/` is stored and shown as a URL whose host a reader (and an RFC 3986
 * parser) takes for 127.0.0.1 while hooks.example is called, and `http:2130706433:8080/` passes the rule that IPv4
 * addresses are written in dotted-decimal form (the host check looked for `://`) while 127.0.0.1 is called. Refused
 * where a URL is taken: a webhook endpoint's `url`, and an http operation's `url`.
 */
describe('URLs written otherwise than they are called', () => {
  let stack: Stack;
  const port = 8080;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'url-spelling', env: { SECRETS_KEY: randomBytes(32).toString('base64') } });
    const put = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: {
        allow_hosts: [
          { host: '127.0.0.1', ports: [port], allow_private: true },
          { host: 'hooks.example.com', ports: [80, port] },
        ],
      },
    });
    expect(put.status).toBe(200);
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
  });

  const misspelt = [
    `http:2130706433:${port}/hook`, // no "//": the dotted-decimal rule did not see the host
    `http:/127.0.0.1:${port}/hook`,
    `http:\\\\127.0.0.1:${port}/hook`,
    `http://hooks.example.com\\@127.0.0.1:${port}/hook`, // called at hooks.example.com, reads as 127.0.0.1
    `http://127.0.0.1:${port}\\@hooks.example.com/hook`, // called at 127.0.0.1, reads as hooks.example.com
    `http://2130706433\\@hooks.example.com:${port}/hook`, // called at 127.0.0.1 (a decimal IPv4 address)
    `http://hooks.example.com/a\\b`, // called as /a/b
    `http://@hooks.example.com/hook`, // empty user info, dropped
    `http://hooks.example.com./hook`, // a dot at the end of the host: the allowlist reads hooks.example.com, DNS may not
    `http://hooks.example.com.:${port}/hook`,
    `http://hooks.example.com%2E/hook`, // decoded into the same dot
    `http://127.0.0.1.:${port}/hook`, // called as 127.0.0.1
    `http://evil.example./hook`, // not on the allowlist either way: refused for its spelling first
    // The parser rewrites the host (IDNA mapping, %-escapes): the record would show one host and another be called.
    `http://hooks.example\u3002com/hook`, // an ideographic full stop, called as hooks.example.com
    `http://hooks.ex\u00adample.com/hook`, // a soft hyphen (invisible), dropped
    `http://hooks.ex\u200bample.com/hook`, // a zero-width space, dropped
    `http://hooks.\uff45xample.com/hook`, // a fullwidth "e"
    `http://hooks.ex%61mple.com/hook`, // decoded into "a"
    `http://h\u00f6oks.example.com/hook`, // called as xn--hoks-… (write that)
    // The parser drops a port's leading zeros: stored as written, called at another spelling (or the scheme's port).
    `http://127.0.0.1:0${port}/hook`,
    `http://hooks.example.com:080/hook`,
  ];

  it.each(misspelt)('a webhook endpoint at %s is refused (400 url invalid_format), nothing written', async (url) => {
    const created = await http<{ errors: FieldError[] }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      key: DEMO.admin,
      body: { url, events: ['execution.finished'] },
    });
    expect(created.status).toBe(400);
    expect(created.body.errors).toEqual([expect.objectContaining({ field: 'url', rule: 'invalid_format' })]);
    const list = await http<{ data: unknown[] }>(stack.apiUrl, 'GET', '/v1/admin/webhooks', { key: DEMO.admin });
    expect(list.body.data).toEqual([]);
  });

  it.each(misspelt)('an http operation to %s is refused (400 naming params.url)', async (url) => {
    const created = await http<{ errors: FieldError[] }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([{ key: 'call', connector: 'http', action: 'request', params: { method: 'POST', url } }]),
    });
    expect(created.status).toBe(400);
    // The reason is in the message; the rule is the URL's form, as for a webhook's url.
    expect(created.body.errors).toEqual([
      expect.objectContaining({ field: 'operations[0].params.url', rule: 'invalid_format' }),
    ]);
  });

  it.each([`http://hooks.example.com/hook#part`, `http://127.0.0.1:${port}/hook#`])(
    'a webhook endpoint at %s is refused (400 url invalid_format: a fragment is never sent), nothing written',
    async (url) => {
      const created = await http<{ errors: FieldError[] }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
        key: DEMO.admin,
        body: { url, events: ['execution.finished'] },
      });
      expect(created.status).toBe(400);
      expect(created.body.errors).toEqual([
        { field: 'url', rule: 'invalid_format', message: expect.stringContaining('no fragment') },
      ]);
      const list = await http<{ data: unknown[] }>(stack.apiUrl, 'GET', '/v1/admin/webhooks', { key: DEMO.admin });
      expect(list.body.data).toEqual([]);
    },
  );

  /** An http operation whose `params` the intake refuses: 400 naming `field` with `refusal`, and no execution written. */
  async function expectHttpOperationRefused(field: string, params: Record<string, unknown>, refusal: string) {
    const before = await http<{ data: unknown[] }>(stack.apiUrl, 'GET', '/v1/executions', { key: DEMO.agent });
    const created = await http<{ errors: FieldError[] }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([{ key: 'call', connector: 'http', action: 'request', params: { method: 'POST', ...params } }]),
    });
    expect(created.status).toBe(400);
    expect(created.body.errors).toEqual([
      expect.objectContaining({ field: `operations[0].params.${field}`, message: expect.stringContaining(refusal) }),
    ]);
    const after = await http<{ data: unknown[] }>(stack.apiUrl, 'GET', '/v1/executions', { key: DEMO.agent });
    expect(after.body.data).toEqual(before.body.data);
  }

  it.each([
    ['url', { url: `http://hooks.example.com/v1/payouts?amount=250000#&amount=25` }],
    [
      'read_back.url',
      {
        url: `http://hooks.example.com/v1/payouts`,
        read_back: { url: `http://hooks.example.com/v1/payouts/{{operation_id}}#`, field: 'status', equals: 'paid' },
      },
    ],
    [
      'context.url',
      { url: `http://hooks.example.com/v1/payouts`, context: { url: `http://hooks.example.com/v1/x#y`, field: 'a' } },
    ],
  ])(
    'an http operation with a fragment in its %s is refused (400 naming it: never sent, a reviewer would read it), nothing written',
    (field, params) => expectHttpOperationRefused(field, params, 'no fragment'),
  );

  // The parser resolves a dot segment of the path, also percent-encoded: an endpoint shown (and listed) as
  // `/a/%2e%2e/hook` had every delivery sent to `/hook`.
  it.each([
    `http://hooks.example.com/a/../hook`,
    `http://hooks.example.com/a/%2e%2e/hook`,
    `http://hooks.example.com/a/%2E./hook`,
    `http://hooks.example.com/./hook`,
    `http://hooks.example.com/hook/..`,
    `http://127.0.0.1:${port}/hook/.%2e?x=1`,
  ])(
    'a webhook endpoint at %s is refused (400 url invalid_format: a dot segment is resolved away), nothing written',
    async (url) => {
      const created = await http<{ errors: FieldError[] }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
        key: DEMO.admin,
        body: { url, events: ['execution.finished'] },
      });
      expect(created.status).toBe(400);
      expect(created.body.errors).toEqual([
        { field: 'url', rule: 'invalid_format', message: expect.stringContaining('dot segment') },
      ]);
      const list = await http<{ data: unknown[] }>(stack.apiUrl, 'GET', '/v1/admin/webhooks', { key: DEMO.admin });
      expect(list.body.data).toEqual([]);
    },
  );

  // The same for an http operation's request and context read: an approver and the record read `/acc_1/../acc_2`
  // (a call to acc_1) while the parser sends it to `/acc_2`.
  it.each([
    ['url', { url: `http://hooks.example.com/v1/accounts/acc_1/../acc_2/close` }],
    ['url', { url: `http://hooks.example.com/v1/accounts/acc_1/%2e%2e/acc_2/close` }],
    [
      'context.url',
      { url: `http://hooks.example.com/v1/payouts`, context: { url: `http://hooks.example.com/v1/./x`, field: 'a' } },
    ],
  ])(
    'an http operation with a dot segment in its %s is refused (400 naming it: resolved away), nothing written',
    (field, params) => expectHttpOperationRefused(field, params, 'dot segment'),
  );

  it('takes URLs written as they are called, a backslash in the query included (the parser keeps it there)', async () => {
    for (const url of [
      `http://127.0.0.1:${port}/hook`,
      `http://hooks.example.com/hook?q=a\\b`,
      // Dots that are no dot segment, and dot segments in the query (never resolved), are called as written.
      `http://hooks.example.com/.well-known/a..b/hook.`,
      `http://hooks.example.com/hook?next=../x`,
    ]) {
      const created = await http<{ id: string; url: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
        key: DEMO.admin,
        body: { url, events: ['execution.finished'] },
      });
      expect(created.status).toBe(201);
      expect(created.body.url).toBe(url);
      expect(
        (await http(stack.apiUrl, 'DELETE', `/v1/admin/webhooks/${created.body.id}`, { key: DEMO.admin })).status,
      ).toBe(204);
    }
  });
});
