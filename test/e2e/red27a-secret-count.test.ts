import { DEMO, Stack } from '../support/stack';
import { http } from '../support/http';
import type { ProblemDetails as Problem } from '@verity/sdk';

const PATH = '/v1/admin/connector-settings/http';

/** `count` secrets named `${prefix}_0…`, each value 4096 characters (the largest a secret may hold). */
function secrets(prefix: string, count: number, from = 0): Record<string, string> {
  const named: Record<string, string> = {};
  for (let i = from; i < from + count; i += 1) named[`${prefix}_${i}`] = `${prefix}-${i}-`.padEnd(4096, 'v');
  return named;
}

/**
 * A tenant's secrets were bounded per request (50) and never in total: an admin key could store any number of them,
 * 4 KiB each, 50 a PUT. Every API process keeps a tenant's values in memory to redact its answers, and every operation
 * row a dispatcher reads carries all of its connector's secrets (`s__secrets`): one tenant's thousands of secrets
 * filled the memory of processes that serve every tenant. A connector holds at most 100 secrets per tenant; a change
 * past it is refused whole (409 `secret-limit`) and writes nothing.
 */
describe('a tenant holds a bounded number of secrets per connector', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'red27asecretcount', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const count = async (table: string) =>
    Number(((await stack.db.dataSource.query(`SELECT count(*) AS n FROM ${table}`)) as { n: string }[])[0].n);
  const put = (body: unknown) => http<Problem>(stack.apiUrl, 'PUT', PATH, { key: DEMO.admin, body });

  it('up to 100 secrets are taken; one more is 409 secret-limit with nothing written', async () => {
    for (const from of [0, 50]) {
      const taken = await put({ allow_hosts: [{ host: 'api.example.com' }], secrets: secrets('token', 50, from) });
      expect(taken.status).toBe(200);
    }
    expect(await count('tenant_connector_secrets')).toBe(100);
    const before = await http(stack.apiUrl, 'GET', PATH, { key: DEMO.admin });
    const changes = await count('admin_changes');

    const refused = await put({ allow_hosts: [{ host: 'other.example.com' }], secrets: secrets('extra', 1) });
    expect(refused.status).toBe(409);
    expect(refused.headers.get('content-type')).toContain('application/problem+json');
    expect(refused.body.type).toBe('https://verity.dev/problems/secret-limit');
    expect(refused.body.detail).toMatch(/at most 100 secrets/);

    expect(await count('tenant_connector_secrets')).toBe(100);
    expect(await count('admin_changes')).toBe(changes);
    const after = await http(stack.apiUrl, 'GET', PATH, { key: DEMO.admin });
    expect(after.text).toBe(before.text);
    expect(after.headers.get('etag')).toBe(before.headers.get('etag'));
  });

  it('at the limit a secret can still be rotated, and one deleted makes room for another', async () => {
    const rotated = await put({ secrets: { token_7: 'a-new-value-for-token-7' } });
    expect(rotated.status).toBe(200);
    const deleted = await http(stack.apiUrl, 'DELETE', `${PATH}/secrets/token_0`, { key: DEMO.admin });
    expect(deleted.status).toBe(204);
    const added = await put({ secrets: secrets('extra', 1) });
    expect(added.status).toBe(200);
    expect(await count('tenant_connector_secrets')).toBe(100);
  });

  it('two changes at once that together pass the limit: one is taken, the other refused', async () => {
    for (let i = 0; i < 40; i += 1) {
      const gone = await http(stack.apiUrl, 'DELETE', `${PATH}/secrets/token_${i + 1}`, { key: DEMO.admin });
      expect(gone.status).toBe(204);
    }
    expect(await count('tenant_connector_secrets')).toBe(60);
    const answers = await Promise.all([put({ secrets: secrets('left', 30) }), put({ secrets: secrets('right', 30) })]);
    expect(answers.map((a) => a.status).sort()).toEqual([200, 409]);
    expect(await count('tenant_connector_secrets')).toBe(90);
  });

  it('at exactly 100 a change that deletes one and adds one is taken; one that rotates some and adds one is refused whole', async () => {
    const fill = await put({ secrets: secrets('fill', 100 - (await count('tenant_connector_secrets'))) });
    expect(fill.status).toBe(200);
    expect(await count('tenant_connector_secrets')).toBe(100);
    const sealed = async (name: string) =>
      (
        (await stack.db.dataSource.query(`SELECT value FROM tenant_connector_secrets WHERE name = $1`, [name])) as {
          value: unknown;
        }[]
      ).map((row) => JSON.stringify(row.value));

    const swapped = await put({ secrets: { token_41: 'rotated-value-41', fill_0: null, ...secrets('more', 1) } });
    expect(swapped.status).toBe(200);
    expect(await count('tenant_connector_secrets')).toBe(100);

    const rotatedBefore = await sealed('token_42');
    const changes = await count('admin_changes');
    const refused = await put({
      secrets: { token_42: 'rotated-value-42', token_43: 'rotated-value-43', ...secrets('more', 1, 1) },
    });
    expect(refused.status).toBe(409);
    expect(refused.body.type).toBe('https://verity.dev/problems/secret-limit');
    expect(refused.body.detail).toMatch(/would make 101/);
    expect(await sealed('token_42')).toEqual(rotatedBefore);
    expect(await sealed('more_1')).toEqual([]);
    expect(await count('admin_changes')).toBe(changes);
    expect(await count('tenant_connector_secrets')).toBe(100);

    const rotatedOnly = await put({ secrets: { token_42: 'rotated-value-42', token_43: 'rotated-value-43' } });
    expect(rotatedOnly.status).toBe(200);
    expect(await sealed('token_42')).not.toEqual(rotatedBefore);
  });
});
