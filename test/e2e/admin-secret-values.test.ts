import { DEMO, Stack } from '../support/stack';
import { http } from '../support/http';
import type { ProblemDetails as Problem } from '@verity/sdk';

type Refusal = Problem & { errors: { field: string; rule: string }[] };

const SECRET = 'hook-Token/0123456789+abc';

/**
 * Secret values are never stored or returned (§10). An agent's, a reviewer's and a person's free text is refused when it
 * holds one (400 `secret_value`); an admin's text is stored and shown too: a webhook URL (returned by every GET of the
 * endpoints, and sent to a host whose allowlist entry does not bind the secret) and the policy's obligation owner and
 * escalation target (shown on every recovery obligation, to agent keys too).
 */
describe("an admin's text that holds a secret's value is refused, and nothing is written", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'rtadminsecretvalues', dispatchers: 0, reconcilers: 0 });
    const put = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: 'hooks.example.com' }], secrets: { hook_token: SECRET } },
    });
    expect(put.status).toBe(200);
  });
  afterAll(async () => stack?.stop());

  const count = async (table: string) =>
    Number(((await stack.db.dataSource.query(`SELECT count(*) AS n FROM ${table}`)) as { n: string }[])[0].n);

  it('a webhook URL holding a secret value, as written or percent-encoded: 400 secret_value, no endpoint', async () => {
    const endpoints = await count('webhook_endpoints');
    const changes = await count('admin_changes');
    for (const url of [
      `https://hooks.example.com/in?token=${SECRET}`,
      `https://hooks.example.com/in?token=${encodeURIComponent(SECRET)}`,
    ]) {
      const created = await http<Refusal>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
        key: DEMO.admin,
        body: { url, events: ['operation.settled'] },
      });
      expect(created.status).toBe(400);
      expect(created.body.errors).toEqual([expect.objectContaining({ field: 'url', rule: 'secret_value' })]);
      expect(created.text.includes(SECRET)).toBe(false);
    }
    expect(await count('webhook_endpoints')).toBe(endpoints);
    expect(await count('admin_changes')).toBe(changes);
    const list = await http(stack.apiUrl, 'GET', '/v1/admin/webhooks', { key: DEMO.admin });
    expect(list.text.includes('hook-Token')).toBe(false);
  });

  it('a secret value shorter than 8 characters: 400 naming the field and the minimum, nothing written', async () => {
    const path = '/v1/admin/connector-settings/http';
    const before = await http(stack.apiUrl, 'GET', path, { key: DEMO.admin });
    const changes = await count('admin_changes');
    for (const value of ['x', 'true', '{', 'abcdefg']) {
      const put = await http<Refusal & { errors: { message: string }[] }>(stack.apiUrl, 'PUT', path, {
        key: DEMO.admin,
        body: { allow_hosts: [{ host: 'other.example.com' }], secrets: { short_token: value } },
      });
      expect(put.status).toBe(400);
      expect(put.headers.get('content-type')).toContain('application/problem+json');
      expect(put.body.errors).toEqual([
        { field: 'secrets.short_token', rule: 'too_small', message: expect.stringMatching(/^at least 8 characters/) },
      ]);
    }
    const after = await http(stack.apiUrl, 'GET', path, { key: DEMO.admin });
    expect(after.text).toBe(before.text);
    expect(after.headers.get('etag')).toBe(before.headers.get('etag'));
    expect(await count('admin_changes')).toBe(changes);
  });

  it('an obligation owner or escalation target holding a secret value: 400 secret_value, the policy unchanged', async () => {
    const before = await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin });
    const changes = await count('admin_changes');
    for (const field of ['obligation_owner', 'escalation_target']) {
      const put = await http<Refusal>(stack.apiUrl, 'PUT', '/v1/admin/policy', {
        key: DEMO.admin,
        body: { [field]: `ops team, key ${SECRET}` },
      });
      expect(put.status).toBe(400);
      expect(put.body.errors).toEqual([expect.objectContaining({ field, rule: 'secret_value' })]);
      expect(put.text.includes(SECRET)).toBe(false);
    }
    const after = await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin });
    expect(after.text).toBe(before.text);
    expect(await count('admin_changes')).toBe(changes);
  });
});
