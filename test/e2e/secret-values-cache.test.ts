import { DEMO, METRICS_TOKEN, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { lockWaiters } from '../support/lock-waits';
import IORedis from 'ioredis';
import { TEST_REDIS_URL } from '../support/services';
import { appendNotedEvent, noteEvent, openStream } from './api-sse';

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
    // demo-other has no secrets; its first answer through B reads that (and keeps it). The list of connectors: the
    // reads of its executions and operations (one, a page, its events, its stream) ask the table itself whether the
    // tenant holds any secret (an index probe, which this lock blocks too) — that they read no secret values is
    // counted by the metric (below).
    await create(DEMO.otherAgent, unique('no-secret'));
    const path = `/v1/connectors`;
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

  it('a stream confirms the secrets once, yet each page after a change reached its process is redacted with it', async () => {
    // The stream's pages are not each preceded by a round trip on the LISTEN connection: what its process keeps is
    // dropped by the change's NOTIFY, and the next page reads the values again. A read of B after the change (which
    // hears every change committed before it) makes sure the NOTIFY has reached B before the page is written.
    const value = `stream-${unique('v').replace(/[^a-z0-9]/gi, '')}`;
    const executionId = await create(DEMO.agent, unique('stream'));
    const publisher = new IORedis(TEST_REDIS_URL);
    const stream = await openStream(`${b}/v1/executions/${executionId}/stream`, DEMO.agent);
    const append = () =>
      appendNotedEvent({ stack, publisher, stream, executionId, idPrefix: 'evt_cache' }, `noted ${value}`);
    try {
      expect(stream.status).toBe(200);
      expect(await append()).toContain(value);
      const set = await http(a, 'PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { secrets: { stream_token: value } },
      });
      expect(set.status).toBe(200);
      expect((await http(b, 'GET', `/v1/executions/${executionId}`, { key: DEMO.agent })).status).toBe(200);
      const after = await append();
      expect(after).not.toContain(value);
      expect(after).toContain('{{secret:stream_token}}');
    } finally {
      stream.abort();
      publisher.disconnect();
      await http(a, 'DELETE', '/v1/admin/connector-settings/http/secrets/stream_token', { key: DEMO.admin });
    }
  });

  it("a reason is looked through for a secret set through another process just before it was sent (the kept values aren't trusted unheard)", async () => {
    const executionId = await create(DEMO.agent, unique('reason'));
    for (let i = 0; i < 20; i += 1) {
      const value = `reason-${i}-${unique('v').replace(/[^a-z0-9]/gi, '')}`;
      // B keeps the tenant's values of before (read for this answer's redaction).
      expect((await http(b, 'GET', `/v1/executions/${executionId}`, { key: DEMO.agent })).status).toBe(200);
      const set = await http(a, 'PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { secrets: { [`reason_${i}`]: value } },
      });
      expect(set.status).toBe(200);
      const refused = await http<{ errors?: { field: string; rule: string }[] }>(
        b,
        'POST',
        `/v1/executions/${executionId}/cancel`,
        { key: DEMO.agent, body: { reason: `because ${value}` } },
      );
      expect(refused.status).toBe(400);
      expect(refused.body.errors).toEqual([expect.objectContaining({ field: 'reason', rule: 'secret_value' })]);
      await http(a, 'DELETE', `/v1/admin/connector-settings/http/secrets/reason_${i}`, { key: DEMO.admin });
    }
  }, 60_000);

  /** The API process' own count of freshness round trips (a SELECT 1 on its LISTEN connection each). */
  const roundTrips = async (url: string) => {
    const text = await (
      await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
    ).text();
    const line = text.split('\n').find((l) => l.startsWith('verity_secrets_freshness_round_trips_total '));
    return Number(line?.slice(line.lastIndexOf(' ') + 1) ?? 0);
  };

  it('an intake of a tenant with no secrets is answered with no round trip: its own statement found none', async () => {
    const before = await roundTrips(b);
    for (let i = 0; i < 5; i += 1) {
      const created = await http(b, 'POST', '/v1/executions', {
        key: DEMO.otherAgent,
        body: submission([charge(unique('none'))], { intent: `nothing secret ${i}` }),
      });
      expect(created.status).toBe(201);
    }
    expect((await roundTrips(b)) - before).toBe(0);
  });

  it('what an intake found (no secrets) is not trusted past a change: a read of another request hears it first', async () => {
    const value = `intake-${unique('v').replace(/[^a-z0-9]/gi, '')}`;
    // Through B: its statement finds the tenant has no secrets, and B keeps that.
    const created = await http<{ id: string }>(b, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('intake'))], { intent: `pay ${value}` }),
    });
    expect(created.status).toBe(201);
    expect(JSON.stringify(created.body)).toContain(value);
    try {
      const set = await http(a, 'PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { secrets: { intake_token: value } },
      });
      expect(set.status).toBe(200);
      const read = await http(b, 'GET', `/v1/executions/${created.body.id}`, { key: DEMO.agent });
      expect(read.text).not.toContain(value);
      expect(read.text).toContain('{{secret:intake_token}}');
    } finally {
      await http(a, 'DELETE', '/v1/admin/connector-settings/http/secrets/intake_token', { key: DEMO.admin });
    }
  });

  /** The API process' own count of reads of a tenant's secret values (one statement each). */
  const secretReads = async (url: string) => {
    const text = await (
      await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
    ).text();
    const line = text.split('\n').find((l) => l.startsWith('verity_tenant_secrets_reads_total '));
    return Number(line?.slice(line.lastIndexOf(' ') + 1) ?? 0);
  };

  /** An event noting `text` appended to the execution's log (no one told: a stream opened later reads it). */
  const noted = (executionId: string, text: string) => noteEvent(stack, executionId, 'evt_note', text);

  /** The stream of the execution through `url`: its frames once one holds `text` (then closed by the test). */
  const streamed = async (url: string, executionId: string, text: string) => {
    const stream = await openStream(`${url}/v1/executions/${executionId}/stream`, DEMO.agent);
    try {
      expect(stream.status).toBe(200);
      const frames = await stream.waitFor((sent) => sent.some((f) => f.data.includes(text)), 15_000);
      return frames.map((f) => f.data).join('\n');
    } finally {
      stream.abort();
    }
  };

  it("the reads of a tenant with no secrets (GETs of its execution, its events, its stream) need no round trip, nor a read of them: the execution's read found none", async () => {
    // Created through A: B has kept nothing of the tenant's from its intake.
    const created = await http<{ id: string }>(a, 'POST', '/v1/executions', {
      key: DEMO.otherAgent,
      body: submission([charge(unique('reads'))], { intent: 'nothing secret read' }),
    });
    expect(created.status).toBe(201);
    const executionId = created.body.id;
    // B reads it once (what that costs is not counted: B may have kept nothing of the tenant's yet).
    expect((await http(b, 'GET', `/v1/executions/${executionId}`, { key: DEMO.otherAgent })).status).toBe(200);
    const [trips, reads] = [await roundTrips(b), await secretReads(b)];
    const stream = await openStream(`${b}/v1/executions/${executionId}/stream`, DEMO.otherAgent);
    try {
      expect(stream.status).toBe(200);
      // Its first page written (redacted as every page is).
      await stream.waitFor((sent) => sent.some((f) => f.event === 'execution.created'), 15_000);
    } finally {
      stream.abort();
    }
    expect((await roundTrips(b)) - trips).toBe(0);
    for (let i = 0; i < 5; i += 1) {
      expect((await http(b, 'GET', `/v1/executions/${executionId}`, { key: DEMO.otherAgent })).status).toBe(200);
    }
    expect((await http(b, 'GET', `/v1/executions/${executionId}/events`, { key: DEMO.otherAgent })).status).toBe(200);
    expect((await roundTrips(b)) - trips).toBe(0);
    expect((await secretReads(b)) - reads).toBe(0);
  });

  it('the other reads of a tenant with no secrets (an operation, pages of executions, a 404) need no round trip, nor a read of them: each read found none', async () => {
    // Created through A: B has kept nothing of the tenant's from its intake.
    const created = await http<{ id: string; operations: { id: string }[] }>(a, 'POST', '/v1/executions', {
      key: DEMO.otherAgent,
      body: submission([charge(unique('reads'))], { intent: 'nothing secret read' }),
    });
    expect(created.status).toBe(201);
    const operationId = created.body.operations[0].id;
    // B reads the tenant once (what that costs is not counted: B may have kept nothing of the tenant's yet).
    expect((await http(b, 'GET', `/v1/connectors`, { key: DEMO.otherAgent })).status).toBe(200);
    const [trips, reads] = [await roundTrips(b), await secretReads(b)];
    const answered = async (path: string, status: number) =>
      expect((await http(b, 'GET', path, { key: DEMO.otherAgent })).status).toBe(status);
    for (let i = 0; i < 3; i += 1) await answered(`/v1/operations/${operationId}`, 200);
    await answered(`/v1/executions?limit=2`, 200);
    await answered(`/v1/executions?limit=2&status=created`, 200);
    await answered(`/v1/executions?limit=2&cursor=${created.body.id}`, 200);
    await answered(`/v1/executions/exe_${unique('none').replace(/[^a-z0-9]/gi, '')}`, 404);
    await answered(`/v1/executions/exe_${unique('none').replace(/[^a-z0-9]/gi, '')}/events`, 404);
    await answered(`/v1/operations/op_${unique('none').replace(/[^a-z0-9]/gi, '')}`, 404);
    expect((await roundTrips(b)) - trips).toBe(0);
    expect((await secretReads(b)) - reads).toBe(0);
  });

  it('what a read of the operation, a page or a 404 found (no secrets) is not trusted past a change: the next one of that process shows the placeholder', async () => {
    const value = `other${unique('v').replace(/[^a-z0-9]/gi, '')}`;
    const placeholder = '{{secret:other_read_token}}';
    const executionId = await create(DEMO.agent, value);
    const execution = await http<{ operations: { id: string }[] }>(a, 'GET', `/v1/executions/${executionId}`, {
      key: DEMO.agent,
    });
    const operationId = execution.body.operations[0].id;
    const get = async (path: string, status = 200) => {
      const answer = await http(b, 'GET', path, { key: DEMO.agent });
      expect(answer.status).toBe(status);
      return answer.text;
    };
    const set = async () =>
      expect(
        (
          await http(a, 'PUT', '/v1/admin/connector-settings/http', {
            key: DEMO.admin,
            body: { secrets: { other_read_token: value } },
          })
        ).status,
      ).toBe(200);
    const unset = async () =>
      expect(
        (await http(a, 'DELETE', '/v1/admin/connector-settings/http/secrets/other_read_token', { key: DEMO.admin }))
          .status,
      ).toBe(204);
    try {
      // Each time B's read finds no secret first (B keeps that), then one is set through A. A 404's detail names the
      // id asked for (its `instance`, the path the client sent, is given as it was sent).
      const reads: [string, number][] = [
        [`/v1/operations/${operationId}`, 200],
        [`/v1/executions?limit=1&cursor=${executionId}z`, 200],
        [`/v1/operations/op_${value}`, 404],
        [`/v1/executions/exe_${value}`, 404],
        [`/v1/executions/exe_${value}/events`, 404],
      ];
      const shown = async (path: string, status: number) => {
        const text = await get(path, status);
        return status === 404 ? (JSON.parse(text) as { detail: string }).detail : text;
      };
      for (const [path, status] of reads) {
        expect(await shown(path, status)).toContain(value);
        await set();
        const read = await shown(path, status);
        expect(read).not.toContain(value);
        expect(read).toContain(placeholder);
        await unset();
      }
    } finally {
      await http(a, 'DELETE', '/v1/admin/connector-settings/http/secrets/other_read_token', { key: DEMO.admin });
    }
  });

  it("the review queue's pages of a tenant with no secrets need no round trip, nor a read of them; what a page found is not trusted past a change", async () => {
    const value = `queue${unique('v').replace(/[^a-z0-9]/gi, '')}`;
    const placeholder = '{{secret:queue_token}}';
    const page = (path: string) => http(b, 'GET', path, { key: DEMO.reviewer });
    // B reads the tenant once (what that costs is not counted: B may have kept nothing of the tenant's yet).
    expect((await http(b, 'GET', `/v1/connectors`, { key: DEMO.reviewer })).status).toBe(200);
    const [trips, reads] = [await roundTrips(b), await secretReads(b)];
    for (let i = 0; i < 2; i += 1) {
      expect((await page('/v1/review/approvals?limit=5')).status).toBe(200);
      expect((await page('/v1/review/manual-reviews?limit=5')).status).toBe(200);
    }
    expect((await roundTrips(b)) - trips).toBe(0);
    expect((await secretReads(b)) - reads).toBe(0);
    // A filter by a connector the registry does not have, and no operation of it waits: refused naming it.
    const refusal = async () => {
      const answer = await page(`/v1/review/approvals?connector=${value}`);
      expect(answer.status).toBe(400);
      return answer.text;
    };
    try {
      expect(await refusal()).toContain(value);
      expect(
        (
          await http(a, 'PUT', '/v1/admin/connector-settings/http', {
            key: DEMO.admin,
            body: { secrets: { queue_token: value } },
          })
        ).status,
      ).toBe(200);
      const refused = await refusal();
      expect(refused).not.toContain(value);
      expect(refused).toContain(placeholder);
    } finally {
      await http(a, 'DELETE', '/v1/admin/connector-settings/http/secrets/queue_token', { key: DEMO.admin });
    }
  });

  it('what a read of the execution found (no secrets) is not trusted past a change: the next GET, events page and stream of that process show the placeholder', async () => {
    const value = `read-${unique('v').replace(/[^a-z0-9]/gi, '')}`;
    const placeholder = '{{secret:read_token}}';
    const executionId = await create(DEMO.agent, value);
    await noted(executionId, `noted ${value}`);
    const get = async (path: string) => {
      const answer = await http(b, 'GET', `/v1/executions/${executionId}${path}`, { key: DEMO.agent });
      expect(answer.status).toBe(200);
      return answer.text;
    };
    const set = async () =>
      expect(
        (
          await http(a, 'PUT', '/v1/admin/connector-settings/http', {
            key: DEMO.admin,
            body: { secrets: { read_token: value } },
          })
        ).status,
      ).toBe(200);
    const unset = async () =>
      expect(
        (await http(a, 'DELETE', '/v1/admin/connector-settings/http/secrets/read_token', { key: DEMO.admin })).status,
      ).toBe(204);
    try {
      // Each time B's read of the execution finds no secret first (B keeps that), then one is set through A.
      expect(await get('')).toContain(value);
      await set();
      const read = await get('');
      expect(read).not.toContain(value);
      expect(read).toContain(placeholder);
      await unset();
      expect(await streamed(b, executionId, value)).toContain(`noted ${value}`);
      await set();
      const page = await streamed(b, executionId, placeholder);
      expect(page).not.toContain(value);
      await unset();
      expect(await get('/events')).toContain(value);
      await set();
      const events = await get('/events');
      expect(events).not.toContain(value);
      expect(events).toContain(placeholder);
    } finally {
      await http(a, 'DELETE', '/v1/admin/connector-settings/http/secrets/read_token', { key: DEMO.admin });
    }
  });
});
