import { requestHash, sentBodyHash } from '../../apps/api/src/executions/idempotency';
import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import type { WireSchemas } from '@verity/sdk';

/** I8: Idempotency-Key per tenant, kept for IDEMPOTENCY_TTL_MS, safe under concurrency. */

interface Execution {
  id: string;
  status: string;
  operations: { params: Record<string, unknown> }[];
}
/** A problem+json answer: the wire contract's own type. */
type Problem = WireSchemas['Problem'];

const TTL_MS = 3_600_000;

describe('Idempotency-Key (I8)', () => {
  let stack: Stack;
  beforeAll(async () => {
    // No workers: executions stay `created`, so nothing but the API writes rows while we count them.
    stack = await Stack.start({
      label: 'apiidem',
      dispatchers: 0,
      reconcilers: 0,
      env: { IDEMPOTENCY_TTL_MS: String(TTL_MS) },
    });
  });
  afterAll(async () => stack?.stop());

  const submit = (key: string | undefined, body: unknown, apiKey = DEMO.agent) =>
    http<Execution & Problem>(stack.apiUrl, 'POST', '/v1/executions', {
      key: apiKey,
      body,
      headers: key === undefined ? {} : { 'idempotency-key': key },
    });

  async function count(sql: string, params: unknown[] = []): Promise<number> {
    const [row] = (await stack.db.dataSource.query(sql, params)) as { n: number }[];
    return row.n;
  }
  const executionsWithKey = (key: string) =>
    count(`SELECT count(*)::int AS n FROM executions WHERE idempotency_key = $1`, [key]);
  const allRows = async () => ({
    executions: await count(`SELECT count(*)::int AS n FROM executions`),
    operations: await count(`SELECT count(*)::int AS n FROM operations`),
    events: await count(`SELECT count(*)::int AS n FROM events`),
    idempotency_keys: await count(`SELECT count(*)::int AS n FROM idempotency_keys`),
  });

  it('50 concurrent submissions with one key create exactly one execution', async () => {
    const key = unique('idem-race');
    const body = submission([charge(unique('order'))]);
    const before = await allRows();
    const responses = await Promise.all(Array.from({ length: 50 }, () => submit(key, body)));

    const statuses = responses.map((r) => r.status);
    expect(statuses.every((s) => s === 201 || s === 409)).toBe(true);
    const created = responses.filter((r) => r.status === 201);
    const firsts = created.filter((r) => r.headers.get('idempotent-replayed') === null);
    expect(firsts).toHaveLength(1);
    expect(new Set(created.map((r) => r.body.id))).toEqual(new Set([firsts[0].body.id]));
    for (const r of created.filter((x) => x !== firsts[0])) expect(r.headers.get('idempotent-replayed')).toBe('true');
    for (const r of responses.filter((x) => x.status === 409)) {
      expect(r.body.type).toBe('https://verity.dev/problems/idempotency-key-in-flight');
      expect(r.headers.get('retry-after')).toBe('1');
    }

    expect(await executionsWithKey(key)).toBe(1);
    const after = await allRows();
    expect(after.executions - before.executions).toBe(1);
    expect(after.operations - before.operations).toBe(1);
    expect(after.idempotency_keys - before.idempotency_keys).toBe(1);

    // Once the first has committed, every retry is a replay of it.
    const replay = await submit(key, body);
    expect(replay.status).toBe(201);
    expect(replay.body.id).toBe(firsts[0].body.id);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
  });

  it('replays the same execution for the same body, in any key order, with Idempotent-Replayed: true', async () => {
    const key = unique('idem-replay');
    const body = submission([charge(unique('order'))], { deadline_seconds: 900 });
    const first = await submit(key, body);
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const reordered = Object.fromEntries(Object.entries(body).reverse());
    const second = await submit(key, reordered);
    expect(second.status).toBe(201);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.headers.get('location')).toBe(`/v1/executions/${first.body.id}`);
    expect(second.body.id).toBe(first.body.id);
    expect(await executionsWithKey(key)).toBe(1);
  });

  it('replays a body whose numbers and strings are spelled otherwise in JSON (1250.0, 1.25e3, \\u00e9): one value', async () => {
    // The key holds the request as JSON reads it: an amount written 1250, 1250.0, 1.25e3 or 12.5E2 is one amount (and
    // is sent as one), an escaped character is that character. A client library that writes numbers or escapes
    // otherwise on its retry gets the replay, not 422 — and not a second charge.
    const key = unique('idem-spelling');
    const reference = unique('order');
    const raw = (amount: string, intent: string) =>
      http<Execution & Problem>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        rawBody:
          `{"agent_id":"spelling","intent":"${intent}","operations":[{"key":"charge","connector":"sandbox.payments",` +
          `"action":"charge","params":{"amount":${amount},"currency":"EUR","reference":"${reference}"}}]}`,
      });
    const first = await raw('1250', 'caf\u00e9');
    expect(first.status).toBe(201);
    expect(first.body.operations[0].params).toMatchObject({ amount: 1250 });
    for (const [amount, intent] of [
      ['1250.0', 'café'],
      ['1.25e3', 'caf\\u00e9'],
      ['12.5E2', 'caf\\u00E9'],
      ['125000e-2', '\\u0063afé'],
    ]) {
      const again = await raw(amount, intent);
      expect([amount, intent, again.status, again.headers.get('idempotent-replayed')]).toEqual([
        amount,
        intent,
        201,
        'true',
      ]);
      expect(again.body.id).toBe(first.body.id);
    }
    // Another amount, or the same word in another Unicode normal form (NFD: "e" and a combining accent), is another
    // body: other characters are sent and stored, so the key does not stand for it.
    for (const [amount, intent] of [
      ['1251', 'café'],
      ['1250', 'cafe\u0301'],
    ]) {
      const other = await raw(amount, intent);
      expect([amount, other.status, other.body.type]).toEqual([
        amount,
        422,
        'https://verity.dev/problems/idempotency-key-reused',
      ]);
    }
    expect(await executionsWithKey(key)).toBe(1);
  });

  it('replays a body that spells out what an absent member means, and one that leaves it out, both ways', async () => {
    // depends_on [], criteria [], expected_state null, requires_approval false: what intake stores for each left out.
    const bare = (reference: string) => submission([charge(reference), { ...charge(`${reference}-2`), key: 'second' }]);
    const spelled = (reference: string) =>
      submission(
        [
          charge(reference, { depends_on: [], expected_state: null, requires_approval: false }),
          { ...charge(`${reference}-2`), key: 'second', depends_on: [] },
        ],
        { criteria: [] },
      );
    for (const [label, first, retry] of [
      ['spelled, then left out', spelled, bare],
      ['left out, then spelled', bare, spelled],
    ] as const) {
      const key = unique('idem-defaults');
      const reference = unique('order');
      const made = await submit(key, first(reference));
      expect([label, made.status]).toEqual([label, 201]);
      const again = await submit(key, retry(reference));
      expect([label, again.status, again.headers.get('idempotent-replayed')]).toEqual([label, 201, 'true']);
      expect(again.body.id).toBe(made.body.id);
      expect(await executionsWithKey(key)).toBe(1);
    }
  });

  it('20 concurrent submissions with one key, half spelling out the defaults: one execution, no 422', async () => {
    const key = unique('idem-defaults-race');
    const reference = unique('order');
    const bare = submission([charge(reference)]);
    const spelled = submission([charge(reference, { depends_on: [], requires_approval: false })], { criteria: [] });
    const responses = await Promise.all(Array.from({ length: 20 }, (_, i) => submit(key, i % 2 ? spelled : bare)));
    expect(responses.map((r) => r.status).filter((s) => s !== 201 && s !== 409)).toEqual([]);
    const created = responses.filter((r) => r.status === 201);
    expect(created.filter((r) => r.headers.get('idempotent-replayed') === null)).toHaveLength(1);
    expect(new Set(created.map((r) => r.body.id)).size).toBe(1);
    expect(await executionsWithKey(key)).toBe(1);
  });

  it('replays a body that spells out a default under a key an earlier version recorded (its hash of the JSON as sent)', async () => {
    const key = unique('idem-legacy');
    const body = submission([charge(unique('order'), { depends_on: [] })]);
    const made = await submit(key, body);
    expect(made.status).toBe(201);
    await stack.db.dataSource.query(`UPDATE idempotency_keys SET request_hash = $2 WHERE key = $1`, [
      key,
      sentBodyHash(body),
    ]);
    const again = await submit(key, body);
    expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
    expect(again.body.id).toBe(made.body.id);
  });

  it('answers 422 for members whose absence does not always mean the value given, or a value that means more', async () => {
    for (const [label, spelled] of [
      ['irreversible', { irreversible: false }],
      ['verification_method', { verification_method: 'read_after_write' }],
      ['depends_on', { depends_on: ['first'] }],
      ['expected_state', { expected_state: {} }],
    ] as const) {
      const key = unique('idem-meaning');
      const reference = unique('order');
      const first = { ...charge(`${reference}-1`), key: 'first' };
      const made = await submit(key, submission([first, charge(reference)]));
      expect([label, made.status]).toEqual([label, 201]);
      const other = await submit(key, submission([first, charge(reference, spelled)]));
      expect([label, other.status, other.body.type]).toEqual([
        label,
        422,
        'https://verity.dev/problems/idempotency-key-reused',
      ]);
    }
  });

  it('answers 422 for the same key with a different body, and writes nothing', async () => {
    const key = unique('idem-mismatch');
    const first = await submit(key, submission([charge(unique('order'))]));
    expect(first.status).toBe(201);
    const before = await allRows();
    const other = await submit(key, submission([charge(unique('order'))]));
    expect(other.status).toBe(422);
    expect(other.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(other.body.type).toBe('https://verity.dev/problems/idempotency-key-reused');
    expect(await allRows()).toEqual(before);
  });

  it('answers 409 while the first request with the key is still in flight', async () => {
    const key = unique('idem-inflight');
    const body = submission([charge(unique('order'))]);
    // The state a request is in between claiming its key and committing its execution.
    await stack.db.dataSource.query(
      `INSERT INTO idempotency_keys (tenant_id, key, request_hash, state, expires_at)
       VALUES ('demo', $1, $2, 'in_flight', now() + interval '1 hour')`,
      [key, requestHash(body)],
    );
    const res = await submit(key, body);
    expect(res.status).toBe(409);
    expect(res.body.type).toBe('https://verity.dev/problems/idempotency-key-in-flight');
    expect(res.headers.get('retry-after')).toBe('1');
    expect(await executionsWithKey(key)).toBe(0);

    // A claim abandoned by a crashed request (older than a minute) is taken over.
    await stack.db.dataSource.query(
      `UPDATE idempotency_keys SET created_at = now() - interval '2 minutes' WHERE tenant_id = 'demo' AND key = $1`,
      [key],
    );
    const takeover = await submit(key, body);
    expect(takeover.status).toBe(201);
    expect(takeover.headers.get('idempotent-replayed')).toBeNull();
    expect(await executionsWithKey(key)).toBe(1);
  });

  it('scopes keys per tenant', async () => {
    const key = unique('idem-tenant');
    const mine = await submit(key, submission([charge(unique('order'))]));
    const theirs = await submit(key, submission([charge(unique('order'))]), DEMO.otherAgent);
    expect(mine.status).toBe(201);
    expect(theirs.status).toBe(201);
    expect(theirs.headers.get('idempotent-replayed')).toBeNull();
    expect(theirs.body.id).not.toBe(mine.body.id);
    const other = await http(stack.apiUrl, 'GET', `/v1/executions/${mine.body.id}`, { key: DEMO.otherAgent });
    expect(other.status).toBe(404);
  });

  it('keeps a key for IDEMPOTENCY_TTL_MS, then lets it be used afresh', async () => {
    const key = unique('idem-ttl');
    const first = await submit(key, submission([charge(unique('order'))]));
    expect(first.status).toBe(201);
    const [record] = (await stack.db.dataSource.query(
      `SELECT extract(epoch FROM expires_at - created_at) * 1000 AS ttl, state, execution_id
       FROM idempotency_keys WHERE tenant_id = 'demo' AND key = $1`,
      [key],
    )) as { ttl: string; state: string; execution_id: string }[];
    expect(Math.abs(Number(record.ttl) - TTL_MS)).toBeLessThan(60_000);
    expect(record).toMatchObject({ state: 'completed', execution_id: first.body.id });

    await stack.db.dataSource.query(
      `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE tenant_id = 'demo' AND key = $1`,
      [key],
    );
    const fresh = await submit(key, submission([charge(unique('order'))]));
    expect(fresh.status).toBe(201);
    expect(fresh.headers.get('idempotent-replayed')).toBeNull();
    expect(fresh.body.id).not.toBe(first.body.id);
  });

  it('claims no key for a request that fails validation', async () => {
    const key = unique('idem-invalid');
    const bad = await submit(key, submission([charge('x', { connector: 'nope' })]));
    expect(bad.status).toBe(400);
    expect(await count(`SELECT count(*)::int AS n FROM idempotency_keys WHERE key = $1`, [key])).toBe(0);
    const good = await submit(key, submission([charge(unique('order'))]));
    expect(good.status).toBe(201);
    expect(good.headers.get('idempotent-replayed')).toBeNull();
  });

  it('without a key, two identical submissions are two executions', async () => {
    const body = submission([charge(unique('order'))]);
    const [a, b] = [await submit(undefined, body), await submit(undefined, body)];
    expect(a.status).toBe(201);
    expect(b.status).toBe(201);
    expect(a.body.id).not.toBe(b.body.id);
  });
});
