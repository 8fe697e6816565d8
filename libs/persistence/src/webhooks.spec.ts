import { ExecutionStatus } from '@verity/status-model';
import { insertChargeExecution, insertStandingKeys, insertTestExecution } from '../../../test/support/fixtures';
import { waitForLockWaiter } from '../../../test/support/lock-waits';
import { waitFor } from '../../../test/support/stack';
import { useTestDatabase } from '../../../test/support/test-database';
import { OUTBOX_HORIZON_WAIT_MS } from '../../../test/support/webhook-deliveries';
import { webhookKeyHolder } from './idempotency';
import { SecretsCipher } from './secrets-cipher';
import { TransitionService } from './transition.service';
import {
  MAX_WEBHOOK_ENDPOINTS,
  WEBHOOK_CANDIDATES_SQL,
  createWebhookEndpoint,
  createWebhookEndpointIn,
  createWebhookEndpointWithKey,
  enableWebhookEndpoint,
  listWebhookDeliveries,
  listWebhookEndpoints,
  loadDeliveryToSend,
  OwedDelivery,
  owedWebhookDeliveries,
  recordWebhookAttempt,
  scanWebhookOutbox,
  WEBHOOKS_SQL,
} from './webhooks';

/** The webhook outbox reads the events table from a cursor: nothing committed is skipped, nothing is announced twice. */
describe('webhook outbox (real Postgres)', () => {
  const db = useTestDatabase('whoutbox', ['acme', 'other', 'racing', 'fair', 'late']);
  const transitions = new TransitionService();
  let endpointId: string;

  beforeAll(async () => {
    await insertStandingKeys(db.dataSource.manager, 'acme', ['test']);
    ({
      endpoint: { id: endpointId },
    } = (await createWebhookEndpoint(db.dataSource, new SecretsCipher(undefined), {
      tenantId: 'acme',
      url: 'http://127.0.0.1:9/hook',
      events: ['execution.finished'],
      createdBy: 'test',
    }))!);
  });

  function newExecution(tenantId = 'acme'): Promise<string> {
    return insertTestExecution(db.dataSource.manager, tenantId, { operations: [] });
  }

  const fail = (runner: Parameters<TransitionService['execution']>[0], id: string) =>
    transitions.execution(runner, { executionId: id, from: ExecutionStatus.CREATED, to: ExecutionStatus.FAILED });

  async function announced(): Promise<string[]> {
    const log = await listWebhookDeliveries(db.dataSource.manager, { tenantId: 'acme', endpointId, limit: 100 });
    return log.map((d) => String(d.payload.data.execution_id)).sort();
  }

  /** Scans until `until` holds: transactions elsewhere on the cluster may hold the horizon back for a moment. */
  async function scanUntil(until: (ids: string[]) => boolean): Promise<string[]> {
    const deadline = Date.now() + OUTBOX_HORIZON_WAIT_MS;
    for (;;) {
      await scanWebhookOutbox(db.dataSource, 100);
      const ids = await announced();
      if (until(ids) || Date.now() > deadline) return ids;
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  it('never jumps over an event whose transaction commits after a younger one', async () => {
    const [slow, fast, foreign, running] = [
      await newExecution(),
      await newExecution(),
      await newExecution('other'),
      await newExecution(),
    ];
    const runner = db.dataSource.createQueryRunner();
    await runner.connect();
    await runner.startTransaction();
    try {
      // The slow transaction writes its event first (the older transaction id) and commits last.
      expect((await fail(runner.manager, slow)).won).toBe(true);
      expect((await fail(db.dataSource.manager, fast)).won).toBe(true);
      expect((await fail(db.dataSource.manager, foreign)).won).toBe(true);
      // Not a terminal status: no webhook.
      await transitions.execution(db.dataSource.manager, {
        executionId: running,
        from: ExecutionStatus.CREATED,
        to: ExecutionStatus.VALIDATING,
      });
      // While the slow one is open, the younger committed event waits behind it (the cursor must not pass it).
      for (let i = 0; i < 3; i += 1) await scanWebhookOutbox(db.dataSource, 100);
      expect(await announced()).toEqual([]);
      await runner.commitTransaction();
    } finally {
      await runner.release();
    }
    const ids = await scanUntil((found) => found.length >= 2);
    expect(ids).toEqual([fast, slow].sort());
    // Scanning again announces nothing twice; the other tenant's event went to no endpoint of this tenant.
    await scanWebhookOutbox(db.dataSource, 100);
    expect(await announced()).toEqual([fast, slow].sort());
  });

  it('reads the candidate events through the partial index', async () => {
    const plan = await db.dataSource.transaction(async (tx) => {
      await tx.query(`SET LOCAL enable_seqscan = off`);
      return (await tx.query(
        `EXPLAIN SELECT e.id FROM events e
         WHERE ${WEBHOOK_CANDIDATES_SQL}
           AND (e.txid, e.id) > ('0'::xid8, '') ORDER BY e.txid, e.id LIMIT 10`,
      )) as { 'QUERY PLAN': string }[];
    });
    const text = plan.map((p) => p['QUERY PLAN']).join('\n');
    expect(text).toContain('events_webhook_outbox');
    expect(text).toContain('events_webhook_after_failed');
  });

  /** An endpoint of acme's that subscribes to operation.needs_review. */
  const needsReviewEndpoint = async (url: string) =>
    (await createWebhookEndpoint(db.dataSource, new SecretsCipher(undefined), {
      tenantId: 'acme',
      url,
      events: ['operation.needs_review'],
      createdBy: 'test',
    }))!.endpoint;

  /** The outbox scanned until the endpoint has a delivery (OUTBOX_HORIZON_WAIT_MS at most): the payloads it got. */
  async function payloadsDeliveredTo(endpointId: string): Promise<unknown[]> {
    const deadline = Date.now() + OUTBOX_HORIZON_WAIT_MS;
    let log: Awaited<ReturnType<typeof listWebhookDeliveries>> = [];
    while (log.length === 0 && Date.now() < deadline) {
      await scanWebhookOutbox(db.dataSource, 100);
      log = await listWebhookDeliveries(db.dataSource.manager, { tenantId: 'acme', endpointId, limit: 10 });
    }
    return log.map((d) => d.payload);
  }

  // Only what contradicts a final FAILED or VERIFIED needs a person; the same event while the outcome was still to be
  // decided is history alone.
  it.each([
    {
      what: 'a re-check that found the effect after a reviewer wrote FAILED',
      type: 'operation.rechecked',
      before: { trigger: 'scheduled', result: 'unreachable', held_for: 'SOURCE_UNREACHABLE' },
      after: { trigger: 'reviewer', result: 'found', held_for: 'SOURCE_UNREACHABLE', after: 'FAILED' },
    },
    {
      what: 'a 2xx recorded after the operation ended FAILED',
      type: 'operation.acknowledged_late',
      before: { detail: 'the provider acknowledged the send after it was marked UNKNOWN' },
      after: { detail: 'the provider acknowledged the send after it was marked UNKNOWN', after: 'FAILED' },
    },
    {
      what: 'a rejection recorded after the operation ended VERIFIED',
      type: 'operation.rejected_late',
      before: { reason: 'CONNECTOR_REJECTED', detail: 'provider rejected the request (402)' },
      after: { reason: 'CONNECTOR_REJECTED', detail: 'provider rejected the request (402)', after: 'VERIFIED' },
    },
  ])('announces $what as needing review', async ({ type, before, after }) => {
    const endpoint = await needsReviewEndpoint(`http://127.0.0.1:9/${type}`);
    const { executionId, operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    const annotate = (data: Record<string, unknown>) =>
      transitions.annotate(db.dataSource.manager, { executionId, operationId, type, data });
    await annotate(before);
    const refuting = await annotate(after);
    expect(await payloadsDeliveredTo(endpoint.id)).toEqual([
      {
        type: 'operation.needs_review',
        timestamp: expect.any(String),
        data: expect.objectContaining({
          event_id: refuting.won ? refuting.eventId : null,
          execution_id: executionId,
          operation_id: operationId,
          status: after.after,
          detail: expect.objectContaining(
            'result' in after ? { result: after.result, after: after.after } : { after: after.after },
          ),
        }),
      },
    ]);
  });

  const endpointFor = (tenantId: string) => ({
    tenantId,
    url: 'http://127.0.0.1:9/hook',
    events: ['webhook.disabled'],
    createdBy: 'test',
  });

  it("places each new delivery in its tenant's line, so one tenant's backlog does not stand before another's first", async () => {
    await createWebhookEndpoint(db.dataSource, new SecretsCipher(undefined), {
      tenantId: 'fair',
      url: 'http://127.0.0.1:9/fair',
      events: ['execution.finished'],
      createdBy: 'test',
    });
    const pendingOf = async (tenantId: string) =>
      Number(
        (
          (await db.dataSource.query(
            `SELECT count(*) AS n FROM webhook_deliveries WHERE tenant_id = $1 AND status = 'pending'`,
            [tenantId],
          )) as { n: string }[]
        )[0].n,
      );
    // acme's earlier deliveries still wait (nothing answers 127.0.0.1:9); the new tenant has none.
    const acmeWaiting = await pendingOf('acme');
    expect(await pendingOf('fair')).toBe(0);
    const ended = [await newExecution(), await newExecution(), await newExecution(), await newExecution('fair')];
    for (const id of ended) expect((await fail(db.dataSource.manager, id)).won).toBe(true);
    const created: OwedDelivery[] = [];
    const deadline = Date.now() + OUTBOX_HORIZON_WAIT_MS;
    while (created.length < ended.length && Date.now() < deadline) {
      created.push(...((await scanWebhookOutbox(db.dataSource, 100))?.created ?? []));
      if (created.length < ended.length) await new Promise((r) => setTimeout(r, 50));
    }
    const tenantOf = new Map(
      (
        (await db.dataSource.query(`SELECT id, tenant_id FROM webhook_deliveries WHERE id = ANY($1)`, [
          created.map((d) => d.id),
        ])) as { id: string; tenant_id: string }[]
      ).map((r) => [r.id, r.tenant_id]),
    );
    const line = (tenantId: string) => created.filter((d) => tenantOf.get(d.id) === tenantId).map((d) => d.backlog);
    expect(line('acme')).toEqual([acmeWaiting + 1, acmeWaiting + 2, acmeWaiting + 3]);
    // The new tenant's first delivery is first in its line, however long acme's is.
    expect(line('fair')).toEqual([1]);

    // Deliveries enqueued again (their jobs lost) are ranked the same way within the pass.
    const owed = await owedWebhookDeliveries(db.dataSource.manager, 0, 1000);
    const owedTenant = new Map(
      (
        (await db.dataSource.query(`SELECT id, tenant_id FROM webhook_deliveries WHERE id = ANY($1)`, [
          owed.map((d) => d.id),
        ])) as { id: string; tenant_id: string }[]
      ).map((r) => [r.id, r.tenant_id]),
    );
    for (const tenantId of ['acme', 'fair']) {
      const ranks = owed.filter((d) => owedTenant.get(d.id) === tenantId).map((d) => d.backlog);
      expect(ranks).toEqual(ranks.map((_, i) => i + 1));
    }
    expect(owed.filter((d) => owedTenant.get(d.id) === 'fair')).toHaveLength(1);
  });

  it('an endpoint deleted while the outbox writes its deliveries waits for the write, then takes them with it', async () => {
    const { endpoint } = (await createWebhookEndpoint(db.dataSource, new SecretsCipher(undefined), {
      tenantId: 'other',
      url: 'http://127.0.0.1:9/deleted',
      events: ['execution.finished'],
      createdBy: 'test',
    }))!;
    const runner = db.dataSource.createQueryRunner();
    await runner.connect();
    let deleting: Promise<unknown> | null = null;
    try {
      await runner.startTransaction();
      const found = (await runner.query(WEBHOOKS_SQL.subscribedEndpoints, [['other']])) as { id: string }[];
      expect(found.map((e) => e.id)).toContain(endpoint.id);
      // The admin's delete lands between the outbox's read of the endpoints and its insert of their deliveries.
      let deleted = false;
      deleting = db.dataSource
        .query(`DELETE FROM webhook_endpoints WHERE id = $1`, [endpoint.id])
        .finally(() => (deleted = true));
      // Seen waiting for the outbox transaction's lock, or finished without waiting: no time decides which.
      await waitForLockWaiter(db.dataSource, {
        statementLike: 'DELETE FROM webhook_endpoints%',
        unless: () => deleted,
      });
      if (deleted) throw new Error('the delete did not wait for the outbox transaction');
      await runner.query(WEBHOOKS_SQL.insertDeliveries, [
        ['whd_deleted_1'],
        [endpoint.id],
        ['other'],
        ['evt_deleted_1'],
        ['execution.finished'],
        [JSON.stringify({ type: 'execution.finished', timestamp: new Date().toISOString(), data: {} })],
        [null],
      ]);
      await runner.commitTransaction();
      await deleting;
    } finally {
      if (runner.isTransactionActive) await runner.rollbackTransaction();
      await runner.release();
      await deleting?.catch(() => undefined);
    }
    const left = (await db.dataSource.query(`SELECT id FROM webhook_deliveries WHERE endpoint_id = $1`, [
      endpoint.id,
    ])) as unknown[];
    expect(left).toEqual([]);
  });

  it('refuses an endpoint beyond the per-tenant limit', async () => {
    const add = () => createWebhookEndpoint(db.dataSource, new SecretsCipher(undefined), endpointFor('other'));
    for (let i = 0; i < MAX_WEBHOOK_ENDPOINTS; i += 1) expect(await add()).not.toBeNull();
    expect(await add()).toBeNull();
  });

  it('at the limit, a create under an Idempotency-Key takes no key either: a retry after a delete can still create', async () => {
    // 'other' is at the limit (the test above).
    const cipher = new SecretsCipher(undefined);
    const key = { key: 'at-limit', requestHash: 'h', ttlMs: 60_000 };
    expect(await createWebhookEndpointWithKey(db.dataSource, cipher, endpointFor('other'), key)).toBeNull();
    expect(await webhookKeyHolder(db.dataSource.manager, 'other', 'at-limit', 'h')).toBeNull();
    const [first] = await listWebhookEndpoints(db.dataSource.manager, 'other');
    await db.dataSource.query(`DELETE FROM webhook_endpoints WHERE id = $1`, [first.id]);
    const made = await createWebhookEndpointWithKey(db.dataSource, cipher, endpointFor('other'), key);
    expect(made).toEqual({ endpoint: expect.objectContaining({ tenant_id: 'other' }), secret: expect.any(String) });
    expect(await webhookKeyHolder(db.dataSource.manager, 'other', 'at-limit', 'h')).toEqual({
      kind: 'replay',
      endpointId: (made as { endpoint: { id: string } }).endpoint.id,
    });
  });

  /** Until a session of this database waits for an advisory lock (polled, never slept on blindly). */
  async function waitingForALock(stop: () => boolean): Promise<void> {
    while (!stop()) {
      const [{ n }] = (await db.dataSource.query(
        `SELECT count(*)::int AS n FROM pg_locks
          WHERE locktype = 'advisory' AND NOT granted
            AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
      )) as { n: number }[];
      if (n > 0) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  it('refuses the endpoint beyond the limit when two creates run at once (the second waits for the first)', async () => {
    const cipher = new SecretsCipher(undefined);
    for (let i = 0; i < MAX_WEBHOOK_ENDPOINTS - 1; i += 1) {
      expect(await createWebhookEndpoint(db.dataSource, cipher, endpointFor('racing'))).not.toBeNull();
    }
    // The last place, taken by a create whose transaction is still open when the next create starts.
    const first = db.dataSource.createQueryRunner();
    await first.connect();
    try {
      await first.startTransaction();
      expect(await createWebhookEndpointIn(first.manager, cipher, endpointFor('racing'))).not.toBeNull();
      const second = createWebhookEndpoint(db.dataSource, cipher, endpointFor('racing'));
      // The second create has either finished (it did not wait: the bug) or is seen waiting for the first's lock.
      let finished = false;
      void second.finally(() => (finished = true));
      await Promise.race([second, waitingForALock(() => finished)]);
      await first.commitTransaction();
      expect(await second).toBeNull();
    } finally {
      await first.release();
    }
    expect(await listWebhookEndpoints(db.dataSource.manager, 'racing')).toHaveLength(MAX_WEBHOOK_ENDPOINTS);
  });

  describe('an event the outbox reaches late (a slow pass, a long transaction holding it back)', () => {
    const cipher = new SecretsCipher(undefined);

    beforeAll(() => insertStandingKeys(db.dataSource.manager, 'late', ['test-late']));

    /** The executions announced to the endpoint, once the pass has reached `last` (no sleeping on a negative). */
    async function announcedTo(endpointId: string, last: string): Promise<string[]> {
      const deadline = Date.now() + OUTBOX_HORIZON_WAIT_MS;
      for (;;) {
        await scanWebhookOutbox(db.dataSource, 100);
        const log = await listWebhookDeliveries(db.dataSource.manager, { tenantId: 'late', endpointId, limit: 100 });
        const ids = log.map((d) => String(d.payload.data.execution_id));
        if (ids.includes(last)) return ids;
        if (Date.now() > deadline) throw new Error(`${last} was never announced to ${endpointId}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    }

    /**
     * Until a pass of the outbox can read the event (OUTBOX_HORIZON_WAIT_MS at most): no transaction older than the
     * event's own is still running on the server. From then on every pass reads it (a transaction begun later is younger).
     */
    async function readableByTheOutbox(eventId: string): Promise<void> {
      await waitFor(
        async () =>
          (
            (await db.dataSource.query(
              `SELECT txid < pg_snapshot_xmin(pg_current_snapshot()) AS readable FROM events WHERE id = $1`,
              [eventId],
            )) as { readable: boolean }[]
          )[0].readable,
        (readable) => readable,
        OUTBOX_HORIZON_WAIT_MS,
        50,
      );
    }

    /** A new endpoint of the tenant at `path`, sent every finished execution. */
    async function endpointAt(path: string) {
      const { endpoint } = (await createWebhookEndpoint(db.dataSource, cipher, {
        tenantId: 'late',
        url: `http://127.0.0.1:9/${path}`,
        events: ['execution.finished'],
        createdBy: 'test-late',
      }))!;
      return endpoint;
    }

    async function finished(): Promise<string> {
      const id = await newExecution('late');
      await fail(db.dataSource.manager, id);
      return id;
    }

    /**
     * Waits until the database's clock is in a later millisecond than now. The outbox compares times as JavaScript
     * dates (milliseconds): an event and an endpoint's creation or re-enable in one millisecond are judged concurrent,
     * either way. These cases are about an event clearly before the change, so the change waits for the next one.
     */
    async function nextMillisecond(): Promise<void> {
      const clock = async () =>
        (await db.dataSource.query(`SELECT date_trunc('milliseconds', clock_timestamp())::text AS at`))[0].at as string;
      const now = await clock();
      const deadline = Date.now() + 5_000;
      while ((await clock()) === now) {
        if (Date.now() > deadline) throw new Error('the database clock did not move');
      }
    }

    it('is not owed to an endpoint created after it happened', async () => {
      const before = await finished();
      await nextMillisecond();
      const endpoint = await endpointAt('new');
      const after = await finished();
      expect(await announcedTo(endpoint.id, after)).toEqual([after]);
      expect(before).not.toBe(after);
    });

    it('is not owed to an endpoint re-enabled after it happened while the endpoint was disabled', async () => {
      const endpoint = await endpointAt('reenabled');
      const enabled = await finished();
      await nextMillisecond();
      await db.dataSource.query(`UPDATE webhook_endpoints SET disabled_at = now() WHERE id = $1`, [endpoint.id]);
      const whileDisabled = await finished();
      await nextMillisecond();
      expect(
        await enableWebhookEndpoint(db.dataSource.manager, { tenantId: 'late', id: endpoint.id, by: 'test-late' }),
      ).not.toBeNull();
      const reenabled = await finished();
      expect((await announcedTo(endpoint.id, reenabled)).sort()).toEqual([enabled, reenabled].sort());
      expect(whileDisabled).toBeDefined();
    });

    /**
     * An execution finished before the endpoint's disable, one while it was disabled and one after its enable; the
     * pass runs while it is disabled (`passWhileDisabled`) or first after the enable. The delivery log's status of each.
     */
    async function acrossDisable(path: string, passWhileDisabled: boolean) {
      const endpoint = await endpointAt(path);
      const before = await finished();
      await nextMillisecond();
      await db.dataSource.query(`UPDATE webhook_endpoints SET disabled_at = now() WHERE id = $1`, [endpoint.id]);
      const whileDisabled = await finished();
      if (passWhileDisabled) expect(await announcedTo(endpoint.id, before)).toEqual([before]);
      await nextMillisecond();
      expect(
        await enableWebhookEndpoint(db.dataSource.manager, { tenantId: 'late', id: endpoint.id, by: 'test-late' }),
      ).not.toBeNull();
      const after = await finished();
      await announcedTo(endpoint.id, after);
      const log = await listWebhookDeliveries(db.dataSource.manager, {
        tenantId: 'late',
        endpointId: endpoint.id,
        limit: 100,
      });
      const statusOf = new Map(log.map((d) => [String(d.payload.data.execution_id), d.status]));
      return { before: statusOf.get(before), whileDisabled: statusOf.get(whileDisabled), after: statusOf.get(after) };
    }

    // Owed (it happened while the endpoint was enabled) and on its log, but the disable came after it: skipped, as a
    // delivery pending at the disable is, so the enable does not send it. The one after the enable is sent.
    it('is written skipped, not sent, when the endpoint was disabled after it happened (enabled again or not)', async () => {
      expect(await acrossDisable('disabled-after', true)).toEqual({
        before: 'skipped',
        whileDisabled: undefined,
        after: 'pending',
      });
    });

    it('is written skipped when the pass first reaches it after the endpoint was disabled and enabled again', async () => {
      expect(await acrossDisable('late-pass', false)).toEqual({
        before: 'skipped',
        whileDisabled: undefined,
        after: 'pending',
      });
    });

    it('a delivery the pass writes while its endpoint is being disabled is not sent by a later enable', async () => {
      const endpoint = await endpointAt('racing-disable');
      // A delivery whose last attempt fails: it disables the endpoint (disableAfter 1).
      const first = await finished();
      await announcedTo(endpoint.id, first);
      const [failing] = await listWebhookDeliveries(db.dataSource.manager, {
        tenantId: 'late',
        endpointId: endpoint.id,
        limit: 1,
      });
      const before = await finished();
      const [event] = (await db.dataSource.query(
        `SELECT id FROM events WHERE execution_id = $1 AND type = 'execution.status_changed'`,
        [before],
      )) as { id: string }[];
      // The single pass below must reach the event: it reads no event of a transaction younger than the oldest one
      // still running on the whole server, and a test file beside this one may hold one open for many seconds.
      await readableByTheOutbox(event.id);
      // Holds the pass at its insert of `before`'s delivery, after it read the endpoint enabled: another transaction
      // has the same (endpoint, event) row uncommitted, and the insert waits for its outcome.
      const holder = db.dataSource.createQueryRunner();
      await holder.connect();
      await holder.startTransaction();
      let scan: Promise<unknown> | undefined;
      try {
        await holder.query(
          `INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, event_id, type, payload)
           VALUES ('msg_holder', $1, 'late', $2, 'execution.finished', '{}'::jsonb)`,
          [endpoint.id, event.id],
        );
        scan = scanWebhookOutbox(db.dataSource, 100);
        await waitForLockWaiter(db.dataSource, { statementLike: 'INSERT INTO webhook_deliveries%' });
        await nextMillisecond();
        const disabled = await recordWebhookAttempt(db.dataSource, {
          deliveryId: failing.id,
          round: failing.round,
          outcome: { ok: false, status: 500, error: 'HTTP 500' },
          final: true,
          disableAfter: 1,
        });
        expect(disabled.disabled).toBeDefined();
      } finally {
        await holder.rollbackTransaction();
        await holder.release();
      }
      await scan;
      await nextMillisecond();
      expect(
        await enableWebhookEndpoint(db.dataSource.manager, { tenantId: 'late', id: endpoint.id, by: 'test-late' }),
      ).not.toBeNull();
      const log = await listWebhookDeliveries(db.dataSource.manager, {
        tenantId: 'late',
        endpointId: endpoint.id,
        limit: 100,
      });
      const delivery = log.find((d) => d.payload.data.execution_id === before)!;
      expect(delivery).toBeDefined();
      // Owed before the disable, as a pending delivery the disable skipped: its turn, after the enable, does not send it.
      const toSend = await loadDeliveryToSend(db.dataSource.manager, cipher, delivery.id, delivery.round);
      expect(toSend?.skip).toBe('endpoint_disabled');
    });
  });
});
