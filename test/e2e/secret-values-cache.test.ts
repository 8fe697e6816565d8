import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { lockWaiters } from '../support/lock-waits';

const VALUE = 'value-c-Zp41qT';
const PLACEHOLDER = '{{secret:cached_token}}';

/**
 * What an answer is looked through for — the tenant's secret values — is kept by each API process, and dropped by every
 * one of them when the tenant's secrets change (a NOTIFY sent by the statement that changes them): an answer costs no
 * read of the secrets, and a secret set through one API process is never returned by another.
 */
describe("the tenant's secret values, kept per API process", () => {
  let stack: Stack;
  let a: string;
  let b: string;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'secretcache', apis: 2, dispatchers: 0, reconcilers: 0 });
    [a, b] = stack.apiUrls;
  }, 60_000);
  afterAll(async () => stack?.stop());

  const create = async (key: string, text: string) => {
    const created = await http<{ id: string }>(a, 'POST', '/v1/executions', {
      key,
      headers: { 'idempotency-key': unique('cache') },
      body: submission([charge(`order-${text}`)], { intent: `pay the order ${text}` }),
    });
    expect(created.status).toBe(201);
    return created.body.id;
  };

  it('a secret set through one API process is a placeholder in the very next answer of another', async () => {
    const executionId = await create(DEMO.agent, VALUE);
    // Process B reads the execution (and keeps what it looked through: no secret yet) before the secret is set.
    const before = await http(b, 'GET', `/v1/executions/${executionId}`, { key: DEMO.agent });
    expect(before.status).toBe(200);
    expect(before.text).toContain(VALUE);
    const set = await http(a, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { cached_token: VALUE } },
    });
    expect(set.status).toBe(200);
    const after = await http(b, 'GET', `/v1/executions/${executionId}`, { key: DEMO.agent });
    expect(after.status).toBe(200);
    expect(after.text).not.toContain(VALUE);
    expect(after.text).toContain(PLACEHOLDER);
    // A new value under the same name, and a delete: each is seen by B at once too.
    const rotated = await http(a, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { cached_token: 'another-value-Rx9' } },
    });
    expect(rotated.status).toBe(200);
    const afterRotation = await http(b, 'GET', `/v1/executions/${executionId}`, { key: DEMO.agent });
    expect(afterRotation.text).toContain(VALUE);
    const deleted = await http(a, 'DELETE', '/v1/admin/connector-settings/http/secrets/cached_token', {
      key: DEMO.admin,
    });
    expect(deleted.status).toBe(204);
    // Set again, then every setting of the connector cleared: the same.
    expect(
      (
        await http(a, 'PUT', '/v1/admin/connector-settings/http', {
          key: DEMO.admin,
          body: { secrets: { cached_token: VALUE } },
        })
      ).status,
    ).toBe(200);
    expect((await http(b, 'GET', `/v1/executions/${executionId}`, { key: DEMO.agent })).text).toContain(PLACEHOLDER);
    const cleared = await http(a, 'DELETE', '/v1/admin/connector-settings/http', { key: DEMO.admin });
    expect(cleared.status).toBe(204);
    expect((await http(b, 'GET', `/v1/executions/${executionId}`, { key: DEMO.agent })).text).toContain(VALUE);
  });

  it('a read asked for after the 200 of a secret set through another process never holds the value: 50 rounds', async () => {
    let shown = 0;
    for (let i = 0; i < 50; i += 1) {
      const value = `round-${i}-${unique('v')}`;
      const path = `/v1/executions/${await create(DEMO.agent, value)}`;
      // Both processes keep the tenant's values of before (none of them is this value).
      const [beforeA, beforeB] = await Promise.all([
        http(a, 'GET', path, { key: DEMO.agent }),
        http(b, 'GET', path, { key: DEMO.agent }),
      ]);
      expect(beforeA.text).toContain(value);
      expect(beforeB.text).toContain(value);
      // Reads asked for while the set is made (they may show the value: asked before it was answered) keep both
      // processes busy, as answers to other requests do.
      const during = [a, b, a, b].map((url) => http(url, 'GET', path, { key: DEMO.agent }));
      const set = await http(a, 'PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { secrets: { [`round_${i}`]: value } },
      });
      expect(set.status).toBe(200);
      const answers = await Promise.all([
        http(a, 'GET', path, { key: DEMO.agent }),
        http(b, 'GET', path, { key: DEMO.agent }),
      ]);
      await Promise.all(during);
      shown += answers.filter((answer) => answer.text.includes(value)).length;
      const deleted = await http(a, 'DELETE', `/v1/admin/connector-settings/http/secrets/round_${i}`, {
        key: DEMO.admin,
      });
      expect(deleted.status).toBe(204);
    }
    expect(shown).toBe(0);
  }, 120_000);

  it("answers a tenant's reads without reading its secrets again: none is read while their table is locked", async () => {
    // demo-other has no secrets; its first answer through B reads that (and keeps it).
    const executionId = await create(DEMO.otherAgent, unique('no-secret'));
    const path = `/v1/executions/${executionId}`;
    expect((await http(b, 'GET', path, { key: DEMO.otherAgent })).status).toBe(200);
    const holder = stack.db.dataSource.createQueryRunner();
    await holder.connect();
    try {
      await holder.startTransaction();
      await holder.query(`LOCK TABLE tenant_connector_secrets IN ACCESS EXCLUSIVE MODE`);
      for (let i = 0; i < 5; i += 1) {
        let answered: number | undefined;
        const read = http(b, 'GET', path, { key: DEMO.otherAgent }).then((answer) => (answered = answer.status));
        // Either the answer comes, or a read of the secrets waits for the lock: the first is the cache used.
        const waiting = await waitFor(
          async () =>
            answered !== undefined ? 0 : await lockWaiters(stack.db.dataSource, '%tenant_connector_secrets%'),
          (n) => answered !== undefined || n > 0,
        );
        expect(waiting).toBe(0);
        expect(answered).toBe(200);
        await read;
      }
    } finally {
      if (holder.isTransactionActive) await holder.rollbackTransaction();
      await holder.release();
    }
  });
});
