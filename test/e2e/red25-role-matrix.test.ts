import { createApiKey } from '@verity/persistence/api-keys';
import type { ProblemDetails as Problem } from '@verity/sdk';
import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { publicTables, tableSignature } from '../fuzz/fuzz';
import { OpenApiDocument, operationsOf } from '../fuzz/requests';

type Role = 'agent' | 'reviewer' | 'admin';

/**
 * Every route that changes something, asked by every key that may not change the tenant's resource there: a key of
 * another role of the tenant (403 forbidden), the operator (403 operator-not-tenant), a key of another tenant (403 for
 * a role the route refuses, else 404: the resource is not its tenant's), no key or an unknown one (401). Each answer is
 * problem+json and leaves every table as it was. The routes are read from /docs-json: a route added later fails here
 * until its roles are written down below.
 */
describe('wrong role or tenant on every route that writes', () => {
  let stack: Stack;
  beforeAll(async () => {
    // No workers: nothing but the requests below writes.
    stack = await Stack.start({ label: 'red25roles', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  /**
   * The roles of the tenant that may use each route, and whether it names a resource of the tenant (another tenant's
   * key then finds none: 404) or acts on the caller's own tenant (another tenant's admin changes its own policy).
   */
  const ROUTES: Record<string, { roles: Role[]; names: boolean }> = {
    'POST /v1/executions': { roles: ['agent', 'admin'], names: false },
    'POST /v1/executions/{id}/cancel': { roles: ['agent', 'reviewer', 'admin'], names: true },
    'POST /v1/operations/{id}/approval': { roles: ['reviewer'], names: true },
    'POST /v1/operations/{id}/resolve': { roles: ['reviewer'], names: true },
    'POST /v1/operations/{id}/recheck': { roles: ['reviewer', 'admin'], names: true },
    'POST /v1/operations/{id}/retry': { roles: ['agent', 'admin'], names: true },
    'PUT /v1/admin/policy': { roles: ['admin'], names: false },
    'PUT /v1/admin/connector-settings/{connector}': { roles: ['admin'], names: false },
    'DELETE /v1/admin/connector-settings/{connector}': { roles: ['admin'], names: false },
    'DELETE /v1/admin/connector-settings/{connector}/secrets/{name}': { roles: ['admin'], names: false },
    'POST /v1/admin/webhooks': { roles: ['admin'], names: false },
    'DELETE /v1/admin/webhooks/{id}': { roles: ['admin'], names: true },
    'POST /v1/admin/webhooks/{id}/enable': { roles: ['admin'], names: true },
    'POST /v1/admin/webhooks/{id}/deliveries/{delivery_id}/redeliver': { roles: ['admin'], names: true },
  };
  /** Any role of a tenant may call it; its tools call the routes above with the caller's key (e2e mcp). */
  const ANY_ROLE = ['POST /mcp'];

  it('answers 401, 403 or 404 problem+json, and writes nothing', async () => {
    const doc = (await http<OpenApiDocument>(stack.apiUrl, 'GET', '/docs-json')).body;
    const writes = operationsOf(doc, ['post', 'put', 'patch', 'delete']).map((o) => `${o.method} ${o.template}`);
    expect(writes.sort()).toEqual([...Object.keys(ROUTES), ...ANY_ROLE].sort());

    const manager = stack.db.dataSource.manager;
    const keys: { name: string; key: string; role: Role | 'operator'; tenant: string }[] = [
      { name: 'agent', key: DEMO.agent, role: 'agent', tenant: 'demo' },
      { name: 'reviewer', key: DEMO.reviewer, role: 'reviewer', tenant: 'demo' },
      { name: 'admin', key: DEMO.admin, role: 'admin', tenant: 'demo' },
      { name: 'operator', key: DEMO.operator, role: 'operator', tenant: '' },
      { name: 'other agent', key: DEMO.otherAgent, role: 'agent', tenant: 'demo-other' },
    ];
    for (const role of ['reviewer', 'admin'] as const) {
      const { key } = await createApiKey(manager, { tenantId: 'demo-other', role });
      keys.push({ name: `other ${role}`, key, role, tenant: 'demo-other' });
    }

    // The tenant's resources: an execution and its operation, the http connector's settings with a secret, a webhook.
    const created = await http<{ id: string; operations: { id: string }[] }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('roles'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    const settings = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: 'hooks.example.com' }], secrets: { crm_token: 'role-matrix-secret-value' } },
    });
    expect(settings.status).toBe(200);
    const webhook = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      key: DEMO.admin,
      body: { url: 'https://hooks.example.com/verity', events: ['operation.settled'] },
    });
    expect(webhook.status).toBe(201);

    const values: Record<string, string> = {
      '{connector}': 'http',
      '{name}': 'crm_token',
      '{delivery_id}': 'msg_01m0000000ghost000000000000',
    };
    const pathOf = (template: string) =>
      template
        .replace(/\/v1\/executions\/\{id\}/, `/v1/executions/${created.body.id}`)
        .replace(/\/v1\/operations\/\{id\}/, `/v1/operations/${created.body.operations[0].id}`)
        .replace(/\/v1\/admin\/webhooks\/\{id\}/, `/v1/admin/webhooks/${webhook.body.id}`)
        .replace(/\{[a-z_]+\}/g, (name) => values[name]);
    const BODIES: Record<string, unknown> = {
      'POST /v1/executions': submission([charge(unique('roles'))]),
      'POST /v1/executions/{id}/cancel': { reason: 'not yours' },
      'POST /v1/operations/{id}/approval': { decision: 'approve' },
      'POST /v1/operations/{id}/resolve': { status: 'VERIFIED', evidence: 'seen it' },
      'PUT /v1/admin/policy': { obligation_owner: 'intruder' },
      'PUT /v1/admin/connector-settings/{connector}': { allow_hosts: [{ host: 'evil.example' }] },
      'POST /v1/admin/webhooks': { url: 'https://hooks.example.com/other', events: ['operation.settled'] },
    };

    const tables = await publicTables(stack);
    const before = await tableSignature(stack, tables);
    const answers: unknown[] = [];
    const expected: unknown[] = [];
    for (const [route, { roles, names }] of Object.entries(ROUTES)) {
      const [method, template] = route.split(' ');
      const callers = [
        ...keys
          .filter((k) => !(k.tenant === 'demo' && roles.includes(k.role as Role)))
          .filter((k) => !(k.tenant === 'demo-other' && roles.includes(k.role as Role) && !names))
          .map((k) => ({
            ...k,
            status: k.role === 'operator' || !roles.includes(k.role as Role) ? 403 : 404,
          })),
        { name: 'no key', key: '', status: 401 },
        { name: 'unknown key', key: 'not-a-key-of-anyone', status: 401 },
      ];
      for (const caller of callers) {
        const res = await http<Problem>(stack.apiUrl, method, pathOf(template), {
          key: caller.key || undefined,
          body: BODIES[route],
        });
        answers.push({
          route,
          caller: caller.name,
          status: res.status,
          type: res.headers.get('content-type')?.split(';')[0],
        });
        expected.push({ route, caller: caller.name, status: caller.status, type: 'application/problem+json' });
      }
    }
    expect(answers).toEqual(expected);
    expect(await tableSignature(stack, tables)).toEqual(before);
  });
});
