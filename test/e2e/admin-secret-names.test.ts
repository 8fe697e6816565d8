import { DEMO, Stack } from '../support/stack';
import { http } from '../support/http';
import type { ProblemDetails as Problem } from '@verity/sdk';

interface Settings {
  allow_hosts: { host: string }[];
  spending_caps: unknown[];
  secrets: string[];
}

/**
 * A secret's name is a path segment of its own endpoint (DELETE /v1/admin/connector-settings/{connector}/secrets/{name}).
 * `.` and `..` are the two segments no HTTP client sends as they are: URLs resolve them (also spelled `%2e%2e`), so a
 * delete of the secret `..` reaches DELETE /v1/admin/connector-settings/http/ — the endpoint that clears the
 * connector's allowlist, spending caps and every secret — and answers 204. Such names are refused when set.
 */
describe('secret names that cannot be addressed in a URL', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'rt7secretnames', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const settings = async () =>
    (await http<Settings>(stack.apiUrl, 'GET', '/v1/admin/connector-settings/http', { key: DEMO.admin })).body;

  it('refuses "." and ".." as secret names: 400 naming what a name must be, nothing written', async () => {
    const put = await http<Settings>(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: 'crm.example.com' }], secrets: { crm_token: 'a-long-random-value-0123456789' } },
    });
    expect(put.status).toBe(200);
    const before = await settings();
    expect(before.secrets).toEqual(['crm_token']);

    for (const name of ['..', '.']) {
      const refused = await http<Problem & { errors: { field: string; rule: string }[] }>(
        stack.apiUrl,
        'PUT',
        '/v1/admin/connector-settings/http',
        { key: DEMO.admin, body: { secrets: { [name]: 'another-long-random-value-987654' } } },
      );
      expect({ name, status: refused.status }).toEqual({ name, status: 400 });
      expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(refused.body.errors).toEqual([
        expect.objectContaining({
          field: `secrets.${name}`,
          rule: 'secret_name',
          message: expect.stringMatching(/may not be named/),
        }),
      ]);
      expect(await settings()).toEqual(before);
    }
    // One stored before the rule can still be removed by name, in the body: `null` is accepted for it.
    const removal = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { '..': null } },
    });
    expect(removal.status).toBe(200);
    expect((await settings()).secrets).toEqual(['crm_token']);
  });

  it('a delete of the secret ".." (a client resolves it to …/http/) clears nothing: 404 problem, nothing written', async () => {
    const put = await http<Settings>(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: 'crm.example.com' }], secrets: { crm_token: 'a-long-random-value-0123456789' } },
    });
    expect(put.status).toBe(200);
    const before = await settings();
    const changes = async () =>
      (await http<{ data: unknown[] }>(stack.apiUrl, 'GET', '/v1/admin/changes?limit=100', { key: DEMO.admin })).body
        .data.length;
    const changesBefore = await changes();
    // fetch, as curl and any URL parser, resolves the dot segments: these reach the server as …/connector-settings/http/.
    for (const path of [
      '/v1/admin/connector-settings/http/secrets/..',
      '/v1/admin/connector-settings/http/secrets/%2e%2e',
      '/v1/admin/connector-settings/http/',
    ]) {
      for (const method of ['DELETE', 'PUT']) {
        const refused = await http<Problem>(stack.apiUrl, method, path, {
          key: DEMO.admin,
          body: method === 'PUT' ? { allow_hosts: [] } : undefined,
        });
        expect({ path, method, status: refused.status }).toEqual({ path, method, status: 404 });
        expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        expect(refused.body.detail).toBe(`no route ${method} /v1/admin/connector-settings/http/`);
      }
    }
    // Nor does a path in other letters reach the route.
    const upper = await http<Problem>(stack.apiUrl, 'DELETE', '/V1/ADMIN/connector-settings/http', { key: DEMO.admin });
    expect(upper.status).toBe(404);
    expect(upper.body.detail).toBe('no route DELETE /V1/ADMIN/connector-settings/http');
    expect(await settings()).toEqual(before);
    expect(await changes()).toBe(changesBefore);
  });
});
