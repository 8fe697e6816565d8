import { createApiKey } from '@verity/persistence/api-keys';
import { DEMO, Stack } from '../support/stack';
import { http, HttpResult } from '../support/http';
import type { WireSchemas } from '@verity/sdk';

/** A problem+json answer: the wire contract's own type. */
type Problem = WireSchemas['Problem'];

/**
 * Two admins of one tenant edit a setting at once: each reads it (GET, its ETag), changes a list in it and sends the
 * whole list back. Without a precondition the second PUT silently undoes the first (a lost update). With `If-Match`
 * the change is made only if the setting is still the version read: of changes made against one version, one is made
 * and the others get 412 `precondition-failed`, with nothing written and nothing recorded in the history.
 */
describe('admin settings edited by two admins at once (If-Match)', () => {
  let stack: Stack;
  let secondAdmin: string;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'aconcur', env: {} });
    secondAdmin = (
      await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role: 'admin', label: 'second admin' })
    ).key;
  }, 60_000);
  afterAll(async () => stack?.stop());

  const call = <T>(method: string, path: string, key: string, body?: unknown, ifMatch?: string) =>
    http<T>(stack.apiUrl, method, path, { key, body, headers: ifMatch === undefined ? {} : { 'if-match': ifMatch } });
  const etag = (res: HttpResult<unknown>) => res.headers.get('etag');
  const changes = async (kind: string) =>
    (await call<{ data: unknown[] }>('GET', `/v1/admin/changes?kind=${kind}&limit=200`, DEMO.admin)).body.data.length;
  const expectPreconditionFailed = (res: HttpResult<Problem>) => {
    expect(res.status).toBe(412);
    expect(res.headers.get('content-type')).toContain('application/problem+json');
    expect(res.body.type).toBe('https://verity.dev/problems/precondition-failed');
  };

  it('policy: the second of two edits of one version is refused (412), not written over the first', async () => {
    const read = await call<{ approval_rules: unknown[] }>('GET', '/v1/admin/policy', DEMO.admin);
    expect(read.status).toBe(200);
    const version = etag(read);
    expect(version).toMatch(/^"[0-9a-f]{32}"$/);
    const recorded = await changes('policy');

    const first = await call(
      'PUT',
      '/v1/admin/policy',
      DEMO.admin,
      { approval_rules: [...read.body.approval_rules, { connector: 'sandbox.sms' }] },
      version!,
    );
    expect(first.status).toBe(200);
    expect(etag(first)).not.toBe(version);
    const second = await call<Problem>(
      'PUT',
      '/v1/admin/policy',
      secondAdmin,
      { approval_rules: [...read.body.approval_rules, { connector: 'sandbox.payments', amount_above: 100 }] },
      version!,
    );
    expectPreconditionFailed(second);

    const now = await call<{ approval_rules: unknown[] }>('GET', '/v1/admin/policy', DEMO.admin);
    expect(now.body.approval_rules).toEqual([{ connector: 'sandbox.sms' }]);
    expect(etag(now)).toBe(etag(first));
    expect(await changes('policy')).toBe(recorded + 1);

    // Made against the version it is now, the second admin's change is taken; so is one without a precondition, or `*`.
    const again = await call(
      'PUT',
      '/v1/admin/policy',
      secondAdmin,
      { approval_rules: [...now.body.approval_rules, { connector: 'sandbox.payments', amount_above: 100 }] },
      etag(now)!,
    );
    expect(again.status).toBe(200);
    expect((await call('PUT', '/v1/admin/policy', DEMO.admin, { obligation_owner: 'team-a' })).status).toBe(200);
    expect((await call('PUT', '/v1/admin/policy', DEMO.admin, { obligation_owner: 'team-b' }, '*')).status).toBe(200);
  });

  it('policy: of eight edits sent at once against one version, exactly one is made', async () => {
    const version = etag(await call('GET', '/v1/admin/policy', DEMO.admin))!;
    const recorded = await changes('policy');
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        call('PUT', '/v1/admin/policy', i % 2 ? DEMO.admin : secondAdmin, { escalation_target: `pager-${i}` }, version),
      ),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([200, 412, 412, 412, 412, 412, 412, 412]);
    const winner = answers.findIndex((a) => a.status === 200);
    const now = await call<{ escalation_target: string }>('GET', '/v1/admin/policy', DEMO.admin);
    expect(now.body.escalation_target).toBe(`pager-${winner}`);
    expect(await changes('policy')).toBe(recorded + 1);
  });

  it('connector settings: a stale PUT, DELETE or secret delete is refused (412) and changes nothing', async () => {
    const path = '/v1/admin/connector-settings/http';
    const start = await call('PUT', path, DEMO.admin, {
      allow_hosts: [{ host: 'api.example.com' }],
      secrets: { TOKEN: 'abc-token-0' },
    });
    expect(start.status).toBe(200);
    const read = await call<{ allow_hosts: { host: string }[] }>('GET', path, DEMO.admin);
    const version = etag(read);
    expect(version).toMatch(/^"[0-9a-f]{32}"$/);
    expect(version).toBe(etag(start));
    const recorded = await changes('connector_settings');

    const first = await call(
      'PUT',
      path,
      DEMO.admin,
      { allow_hosts: [...read.body.allow_hosts, { host: 'crm.example.com' }] },
      version!,
    );
    expect(first.status).toBe(200);
    expectPreconditionFailed(
      await call<Problem>(
        'PUT',
        path,
        secondAdmin,
        { allow_hosts: [...read.body.allow_hosts, { host: 'billing.example.com' }] },
        version!,
      ),
    );
    expectPreconditionFailed(await call<Problem>('DELETE', path, secondAdmin, undefined, version!));
    expectPreconditionFailed(await call<Problem>('DELETE', `${path}/secrets/TOKEN`, secondAdmin, undefined, version!));

    const now = await call<{ allow_hosts: { host: string }[]; secrets: string[] }>('GET', path, DEMO.admin);
    expect(now.body.allow_hosts.map((h) => h.host)).toEqual(['api.example.com', 'crm.example.com']);
    expect(now.body.secrets).toEqual(['TOKEN']);
    expect(etag(now)).toBe(etag(first));
    expect(await changes('connector_settings')).toBe(recorded + 1);

    // At the version it is now, each is made.
    expect((await call('DELETE', `${path}/secrets/TOKEN`, secondAdmin, undefined, etag(now)!)).status).toBe(204);
    const after = await call('GET', path, DEMO.admin);
    expect(etag(after)).not.toBe(etag(now));
    expect((await call('DELETE', path, secondAdmin, undefined, etag(after)!)).status).toBe(204);
  });

  it('connector settings: a secret rotated by one admin moves the version; a second rotation of what was read is 412', async () => {
    const path = '/v1/admin/connector-settings/http';
    expect((await call('PUT', path, DEMO.admin, { secrets: { ROTATED: 'sk_old_value' } })).status).toBe(200);
    const read = await call('GET', path, DEMO.admin);
    const version = etag(read)!;
    const recorded = await changes('connector_settings');

    // Both admins rotate the same secret from the page they read: the first is made, the second does not overwrite it.
    const first = await call('PUT', path, DEMO.admin, { secrets: { ROTATED: 'sk_by_first' } }, version);
    expect(first.status).toBe(200);
    expect(etag(first)).not.toBe(version);
    expectPreconditionFailed(
      await call<Problem>('PUT', path, secondAdmin, { secrets: { ROTATED: 'sk_by_second' } }, version),
    );
    expect(await changes('connector_settings')).toBe(recorded + 1);
    // What GET shows is the same names; its version is the one the first rotation answered.
    const now = await call<{ secrets: string[] }>('GET', path, DEMO.admin);
    expect(now.body.secrets).toContain('ROTATED');
    expect(etag(now)).toBe(etag(first));
    // The version is no digest of the value: rotating to the same value again moves it as well.
    const again = await call('PUT', path, secondAdmin, { secrets: { ROTATED: 'sk_by_first' } }, etag(now)!);
    expect(again.status).toBe(200);
    expect(etag(again)).not.toBe(etag(now));
    expect((await call('DELETE', `${path}/secrets/ROTATED`, DEMO.admin, undefined, etag(again)!)).status).toBe(204);
  });

  it('connector settings: of six edits sent at once against one version, exactly one is made', async () => {
    const path = '/v1/admin/connector-settings/sandbox.sms';
    const version = etag(await call('GET', path, DEMO.admin))!;
    const recorded = await changes('connector_settings');
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        call(
          'PUT',
          path,
          i % 2 ? DEMO.admin : secondAdmin,
          { spending_caps: [{ period: 'day', max_operations: i }] },
          version,
        ),
      ),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([200, 412, 412, 412, 412, 412]);
    const winner = answers.findIndex((a) => a.status === 200);
    const now = await call<{ spending_caps: unknown[] }>('GET', path, DEMO.admin);
    expect(now.body.spending_caps).toEqual([{ period: 'day', max_operations: winner }]);
    expect(await changes('connector_settings')).toBe(recorded + 1);
  });

  it('an If-Match that is no entity tag is 400 naming it; a weak tag never matches (412); nothing is written', async () => {
    const read = await call('GET', '/v1/admin/policy', DEMO.admin);
    const recorded = await changes('policy');
    for (const header of ['abc', '', '"unterminated', 'W/abc', '"a" "b"']) {
      const res = await call<Problem>('PUT', '/v1/admin/policy', DEMO.admin, { obligation_owner: 'nope' }, header);
      expect([header, res.status, res.body.errors]).toEqual([
        header,
        400,
        [expect.objectContaining({ field: 'If-Match', rule: 'invalid_format' })],
      ]);
    }
    expectPreconditionFailed(
      await call<Problem>('PUT', '/v1/admin/policy', DEMO.admin, { obligation_owner: 'nope' }, `W/${etag(read)}`),
    );
    // A comma inside a quoted tag is part of it (RFC 9110 etagc): a tag, naming no version of ours — 412, not 400.
    expectPreconditionFailed(
      await call<Problem>('PUT', '/v1/admin/policy', DEMO.admin, { obligation_owner: 'nope' }, '"a,b"'),
    );
    // One of several tags is enough.
    const listed = await call(
      'PUT',
      '/v1/admin/policy',
      DEMO.admin,
      { obligation_owner: 'listed' },
      `"0", ${etag(read)}`,
    );
    expect(listed.status).toBe(200);
    expect(await changes('policy')).toBe(recorded + 1);
  });
});
