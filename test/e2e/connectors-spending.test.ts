import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, sms, unique } from '../support/http';
import {
  Call,
  Execution,
  TargetServer,
  httpOp,
  recordingClient,
  settled,
  startTarget,
  submitOps,
  allowLoopbackPort,
} from './connectors-support';
import type { ExecutionEvent as Event } from '@verity/sdk';
import { createApiKey } from '@verity/persistence/api-keys';
import { eventTransactions } from '../support/event-transactions';

/**
 * A spending cap per tenant and connector. "At most 3 SMS per day": with four submitted at once (two
 * dispatcher processes racing), exactly three are sent and one is refused before dispatch — CANCELLED, never sent, with
 * a spending_cap.exceeded event carrying the cap, its period and the usage — and the provider saw three messages.
 */
describe('spending caps', () => {
  let stack: Stack;
  let call: Call;
  let target: TargetServer;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'connspend', dispatchers: 2 });
    ({ call } = recordingClient(stack));
    target = await startTarget();
  });
  afterAll(async () => {
    await target?.close();
    await stack?.stop();
  });

  const events = async (executionId: string) =>
    (await call<{ data: Event[] }>('GET', `/v1/executions/${executionId}/events`)).body.data;

  it('refuses the 4th SMS of the day before dispatch; the provider has exactly 3', async () => {
    const put = await call<{ spending_caps: unknown[] }>('PUT', '/v1/admin/connector-settings/sandbox.sms', {
      key: DEMO.admin,
      body: { spending_caps: [{ period: 'day', max_operations: 3 }] },
    });
    expect(put.status).toBe(200);
    expect(put.body.spending_caps).toEqual([{ period: 'day', max_operations: 3 }]);

    const refs = [1, 2, 3, 4].map(() => unique('capped-sms'));
    const submitted = await Promise.all(refs.map((ref) => submitOps(call, [sms(ref)])));
    const done: Execution[] = await Promise.all(submitted.map((e) => settled(call, e.id)));
    const ops = done.map((e) => e.operations[0]);
    expect(ops.map((o) => o.status).sort()).toEqual(['ACKNOWLEDGED', 'ACKNOWLEDGED', 'ACKNOWLEDGED', 'CANCELLED']);

    const refusedIndex = ops.findIndex((o) => o.status === 'CANCELLED');
    const refused = ops[refusedIndex];
    // Never sent: no attempt, no sent_at, and no SENT in its history.
    expect(refused).toMatchObject({ attempt: 0, sent_at: null, terminal_reason: null });
    expect(refused.evidence).toMatchObject({
      method: 'spending_cap',
      rule: 'max_operations',
      period: 'day',
      cap: { period: 'day', max_operations: 3 },
      usage: { period: 'day', operations: 3 },
      detail: expect.stringMatching(/^spending cap reached for sandbox\.sms: 3 of at most 3 operations per day/),
    });
    const history = await events(done[refusedIndex].id);
    const mine = history.filter((e) => e.operation_id === refused.id);
    expect(mine.filter((e) => e.to_status).map((e) => e.to_status)).toEqual(['CANCELLED']);
    expect(mine.find((e) => e.type === 'spending_cap.exceeded')?.data).toMatchObject({
      cap: { period: 'day', max_operations: 3 },
      period: 'day',
      usage: { operations: 3 },
    });
    // The cap's event is written with the move it explains: no CANCELLED without it, whenever a process stops.
    const written = await eventTransactions(stack.db, done[refusedIndex].id);
    const cancelled = mine.find((e) => e.to_status === 'CANCELLED')!;
    expect(written.get(mine.find((e) => e.type === 'spending_cap.exceeded')!.id)).toBe(written.get(cancelled.id));
    expect(done[refusedIndex].status).toBe('completed');

    const effects = await stack.effects();
    const sent = refs.filter((ref) => effects.messages[ref]).map((ref) => effects.messages[ref].count);
    expect(sent).toEqual([1, 1, 1]);
    expect(effects.messages[refs[refusedIndex]]).toBeUndefined();
    expect(effects.duplicates).toEqual([]);

    const settings = await call<{ usage: { period: string; operations: number }[] }>(
      'GET',
      '/v1/admin/connector-settings/sandbox.sms',
      { key: DEMO.admin },
    );
    expect(settings.body.usage).toEqual([expect.objectContaining({ period: 'day', operations: 3 })]);
  });

  it('keeps refusing in the same window, and sends again once the admin raises the cap', async () => {
    const fifthRef = unique('capped-sms');
    const fifth = await settled(call, (await submitOps(call, [sms(fifthRef)])).id);
    expect(fifth.operations[0]).toMatchObject({ status: 'CANCELLED', attempt: 0 });
    // Its retry (allowed: CANCELLED, never sent) is a new operation that the cap counts like any other: refused too.
    const retried = await call<{ execution: { id: string } }>('POST', `/v1/operations/${fifth.operations[0].id}/retry`);
    expect(retried.status).toBe(201);
    expect((await settled(call, retried.body.execution.id)).operations[0]).toMatchObject({
      status: 'CANCELLED',
      attempt: 0,
      retry_of: fifth.operations[0].id,
      failure: { code: 'spending_cap_reached', retryable: true },
    });
    expect((await stack.effects()).messages[fifthRef]).toBeUndefined();

    await call('PUT', '/v1/admin/connector-settings/sandbox.sms', {
      key: DEMO.admin,
      body: { spending_caps: [{ period: 'day', max_operations: 4 }] },
    });
    const ref = unique('capped-sms');
    const sixth = await settled(call, (await submitOps(call, [sms(ref)])).id);
    expect(sixth.operations[0].status).toBe('ACKNOWLEDGED');
    expect((await stack.effects()).messages[ref].count).toBe(1);
  });

  it('caps an amount: charges beyond the day’s total are refused, those within it are charged', async () => {
    await call('PUT', '/v1/admin/connector-settings/sandbox.payments', {
      key: DEMO.admin,
      body: { spending_caps: [{ period: 'day', max_amount: 3000, amount_field: 'amount' }] },
    });
    const refs = [unique('capped-order'), unique('capped-order'), unique('capped-order')];
    const results: Execution[] = [];
    // One after another, so which charge is over the cap is known: 1250 + 1250 = 2500; a third would be 3750.
    for (const ref of refs) results.push(await settled(call, (await submitOps(call, [charge(ref)])).id));
    expect(results.map((e) => e.operations[0].status)).toEqual(['VERIFIED', 'VERIFIED', 'CANCELLED']);
    expect(results[2].operations[0].evidence).toMatchObject({
      rule: 'max_amount',
      requested: 1250,
      usage: { amount: 2500, operations: 2 },
    });
    const effects = await stack.effects();
    expect(refs.map((ref) => effects.charges[ref]?.count ?? 0)).toEqual([1, 1, 0]);
  });

  it('counts no amount for a declined charge (it moved no money): the charge after it has the room', async () => {
    const putCap = (max_amount: number) =>
      call<{ usage: { amount: number; operations: number }[] }>(
        'PUT',
        '/v1/admin/connector-settings/sandbox.payments',
        {
          key: DEMO.admin,
          body: { spending_caps: [{ period: 'day', max_amount, amount_field: 'amount' }] },
        },
      );
    const used = (await putCap(1e15)).body.usage[0];
    expect((await putCap(used.amount + 2000)).status).toBe(200);
    const of = (reference: string) => charge(reference, { params: { amount: 2000, currency: 'EUR', reference } });
    const declinedRef = unique('decline-capped');
    const declined = await settled(call, (await submitOps(call, [of(declinedRef)])).id);
    expect(declined.operations[0]).toMatchObject({ status: 'FAILED', attempt: 1, commit: 'rejected' });
    // The same 2000 again, on a card that takes it: within the cap, since the declined one charged nothing.
    const ref = unique('after-decline');
    const charged = await settled(call, (await submitOps(call, [of(ref)])).id);
    expect(charged.operations[0]).toMatchObject({ status: 'VERIFIED', attempt: 1 });
    const effects = await stack.effects();
    expect([effects.charges[declinedRef]?.count ?? 0, effects.charges[ref]?.count]).toEqual([0, 1]);
    // Both count as sends (max_operations bounds attempts); only the charge counts as money.
    const usage = await call<{ usage: { amount: number; operations: number }[] }>(
      'GET',
      '/v1/admin/connector-settings/sandbox.payments',
      { key: DEMO.admin },
    );
    expect(usage.body.usage[0]).toMatchObject({ operations: used.operations + 2, amount: used.amount + 2000 });
  });

  it('refuses an amount above the cap’s own max_amount as no wait can change: not retryable', async () => {
    const cap = { period: 'hour', max_amount: 1000, amount_field: 'amount' };
    const put = await call('PUT', '/v1/admin/connector-settings/sandbox.payments', {
      key: DEMO.admin,
      body: { spending_caps: [cap] },
    });
    expect(put.status).toBe(200);
    const ref = unique('above-cap');
    const done = await settled(
      call,
      (await submitOps(call, [charge(ref, { params: { amount: 1001, currency: 'EUR', reference: ref } })])).id,
    );
    expect(done.operations[0]).toMatchObject({
      status: 'CANCELLED',
      attempt: 0,
      evidence: { method: 'spending_cap', rule: 'max_amount', requested: 1001, cap },
      // Not "spending_cap_reached, retryable": 1001 is above 1000 in any window, empty or not.
      failure: { code: 'amount_above_cap', category: 'policy', retryable: false },
    });
    expect((await stack.effects()).charges[ref]).toBeUndefined();

    // Beside a cap whose window is full (the hour's operations, all used): the amount no window has room for is what
    // the refusal names, not the full window, which would call it retryable once the hour has passed.
    const used = await call<{ usage: { operations: number }[] }>(
      'PUT',
      '/v1/admin/connector-settings/sandbox.payments',
      { key: DEMO.admin, body: { spending_caps: [{ period: 'hour', max_operations: 1_000_000 }] } },
    );
    const sentThisHour = used.body.usage[0].operations;
    expect(sentThisHour).toBeGreaterThan(0);
    const full = { period: 'hour', max_operations: sentThisHour };
    const both = await call('PUT', '/v1/admin/connector-settings/sandbox.payments', {
      key: DEMO.admin,
      body: { spending_caps: [full, { ...cap, period: 'day' }] },
    });
    expect(both.status).toBe(200);
    const second = unique('above-cap');
    const refused = await settled(
      call,
      (await submitOps(call, [charge(second, { params: { amount: 1001, currency: 'EUR', reference: second } })])).id,
    );
    expect(refused.operations[0]).toMatchObject({
      status: 'CANCELLED',
      evidence: { rule: 'max_amount', requested: 1001, cap: { ...cap, period: 'day' } },
      failure: { code: 'amount_above_cap', retryable: false },
    });
  });

  it('counts reviewers’ releases and fresh charges racing for the last two sends: exactly two are charged', async () => {
    // Held before any send (a knowledge conflict), so a reviewer's release is what sends each: its own path to SENT
    // (the operation's row locked first), judged by the same cap as the dispatches racing it.
    const heldRefs = [0, 1, 2, 3].map(() => unique('release-race'));
    const held = await Promise.all(
      heldRefs.map((ref) =>
        submitOps(call, [
          charge(ref, { params: { amount: 10, currency: 'EUR', reference: ref }, expected_state: { charged: true } }),
        ]),
      ),
    );
    const statusOf = async (e: Execution) =>
      (await call<Execution>('GET', `/v1/executions/${e.id}`)).body.operations[0];
    for (const e of held)
      await waitFor(
        () => statusOf(e),
        (o) => o.status === 'MANUAL_REVIEW',
        20_000,
      );
    const put = (caps: unknown[]) =>
      call<{ usage: { operations: number }[] }>('PUT', '/v1/admin/connector-settings/sandbox.payments', {
        key: DEMO.admin,
        body: { spending_caps: caps },
      });
    const used = (await put([{ period: 'month', max_operations: 1_000_000 }])).body.usage[0].operations;
    expect((await put([{ period: 'month', max_operations: used + 2 }])).status).toBe(200);

    const freshRefs = [0, 1, 2, 3].map(() => unique('fresh-race'));
    const raced = await Promise.all([
      ...held.map(async (e) => {
        const released = await call('POST', `/v1/operations/${e.operations[0].id}/resolve`, {
          key: DEMO.reviewer,
          body: { status: 'SENT', evidence: 'understood; send it' },
        });
        expect(released.status).toBe(200);
        return e;
      }),
      ...freshRefs.map((ref) =>
        submitOps(call, [charge(ref, { params: { amount: 10, currency: 'EUR', reference: ref } })]),
      ),
    ]);
    const ended = await Promise.all(
      raced.map((e) =>
        waitFor(
          () => statusOf(e),
          (o) => ['VERIFIED', 'CANCELLED'].includes(o.status),
          45_000,
        ),
      ),
    );
    const sent = ended.filter((o) => o.status === 'VERIFIED');
    expect(sent.map((o) => o.attempt)).toEqual([1, 1]);
    expect(
      ended.filter((o) => o.status === 'CANCELLED').map((o) => [o.attempt, (o.evidence as { rule?: string }).rule]),
    ).toEqual(Array.from({ length: 6 }, () => [0, 'max_operations']));
    const effects = await stack.effects();
    expect([...heldRefs, ...freshRefs].reduce((n, ref) => n + (effects.charges[ref]?.count ?? 0), 0)).toBe(2);
    expect(effects.duplicates).toEqual([]);
  });

  it('counts per tenant: another tenant’s cap of 1 is not used up by this tenant’s sends', async () => {
    // demo-other has no admin key among the demo keys: its setting is written the way the API would store it.
    await stack.db.dataSource.query(
      `INSERT INTO tenant_connector_settings (tenant_id, connector, spending_caps) VALUES ('demo-other', 'sandbox.sms', $1)`,
      [JSON.stringify([{ period: 'day', max_operations: 1 }])],
    );
    const { call: otherTenant } = recordingClient(stack, DEMO.otherAgent);
    const first = await settled(otherTenant, (await submitOps(otherTenant, [sms(unique('other-sms'))])).id);
    expect(first.operations[0].status).toBe('ACKNOWLEDGED');
    const second = await settled(otherTenant, (await submitOps(otherTenant, [sms(unique('other-sms'))])).id);
    expect(second.operations[0]).toMatchObject({ status: 'CANCELLED', evidence: { usage: { operations: 1 } } });
  });

  describe('amounts that would game a cap (a positive finite number of the cap’s unit, or nothing is sent)', () => {
    const payment = (amount: unknown, extra: Record<string, unknown> = {}) =>
      httpOp('pay', { method: 'POST', url: `${target.base}/orders`, body: { id: unique('pay'), amount } }, extra);
    const table = async (name: string) =>
      ((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM ${name}`)) as { n: number }[])[0].n;
    const posts = () => target.seen.filter((s) => s.method === 'POST').length;
    /** A payment accepted while the tenant has no cap on http, held for approval (not sent yet). */
    const heldWithoutCap = async (amount: unknown) => {
      await call('PUT', '/v1/admin/connector-settings/http', { key: DEMO.admin, body: { spending_caps: [] } });
      const waiting = await submitOps(call, [payment(amount, { requires_approval: true })]);
      await waitFor(
        async () => (await call<Execution>('GET', `/v1/executions/${waiting.id}`)).body,
        (e) => e.status === 'waiting_for_approval',
        20_000,
      );
      return waiting;
    };
    const approveAndSettle = async (waiting: Execution) => {
      const approved = await call('POST', `/v1/operations/${waiting.operations[0].id}/approval`, {
        key: DEMO.reviewer,
        body: { decision: 'approve' },
      });
      expect(approved.status).toBe(200);
      return settled(call, waiting.id);
    };

    beforeAll(async () => {
      await allowLoopbackPort(call, target.port);
    });

    it('refuses a cap whose own max_amount is not positive and finite (400 naming it; the settings stay)', async () => {
      const before = await call('GET', '/v1/admin/connector-settings/http', { key: DEMO.admin });
      const bodies: [string, string][] = [
        ['zero', '{"spending_caps":[{"period":"day","max_amount":0,"amount_field":"body.amount"}]}'],
        ['negative', '{"spending_caps":[{"period":"day","max_amount":-1000,"amount_field":"body.amount"}]}'],
        ['a string', '{"spending_caps":[{"period":"day","max_amount":"1000","amount_field":"body.amount"}]}'],
        ['null', '{"spending_caps":[{"period":"day","max_amount":null,"amount_field":"body.amount"}]}'],
        ['1e400 (Infinity)', '{"spending_caps":[{"period":"day","max_amount":1e400,"amount_field":"body.amount"}]}'],
      ];
      for (const [what, rawBody] of bodies) {
        const res = await http<{ errors: { field: string; rule: string }[] }>(
          stack.apiUrl,
          'PUT',
          '/v1/admin/connector-settings/http',
          { key: DEMO.admin, rawBody, headers: { 'content-type': 'application/json' } },
        );
        expect([what, res.status, res.headers.get('content-type')?.split(';')[0]]).toEqual([
          what,
          400,
          'application/problem+json',
        ]);
        expect(res.body.errors.map((e) => e.field)).toContain('spending_caps[0].max_amount');
      }
      expect((await call('GET', '/v1/admin/connector-settings/http', { key: DEMO.admin })).body).toEqual(before.body);
    });

    it('refuses at intake (400 naming the field, nothing written) an amount the tenant’s cap could not count', async () => {
      const put = await call('PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { spending_caps: [{ period: 'day', max_amount: 1000, amount_field: 'body.amount' }] },
      });
      expect(put.status).toBe(200);
      const before = { executions: await table('executions'), operations: await table('operations') };
      const sentBefore = posts();
      for (const amount of [-1_000_000, -0.01, 0, 'NaN', '1500', null, { value: 5 }, [5], undefined]) {
        const res = await call<{ errors: { field: string; rule: string }[] }>('POST', '/v1/executions', {
          body: { agent_id: 'a', intent: 'i', operations: [payment(amount)] },
        });
        expect([amount, res.status]).toEqual([amount, 400]);
        expect(res.body.errors).toContainEqual(
          expect.objectContaining({ field: 'operations[0].params.body.amount', rule: 'positive_amount' }),
        );
      }
      expect({ executions: await table('executions'), operations: await table('operations') }).toEqual(before);

      // With an Idempotency-Key too: 400, nothing written, and the key is free again (not held by a refused request).
      const key = unique('refused');
      const refused = await call('POST', '/v1/executions', {
        body: { agent_id: 'a', intent: 'i', operations: [payment('1500')] },
        headers: { 'idempotency-key': key },
      });
      expect(refused.status).toBe(400);
      const held = (await stack.db.dataSource.query(`SELECT key FROM idempotency_keys WHERE key = $1`, [key])) as [];
      expect(held).toEqual([]);
      expect({ executions: await table('executions'), operations: await table('operations') }).toEqual(before);

      // The cap still has its whole budget: nothing above bought any of it back.
      const within = await settled(call, (await submitOps(call, [payment(600)])).id);
      expect(within.operations[0].status).toBe('ACKNOWLEDGED');
      const over = await settled(call, (await submitOps(call, [payment(500)])).id);
      expect(over.operations[0]).toMatchObject({ status: 'CANCELLED', attempt: 0, evidence: { rule: 'max_amount' } });
      // 1e308 is a positive finite number: accepted at intake, and far over any cap at dispatch.
      const huge = await settled(call, (await submitOps(call, [payment(1e308)])).id);
      expect(huge.operations[0]).toMatchObject({ status: 'CANCELLED', attempt: 0, evidence: { rule: 'max_amount' } });
      expect(posts()).toBe(sentBefore + 1);
      const usage = await call<{ usage: { amount: number }[] }>('GET', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
      });
      expect(usage.body.usage[0].amount).toBe(600);
    });

    it('answers a held Idempotency-Key before the amounts: the replay, or 422 for another body', async () => {
      await call('PUT', '/v1/admin/connector-settings/http', { key: DEMO.admin, body: { spending_caps: [] } });
      const key = unique('capped-replay');
      const body = { agent_id: 'a', intent: 'i', operations: [payment('1500', { requires_approval: true })] };
      const first = await call<Execution>('POST', '/v1/executions', { body, headers: { 'idempotency-key': key } });
      expect(first.status).toBe(201);
      // Since then the tenant caps amounts, and this body's amount (a string) is one the cap could not count.
      await call('PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { spending_caps: [{ period: 'week', max_amount: 1000, amount_field: 'body.amount' }] },
      });
      try {
        const before = await table('executions');
        const replay = await call<Execution>('POST', '/v1/executions', { body, headers: { 'idempotency-key': key } });
        expect(replay.status).toBe(201);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(replay.body.id).toBe(first.body.id);
        const other = { ...body, intent: 'another' };
        const reused = await call<{ type: string }>('POST', '/v1/executions', {
          body: other,
          headers: { 'idempotency-key': key },
        });
        expect(reused.status).toBe(422);
        expect(reused.body.type).toBe('https://verity.dev/problems/idempotency-key-reused');
        // A new key with the same unchargeable body: the amount check answers, as before.
        const fresh = await call('POST', '/v1/executions', { body, headers: { 'idempotency-key': unique('k') } });
        expect(fresh.status).toBe(400);
        expect(await table('executions')).toBe(before);
      } finally {
        await call('POST', `/v1/executions/${first.body.id}/cancel`, {});
      }
    });

    /**
     * A payment of `amount` accepted while no cap applied, held for approval; `cap` is set, then it is approved: it is
     * cancelled at dispatch as `amount_unreadable` (`detail`) and never sent. Answers the operation as it ended.
     */
    async function cancelledAtDispatchUnder(amount: number, cap: Record<string, unknown>, detail: RegExp) {
      const waiting = await heldWithoutCap(amount);
      await call('PUT', '/v1/admin/connector-settings/http', { key: DEMO.admin, body: { spending_caps: [cap] } });
      const sentBefore = posts();
      const done = await approveAndSettle(waiting);
      expect(done.operations[0]).toMatchObject({
        status: 'CANCELLED',
        attempt: 0,
        sent_at: null,
        evidence: { rule: 'amount_unreadable', detail: expect.stringMatching(detail) },
      });
      expect(posts()).toBe(sentBefore);
      return done.operations[0];
    }

    it('cancels at dispatch, with evidence, an amount accepted before the cap existed', async () => {
      const cancelled = await cancelledAtDispatchUnder(
        -5000,
        { period: 'week', max_amount: 1000, amount_field: 'body.amount' },
        /does not carry as a positive finite number; not sent/,
      );
      expect(cancelled.evidence).toMatchObject({ method: 'spending_cap' });
      // No cap was reached and no wait changes it: not the retryable "cap reached".
      expect(cancelled.failure).toMatchObject({
        code: 'spending_cap_unmeasurable',
        category: 'policy',
        retryable: false,
      });
      // Its retry is a new operation submitted while the cap is in place: refused as intake refuses one (400 naming the
      // field), and nothing written — no execution that the cap would cancel, no approval asked of a reviewer for it.
      const [executions, operations] = [await table('executions'), await table('operations')];
      const retried = await call<{ errors: unknown[] }>('POST', `/v1/operations/${cancelled.id}/retry`);
      expect(retried.status).toBe(400);
      expect(retried.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(retried.body.errors).toEqual([
        { field: 'params.body.amount', rule: 'positive_amount', message: expect.stringContaining('positive finite') },
      ]);
      expect([await table('executions'), await table('operations')]).toEqual([executions, operations]);
    });

    it('refuses a retry whose body today’s rules refuse (a member named twice ignoring case, accepted before the rule)', async () => {
      // Held for approval, then given the body an operation accepted before 2026-12-04 may have (the rule refuses it at
      // intake since): the cap counts `amount` (1), a target that binds names ignoring case charges `AMOUNT`.
      const waiting = await heldWithoutCap(1);
      const opId = waiting.operations[0].id;
      await stack.db.dataSource.query(
        `UPDATE operations SET params = jsonb_set(params, '{body,AMOUNT}', '1000000') WHERE id = $1`,
        [opId],
      );
      const denied = await call('POST', `/v1/operations/${opId}/approval`, {
        key: DEMO.reviewer,
        body: { decision: 'deny' },
      });
      expect(denied.status).toBe(200);
      await call('PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { spending_caps: [{ period: 'week', max_amount: 1e15, amount_field: 'body.amount' }] },
      });
      // A retry is a new operation submitted now: judged by the connector's rules of now, as a submission is.
      const [executions, operations] = [await table('executions'), await table('operations')];
      const retried = await call<{ errors: { field: string; rule: string }[] }>('POST', `/v1/operations/${opId}/retry`);
      expect(retried.status).toBe(400);
      expect(retried.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(retried.body.errors).toEqual([
        // Whichever of the two the stored body holds later (jsonb keeps its members in an order of its own).
        expect.objectContaining({
          field: expect.stringMatching(/^params\.body\.(amount|AMOUNT)$/),
          rule: 'duplicate_key',
        }),
      ]);
      expect([await table('executions'), await table('operations')]).toEqual([executions, operations]);
    });

    it('cancels at dispatch a currency whose shown part ends inside an emoji (the cut keeps no half character)', async () => {
      // The evidence names the currency found, cut to 40 characters: cut between the two halves of an emoji, the half
      // left is text Postgres refuses in jsonb, and the refusal could not be written (the operation stayed PREPARED).
      // The cut leaves the whole emoji out instead.
      await call('PUT', '/v1/admin/connector-settings/http', { key: DEMO.admin, body: { spending_caps: [] } });
      const currency = `${'X'.repeat(39)}\u{1F4B6}`;
      const waiting = await submitOps(call, [
        httpOp(
          'pay',
          { method: 'POST', url: `${target.base}/orders`, body: { id: unique('pay'), amount: 10, currency } },
          { requires_approval: true },
        ),
      ]);
      await waitFor(
        async () => (await call<Execution>('GET', `/v1/executions/${waiting.id}`)).body,
        (e) => e.status === 'waiting_for_approval',
        20_000,
      );
      const cap = {
        period: 'week',
        max_amount: 1000,
        amount_field: 'body.amount',
        currency: 'EUR',
        currency_field: 'body.currency',
      };
      expect(
        (await call('PUT', '/v1/admin/connector-settings/http', { key: DEMO.admin, body: { spending_caps: [cap] } }))
          .status,
      ).toBe(200);
      const sentBefore = posts();
      const done = await approveAndSettle(waiting);
      expect(done.operations[0]).toMatchObject({
        status: 'CANCELLED',
        attempt: 0,
        evidence: {
          rule: 'currency_mismatch',
          currency_found: { field: 'body.currency', value: `${'X'.repeat(39)}…` },
        },
        failure: { code: 'spending_cap_unmeasurable', retryable: false },
      });
      expect(posts()).toBe(sentBefore);
    });

    it('counts the amount of an http FAILED: its rejection statuses are the operation’s own word, not the target’s', async () => {
      const put = await call<{ usage: { amount: number; operations: number }[] }>(
        'PUT',
        '/v1/admin/connector-settings/http',
        {
          key: DEMO.admin,
          body: { spending_caps: [{ period: 'week', max_amount: 1e15, amount_field: 'body.amount' }] },
        },
      );
      const before = put.body.usage[0];
      // A target that paid part of a batch and answered 422 would be paid, whatever the agent declared 422 to mean.
      const rejected = httpOp('pay', {
        method: 'POST',
        url: `${target.base}/reject`,
        body: { id: unique('pay'), amount: 50 },
        reject_statuses: [422],
      });
      const done = await settled(call, (await submitOps(call, [rejected])).id);
      expect(done.operations[0]).toMatchObject({ status: 'FAILED', attempt: 1, commit: 'rejected' });
      const after = await call<{ usage: { amount: number; operations: number }[] }>(
        'GET',
        '/v1/admin/connector-settings/http',
        { key: DEMO.admin },
      );
      expect(after.body.usage[0]).toMatchObject({ operations: before.operations + 1, amount: before.amount + 50 });
    });

    it('with amount_decimals, refuses at intake an amount a target would round up (0.004 charged as 0.01)', async () => {
      const cap = { period: 'week', max_amount: 1000, amount_field: 'body.amount', amount_decimals: 2 };
      const put = await call<{ spending_caps: unknown[] }>('PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { spending_caps: [cap] },
      });
      expect(put.body.spending_caps).toEqual([cap]);
      const before = { executions: await table('executions'), operations: await table('operations') };
      for (const amount of [0.004, 100.005, 1e-7, 5e-324]) {
        const res = await call<{ errors: { field: string; rule: string; message: string }[] }>(
          'POST',
          '/v1/executions',
          { body: { agent_id: 'a', intent: 'i', operations: [payment(amount)] } },
        );
        expect([amount, res.status, res.body.errors]).toEqual([
          amount,
          400,
          [
            expect.objectContaining({
              field: 'operations[0].params.body.amount',
              rule: 'positive_amount',
              message: expect.stringContaining('with at most 2 decimal places'),
            }),
          ],
        ]);
      }
      expect({ executions: await table('executions'), operations: await table('operations') }).toEqual(before);
      const cent = await settled(call, (await submitOps(call, [payment(0.01)])).id);
      expect(cent.operations[0].status).toBe('ACKNOWLEDGED');
      expect(JSON.parse(target.seen.filter((s) => s.method === 'POST').at(-1)!.body)).toMatchObject({ amount: 0.01 });
    });

    it('with amount_decimals set after acceptance, cancels at dispatch (never sent) an amount a target would round up', async () => {
      await cancelledAtDispatchUnder(
        0.004,
        { period: 'week', max_amount: 1000, amount_field: 'body.amount', amount_decimals: 2 },
        /positive finite number with at most 2 decimal places; not sent/,
      );
    });

    it('with a currency, refuses its lookalikes at intake; 24 charges at once under room for 10 send exactly 10', async () => {
      const putCap = async (max_amount: number) => {
        const cap = {
          period: 'hour',
          max_amount,
          amount_field: 'body.amount',
          currency: 'USD',
          currency_field: 'body.currency',
        };
        const put = await call<{ usage: { amount: number }[] }>('PUT', '/v1/admin/connector-settings/http', {
          key: DEMO.admin,
          body: { spending_caps: [cap] },
        });
        expect(put.status).toBe(200);
        return put.body.usage[0].amount;
      };
      // What the tests above sent in the last hour counts too: the cap leaves room for exactly 1000 more.
      const used = await putCap(1e15);
      await putCap(used + 1000);
      const usd = (currency: string) =>
        httpOp('pay', {
          method: 'POST',
          url: `${target.base}/orders`,
          body: { id: unique('pay'), amount: 100, currency },
        });
      for (const currency of ['usd', ' USD', 'USD\u200b', 'U\u0405D', '\uff35SD']) {
        const res = await call<{ errors: { field: string; rule: string }[] }>('POST', '/v1/executions', {
          body: { agent_id: 'a', intent: 'i', operations: [usd(currency)] },
        });
        expect([currency, res.status, res.body.errors]).toEqual([
          currency,
          400,
          [expect.objectContaining({ field: 'operations[0].params.body.currency', rule: 'currency_mismatch' })],
        ]);
      }
      const sentBefore = posts();
      const submitted = await Promise.all(Array.from({ length: 24 }, () => submitOps(call, [usd('USD')])));
      const done = await Promise.all(submitted.map((e) => settled(call, e.id)));
      const statuses = done.map((e) => e.operations[0].status);
      expect(statuses.filter((status) => status === 'ACKNOWLEDGED')).toHaveLength(10);
      expect(statuses.filter((status) => status === 'CANCELLED')).toHaveLength(14);
      expect(posts()).toBe(sentBefore + 10);

      // Amounts that differ, each within the room alone, racing two ways at once: fresh submissions (intake, then the
      // dispatch's check) and reviewers' approvals of charges held since before (the release's check). Exact: what
      // was sent sums to no more than the room, and every refused one would not have fitted in what was left — no
      // charge over the cap, and none refused that the cap had room for.
      const amounts = [90, 130, 170, 210, 250, 290, 330, 370, 410, 450, 490, 530];
      const charged = (amount: number) =>
        httpOp('pay', {
          method: 'POST',
          url: `${target.base}/orders`,
          body: { id: unique('race'), amount, currency: 'USD' },
        });
      const held = await Promise.all(
        amounts.slice(0, 4).map((amount) => submitOps(call, [{ ...charged(amount), requires_approval: true }])),
      );
      for (const e of held) {
        await waitFor(
          async () => (await call<Execution>('GET', `/v1/executions/${e.id}`)).body,
          (x) => x.status === 'waiting_for_approval',
          20_000,
        );
      }
      const room = 1000;
      await putCap((await putCap(1e15)) + room);
      const postsBefore = posts();
      const raced = await Promise.all([
        ...held.map(async (e) => {
          const approved = await call('POST', `/v1/operations/${e.operations[0].id}/approval`, {
            key: DEMO.reviewer,
            body: { decision: 'approve' },
          });
          expect(approved.status).toBe(200);
          return e;
        }),
        ...amounts.slice(4).map((amount) => submitOps(call, [charged(amount)])),
      ]);
      const ended = (await Promise.all(raced.map((e) => settled(call, e.id)))).map((e) => e.operations[0]);
      const amountOf = (op: Execution['operations'][number]) => (op.params as { body: { amount: number } }).body.amount;
      const accepted = ended.filter((op) => op.status === 'ACKNOWLEDGED').map(amountOf);
      const refused = ended.filter((op) => op.status !== 'ACKNOWLEDGED');
      const spent = accepted.reduce((sum, amount) => sum + amount, 0);
      expect(spent).toBeLessThanOrEqual(room);
      expect(
        refused.map((op) => [amountOf(op), op.status, op.attempt, (op.evidence as { rule?: string }).rule]),
      ).toEqual(refused.map((op) => [amountOf(op), 'CANCELLED', 0, 'max_amount']));
      expect(refused.filter((op) => amountOf(op) <= room - spent).map(amountOf)).toEqual([]);
      // The target was asked for exactly the accepted amounts, once each.
      const asked = target.seen
        .filter((s) => s.method === 'POST')
        .slice(postsBefore)
        .map((s) => (JSON.parse(s.body) as { amount: number }).amount);
      expect(asked.sort((a, b) => a - b)).toEqual([...accepted].sort((a, b) => a - b));
    });
  });

  /**
   * A cap on money names its currency: "at most 1000 EUR a day" is not gamed by charging 999 KWD (three times the
   * value). On the other tenant (a ledger of its own, untouched by the charges above), with keys of its own.
   */
  describe('a cap with a currency (an amount in another currency is never counted as the cap’s unit)', () => {
    const OTHER_ADMIN = 'test-spend-currency-other-admin-key';
    const OTHER_REVIEWER = 'test-spend-currency-other-reviewer-key';
    let other: Call;
    const eurCap = { period: 'day', max_amount: 1000, amount_field: 'amount', currency: 'EUR' };
    const pay = (reference: string, amount: number, currency: string, extra: Record<string, unknown> = {}) =>
      charge(reference, { key: 'pay', params: { amount, currency, reference }, ...extra });
    const putCaps = (caps: unknown[]) =>
      call<{ spending_caps: unknown[]; errors?: { field: string; rule: string; message: string }[] }>(
        'PUT',
        '/v1/admin/connector-settings/sandbox.payments',
        { key: OTHER_ADMIN, body: { spending_caps: caps } },
      );
    const table = async (name: string) =>
      ((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM ${name}`)) as { n: number }[])[0].n;

    beforeAll(async () => {
      await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'admin', key: OTHER_ADMIN });
      await createApiKey(stack.db.dataSource.manager, {
        tenantId: 'demo-other',
        role: 'reviewer',
        key: OTHER_REVIEWER,
      });
      ({ call: other } = recordingClient(stack, DEMO.otherAgent));
    });

    it('refuses a bad currency, a currency_field without a currency, and one no charge has (400, nothing written)', async () => {
      const before = await call('GET', '/v1/admin/connector-settings/sandbox.payments', { key: OTHER_ADMIN });
      const cases: [unknown, string, string][] = [
        [{ ...eurCap, currency: 'eur' }, 'spending_caps[0].currency', 'invalid_format'],
        [{ ...eurCap, currency: 'EURO' }, 'spending_caps[0].currency', 'invalid_format'],
        [{ ...eurCap, currency: 978 }, 'spending_caps[0].currency', 'invalid_type'],
        [
          { period: 'day', max_amount: 1000, amount_field: 'amount', currency_field: 'currency' },
          'spending_caps[0].currency_field',
          'requires_currency',
        ],
        [{ period: 'day', max_operations: 5, currency: 'EUR' }, 'spending_caps[0].currency', 'requires_max_amount'],
        [{ ...eurCap, currency_field: 'curency' }, 'spending_caps[0].currency_field', 'unknown_currency_field'],
        // A number is not where a currency is.
        [{ ...eurCap, currency_field: 'amount' }, 'spending_caps[0].currency_field', 'unknown_currency_field'],
        [{ ...eurCap, currency_field: 'a..b' }, 'spending_caps[0].currency_field', 'invalid_format'],
      ];
      for (const [cap, field, rule] of cases) {
        const res = await putCaps([cap]);
        expect({ cap, status: res.status, type: res.headers.get('content-type')?.split(';')[0] }).toEqual({
          cap,
          status: 400,
          type: 'application/problem+json',
        });
        expect(res.body.errors).toEqual(expect.arrayContaining([expect.objectContaining({ field, rule })]));
      }
      const unknown = await putCaps([{ ...eurCap, currency_field: 'curency' }]);
      expect(unknown.body.errors).toEqual([
        {
          field: 'spending_caps[0].currency_field',
          rule: 'unknown_currency_field',
          message: 'no action of sandbox.payments (charge) has a "curency" in its params',
        },
      ]);
      // Amount caps in two currencies would refuse every charge (each in the other's wrong currency).
      const two = await putCaps([eurCap, { ...eurCap, period: 'week', currency: 'USD' }]);
      expect(two.status).toBe(400);
      expect(two.body.errors).toEqual([expect.objectContaining({ field: 'spending_caps', rule: 'one_currency' })]);
      expect((await call('GET', '/v1/admin/connector-settings/sandbox.payments', { key: OTHER_ADMIN })).body).toEqual(
        before.body,
      );
    });

    it('refuses at intake (400 currency_mismatch, nothing written) a charge in another currency than the cap’s', async () => {
      const put = await putCaps([eurCap]);
      expect(put.status).toBe(200);
      expect(put.body.spending_caps).toEqual([eurCap]);
      const shown = await call<{ spending_caps: unknown[] }>('GET', '/v1/admin/connector-settings/sandbox.payments', {
        key: OTHER_ADMIN,
      });
      expect(shown.body.spending_caps).toEqual([eurCap]);

      const before = { executions: await table('executions'), operations: await table('operations') };
      const listed = async () =>
        (await other<{ data: { id: string }[] }>('GET', '/v1/executions')).body.data.map((e) => e.id);
      const listedBefore = await listed();
      const ref = unique('kwd-intake');
      const refused = await other<{ errors: { field: string; rule: string; message: string }[] }>(
        'POST',
        '/v1/executions',
        { body: { agent_id: 'a', intent: 'i', operations: [pay(ref, 999, 'KWD')] } },
      );
      expect(refused.status).toBe(400);
      expect(refused.body.errors).toEqual([
        {
          field: 'operations[0].params.currency',
          rule: 'currency_mismatch',
          message: `the tenant's spending cap on sandbox.payments (per day) counts params.amount in EUR: params.currency must be EUR (it is "KWD")`,
        },
      ]);
      expect({ executions: await table('executions'), operations: await table('operations') }).toEqual(before);
      expect(await listed()).toEqual(listedBefore);
      expect((await stack.effects()).charges[ref]).toBeUndefined();

      // The same amount in the cap's currency is accepted, charged and counted.
      const eurRef = unique('eur-intake');
      const done = await settled(other, (await submitOps(other, [pay(eurRef, 400, 'EUR')])).id);
      expect(done.operations[0].status).toBe('VERIFIED');
      expect((await stack.effects()).charges[eurRef].count).toBe(1);
    });

    it('cancels at dispatch, never sent, a charge in another currency accepted before the cap; the one in EUR is sent', async () => {
      expect((await putCaps([])).status).toBe(200);
      const kwdRef = unique('kwd-later');
      const eurRef = unique('eur-later');
      const kwd = await submitOps(other, [pay(kwdRef, 300, 'KWD', { requires_approval: true })]);
      const eur = await submitOps(other, [pay(eurRef, 300, 'EUR', { requires_approval: true })]);
      for (const e of [kwd, eur]) {
        await waitFor(
          async () => (await other<Execution>('GET', `/v1/executions/${e.id}`)).body,
          (x) => x.status === 'waiting_for_approval',
          20_000,
        );
      }
      expect((await putCaps([eurCap])).status).toBe(200);
      for (const e of [kwd, eur]) {
        const approved = await call('POST', `/v1/operations/${e.operations[0].id}/approval`, {
          key: OTHER_REVIEWER,
          body: { decision: 'approve' },
        });
        expect(approved.status).toBe(200);
      }
      const [kwdDone, eurDone] = [await settled(other, kwd.id), await settled(other, eur.id)];
      expect(eurDone.operations[0].status).toBe('VERIFIED');
      const refused = kwdDone.operations[0];
      expect(refused).toMatchObject({
        status: 'CANCELLED',
        attempt: 0,
        sent_at: null,
        evidence: {
          method: 'spending_cap',
          rule: 'currency_mismatch',
          cap: eurCap,
          requested: 300,
          currency_found: { field: 'currency', value: 'KWD' },
          detail: `spending cap on sandbox.payments counts params.amount in EUR; this operation's params.currency is "KWD", not EUR; not sent`,
        },
        failure: { code: 'spending_cap_unmeasurable', category: 'policy', retryable: false },
      });
      const history = (await other<{ data: Event[] }>('GET', `/v1/executions/${kwd.id}/events`)).body.data;
      const mine = history.filter((e) => e.operation_id === refused.id);
      expect(mine.filter((e) => e.to_status).map((e) => e.to_status)).toEqual(['CANCELLED']);
      expect(mine.find((e) => e.type === 'spending_cap.exceeded')?.data).toMatchObject({
        rule: 'currency_mismatch',
        cap: eurCap,
      });
      const effects = await stack.effects();
      expect(effects.charges[kwdRef]).toBeUndefined();
      expect(effects.charges[eurRef].count).toBe(1);
      // The day's usage: the two EUR charges, nothing of the KWD one.
      const usage = await call<{ usage: { amount: number; operations: number }[] }>(
        'GET',
        '/v1/admin/connector-settings/sandbox.payments',
        { key: OTHER_ADMIN },
      );
      expect(usage.body.usage[0]).toMatchObject({ operations: 2, amount: 700 });

      // Retried while the cap is in place: 400 as at intake, nothing written (the cap would refuse it again).
      const [executions, operations] = [await table('executions'), await table('operations')];
      const retried = await other<{ errors: unknown[] }>('POST', `/v1/operations/${refused.id}/retry`);
      expect(retried.status).toBe(400);
      expect(retried.body.errors).toEqual([
        { field: 'params.currency', rule: 'currency_mismatch', message: expect.stringContaining('must be EUR') },
      ]);
      expect([await table('executions'), await table('operations')]).toEqual([executions, operations]);
      // Once the cap counts its currency no more, the same retry is made.
      expect((await putCaps([])).status).toBe(200);
      expect((await other('POST', `/v1/operations/${refused.id}/retry`)).status).toBe(201);
    });
  });

  it('forgets ledger entries older than the longest cap period (a month): the sweeper prunes them', async () => {
    const ledger = async () =>
      (await stack.db.dataSource.query(`SELECT operation_id FROM connector_spend ORDER BY operation_id`)) as {
        operation_id: string;
      }[];
    const entries = await ledger();
    expect(entries.length).toBeGreaterThan(2);
    const [old, recent] = entries.map((e) => e.operation_id);
    await stack.db.dataSource.query(
      `UPDATE connector_spend SET spent_at = now() - interval '31 days' WHERE operation_id = $1`,
      [old],
    );
    await stack.db.dataSource.query(
      `UPDATE connector_spend SET spent_at = now() - interval '29 days' WHERE operation_id = $1`,
      [recent],
    );
    const after = await waitFor(ledger, (rows) => !rows.some((r) => r.operation_id === old), 20_000);
    expect(after.map((r) => r.operation_id)).toEqual(entries.map((e) => e.operation_id).filter((id) => id !== old));
  });
});
