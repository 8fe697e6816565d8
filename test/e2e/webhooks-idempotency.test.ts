import { randomBytes } from 'node:crypto';
import { SecretsCipher, createApiKey } from '@verity/persistence';
import { Client } from 'pg';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';
import type { WireSchemas } from '@verity/sdk';

type Created = WireSchemas['WebhookEndpointCreated'];
/** A problem+json answer: the wire contract's own type. */
type Problem = WireSchemas['Problem'];

/**
 * An admin whose 201 was lost retries the create with the same Idempotency-Key: the answer is the endpoint that
 * request made, with the signing secret that was never seen — never a second endpoint whose deliveries the receiver
 * cannot de-duplicate or verify.
 */
describe('POST /v1/admin/webhooks with an Idempotency-Key', () => {
  let stack: Stack;
  let otherAdmin: string;
  const port = 9;

  const create = (idempotencyKey: string | undefined, body: unknown, key = DEMO.admin) =>
    http<Created & Problem>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      key,
      body,
      headers: idempotencyKey === undefined ? {} : { 'idempotency-key': idempotencyKey },
    });
  const hook = (path: string) => ({ url: `http://127.0.0.1:${port}/${path}`, events: ['execution.finished'] });

  async function count(sql: string, params: unknown[] = []): Promise<number> {
    const [row] = (await stack.db.dataSource.query(sql, params)) as { n: number }[];
    return row.n;
  }
  const rowsNow = async () => ({
    endpoints: await count(`SELECT count(*)::int AS n FROM webhook_endpoints`),
    changes: await count(`SELECT count(*)::int AS n FROM admin_changes`),
    keys: await count(`SELECT count(*)::int AS n FROM idempotency_keys`),
  });
  const endpointsAt = (url: string) => count(`SELECT count(*)::int AS n FROM webhook_endpoints WHERE url = $1`, [url]);

  beforeAll(async () => {
    // No workers: nothing but the API writes the rows counted here.
    stack = await Stack.start({
      label: 'webhooks-idem',
      dispatchers: 0,
      reconcilers: 0,
      env: { SECRETS_KEY: randomBytes(32).toString('base64') },
    });
    otherAdmin = (
      await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'admin', label: 'test' })
    ).key;
    for (const key of [DEMO.admin, otherAdmin]) {
      const put = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
        key,
        body: { allow_hosts: [{ host: '127.0.0.1', ports: [port], allow_private: true }] },
      });
      expect(put.status).toBe(200);
    }
  }, 60_000);
  afterAll(async () => stack?.stop());

  it('a retry after a lost 201 replays it: the same endpoint, the same secret, Idempotent-Replayed, nothing written', async () => {
    const key = unique('wh-idem');
    const body = hook(unique('lost'));
    const first = await create(key, body);
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(first.body.secret).toMatch(/^whsec_/);
    const before = await rowsNow();

    // The same body in another key order is the same request.
    const again = await create(key, { events: body.events, url: body.url });
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('location')).toBe(`/v1/admin/webhooks/${first.body.id}`);
    expect(again.headers.get('cache-control')).toBe('no-store');
    expect(again.body).toEqual(first.body);
    expect(await rowsNow()).toEqual(before);
    expect(await endpointsAt(body.url)).toBe(1);
  });

  it('the events in another order are the same subscription: the replay, not 422', async () => {
    const key = unique('wh-idem');
    const url = `http://127.0.0.1:${port}/${unique('order')}`;
    const first = await create(key, { url, events: ['operation.settled', 'execution.finished'] });
    expect(first.status).toBe(201);
    const before = await rowsNow();

    const again = await create(key, { url, events: ['execution.finished', 'operation.settled'] });
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
    expect(await rowsNow()).toEqual(before);
    expect(await endpointsAt(url)).toBe(1);
  });

  it('ten concurrent creates with one key make exactly one endpoint; every 201 carries its id and secret', async () => {
    const key = unique('wh-race');
    const body = hook(unique('race'));
    const before = await rowsNow();
    const answers = await Promise.all(Array.from({ length: 10 }, () => create(key, body)));

    expect(answers.every((a) => a.status === 201 || a.status === 409)).toBe(true);
    const created = answers.filter((a) => a.status === 201);
    const firsts = created.filter((a) => a.headers.get('idempotent-replayed') === null);
    expect(firsts).toHaveLength(1);
    for (const a of created) expect([a.body.id, a.body.secret]).toEqual([firsts[0].body.id, firsts[0].body.secret]);
    for (const a of created.filter((x) => x !== firsts[0])) expect(a.headers.get('idempotent-replayed')).toBe('true');
    for (const a of answers.filter((x) => x.status === 409)) {
      expect(a.body.type).toBe('https://verity.dev/problems/idempotency-key-in-flight');
      expect(a.headers.get('retry-after')).toBe('1');
    }
    expect(await endpointsAt(body.url)).toBe(1);
    const after = await rowsNow();
    expect(after).toEqual({ endpoints: before.endpoints + 1, changes: before.changes + 1, keys: before.keys + 1 });
  });

  it('a request with the key while the first is still in flight: 409 idempotency-key-in-flight, then the replay', async () => {
    const key = unique('wh-inflight');
    const body = hook(unique('inflight'));
    // Hold the tenant's endpoint lock, which every create takes: the first request waits inside its transaction.
    const holder = new Client({ connectionString: stack.db.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT pg_advisory_xact_lock(hashtextextended('webhook_endpoints' || chr(31) || 'demo', 0))`);
      const first = create(key, body);
      await waitFor(
        () =>
          count(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
            AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`),
        (n) => n > 0,
      );
      const second = await create(key, body);
      expect(second.status).toBe(409);
      expect(second.body.type).toBe('https://verity.dev/problems/idempotency-key-in-flight');
      expect(second.headers.get('retry-after')).toBe('1');
      await holder.query('COMMIT');
      const made = await first;
      expect(made.status).toBe(201);
      const third = await create(key, body);
      expect([third.status, third.headers.get('idempotent-replayed'), third.body.id]).toEqual([
        201,
        'true',
        made.body.id,
      ]);
    } finally {
      await holder.end();
    }
    expect(await endpointsAt(body.url)).toBe(1);
  });

  it('the same key with another body: 422 idempotency-key-reused, nothing written', async () => {
    const key = unique('wh-reuse');
    const first = await create(key, hook(unique('reuse')));
    expect(first.status).toBe(201);
    const before = await rowsNow();
    const other = hook(unique('reuse-other'));
    const reused = await create(key, other);
    expect(reused.status).toBe(422);
    expect(reused.body.type).toBe('https://verity.dev/problems/idempotency-key-reused');
    expect(await rowsNow()).toEqual(before);
    expect(await endpointsAt(other.url)).toBe(0);
  });

  it('a key is scoped to its route and tenant: an execution’s key and another tenant’s key never replay', async () => {
    // An execution submitted with the key first, then a webhook with it: both are created.
    const shared = unique('wh-shared');
    const run = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('wh-idem-sms'))]),
      headers: { 'idempotency-key': shared },
    });
    expect(run.status).toBe(201);
    const body = hook(unique('shared'));
    const mine = await create(shared, body);
    expect([mine.status, mine.headers.get('idempotent-replayed')]).toEqual([201, null]);
    // And the other way round: a webhook's key does not answer an execution's submission.
    const webhookFirst = unique('wh-first');
    expect((await create(webhookFirst, hook(unique('first')))).status).toBe(201);
    const later = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('wh-idem-sms'))]),
      headers: { 'idempotency-key': webhookFirst },
    });
    expect([later.status, later.headers.get('idempotent-replayed')]).toEqual([201, null]);

    // Another tenant's admin with the same key and body gets an endpoint of its own, with its own secret.
    const theirs = await create(shared, body, otherAdmin);
    expect([theirs.status, theirs.headers.get('idempotent-replayed')]).toEqual([201, null]);
    expect(theirs.body.id).not.toBe(mine.body.id);
    expect(theirs.body.secret).not.toBe(mine.body.secret);
    expect(await endpointsAt(body.url)).toBe(2);
  });

  it('a malformed key is 400 naming the header, and nothing is written', async () => {
    const before = await rowsNow();
    for (const bad of ['has space', 'x'.repeat(256), 'tab\there']) {
      const refused = await http<Problem>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
        key: DEMO.admin,
        body: hook(unique('bad')),
        headers: { 'idempotency-key': bad },
      });
      expect(refused.status).toBe(400);
      expect(refused.body.errors).toEqual([expect.objectContaining({ field: 'Idempotency-Key', rule: 'format' })]);
    }
    expect(await rowsNow()).toEqual(before);
  });

  it('a replay after the endpoint was deleted: 409 idempotency-key-target-deleted naming it, nothing re-created', async () => {
    const key = unique('wh-deleted');
    const body = hook(unique('deleted'));
    const first = await create(key, body);
    expect(first.status).toBe(201);
    expect(
      (await http(stack.apiUrl, 'DELETE', `/v1/admin/webhooks/${first.body.id}`, { key: DEMO.admin })).status,
    ).toBe(204);
    const before = await rowsNow();
    const again = await create(key, body);
    expect(again.status).toBe(409);
    expect(again.headers.get('content-type')).toContain('application/problem+json');
    expect(again.body.type).toBe('https://verity.dev/problems/idempotency-key-target-deleted');
    expect(again.body.webhook_id).toBe(first.body.id);
    expect(again.text).not.toContain('whsec_');
    expect(await rowsNow()).toEqual(before);
    expect(await endpointsAt(body.url)).toBe(0);
  });

  it('a replay whose endpoint’s secret no longer opens: 409 idempotency-replay-unavailable naming it, not a 500', async () => {
    const key = unique('wh-unopenable');
    const body = hook(unique('unopenable'));
    const first = await create(key, body);
    expect(first.status).toBe(201);
    // What a changed SECRETS_KEY leaves: the stored secret sealed with a key this API does not have.
    const other = new SecretsCipher(randomBytes(32).toString('base64'));
    await stack.db.dataSource.query(`UPDATE webhook_endpoints SET secret = $2 WHERE id = $1`, [
      first.body.id,
      other.seal(first.body.secret, 'elsewhere'),
    ]);
    const before = await rowsNow();
    const again = await create(key, body);
    expect(again.status).toBe(409);
    expect(again.headers.get('content-type')).toContain('application/problem+json');
    expect(again.body.type).toBe('https://verity.dev/problems/idempotency-replay-unavailable');
    expect(again.body.webhook_id).toBe(first.body.id);
    expect(again.body.detail).toContain(first.body.id);
    expect(again.body.detail).toContain('cannot be shown again');
    expect(again.text).not.toContain('whsec_');
    expect(await rowsNow()).toEqual(before);
    expect(await endpointsAt(body.url)).toBe(1);
  });
});
