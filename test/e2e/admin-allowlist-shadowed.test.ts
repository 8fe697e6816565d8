import { DEMO, Stack } from '../support/stack';
import { http } from '../support/http';
import type { WireSchemas } from '@verity/sdk';

/** A problem+json answer: the wire contract's own type. */
type Problem = WireSchemas['Problem'];

/**
 * A URL falls under the first allowlist entry that names its host. An entry written after one that already takes its
 * host (and port) is never read: the admin who adds `{ host: "api.example.com", secrets: ["crm_token"] }` after a plain
 * `api.example.com` entry, or after `*.example.com`, sees it stored and shown, and every operation sending the token
 * there is still refused `secret_not_bound`. Such an entry is refused (400 `shadowed`), not stored to read as in force.
 */
describe('an allowlist entry that can never apply', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'ashadow', env: {} });
  }, 60_000);
  afterAll(async () => stack?.stop());

  const path = '/v1/admin/connector-settings/http';
  const call = <T>(method: string, body?: unknown) => http<T>(stack.apiUrl, method, path, { key: DEMO.admin, body });
  const changes = async () =>
    (
      await http<{ data: unknown[] }>(stack.apiUrl, 'GET', '/v1/admin/changes?kind=connector_settings&limit=200', {
        key: DEMO.admin,
      })
    ).body.data.length;

  it.each([
    [[{ host: 'api.example.com' }, { host: 'API.example.com', secrets: ['crm_token'] }], 1, 'api.example.com'],
    [
      [
        { host: 'api.example.com', ports: [443] },
        { host: 'api.example.com', ports: [443], secrets: ['crm_token'] },
      ],
      1,
      'api.example.com',
    ],
    [
      [{ host: 'hooks.example.com' }, { host: '*.example.com' }, { host: 'api.example.com', secrets: ['crm_token'] }],
      2,
      '*.example.com',
    ],
  ])('%j: 400 shadowed naming the later entry, nothing written or recorded', async (allowHosts, index, first) => {
    expect((await call('PUT', { allow_hosts: [{ host: 'kept.example.com' }] })).status).toBe(200);
    const before = await call('GET');
    const recorded = await changes();

    const res = await call<Problem>('PUT', { allow_hosts: allowHosts, secrets: { crm_token: 'tok_0123456789' } });
    expect({ status: res.status, type: res.headers.get('content-type') }).toEqual({
      status: 400,
      type: expect.stringContaining('application/problem+json'),
    });
    expect(res.body.errors).toEqual([
      expect.objectContaining({ field: `allow_hosts[${index}].host`, rule: 'shadowed' }),
    ]);
    expect(res.body.errors![0].message).toContain(`(${first}), the first entry that names it`);

    const after = await call('GET');
    expect(after.body).toEqual(before.body);
    expect(after.headers.get('etag')).toBe(before.headers.get('etag'));
    expect(await changes()).toBe(recorded);
  });

  it('takes an entry per port, and the specific entry before the wildcard', async () => {
    const res = await call<{ allow_hosts: { host: string }[] }>('PUT', {
      allow_hosts: [
        { host: 'api.example.com', ports: [8443], secrets: ['crm_token'] },
        { host: 'api.example.com' },
        { host: '*.example.com' },
      ],
    });
    expect(res.status).toBe(200);
    expect(res.body.allow_hosts.map((e) => e.host)).toEqual(['api.example.com', 'api.example.com', '*.example.com']);
  });
});
