import { DEMO, Stack } from '../support/stack';
import { http } from '../support/http';

/**
 * If-None-Match on the writes of the admin settings, whose ETag is their version (RFC 9110 §13.1.2): `*` holds only if
 * there is no current version — the policy and a connector's settings always have one — and a list of tags only if the
 * current version is none of them (compared weakly). When it does not hold the write is 412 `precondition-failed`,
 * nothing written and nothing recorded, as with an If-Match that does not hold. A client that sends `If-None-Match: *`
 * to set a connector's caps only if nobody has ("create if absent") must not replace another admin's.
 */
describe('If-None-Match on the admin settings’ writes', () => {
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
});
