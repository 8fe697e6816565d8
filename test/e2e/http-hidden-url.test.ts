import { Stack } from '../support/stack';
import { unique } from '../support/http';
import {
  Call,
  TargetServer,
  allowLoopbackPort,
  approvalAboveFifty,
  deniedAfter,
  httpOp,
  recordingClient,
  startTarget,
} from './connectors-support';

/**
 * An http operation's URLs — its request's, its read-back's and its context read's — are what an approver reads to
 * approve a charge or a message, and what a reviewer reads of an operation in review. A bidi control written in one
 * (U+202E, U+2066–U+2069) reorders what is shown, an invisible character (U+200B, U+FEFF, U+00AD…) makes it read as
 * another: `/pay/\u202Eelgoog` is shown as `/pay/google`. Refused as written (400 naming the field, rule
 * `invalid_format`, the message naming the character; nothing written, nothing sent) — at intake, and at a retry of
 * an operation stored before the rule (a retry takes no body: it re-submits the stored params, judged by today's
 * rules). Percent-escapes are taken here, unlike a webhook's URL: a query may carry a message's text, `%0A` a line of
 * it, and the escape is shown as written.
 */
describe('an http operation URL holding a character that hides or reorders what is shown', () => {
  let stack: Stack;
  let call: Call;
  let target: TargetServer;

  const table = async (name: string) =>
    ((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM ${name}`)) as { n: number }[])[0].n;
  const written = async () => ({
    executions: await table('executions'),
    operations: await table('operations'),
    idempotency_keys: await table('idempotency_keys'),
  });
  const submit = (params: Record<string, unknown>) =>
    call<{ errors?: { field: string; rule: string; message: string }[] }>('POST', '/v1/executions', {
      body: { agent_id: 'a', intent: 'pay', operations: [httpOp('pay', params)] },
      headers: { 'idempotency-key': unique('hidden-url') },
    });

  beforeAll(async () => {
    target = await startTarget();
    stack = await Stack.start({ label: 'http-hidden-url' });
    ({ call } = recordingClient(stack));
    await allowLoopbackPort(call, target.port);
    await approvalAboveFifty(call);
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  const hidden: [string, string, string][] = [
    ['U+202E in the path', '/pay/\u202Eelgoog', 'U+202E'],
    ['U+2066…U+2069 in the path', '/pay/\u2066x\u2069', 'U+2066'],
    ['U+2067 in the query', '/pay?to=\u2067x', 'U+2067'],
    ['U+2068 in the query', '/pay?\u2068to=x', 'U+2068'],
    ['U+200B in the path', '/pa\u200By', 'U+200B'],
    ['U+FEFF in the query', '/pay?a=\uFEFF', 'U+FEFF'],
    ['U+00AD (soft hyphen) in the path', '/pa\u00ADy', 'U+00AD'],
    ['U+2028 (line separator) in the query', '/pay?a=\u2028b', 'U+2028'],
    ['U+0085 (a C1 control) in the path', '/pay\u0085', 'U+0085'],
    ['U+E0041 (a tag character) in the query', '/pay?a=\u{E0041}', 'U+E0041'],
  ];

  const places: [string, (url: string) => Record<string, unknown>][] = [
    ['url', (url) => ({ method: 'POST', url, body: { amount: 1 } })],
    [
      'read_back.url',
      (url) => ({
        method: 'POST',
        url: `${target.base}/orders`,
        body: { amount: 1 },
        read_back: { url, field: 'status', equals: 'done' },
      }),
    ],
    [
      'context.url',
      (url) => ({
        method: 'POST',
        url: `${target.base}/orders`,
        body: { amount: 1 },
        context: { url, field: 'status' },
      }),
    ],
  ];

  describe.each(places)('params.%s', (field, params) => {
    it.each(hidden)('%s is refused (400 invalid_format naming it), nothing written', async (_what, path, named) => {
      const before = await written();
      const refused = await submit(params(`${target.base}${path}`));
      expect(refused.status).toBe(400);
      expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(refused.body.errors).toEqual([
        {
          field: `operations[0].params.${field}`,
          rule: 'invalid_format',
          message: expect.stringContaining(`no ${named}:`),
        },
      ]);
      expect(await written()).toEqual(before);
      expect(target.seen).toEqual([]);
    });
  });

  it('takes URLs whose characters are all shown, and escapes (a query may carry text: %0A is a line of it)', async () => {
    for (const path of [
      '/h\u00e9ros?q=caf\u00e9',
      '/pay?memo=line%0Anext',
      '/pay?memo=%E2%80%AE', // escaped, shown as written: taken here (a webhook URL refuses it)
      '/pay?q=a%20b',
    ]) {
      const created = await submit({ method: 'POST', url: `${target.base}${path}`, body: { amount: 60 } });
      expect({ path, status: created.status }).toEqual({ path, status: 201 });
    }
  });

  it('refuses the retry of an operation stored with such a URL before the rule (nothing written)', async () => {
    // Held for approval (above the threshold), given the URL an operation accepted before the rule may hold, denied.
    const accepted = await submit({ method: 'POST', url: `${target.base}/pay/x`, body: { amount: 60 } });
    const opId = await deniedAfter(call, accepted, (id) =>
      stack.db.dataSource.query(
        `UPDATE operations SET params = jsonb_set(params, '{url}', to_jsonb($2::text)) WHERE id = $1`,
        [id, `${target.base}/pay/\u202Eelgoog`],
      ),
    );
    const before = await written();
    const retried = await call<{ errors: { field: string; rule: string; message: string }[] }>(
      'POST',
      `/v1/operations/${opId}/retry`,
    );
    expect(retried.status).toBe(400);
    expect(retried.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(retried.body.errors).toEqual([
      { field: 'params.url', rule: 'invalid_format', message: expect.stringContaining('no U+202E:') },
    ]);
    expect(await written()).toEqual(before);
    expect(target.seen).toEqual([]);
  });
});
