import { DEMO, Stack, waitFor } from '../support/stack';
import { StallablePostgres } from '../support/stallable-postgres';
import { charge, http, submission, unique } from '../support/http';
import type { Execution } from '@verity/sdk';

/**
 * A Postgres that stops answering (frozen, or cut off by the network) rather than refusing connections: statements
 * already sent on pooled connections get no reply. The API must still answer 503 problem+json within its query
 * timeout (and not claim 'nothing was written' for a write it sent), recover when the server answers again, and stop
 * on SIGTERM with exit 0 while a statement hangs. Before: the request hung until the client gave up; a SIGTERM then
 * ended in the 25 s forced exit 1 (the answered request's keep-alive connection held server.close()).
 */

const QUERY_TIMEOUT_MS = 1500;

describe('a stalled Postgres', () => {
  let stack: Stack;
  let pg: StallablePostgres | undefined;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'apidbstall', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => {
    await pg?.stop();
    await stack?.stop();
  });

  it('answers 503 within the query timeout, writes nothing, recovers, and stops on SIGTERM with exit 0', async () => {
    pg = await StallablePostgres.start('api-pgstall');
    const { app: api, url } = await stack.startApiApp({
      DATABASE_URL: pg.url,
      RUN_MIGRATIONS: 'true',
      SEED_DEMO: 'true',
      DATABASE_QUERY_TIMEOUT_MS: String(QUERY_TIMEOUT_MS),
      QUEUE_PREFIX: `{${unique('pgstall')}}`,
    });
    const submit = (idempotencyKey = unique('stall'), body = submission([charge(unique('order'))])) =>
      http<Execution>(url, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body,
        headers: { 'idempotency-key': idempotencyKey },
      });
    const before = await submit();
    expect(before.status).toBe(201);
    // Warm the pool, so the statements below go out on connections that are already open.
    await Promise.all([1, 2, 3].map(() => http(url, 'GET', '/v1/executions', { key: DEMO.agent })));

    pg.stall();
    const stalledKey = unique('stalled');
    const stalledBody = submission([charge(unique('order'))]);
    // The submission first, on a session already open (one that cannot even be opened proves nothing was sent).
    const created = await submit(stalledKey, stalledBody);
    const [list, read] = await Promise.all([
      http(url, 'GET', '/v1/executions', { key: DEMO.agent }),
      http(url, 'GET', `/v1/executions/${before.body.id}`, { key: DEMO.agent }),
    ]);
    // Answered at all with Postgres stalled: the query timeout, then the pool's connection timeout (5 s), fired (the
    // 503s' type below says so); with neither, the requests would hang with the server.
    for (const res of [list, read, created]) {
      expect(res.status).toBe(503);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body).toMatchObject({ type: 'https://verity.dev/problems/database-unavailable', status: 503 });
    }
    // The insert was sent and got no answer: the server may still carry it out, so the caller is not told
    // 'nothing was written' (it was, once the server resumed, before this change's caller retried without a key).
    expect((created.body as unknown as { detail: string }).detail).toMatch(/may still have been recorded/);
    expect((list.body as { detail: string }).detail).toMatch(/nothing was written/);
    // The OpenAPI document says the same: a client generated from it must not read every 503 of a write as "nothing
    // was written" and send it again without its key (a second charge). Its examples are the answers given here.
    type Documented = { description: string; content: Record<string, { examples: Record<string, { value: object }> }> };
    const doc = (await (await fetch(`${stack.apiUrl}/docs-json`)).json()) as {
      paths: Record<string, Record<string, { responses: Record<string, Documented> }>>;
    };
    const documented = (path: string, method: string) => doc.paths[path][method].responses['503'];
    const details = (answer: Documented) =>
      Object.values(answer.content['application/problem+json'].examples).map(
        (e) => (e.value as { detail: string }).detail,
      );
    for (const [path, method] of [
      ['/v1/executions', 'post'],
      ['/v1/operations/{id}/resolve', 'post'],
      ['/v1/executions/{id}/cancel', 'post'],
      ['/v1/admin/policy', 'put'],
    ]) {
      expect({ path, method, description: documented(path, method).description }).toEqual({
        path,
        method,
        description: expect.stringMatching(/may still have been recorded/),
      });
    }
    expect(details(documented('/v1/executions', 'post'))).toContain(
      (created.body as unknown as { detail: string }).detail,
    );
    // A read's other 503s (too many large answers under way; its tenant's secrets do not open here) say nothing was
    // changed either.
    expect(details(documented('/v1/executions', 'get'))).toEqual([
      expect.stringMatching(/ANSWER_BYTES_IN_FLIGHT.*nothing was carried out/),
      (list.body as { detail: string }).detail,
      expect.stringMatching(/SECRETS_KEY.*nothing was changed/),
    ]);
    expect(documented('/v1/executions', 'get').description).not.toMatch(/may still/);
    const ready = await http<{ checks: Record<string, string> }>(url, 'GET', '/health/ready');
    expect(ready.status).toBe(503);
    expect(ready.body.checks.postgres).toBe('down');

    pg.resume();
    // Repeated with its key, the stalled submission is one execution, whether or not the stalled insert landed.
    const repeated = await waitFor(
      () => submit(stalledKey, stalledBody),
      (r) => r.status === 200 || r.status === 201,
      30_000,
      250,
    );
    const listed = await http<{ data: { id: string }[] }>(url, 'GET', '/v1/executions', { key: DEMO.agent });
    expect(listed.body.data.map((e) => e.id)).toEqual([repeated.body.id, before.body.id]);

    // SIGTERM while a statement hangs: the request is answered, the process stops cleanly.
    pg.stall();
    const hanging = http(url, 'GET', '/v1/executions', { key: DEMO.agent });
    // The statement has reached the server (unread bytes wait on its side of a session) before the signal.
    await waitFor(
      async () => pg!.unreadBytes(),
      (bytes) => bytes > 0,
      10_000,
      50,
    );
    api.child.kill('SIGTERM');
    // 0: the stop finished (held on the stalled statement, it is the forced exit 1 at the grace).
    expect(await api.exited).toBe(0);
    expect((await hanging).status).toBe(503);
    pg.resume();
  }, 90_000);
});
