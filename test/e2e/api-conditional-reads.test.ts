import { DEMO, Stack, waitFor } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';

/**
 * Conditional reads (If-None-Match) of the resources whose ETag is a version a write's If-Match names, not a digest of
 * what the answer shows. What such an answer shows can change while the version does not, so it must never be a `304`
 * that makes a client (a browser revalidating its cache) show what it held before.
 */
describe('If-None-Match on a versioned read', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'condreads' });
  });
  afterAll(async () => stack?.stop());

  type Settings = { usage: { period: string; operations: number }[] };
  const settings = (headers: Record<string, string> = {}) =>
    http<Settings>(stack.apiUrl, 'GET', '/v1/admin/connector-settings/sandbox.sms', { key: DEMO.admin, headers });

  it('a connector’s settings naming their ETag are answered in full with the usage as it is now, never 304', async () => {
    const put = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/sandbox.sms', {
      key: DEMO.admin,
      body: { spending_caps: [{ period: 'day', max_operations: 100 }] },
    });
    expect(put.status).toBe(200);
    const before = await settings();
    expect(before.status).toBe(200);
    const etag = before.headers.get('etag')!;
    expect(before.body.usage).toEqual([expect.objectContaining({ period: 'day', operations: 0 })]);

    // One SMS sent: the usage moves, the settings (and so their version) do not.
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('cond-usage'))]),
    });
    expect(created.status).toBe(201);
    const after = await waitFor(
      () => settings(),
      (r) => r.body.usage[0]?.operations === 1,
      30_000,
      100,
    );
    expect(after.headers.get('etag')).toBe(etag);

    // What a browser sends to revalidate the answer it cached (fetch would add `no-cache`, which no server answers 304
    // to): it must get the usage now, not a 304 that shows the old one.
    for (const ifNoneMatch of [etag, `"other", ${etag}`, `W/${etag}`, '*']) {
      const revalidated = await settings({ 'if-none-match': ifNoneMatch, 'cache-control': 'max-age=0' });
      expect([ifNoneMatch, revalidated.status, revalidated.body?.usage?.[0]?.operations]).toEqual([
        ifNoneMatch,
        200,
        1,
      ]);
      expect(revalidated.headers.get('etag')).toBe(etag);
      expect(revalidated.headers.get('cache-control')).toBe('no-store, no-transform');
    }
  });

  it('the policy naming its ETag is answered in full by an API whose defaults differ (a rolling deploy), never 304', async () => {
    type Policy = { effective: { obligation_due_seconds: { default: number } } };
    const policy = (url: string, headers: Record<string, string> = {}) =>
      http<Policy>(url, 'GET', '/v1/admin/policy', { key: DEMO.admin, headers });
    const old = await policy(stack.apiUrl);
    expect(old.status).toBe(200);
    const etag = old.headers.get('etag')!;
    // The same policy (same version) served by an API configured with another default due time.
    const oldDefault = old.body.effective.obligation_due_seconds.default;
    const renewed = await stack.startApi({ OBLIGATION_DUE_MS: String(oldDefault * 2000) });
    const fresh = await policy(renewed);
    expect(fresh.headers.get('etag')).toBe(etag);
    expect(fresh.body.effective.obligation_due_seconds.default).toBe(oldDefault * 2);

    for (const ifNoneMatch of [etag, '*']) {
      const revalidated = await policy(renewed, { 'if-none-match': ifNoneMatch, 'cache-control': 'max-age=0' });
      expect([ifNoneMatch, revalidated.status, revalidated.body?.effective?.obligation_due_seconds?.default]).toEqual([
        ifNoneMatch,
        200,
        oldDefault * 2,
      ]);
      expect(revalidated.headers.get('cache-control')).toBe('no-store, no-transform');
    }
  });
});
