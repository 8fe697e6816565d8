import SwaggerParser from '@apidevtools/swagger-parser';
import { chargeOperation, insertTestExecution } from '../support/fixtures';
import { z } from 'zod';
import { API_SCHEMAS, componentSchemas } from '../../apps/api/src/openapi';
import { DEMO, METRICS_TOKEN, Stack, waitFor } from '../support/stack';
import { charge, http, sms, submission, unique } from '../support/http';

/**
 * The read endpoints, cancel and retry through all processes, and the OpenAPI contract: every response is
 * checked against the (strict) schemas that /docs-json serves, so an undocumented or internal field fails here.
 */

type Execution = z.infer<typeof API_SCHEMAS.Execution>;
type Operation = z.infer<typeof API_SCHEMAS.Operation>;
type EventList = z.infer<typeof API_SCHEMAS.EventList>;
type ExecutionList = z.infer<typeof API_SCHEMAS.ExecutionList>;
interface Problem {
  type: string;
  status: number;
  retry?: string;
  current_status?: string;
  errors?: { field: string; rule: string }[];
}

const TERMINAL = ['completed', 'failed', 'cancelled', 'expired'];
/** Columns that exist in the database and must never reach a response. */
const INTERNAL_FIELDS = [
  'tenant_id',
  'generation',
  'check_count',
  'provider_ref',
  'event_seq',
  'idempotency_key',
  'baseline',
  'next_check_at',
  'key_hash',
];

describe('reads, cancel, retry and the OpenAPI contract', () => {
  let stack: Stack;
  /** Every JSON body the API returned in this file, with the schema it must satisfy. */
  const seen: { schema: keyof typeof API_SCHEMAS; body: unknown; what: string }[] = [];

  beforeAll(async () => {
    // A large reconcile budget keeps an operation UNKNOWN while the source is unreadable (the cancel test).
    stack = await Stack.start({ label: 'apireads', env: { RECONCILE_BUDGET: '100000' } });
  });
  afterAll(async () => stack?.stop());

  async function get<T>(path: string, schema: keyof typeof API_SCHEMAS, key = DEMO.agent) {
    const res = await http<T>(stack.apiUrl, 'GET', path, { key });
    expect(res.status).toBe(200);
    seen.push({ schema, body: res.body, what: `GET ${path}` });
    return res.body;
  }
  const execution = (id: string) => get<Execution>(`/v1/executions/${id}`, 'Execution');
  const settled = (id: string, until: (e: Execution) => boolean = (e) => TERMINAL.includes(e.status)) =>
    waitFor(() => execution(id), until, 45_000, 150);

  async function submit(operations: unknown[], extra: Record<string, unknown> = {}) {
    const res = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission(operations, extra),
    });
    expect(res.status).toBe(201);
    seen.push({ schema: 'Execution', body: res.body, what: 'POST /v1/executions' });
    return res.body;
  }

  it('returns an execution with its operations, retry rule per operation, effects and failure', async () => {
    const done = await settled((await submit([charge(unique('order')), sms(unique('sms'))])).id);
    expect(done.status).toBe('completed');
    expect(done.operations.map((o) => [o.key, o.status, o.retry, o.verification_method])).toEqual([
      ['charge', 'VERIFIED', 'not_needed', 'read_after_write'],
      ['notify', 'ACKNOWLEDGED', 'wait', ''],
    ]);
    expect(done.effects).toEqual({
      summary: 'unverified',
      counts: expect.objectContaining({ VERIFIED: 1, ACKNOWLEDGED: 1, PREPARED: 0 }),
      // Added fields (docs/semantics.md): the SMS was accepted, not proven committed.
      commit: { not_dispatched: 0, committed: 1, rejected: 0, unknown: 1 },
      no_change_required: 0,
      not_sent: 0,
      held_not_sent: 0,
    });
    expect(done.failure).toBeNull();

    const op = await get<Operation & { permitted_resolutions: string[] }>(
      `/v1/operations/${done.operations[0].id}`,
      'OperationDetail',
    );
    expect(op.evidence).toMatchObject({ method: 'read_after_write' });
    expect(op.permitted_resolutions).toEqual([]);

    // A row that intake would have refused (written by hand) fails in validating, with a structured failure.
    const id = await insertTestExecution(stack.db.dataSource.manager, 'demo', {
      execution: { agentId: 'hand-written', intent: 'bypasses intake' },
      operations: [
        chargeOperation({ key: 'x', connector: 'acme.rockets', action: 'launch', params: {}, verification_method: '' }),
      ],
    });
    const failed = await settled(id);
    expect(failed.status).toBe('failed');
    expect(failed.failure).toMatchObject({ code: 'invalid_request', phase: 'validating', category: 'caller_error' });
    expect(failed.operations[0]).toMatchObject({ status: 'CANCELLED', retry: 'safe' });
  });

  it('shows an execution with criteria with a pending outcome from its 201 on, never an outcome of null', async () => {
    const criteria = [
      { key: 'paid', operation: 'charge', expect_status: 'VERIFIED' },
      { key: 'amount', operation: 'charge', expect_evidence: { path: 'record.amount', equals: 1250 } },
    ];
    const created = await submit([charge(unique('outcome-201'))], { criteria });
    // Not evaluated yet (the dispatcher has not advanced it): pending, each criterion pending with no evidence.
    expect(created.outcome).toEqual({ result: 'pending', evaluated_at: created.created_at });
    expect(created.criteria_results).toEqual(
      criteria.map((c) => ({ ...c, verdict: 'pending', rationale: 'not evaluated yet', evidence_event_ids: [] })),
    );
    // The first evaluation is written over it as before (its compare-and-set found nothing stored), then the next.
    const judged = await settled(created.id, (e) => e.outcome?.result === 'satisfied');
    expect(Number.isNaN(Date.parse(judged.outcome!.evaluated_at!))).toBe(false);
    expect(judged.criteria_results!.map((r) => [r.key, r.verdict, r.evidence_event_ids.length])).toEqual([
      ['paid', 'pass', 1],
      ['amount', 'pass', 1],
    ]);
    // Without criteria there is nothing to judge: outcome and criteria_results stay null.
    const plain = await submit([sms(unique('outcome-none'))]);
    expect([plain.outcome, plain.criteria_results]).toEqual([null, null]);
    expect((await execution(plain.id)).outcome).toBeNull();
  });

  it('lists newest first with a status filter and cursor pagination that neither skips nor repeats', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i += 1) ids.push((await submit([sms(unique('list'))], { agent_id: 'lister' })).id);
    const pages: string[][] = [];
    let cursor: string | null = null;
    do {
      const page: ExecutionList = await get<ExecutionList>(
        `/v1/executions?limit=2${cursor ? `&cursor=${cursor}` : ''}`,
        'ExecutionList',
      );
      expect(page.data.length).toBeLessThanOrEqual(2);
      pages.push(page.data.map((e) => e.id));
      cursor = page.next_cursor;
      if (cursor) expect(cursor).toBe(page.data[page.data.length - 1].id);
    } while (cursor && pages.length < 100);
    const all = pages.flat();
    expect(new Set(all).size).toBe(all.length);
    expect([...all].sort().reverse()).toEqual(all);
    const [total] = (await stack.db.dataSource.query(
      `SELECT count(*)::int AS n FROM executions WHERE tenant_id = 'demo'`,
    )) as { n: number }[];
    expect(all.length).toBe(total.n);
    expect(all.slice(0, 5)).toEqual([...ids].reverse());

    for (const id of ids) await settled(id);
    const completed = await get<ExecutionList>('/v1/executions?status=completed&limit=200', 'ExecutionList');
    expect(completed.data.every((e) => e.status === 'completed')).toBe(true);
    expect(completed.data.map((e) => e.id)).toEqual(expect.arrayContaining(ids));
    const running = await get<ExecutionList>('/v1/executions?status=waiting_for_approval', 'ExecutionList');
    expect(running.data.map((e) => e.id)).not.toEqual(expect.arrayContaining(ids));
  });

  it('reads the event log in order after a cursor (event id or seq), page by page', async () => {
    const done = await settled((await submit([charge(unique('order'))])).id);
    const full = await get<EventList>(`/v1/executions/${done.id}/events`, 'EventList');
    expect(full.next_cursor).toBeNull();
    expect(full.data.map((e) => e.seq)).toEqual(full.data.map((_, i) => i + 1));
    expect(full.data[0]).toMatchObject({ type: 'execution.created', to_status: 'created', seq: 1 });
    const opChanges = full.data.filter((e) => e.operation_id === done.operations[0].id && e.to_status);
    expect(opChanges.map((e) => e.to_status)).toEqual(['SENT', 'ACKNOWLEDGED', 'VERIFIED']);
    expect(full.data[full.data.length - 1].to_status).toBe('completed');

    const third = full.data[2];
    const afterId = await get<EventList>(`/v1/executions/${done.id}/events?after=${third.id}`, 'EventList');
    expect(afterId.data).toEqual(full.data.slice(3));
    const afterSeq = await get<EventList>(`/v1/executions/${done.id}/events?after=3`, 'EventList');
    expect(afterSeq.data).toEqual(full.data.slice(3));

    const paged: string[] = [];
    let after = '';
    for (let i = 0; i < 50; i += 1) {
      const page: EventList = await get<EventList>(
        `/v1/executions/${done.id}/events?limit=2${after ? `&after=${after}` : ''}`,
        'EventList',
      );
      paged.push(...page.data.map((e) => e.id));
      if (!page.next_cursor) break;
      after = page.next_cursor;
    }
    expect(paged).toEqual(full.data.map((e) => e.id));

    const other = await settled((await submit([sms(unique('sms'))])).id);
    const foreign = (await get<EventList>(`/v1/executions/${other.id}/events`, 'EventList')).data[1].id;
    for (const bad of [foreign, 'evt_01doesnotexist', 'yesterday']) {
      const res = await http<Problem>(stack.apiUrl, 'GET', `/v1/executions/${done.id}/events?after=${bad}`, {
        key: DEMO.agent,
      });
      expect(res.status).toBe(400);
      expect(res.body.errors?.[0]).toMatchObject({ field: 'after', rule: 'known_event' });
    }
    // The message quotes the cursor's first 100 characters, never half of one: an emoji at the cut left its first half,
    // sent as "\ud83d", which strict JSON readers refuse with the whole answer (the refusal could not be read).
    const emoji = await http<Problem>(
      stack.apiUrl,
      'GET',
      `/v1/executions/${done.id}/events?after=${encodeURIComponent(`${'a'.repeat(99)}\u{1F600}`)}`,
      { key: DEMO.agent },
    );
    expect(emoji.status).toBe(400);
    expect(emoji.body.errors?.[0]).toMatchObject({
      rule: 'known_event',
      message: `no event ${'a'.repeat(99)} in this execution`,
    });
  });

  it('cancels: PREPARED operations become CANCELLED, an operation already sent keeps being reconciled (I11)', async () => {
    const reference = unique('order');
    // The charge reaches the provider but the answer is lost (UNKNOWN), and the source cannot be read yet.
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
      read_fault: 'unavailable',
    });
    try {
      const created = await submit([
        charge(reference),
        charge(unique('held'), { key: 'held', requires_approval: true }),
        sms(unique('later'), { depends_on: ['held'] }),
      ]);
      const inFlight = await settled(
        created.id,
        (e) =>
          ['UNKNOWN', 'RECONCILING'].includes(e.operations[0].status) &&
          e.operations[1].approval?.state === 'requested',
      );
      expect(inFlight.operations.map((o) => o.status).slice(1)).toEqual(['PREPARED', 'PREPARED']);

      const forbidden = await http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${inFlight.operations[0].id}/retry`, {
        key: DEMO.agent,
      });
      expect(forbidden.status).toBe(409);
      // UNKNOWN (forbidden: a blind re-send could charge twice) or, mid-check, RECONCILING (wait).
      expect(forbidden.body).toMatchObject({ type: 'https://verity.dev/problems/retry-not-allowed', status: 409 });
      expect({ UNKNOWN: 'forbidden', RECONCILING: 'wait' }[forbidden.body.current_status ?? '']).toBe(
        forbidden.body.retry,
      );
      seen.push({ schema: 'Problem', body: forbidden.body, what: 'retry UNKNOWN' });

      const cancelled = await http<Execution>(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, {
        key: DEMO.agent,
        body: { reason: 'the customer called' },
      });
      expect(cancelled.status).toBe(200);
      seen.push({ schema: 'Execution', body: cancelled.body, what: 'POST cancel' });
      expect(cancelled.body.status).toBe('cancelled');
      expect(['UNKNOWN', 'RECONCILING']).toContain(cancelled.body.operations[0].status);
      expect(cancelled.body.operations.slice(1).map((o) => o.status)).toEqual(['CANCELLED', 'CANCELLED']);

      const again = await http<Problem>(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, {
        key: DEMO.agent,
      });
      expect(again.status).toBe(409);
      expect(again.body).toMatchObject({
        // A second cancel is a decision already made (I13): the problem names the winner's decision.
        type: 'https://verity.dev/problems/already-decided',
        status: 409,
        decision: 'cancel',
        current_status: 'cancelled',
      });

      // The source becomes readable: the charge that did happen is found, not written off.
      await stack.setFaults({ rules: [], read_fault: null });
      const after = await settled(created.id, (e) => e.operations[0].status === 'VERIFIED');
      expect(after.status).toBe('cancelled');
      expect(after.operations.slice(1).map((o) => o.status)).toEqual(['CANCELLED', 'CANCELLED']);
      expect((await stack.effects()).charges[reference].count).toBe(1);

      const events = await get<EventList>(`/v1/executions/${created.id}/events`, 'EventList');
      const cancelEvent = events.data.find((e) => e.to_status === 'cancelled');
      expect(cancelEvent?.data).toMatchObject({ reason: 'the customer called' });
      // Each operation the cancel ended keeps the caller's reason too, beside its (null) terminal reason.
      for (const op of after.operations.slice(1)) {
        const ended = events.data.find((e) => e.operation_id === op.id && e.to_status === 'CANCELLED');
        expect(ended?.data).toMatchObject({
          caller_reason: 'the customer called',
          reason: null,
          by: cancelEvent?.data?.by,
        });
      }
      expect(
        events.data.filter((e) => e.operation_id === after.operations[0].id).map((e) => e.to_status),
      ).not.toContain('CANCELLED');
    } finally {
      await stack.setFaults({ rules: [], read_fault: null });
    }
  });

  it('cancels atomically even while the dispatcher is advancing the execution', async () => {
    // Cancel right after submit races validating/planning/sending: the answer is `cancelled` — or, when the whole
    // happy path finished first (it takes milliseconds), 409 execution-terminal with nothing changed — never a
    // completed execution whose operations the cancel had already settled. One waiting for approval cannot finish
    // first: its cancel always wins.
    for (let i = 0; i < 6; i += 1) {
      const waitsForApproval = i % 2 === 0;
      const created = await submit([
        charge(unique('race'), { requires_approval: waitsForApproval }),
        sms(unique('race')),
      ]);
      const res = await http<Execution & { type?: string; current_status?: string }>(
        stack.apiUrl,
        'POST',
        `/v1/executions/${created.id}/cancel`,
        { key: DEMO.agent },
      );
      const final = await settled(created.id, (e) =>
        e.operations.every((o) => !['PREPARED', 'SENT'].includes(o.status)),
      );
      if (waitsForApproval || res.status !== 409) {
        expect(res.status).toBe(200);
        expect(res.body.status).toBe('cancelled');
        expect(final.status).toBe('cancelled');
        for (const op of final.operations) expect(['CANCELLED', 'ACKNOWLEDGED', 'VERIFIED']).toContain(op.status);
      } else {
        expect(res.body).toMatchObject({
          type: 'https://verity.dev/problems/execution-terminal',
          current_status: 'completed',
        });
        expect(final.status).toBe('completed');
        expect(final.operations.map((o) => o.status)).toEqual(['VERIFIED', 'ACKNOWLEDGED']);
      }
    }
  });

  it('retries a FAILED operation as a new one (retry_of), once; refuses other statuses with their rule', async () => {
    const failed = await settled((await submit([charge(unique('decline-order'))], { deadline_seconds: 3600 })).id);
    const op = failed.operations[0];
    expect(op).toMatchObject({ status: 'FAILED', terminal_reason: 'CONNECTOR_REJECTED', retry: 'safe' });

    const retried = await http<z.infer<typeof API_SCHEMAS.RetryResult>>(
      stack.apiUrl,
      'POST',
      `/v1/operations/${op.id}/retry`,
      { key: DEMO.agent },
    );
    expect(retried.status).toBe(201);
    seen.push({ schema: 'RetryResult', body: retried.body, what: 'POST retry' });
    expect(retried.body.operation).toMatchObject({
      retry_of: op.id,
      status: 'PREPARED',
      key: op.key,
      params: op.params,
    });
    expect(retried.body.execution.id).not.toBe(failed.id);
    // As long as the original had (its deadline_seconds), not a fixed ten minutes.
    const lasts = (e: { created_at: string; deadline_at: string }) =>
      Math.round((Date.parse(e.deadline_at) - Date.parse(e.created_at)) / 1000);
    expect(lasts(retried.body.execution)).toBe(3600);
    expect(retried.headers.get('location')).toBe(`/v1/operations/${retried.body.operation.id}`);
    const original = await execution(failed.id);
    expect(original.operations).toHaveLength(1);
    expect(original.operations[0].status).toBe('FAILED');

    const twice = await http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${op.id}/retry`, { key: DEMO.agent });
    expect(twice.status).toBe(409);
    expect(twice.body).toMatchObject({
      type: 'https://verity.dev/problems/already-retried',
      retry: 'safe',
      current_status: 'FAILED',
      // The retry that exists: a caller whose first retry timed out finds it here.
      retried_by: { operation_id: retried.body.operation.id, execution_id: retried.body.execution.id },
    });

    const verified = await settled((await submit([charge(unique('order')), sms(unique('sms'))])).id);
    for (const [o, rule] of [
      [verified.operations[0], 'not_needed'],
      [verified.operations[1], 'wait'],
    ] as const) {
      const res = await http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${o.id}/retry`, { key: DEMO.agent });
      expect(res.status).toBe(409);
      expect(res.body).toMatchObject({
        type: 'https://verity.dev/problems/retry-not-allowed',
        retry: rule,
        status: 409,
      });
    }
    const withBody = await http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${op.id}/retry`, {
      key: DEMO.agent,
      body: { params: { amount: 1 } },
    });
    expect(withBody.status).toBe(400);
  });

  it('cuts a retry’s intent to 4000 characters without halving one (an emoji at the cut is left out whole)', async () => {
    // The retry's intent is "Retry of <op> (<key>) from <execution>: " and the original's, cut to 4000 UTF-16 units.
    // Emoji of two units each, starting at either parity: one of the two cuts falls between an emoji's halves.
    const emoji = '\u{1F4B6}';
    let halved = 0;
    for (const intent of [emoji.repeat(1999), `x${emoji.repeat(1999)}`]) {
      const failed = await settled((await submit([charge(unique('decline-order'))], { intent })).id);
      const op = failed.operations[0];
      const retried = await http<{ execution: { id: string } }>(stack.apiUrl, 'POST', `/v1/operations/${op.id}/retry`, {
        key: DEMO.agent,
      });
      expect(retried.status).toBe(201);
      const written = (await execution(retried.body.execution.id)).intent;
      const whole = `Retry of ${op.id} (${op.key}) from ${failed.id}: ${intent}`;
      const splits = whole.slice(0, 4000).endsWith('\ud83d');
      if (splits) halved += 1;
      expect(written).toBe(whole.slice(0, splits ? 3999 : 4000));
      expect(written).not.toContain('\ufffd');
    }
    expect(halved).toBe(1);
  });

  it('takes approval decisions from reviewers: approve sends, deny cancels', async () => {
    const created = await submit([
      charge(unique('order'), { requires_approval: true }),
      charge(unique('order'), { key: 'second', requires_approval: true }),
    ]);
    await settled(created.id, (e) => e.status === 'waiting_for_approval');
    const [first, second] = created.operations;
    // The review queues, as the console reads them: documented by the ReviewQueue and ReviewSummary schemas.
    const queue = await get<{ data: { operation: { id: string } }[] }>(
      `/v1/review/approvals?q=${created.id}`,
      'ReviewQueue',
      DEMO.reviewer,
    );
    expect(queue.data.map((item) => item.operation.id).sort()).toEqual([first.id, second.id].sort());
    await get('/v1/review/summary', 'ReviewSummary', DEMO.reviewer);
    const approved = await http(stack.apiUrl, 'POST', `/v1/operations/${first.id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: 'looks right' },
    });
    expect(approved.status).toBe(200);
    seen.push({ schema: 'OperationDetail', body: approved.body, what: 'POST approval' });
    const denied = await http(stack.apiUrl, 'POST', `/v1/operations/${second.id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'deny' },
    });
    expect(denied.status).toBe(200);
    const done = await settled(created.id);
    expect(done.operations.map((o) => o.status)).toEqual(['VERIFIED', 'CANCELLED']);
    expect(done.operations[0].approval).toMatchObject({ state: 'granted', reason: 'looks right' });
    const late = await http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${second.id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve' },
    });
    expect(late.status).toBe(409);
  });

  it('refuses a review-queue filter no operation can match, instead of an empty queue that reads as "nothing waits"', async () => {
    // An operation waits for approval: a filter that names its connector finds it, a misspelled one must not say none.
    const created = await submit([charge(unique('order'), { requires_approval: true })]);
    await settled(created.id, (e) => e.status === 'waiting_for_approval');
    const found = await get<{ total: number }>(
      `/v1/review/approvals?connector=sandbox.payments&q=${created.id}`,
      'ReviewQueue',
      DEMO.reviewer,
    );
    expect(found.total).toBe(1);
    for (const path of [
      '/v1/review/approvals?connector=sandbox.payment',
      '/v1/review/approvals?connector=SANDBOX.PAYMENTS',
      '/v1/review/manual-reviews?connector=sandbox.sm',
    ]) {
      const res = await http<Problem>(stack.apiUrl, 'GET', path, { key: DEMO.reviewer });
      expect({ path, status: res.status }).toEqual({ path, status: 400 });
      expect(res.body.errors).toEqual([expect.objectContaining({ field: 'connector', rule: 'known_connector' })]);
    }
    // A name the registry no longer has (a connector a later release removed) stays a filter while one of its operations
    // waits, also when the other filters match none of them: an empty page then, not "unknown connector".
    const opId = created.operations[0].id;
    await stack.db.dataSource.query(`UPDATE operations SET connector = 'legacy.payments' WHERE id = $1`, [opId]);
    try {
      const legacy = await get<{ total: number }>(
        '/v1/review/approvals?connector=legacy.payments',
        'ReviewQueue',
        DEMO.reviewer,
      );
      expect(legacy.total).toBe(1);
      const none = await http<{ total: number }>(
        stack.apiUrl,
        'GET',
        '/v1/review/approvals?connector=legacy.payments&q=exe_matches_nothing',
        { key: DEMO.reviewer },
      );
      expect({ status: none.status, total: none.body.total }).toEqual({ status: 200, total: 0 });
    } finally {
      await stack.db.dataSource.query(`UPDATE operations SET connector = 'sandbox.payments' WHERE id = $1`, [opId]);
    }
    // A reason no operation is ever held for (a denial, a proven absence, a rejection) is no filter of the holds either.
    for (const reason of ['DENIED', 'PROVEN_ABSENT', 'CONNECTOR_REJECTED']) {
      const res = await http<Problem>(stack.apiUrl, 'GET', `/v1/review/manual-reviews?reason=${reason}`, {
        key: DEMO.reviewer,
      });
      expect({ reason, status: res.status }).toEqual({ reason, status: 400 });
      expect(res.body.errors).toEqual([expect.objectContaining({ field: 'reason', rule: 'invalid_value' })]);
    }
    expect(
      (await http(stack.apiUrl, 'GET', '/v1/review/manual-reviews?reason=SOURCE_UNREACHABLE', { key: DEMO.reviewer }))
        .status,
    ).toBe(200);
  });

  it('holds a knowledge conflict for a human, who resolves it with evidence within the permitted actions', async () => {
    // The agent believes the order was already charged; the source says it was not: irreversible → MANUAL_REVIEW.
    const created = await submit([charge(unique('order'), { expected_state: { charged: true } })]);
    const held = await settled(created.id);
    const op = held.operations[0];
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'KNOWLEDGE_CONFLICT', retry: 'console' });
    expect(op.recovery_obligation?.permitted_actions).toBeDefined();
    const detail = await get<{ permitted_resolutions: string[] }>(`/v1/operations/${op.id}`, 'OperationDetail');
    expect(detail.permitted_resolutions.sort()).toEqual(['CANCELLED', 'SENT']);
    const reviews = await get<{ data: unknown[] }>(
      `/v1/review/manual-reviews?q=${op.id}`,
      'ReviewQueue',
      DEMO.reviewer,
    );
    expect(reviews.data).toHaveLength(1);

    const notPermitted = await http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${op.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: 'I think it is fine' },
    });
    expect(notPermitted.status).toBe(409);
    expect(notPermitted.body).toMatchObject({ type: 'https://verity.dev/problems/resolution-not-permitted' });
    seen.push({ schema: 'Problem', body: notPermitted.body, what: 'resolve 409' });

    const resolved = await http<Operation>(stack.apiUrl, 'POST', `/v1/operations/${op.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'CANCELLED', evidence: 'customer confirmed the order was paid by bank transfer' },
    });
    expect(resolved.status).toBe(200);
    seen.push({ schema: 'OperationDetail', body: resolved.body, what: 'POST resolve' });
    expect(resolved.body.status).toBe('CANCELLED');
    expect(resolved.body.recovery_obligation?.resolution).toMatchObject({ status: 'CANCELLED' });
    expect((await settled(created.id)).status).toBe('completed');
  });

  it('describes connectors and the status model', async () => {
    const connectors = await get<z.infer<typeof API_SCHEMAS.ConnectorList>>('/v1/connectors', 'ConnectorList');
    const payments = connectors.data.find((c) => c.name === 'sandbox.payments');
    expect(payments).toMatchObject({ read_back: true, provider_idempotency: true, reversible: false });
    expect(payments?.actions[0]).toMatchObject({
      name: 'charge',
      params_schema: expect.objectContaining({ type: 'object' }),
    });
    expect(connectors.data.find((c) => c.name === 'sandbox.sms')).toMatchObject({
      read_back: false,
      can_reach_verified: false,
    });
    const model = await get<z.infer<typeof API_SCHEMAS.StatusModel>>('/v1/status-model', 'StatusModel');
    expect(model.operation.statuses.find((s) => s.status === 'UNKNOWN')?.retry).toBe('forbidden');
    expect(model.execution.terminal).toEqual(['completed', 'failed', 'cancelled', 'expired']);
  });

  it('answers / and /v1 with links a first-time user can follow, without a key', async () => {
    for (const path of ['/', '/v1']) {
      const res = await http<{ links: Record<string, string> }>(stack.apiUrl, 'GET', path);
      expect(res.status).toBe(200);
      seen.push({ schema: 'Index', body: res.body, what: `GET ${path}` });
      expect(res.body.links).toMatchObject({ docs: '/docs', console: '/console', health: '/health/ready' });
      for (const link of ['/docs-json', res.body.links.health, res.body.links.status_model]) {
        expect((await http(stack.apiUrl, 'GET', link)).status).toBe(200);
      }
    }
  });

  it('serves health, readiness and Prometheus metrics without ids in the labels', async () => {
    seen.push({ schema: 'Liveness', body: (await http(stack.apiUrl, 'GET', '/health/live')).body, what: 'live' });
    const ready = await http(stack.apiUrl, 'GET', '/health/ready');
    expect(ready.status).toBe(200);
    seen.push({ schema: 'Readiness', body: ready.body, what: 'ready' });
    // Closed by default (it counts every tenant): the scraper sends METRICS_TOKEN as its bearer token.
    const metrics = await http<string>(stack.apiUrl, 'GET', '/metrics', { key: METRICS_TOKEN });
    expect(metrics.status).toBe(200);
    expect(metrics.text).toMatch(/^verity_executions_in_flight\{status="running"\} \d+$/m);
    expect(metrics.text).toMatch(/^verity_open_obligations\{age="overdue_gt_24h"\} \d+$/m);
    expect(metrics.text).toMatch(/verity_http_request_duration_seconds_count\{[^}]*route="\/v1\/executions\/:id"/);
    expect(metrics.text).not.toMatch(/exe_[0-9a-z]{10}/);
  });

  it('serves a valid OpenAPI 3 document with every docs/contract.md §5 path, built from the same schemas', async () => {
    const res = await http<Record<string, unknown>>(stack.apiUrl, 'GET', '/docs-json');
    expect(res.status).toBe(200);
    const doc = res.body as {
      openapi: string;
      paths: Record<
        string,
        Record<string, { responses: Record<string, { content?: Record<string, { schema: unknown }> }> }>
      >;
      components: { schemas: Record<string, unknown> };
    };
    expect(doc.openapi).toMatch(/^3\./);
    await SwaggerParser.validate(structuredClone(doc) as never);

    const design: [string, string][] = [
      ['post', '/v1/executions'],
      ['get', '/v1/executions/{id}'],
      ['get', '/v1/executions'],
      ['get', '/v1/executions/{id}/events'],
      ['get', '/v1/executions/{id}/stream'],
      ['post', '/v1/executions/{id}/cancel'],
      ['get', '/v1/operations/{id}'],
      ['post', '/v1/operations/{id}/approval'],
      ['post', '/v1/operations/{id}/resolve'],
      ['post', '/v1/operations/{id}/retry'],
      ['get', '/v1/connectors'],
      ['get', '/v1/status-model'],
      ['get', '/v1/review/summary'],
      ['get', '/v1/review/approvals'],
      ['get', '/v1/review/manual-reviews'],
      ['get', '/docs'],
      ['get', '/console'],
      ['get', '/admin/queues'],
      ['get', '/health/live'],
      ['get', '/health/ready'],
      ['get', '/metrics'],
    ];
    const missing = design.filter(([method, path]) => !doc.paths[path]?.[method]).map(([m, p]) => `${m} ${p}`);
    expect(missing).toEqual([]);

    // The served components are exactly the zod schemas the tests validate responses with.
    const components = componentSchemas();
    for (const name of Object.keys(API_SCHEMAS)) {
      expect(doc.components.schemas[name]).toEqual(JSON.parse(JSON.stringify(components[name])));
    }
    // Every JSON response documented for a /v1 operation points at one of them, and every error at Problem.
    for (const [method, path] of design.filter(([, p]) => p.startsWith('/v1/'))) {
      {
        const operation = doc.paths[path][method];
        const success = Object.entries(operation.responses).filter(([code]) => code.startsWith('2'));
        expect([path, method, success.length]).toEqual([path, method, 1]);
        for (const [code, response] of Object.entries(operation.responses)) {
          const json = response.content?.['application/json'] ?? response.content?.['application/problem+json'];
          if (path.endsWith('/stream') && code === '200') {
            expect(response.content?.['text/event-stream']).toBeDefined();
            continue;
          }
          const ref = (json?.schema as { $ref?: string } | undefined)?.$ref ?? '';
          expect([path, method, code, ref.startsWith('#/components/schemas/')]).toEqual([path, method, code, true]);
          if (!code.startsWith('2')) expect([path, code, ref]).toEqual([path, code, '#/components/schemas/Problem']);
        }
      }
    }
    const ui = await http<string>(stack.apiUrl, 'GET', '/docs');
    expect(ui.status).toBe(200);
    expect(ui.headers.get('content-type')).toMatch(/text\/html/);
  });

  it('every response seen in this file matches its documented schema and carries no internal field', async () => {
    const problem = await http(stack.apiUrl, 'GET', '/v1/executions/exe_01nothere', { key: DEMO.agent });
    seen.push({ schema: 'Problem', body: problem.body, what: '404' });
    expect(seen.length).toBeGreaterThan(30);
    const wrong: string[] = [];
    for (const { schema, body, what } of seen) {
      const parsed = API_SCHEMAS[schema].safeParse(body);
      if (!parsed.success) wrong.push(`${what} as ${schema}: ${JSON.stringify(parsed.error.issues.slice(0, 3))}`);
      const text = JSON.stringify(body);
      for (const field of INTERNAL_FIELDS) if (text.includes(`"${field}"`)) wrong.push(`${what}: has ${field}`);
    }
    expect(wrong).toEqual([]);
  });

  it('logs one structured line per request with its ids, and never an API key', async () => {
    const created = await submit([sms(unique('log'))]);
    const requestId = unique('req');
    await http(stack.apiUrl, 'GET', `/v1/executions/${created.id}`, {
      key: DEMO.agent,
      headers: { 'x-request-id': requestId },
    });
    await waitFor(
      async () => stack.logs('api'),
      (logs) => logs.includes(requestId),
      10_000,
    );
    const lines = stack
      .logs('api')
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const line = lines.find((l) => l.requestId === requestId);
    expect(line).toMatchObject({ executionId: created.id, tenantId: 'demo', status: 200, route: '/v1/executions/:id' });
    expect(lines.some((l) => l.method === 'POST' && l.executionId === created.id && l.status === 201)).toBe(true);
    for (const key of Object.values(DEMO)) expect(stack.logs()).not.toContain(key);
  });
});
