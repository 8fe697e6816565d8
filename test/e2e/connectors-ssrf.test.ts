import { DEMO, Stack, waitFor } from '../support/stack';
import { submission } from '../support/http';
import {
  Call,
  TargetServer,
  httpOp,
  recordingClient,
  settled,
  startCanary,
  startTarget,
  submitOps,
} from './connectors-support';

/**
 * SSRF vectors against the http connector. A canary listens on loopback (every address family) and must
 * receive nothing, whether a vector is refused at intake (400 naming the field) or when sending (FAILED,
 * SOURCE_UNREACHABLE, "not sent: egress refused"). The tenant allowlists several internal hosts *without*
 * allow_private, so the resolved-address check — not just the allowlist — is what refuses them.
 */
describe('SSRF defence of the http connector', () => {
  let stack: Stack;
  let call: Call;
  let target: TargetServer;
  let canary: Awaited<ReturnType<typeof startCanary>>;

  beforeAll(async () => {
    canary = await startCanary();
    target = await startTarget({ redirectTo: `http://127.0.0.1:${canary.port}/orders/x` });
    stack = await Stack.start({ label: 'connssrf' });
    ({ call } = recordingClient(stack));
    const put = await call('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: {
        allow_hosts: [
          // The one explicit private allowance: the test target, on its own port — and the stack's sandbox provider's,
          // which is refused all the same (a platform service is never a tenant's target).
          { host: '127.0.0.1', ports: [target.port, stack.sandboxPort], allow_private: true },
          // Allowlisted by name or address, but never allowed to be internal:
          { host: 'localhost' },
          { host: '::1' },
          { host: '::ffff:127.0.0.1' },
          { host: '169.254.169.254' },
          { host: '10.0.0.1' },
          { host: '192.168.1.1' },
          { host: '172.16.0.1' },
          { host: '100.64.0.1' },
          { host: 'fc00::1' },
          { host: 'fe80::1' },
        ],
      },
    });
    expect(put.status).toBe(200);
  });
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
    await canary?.close();
  });

  const post = (url: string, extra: Record<string, unknown> = {}) => ({
    method: 'POST',
    url,
    body: { a: 1 },
    ...extra,
  });

  it.each([
    ['decimal IPv4', () => `http://2130706433:${canary.port}/`],
    ['octal IPv4', () => `http://0177.0.0.1:${canary.port}/`],
    ['hex IPv4', () => `http://0x7f.0.0.1:${canary.port}/`],
    ['hex IPv4, one number', () => `http://0x7f000001:${canary.port}/`],
    ['short IPv4', () => `http://127.1:${canary.port}/`],
    ['unspecified 0.0.0.0', () => `http://0.0.0.0:${canary.port}/`],
    ['unspecified ::', () => `http://[::]:${canary.port}/`],
    ['file scheme', () => 'file:///etc/passwd'],
    ['gopher scheme', () => `gopher://127.0.0.1:${canary.port}/_GET`],
    ['credentials in the URL', () => `http://admin:pw@127.0.0.1:${canary.port}/`],
  ])('refuses at intake: %s (400 naming operations[0].params.url)', async (_name, url) => {
    const refused = await call<{ errors: { field: string }[] }>('POST', '/v1/executions', {
      body: submission([httpOp('x', post(url()))]),
    });
    expect(refused.status).toBe(400);
    expect(refused.headers.get('content-type')).toContain('application/problem+json');
    expect(refused.body.errors.map((e) => e.field)).toContain('operations[0].params.url');
  });

  it('refuses when sending: never delivered, FAILED with SOURCE_UNREACHABLE, a policy failure naming the rule', async () => {
    const vectors: [string, string, RegExp][] = [
      ['loopback_other_port', `http://127.0.0.1:${canary.port}/`, /port \d+ is not allowed/],
      ['name_resolving_to_loopback', `http://localhost:${canary.port}/`, /localhost resolves to a loopback address/],
      ['ipv6_loopback', `http://[::1]:${canary.port}/`, /::1 is a loopback address/],
      ['ipv4_mapped_ipv6', `http://[::ffff:127.0.0.1]:${canary.port}/`, /is a loopback address/],
      ['cloud_metadata', 'http://169.254.169.254/latest/meta-data/', /link-local address/],
      ['private_10', `http://10.0.0.1:${canary.port}/`, /private address/],
      ['private_192_168', 'http://192.168.1.1/', /private address/],
      ['private_172_16', 'http://172.16.0.1/', /private address/],
      ['cgnat', 'http://100.64.0.1/', /shared-cgnat address/],
      ['ipv6_ula', 'http://[fc00::1]/', /unique-local address/],
      ['ipv6_link_local', 'http://[fe80::1]/', /link-local address/],
      ['not_allowlisted', 'http://internal.example/', /not on this tenant's allowlist/],
    ];
    const execution = await submitOps(
      call,
      vectors.map(([key, url]) => httpOp(key, post(url))),
    );
    const done = await settled(call, execution.id);
    for (const [key, , rule] of vectors) {
      const op = done.operations.find((o) => o.key === key)!;
      expect({ key, status: op.status, reason: op.terminal_reason }).toEqual({
        key,
        status: 'FAILED',
        reason: 'SOURCE_UNREACHABLE',
      });
      expect({ key, detail: op.evidence?.detail }).toEqual({
        key,
        detail: expect.stringMatching(new RegExp(`^not sent: egress refused: .*${rule.source}`)),
      });
      // The tenant's egress policy refused it (allowlist, port or address): a policy failure, never retryable as is.
      expect({ key, failure: op.failure }).toEqual({
        key,
        failure: {
          code: 'egress_refused',
          phase: 'dispatch',
          category: 'policy',
          retryable: false,
          message: expect.stringMatching(new RegExp(`^never sent: the tenant's egress policy .*${rule.source}`)),
          at: expect.any(String),
        },
      });
    }
  });

  it("never reaches the platform's own sandbox provider, even allow-listed with allow_private", async () => {
    // A charge of another account, and what a tenant's call could do to it: reset the sandbox, read it by setting the
    // account header itself (the sandbox tells accounts apart by that header alone).
    const reference = `ssrf-victim-${Date.now()}`;
    const charged = await stack.sandbox('/v1/charges', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'sandbox-account': 'demo-other' },
      body: JSON.stringify({ amount: 4242, currency: 'EUR', reference }),
    });
    expect(charged.status).toBe(201);
    const vectors: [string, Record<string, unknown>][] = [
      ['reset', post(`${stack.sandboxUrl}/__reset`)],
      ['faults', post(`${stack.sandboxUrl}/__faults`, { method: 'PUT', body: { rules: [] } })],
      [
        'other_account',
        {
          method: 'GET',
          url: `${stack.sandboxUrl}/v1/charges?reference=${reference}`,
          headers: { 'sandbox-account': 'demo-other' },
        },
      ],
      ['by_name', post(`http://localhost:${stack.sandboxPort}/__reset`)],
    ];
    const execution = await submitOps(
      call,
      vectors.map(([key, params]) => httpOp(key, params)),
    );
    const done = await settled(call, execution.id);
    for (const [key] of vectors) {
      const op = done.operations.find((o) => o.key === key)!;
      expect({ key, status: op.status, code: op.failure?.code }).toEqual({
        key,
        status: 'FAILED',
        code: 'egress_refused',
      });
      expect({ key, detail: op.evidence?.detail }).toEqual({
        key,
        detail: expect.stringMatching(/^not sent: egress refused: .* reaches the sandbox provider of this platform/),
      });
    }
    // Nothing was reset: the other account's charge is still there.
    expect((await stack.effects()).charges[reference]).toMatchObject({ count: 1, amounts: [4242] });
    // A webhook endpoint there is refused when it is created.
    const hook = await call<{ errors: { field: string; message: string }[] }>('POST', '/v1/admin/webhooks', {
      key: DEMO.admin,
      body: { url: `${stack.sandboxUrl}/__reset`, events: ['execution.finished'] },
    });
    expect(hook.status).toBe(400);
    expect(hook.body.errors[0]).toMatchObject({
      field: 'url',
      message: expect.stringContaining('reaches the sandbox provider of this platform'),
    });
  });

  it('does not follow a 302 from an allowed host to an internal one: UNKNOWN, never a request to the canary', async () => {
    const execution = await submitOps(call, [httpOp('redirected', post(`${target.base}/redirect`))]);
    const done = await waitFor(
      async () =>
        (
          await call<{ operations: { status: string; evidence: Record<string, unknown> | null }[] }>(
            'GET',
            `/v1/executions/${execution.id}`,
          )
        ).body,
      (e) => ['UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW'].includes(e.operations[0].status),
    );
    expect(done.operations[0].status).not.toBe('ACKNOWLEDGED');
    expect(target.seen.filter((s) => s.url === '/redirect')).toHaveLength(1);
  });

  it('applies the same rules to read-backs: a read-back aimed at an internal host is never made', async () => {
    const execution = await submitOps(call, [
      httpOp(
        'sneaky_read',
        post(`${target.base}/orders`, {
          body: { id: '{{operation_id}}' },
          read_back: {
            url: `http://localhost:${canary.port}/orders/{{operation_id}}`,
            field: 'data.status',
            equals: 'created',
          },
        }),
      ),
    ]);
    const held = await waitFor(
      async () =>
        (
          await call<{
            operations: { status: string; terminal_reason: string | null; evidence: Record<string, unknown> | null }[];
          }>('GET', `/v1/executions/${execution.id}`)
        ).body.operations[0],
      (op) => op.status === 'MANUAL_REVIEW',
      45_000,
    );
    expect(held).toMatchObject({ terminal_reason: 'SOURCE_UNREACHABLE' });
    expect(String(held.evidence?.error)).toMatch(/egress refused: localhost resolves to a loopback address/);
  });

  it('never reaches a platform service through an IPv4-translated IPv6 address (NAT64, SIIT), even with allow_private', async () => {
    // A translator on the platform's network sends these to the IPv4 address they carry (here the sandbox provider's,
    // 127.0.0.1): the allowlist lets a tenant name them with allow_private, the platform's services stay out of reach.
    const translated = ['64:ff9b::7f00:1', '::ffff:0:7f00:1'];
    const current = await call<{ allow_hosts: Record<string, unknown>[] }>('GET', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
    });
    const put = await call('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: {
        allow_hosts: [
          ...current.body.allow_hosts,
          ...translated.map((host) => ({ host, ports: [stack.sandboxPort], allow_private: true })),
        ],
      },
    });
    expect(put.status).toBe(200);
    const before = await call<{ data: unknown[] }>('GET', '/v1/admin/webhooks', { key: DEMO.admin });
    for (const host of translated) {
      const hook = await call<{ errors: { field: string; rule: string; message: string }[] }>(
        'POST',
        '/v1/admin/webhooks',
        {
          key: DEMO.admin,
          body: { url: `http://[${host}]:${stack.sandboxPort}/__reset`, events: ['execution.finished'] },
        },
      );
      expect({ host, status: hook.status, type: hook.headers.get('content-type') }).toEqual({
        host,
        status: 400,
        type: expect.stringContaining('application/problem+json'),
      });
      expect(hook.body.errors[0]).toMatchObject({
        field: 'url',
        rule: 'egress_blocked',
        message: expect.stringContaining('reaches the sandbox provider of this platform'),
      });
    }
    const after = await call<{ data: unknown[] }>('GET', '/v1/admin/webhooks', { key: DEMO.admin });
    expect(after.body.data).toEqual(before.body.data);
    const execution = await submitOps(
      call,
      translated.map((host, i) => httpOp(`translated_${i}`, post(`http://[${host}]:${stack.sandboxPort}/__reset`))),
    );
    const done = await settled(call, execution.id);
    for (const op of done.operations) {
      expect({ key: op.key, status: op.status, code: op.failure?.code, detail: op.evidence?.detail }).toEqual({
        key: op.key,
        status: 'FAILED',
        code: 'egress_refused',
        detail: expect.stringMatching(/^not sent: egress refused: .* reaches the sandbox provider of this platform/),
      });
    }
  });

  it('the canary on loopback received no request at all', async () => {
    expect(canary.hits()).toBe(0);
    // ...while the allowed target was reached, so the stack was really sending,
    expect(target.seen.length).toBeGreaterThan(0);
    // ...and the canary does count what reaches it (the control for the zero above).
    await fetch(`http://127.0.0.1:${canary.port}/`).then((r) => r.text());
    expect(canary.hits()).toBe(1);
  });
});
