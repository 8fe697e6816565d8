import { randomUUID } from 'node:crypto';
import {
  ConnectorAction,
  ConnectorInfo,
  Execution,
  ExecutionEvent,
  ExecutionStatus,
  FetchLike,
  Operation,
  OperationDetail,
  OperationRequest,
  OperationStatus,
  RetryRule,
  SubmissionRequest,
  Verity,
  VerityConflictError,
  VerityError,
  VerityIdempotencyError,
  VerityNotFoundError,
  VerityTimeoutError,
  VerityValidationError,
  isExecutionSettled,
  isOperationStatusEvent,
} from '@verity/sdk';
import { API_SCHEMAS } from '../../apps/api/src/schemas';
import { DEMO, Stack, waitFor } from '../support/stack';

const unique = (prefix: string) => `${prefix}-${randomUUID()}`;

function charge(reference = unique('order'), extra: Partial<OperationRequest> = {}): OperationRequest {
  return {
    key: 'charge',
    connector: 'sandbox.payments',
    action: 'charge',
    params: { amount: 1250, currency: 'EUR', reference },
    ...extra,
  };
}

function sms(clientRef = unique('sms')): OperationRequest {
  return {
    key: 'notify',
    connector: 'sandbox.sms',
    action: 'send',
    params: { to: '+15550100', body: 'hi', client_ref: clientRef },
  };
}

function submission(operations: OperationRequest[], intent = 'sdk e2e'): SubmissionRequest {
  return { agent_id: 'sdk-e2e', intent, operations };
}

/** Every key of a wire type, checked by the compiler both ways: a key missing here or extra here fails tsc. */
const OPERATION_KEYS: Record<keyof Operation, true> = {
  id: true,
  execution_id: true,
  key: true,
  connector: true,
  action: true,
  params: true,
  irreversible: true,
  requires_approval: true,
  verification_method: true,
  expected_state: true,
  depends_on: true,
  status: true,
  terminal_reason: true,
  commit: true,
  failure: true,
  retry: true,
  attempt: true,
  no_change_required: true,
  evidence: true,
  observation: true,
  approval: true,
  recovery_obligation: true,
  retry_of: true,
  earlier_attempts: true,
  sent_at: true,
  acknowledged_at: true,
  rejected_at: true,
  rejection: true,
  created_at: true,
  updated_at: true,
};
const EXECUTION_KEYS: Record<keyof Execution, true> = {
  id: true,
  agent_id: true,
  intent: true,
  status: true,
  effects: true,
  failure: true,
  criteria: true,
  criteria_results: true,
  outcome: true,
  deadline_at: true,
  created_at: true,
  updated_at: true,
  trace_id: true,
  operations: true,
};
const EVENT_KEYS: Record<keyof ExecutionEvent, true> = {
  id: true,
  execution_id: true,
  operation_id: true,
  seq: true,
  type: true,
  from_status: true,
  to_status: true,
  data: true,
  created_at: true,
};
const CONNECTOR_KEYS: Record<keyof ConnectorInfo, true> = {
  name: true,
  description: true,
  read_back: true,
  context_read: true,
  provider_idempotency: true,
  reversible: true,
  can_reach_verified: true,
  actions: true,
};
const ACTION_KEYS: Record<keyof ConnectorAction, true> = {
  name: true,
  description: true,
  read_back: true,
  context_read: true,
  provider_idempotency: true,
  reversible: true,
  can_reach_verified: true,
  conditions: true,
  params_schema: true,
};
const keysOf = (o: object) => Object.keys(o).sort();

/** A fetch that records what it sends (to prove the key stays in the Authorization header). */
function recordingFetch(): { fetch: FetchLike; urls: string[] } {
  const urls: string[] = [];
  return {
    urls,
    fetch: (input, init) => {
      urls.push(String(input));
      return fetch(input, init);
    },
  };
}

/**
 * A fetch whose first stream response is torn after `afterEvents` complete event frames: half of the next frame
 * is delivered, then the real connection is cancelled and the body errors like a reset network.
 */
function tearingFetch(afterEvents: number) {
  const streams: { lastEventId: string | null; torn: boolean }[] = [];
  const wrapped: FetchLike = async (input, init) => {
    const url = String(input);
    const response = await fetch(input, init);
    if (!/\/stream$/.test(new URL(url).pathname)) return response;
    const lastEventId = new Headers(init?.headers).get('last-event-id');
    const tear = streams.length === 0 && response.ok && response.body !== null;
    streams.push({ lastEventId, torn: tear });
    if (!tear) return response;
    return new Response(tearAfter(response.body!, afterEvents), { status: response.status, headers: response.headers });
  };
  return { fetch: wrapped, streams };
}

function tearAfter(body: ReadableStream<Uint8Array>, afterEvents: number): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  let buffer = '';
  let frames = 0;
  let tearNow = false;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (tearNow) {
        await reader.cancel(); // closes the real connection: the server sees the client go away
        controller.error(new TypeError('terminated: simulated connection reset'));
        return;
      }
      const { done, value } = await reader.read();
      if (done) {
        controller.close();
        return;
      }
      buffer += decoder.decode(value, { stream: true });
      let out = '';
      let end: number;
      while ((end = buffer.indexOf('\n\n')) !== -1) {
        const frame = buffer.slice(0, end + 2);
        buffer = buffer.slice(end + 2);
        if (/^id: /m.test(frame)) {
          if (frames === afterEvents) {
            out += frame.slice(0, Math.floor(frame.length / 2));
            tearNow = true;
            break;
          }
          frames += 1;
        }
        out += frame;
      }
      if (out) controller.enqueue(encoder.encode(out));
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
}

describe('@verity/sdk against the running stack', () => {
  let stack: Stack;
  let dx: Verity;
  let reviewer: Verity;
  let recorder: ReturnType<typeof recordingFetch>;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'sdk' });
    recorder = recordingFetch();
    dx = new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.agent, fetch: recorder.fetch });
    reviewer = new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.reviewer });
  }, 120_000);
  afterAll(async () => stack?.stop());

  it('creates idempotently: the same key twice gives the same execution, the second flagged as a replay', async () => {
    const key = unique('idem');
    const body = submission([charge()]);
    const first = await dx.executions.createWithMeta(body, { idempotencyKey: key });
    const second = await dx.executions.createWithMeta(body, { idempotencyKey: key });
    expect(first.replayed).toBe(false);
    expect(second.replayed).toBe(true);
    expect(second.execution.id).toBe(first.execution.id);
    expect(first.execution.id).toMatch(/^exe_/);
    expect(first.execution.status).toBe(ExecutionStatus.CREATED);
    expect(first.execution.operations[0].status).toBe(OperationStatus.PREPARED);
    expect(first.idempotencyKey).toBe(key);

    const plain = await dx.executions.create(submission([charge()]));
    expect(plain.id).not.toBe(first.execution.id);
    await dx.waitForSettled(first.execution.id, { timeoutMs: 30_000 });
    await dx.waitForSettled(plain.id, { timeoutMs: 30_000 });
  });

  it('answers 422 as a typed error for the same key with a different body', async () => {
    const key = unique('idem');
    const original = await dx.executions.create(submission([charge()]), { idempotencyKey: key });
    const error = await dx.executions.create(submission([charge()]), { idempotencyKey: key }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(VerityIdempotencyError);
    expect(error).toBeInstanceOf(VerityError);
    expect(error).toMatchObject({ status: 422, code: 'idempotency-key-reused' });
    expect((error as VerityError).body.type).toBe('https://verity.dev/problems/idempotency-key-reused');
    await dx.waitForSettled(original.id, { timeoutMs: 30_000 });
  });

  it('rejects unknown ids with a typed 404', async () => {
    const missing = await dx.get('exe_does_not_exist').catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(VerityNotFoundError);
    expect(missing).toMatchObject({ status: 404, code: 'not-found', instance: '/v1/executions/exe_does_not_exist' });
    await expect(dx.operations.get('op_does_not_exist')).rejects.toMatchObject({ status: 404, code: 'not-found' });
    await expect(dx.executions.events('exe_does_not_exist')).rejects.toBeInstanceOf(VerityNotFoundError);
    await expect(dx.stream('exe_does_not_exist').toArray()).rejects.toBeInstanceOf(VerityNotFoundError);
    await expect(dx.waitForSettled('exe_does_not_exist', { timeoutMs: 5_000 })).rejects.toBeInstanceOf(
      VerityNotFoundError,
    );
  });

  it('carries field errors on a 400 validation problem', async () => {
    const bad = submission([
      charge(unique('order'), { params: { amount: -5, currency: 'EUR', reference: 'x' } }),
      { key: 'b', connector: 'nope', action: 'x', params: {} },
    ]);
    const error = (await dx.executions.create(bad).catch((e: unknown) => e)) as VerityValidationError;
    expect(error).toBeInstanceOf(VerityValidationError);
    expect(error).toMatchObject({ status: 400, code: 'validation-error' });
    expect(error.fieldError('operations[1].connector')?.rule).toBe('known_connector');
    expect(error.fieldError('operations[0].params.amount')).toBeDefined();
    expect(error.errors.every((e) => e.field && e.rule && e.message)).toBe(true);
    expect(error.body.errors).toEqual(error.errors);

    const badQuery = await dx.executions.list({ limit: 0 }).catch((e: unknown) => e);
    expect(badQuery).toBeInstanceOf(VerityValidationError);
    expect((badQuery as VerityValidationError).errors[0].field).toBe('limit');
  });

  it('waits for a payment to settle: completed, VERIFIED with read-back evidence, charged once', async () => {
    const reference = unique('order');
    // Held for approval until the wait is following the stream: the happy path can otherwise settle before the wait's
    // first read, which then returns at once with no event to hand over (as documented).
    const created = await dx.executions.create(submission([charge(reference, { requires_approval: true })]));
    const events: ExecutionEvent[] = [];
    const settling = dx.waitForSettled(created.id, { timeoutMs: 30_000, onEvent: (e) => events.push(e) });
    const opId = created.operations[0].id;
    await waitFor(
      () => reviewer.operations.get(opId),
      (op) => events.length > 0 && op.approval?.state === 'requested',
    );
    await reviewer.operations.approve(opId, { reason: 'sdk e2e' });
    const settled = await settling;
    expect(settled.status).toBe(ExecutionStatus.COMPLETED);
    expect(isExecutionSettled(settled)).toBe(true);
    expect(settled.effects.summary).toBe('all_verified');
    const [op] = settled.operations;
    expect(op.status).toBe(OperationStatus.VERIFIED);
    expect(op.retry).toBe(RetryRule.NOT_NEEDED);
    expect(op.verification_method).toBe('read_after_write');
    expect(op.evidence).toMatchObject({ method: 'read_after_write', record: { reference, amount: 1250 } });
    expect(events.filter(isOperationStatusEvent).map((e) => e.to_status)).toContain(OperationStatus.VERIFIED);
    expect((await stack.effects()).charges[reference].count).toBe(1);

    // The SDK's wire types name exactly the fields the API sends, and the API's own schemas accept the values.
    expect(keysOf(settled)).toEqual(keysOf(EXECUTION_KEYS));
    expect(keysOf(op)).toEqual(keysOf(OPERATION_KEYS));
    expect(keysOf(events[0])).toEqual(keysOf(EVENT_KEYS));
    API_SCHEMAS.Execution.parse(settled);
    API_SCHEMAS.Event.parse(events[0]);
    const detail: OperationDetail = await dx.operations.get(op.id);
    expect(keysOf(detail)).toEqual(
      keysOf({ ...OPERATION_KEYS, permitted_resolutions: true, resolution_options: true }),
    );
    API_SCHEMAS.OperationDetail.parse(detail);
    expect(detail.permitted_resolutions).toEqual([]);
  });

  it('settles an SMS as ACKNOWLEDGED: sent, and honestly not verifiable', async () => {
    const clientRef = unique('sms');
    const created = await dx.executions.create(submission([sms(clientRef)]));
    expect(created.operations[0].verification_method).toBe('');
    const settled = await dx.waitForSettled(created.id, { timeoutMs: 30_000 });
    expect(settled.status).toBe(ExecutionStatus.COMPLETED);
    expect(settled.operations[0].status).toBe(OperationStatus.ACKNOWLEDGED);
    expect(settled.effects.summary).toBe('unverified');
    expect((await stack.effects()).messages[clientRef].count).toBe(1);
  });

  it('refuses a retry of a VERIFIED operation with a typed 409 naming the rule', async () => {
    const created = await dx.executions.create(submission([charge()]));
    const settled = await dx.waitForSettled(created.id, { timeoutMs: 30_000 });
    const op = settled.operations[0];
    expect(op.status).toBe(OperationStatus.VERIFIED);
    const error = (await dx.operations.retry(op.id).catch((e: unknown) => e)) as VerityConflictError;
    expect(error).toBeInstanceOf(VerityConflictError);
    expect(error).toMatchObject({ status: 409, code: 'retry-not-allowed' });
    expect(error.body).toMatchObject({ status: 409, retry: RetryRule.NOT_NEEDED });
  });

  it('streams through a forced disconnect: resumes with Last-Event-ID, no gap, no duplicate, ends on settle', async () => {
    const tearing = tearingFetch(3);
    const client = new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.agent, fetch: tearing.fetch });
    const created = await client.executions.create(submission([charge(), { ...sms(), depends_on: ['charge'] }]));
    const stream = client.stream(created.id);
    const events: ExecutionEvent[] = [];
    for await (const event of stream) events.push(event);

    const seqs = events.map((e) => e.seq);
    expect(seqs.length).toBeGreaterThan(5);
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1));
    expect(new Set(events.map((e) => e.id)).size).toBe(events.length);
    expect(stream.endReason).toBe('settled');
    expect(stream.connections).toBe(2);
    expect(tearing.streams).toEqual([
      { lastEventId: null, torn: true },
      { lastEventId: events[2].id, torn: false },
    ]);
    expect(events.every((e) => e.execution_id === created.id)).toBe(true);

    // The stream ended because everything settled, and it told the same history as the event log.
    const settled = await client.get(created.id);
    expect(isExecutionSettled(settled)).toBe(true);
    expect(settled.operations.map((o) => o.status)).toEqual([OperationStatus.VERIFIED, OperationStatus.ACKNOWLEDGED]);
    const log = await client.executions.events(created.id, { limit: 1000 });
    expect(log.data).toEqual(events);

    // Resuming from a given event yields exactly the rest; paging the log with `after` agrees.
    const rest = await client.stream(created.id, { lastEventId: events[4].id }).toArray();
    expect(rest.map((e) => e.seq)).toEqual(seqs.slice(5));
    const page = await client.executions.events(created.id, { after: events[1].id, limit: 2 });
    expect(page.data.map((e) => e.seq)).toEqual([3, 4]);
    expect(page.next_cursor).toBe(events[3].id);
  });

  it('times out with a typed error while approval is pending, then settles after a reviewer approves', async () => {
    const created = await dx.executions.create(submission([charge(unique('order'), { requires_approval: true })]));
    const error = (await dx
      .waitForSettled(created.id, { timeoutMs: 1_500 })
      .catch((e: unknown) => e)) as VerityTimeoutError;
    expect(error).toBeInstanceOf(VerityTimeoutError);
    expect(error).toMatchObject({ executionId: created.id, timeoutMs: 1_500 });
    expect(error.lastExecution?.id).toBe(created.id);
    expect(error.lastExecution?.operations[0].status).toBe(OperationStatus.PREPARED);

    const forbidden = await dx.operations.approve(created.operations[0].id).catch((e: unknown) => e);
    expect(forbidden).toMatchObject({ status: 403, code: 'forbidden' });

    const approved = await reviewer.operations.approve(created.operations[0].id, { reason: 'looks right' });
    expect(approved.approval).toMatchObject({ state: 'granted', reason: 'looks right' });
    const settled = await dx.waitForSettled(created.id, { timeoutMs: 30_000 });
    expect(settled.status).toBe(ExecutionStatus.COMPLETED);
    expect(settled.operations[0].status).toBe(OperationStatus.VERIFIED);
  });

  it('follows a manual review: the iterator receives the approval, the hold, the resolution and the outcome evaluation, then ends settled', async () => {
    // The read-back shows the charge with another amount: held for a human (INTEGRITY_MISMATCH).
    await stack.setFaults({ read_fault: 'amount_mismatch' });
    try {
      const created = await dx.executions.create({
        ...submission([charge(unique('order'), { requires_approval: true })]),
        criteria: [{ key: 'paid', operation: 'charge', expect_status: OperationStatus.VERIFIED }],
      });
      const opId = created.operations[0].id;
      const resolvedLater = dx.waitFor(created.id, (e) => e.operations[0].status === OperationStatus.VERIFIED, {
        timeoutMs: 60_000,
      });
      // Opened before anything was decided: the operation waits for approval in PREPARED.
      const stream = dx.stream(created.id);
      const events: ExecutionEvent[] = [];
      let completedAt = -1;
      for await (const event of stream) {
        events.push(event);
        if (event.type === 'approval.requested') await reviewer.operations.approve(opId);
        if (event.operation_id === null && event.to_status === ExecutionStatus.COMPLETED) {
          completedAt = events.length - 1;
          // The agent's part is over: waitForSettled keeps its meaning and answers with the hold.
          const held = await dx.waitForSettled(created.id, { timeoutMs: 10_000 });
          expect(held.operations[0].status).toBe(OperationStatus.MANUAL_REVIEW);
          await stack.setFaults({ read_fault: null });
          await reviewer.operations.resolve(opId, { status: 'VERIFIED', evidence: 'dashboard shows it (sdk test)' });
        }
      }
      expect(stream.endReason).toBe('settled');
      expect(stream.connections).toBe(1);
      expect(completedAt).toBeGreaterThan(0);
      const types = events.map((e) => e.type);
      expect(types).toContain('approval.decided');
      const afterCompletion = events.slice(completedAt + 1);
      expect(afterCompletion.map((e) => e.type)).toContain('operation.resolved');
      const resolution = afterCompletion.find((e) => e.operation_id === opId && e.to_status === 'VERIFIED');
      expect(resolution).toMatchObject({ from_status: OperationStatus.MANUAL_REVIEW });
      // The outcome evaluation that follows the resolution arrives before the end.
      const evaluation = afterCompletion.filter((e) => e.type === 'outcome.evaluated').pop();
      expect(evaluation?.seq).toBeGreaterThan(resolution!.seq);
      expect(evaluation?.data).toMatchObject({ result: 'satisfied' });
      expect((await dx.executions.events(created.id, { limit: 1000 })).data).toEqual(events);

      const resolved = await resolvedLater;
      expect(resolved.operations[0].status).toBe(OperationStatus.VERIFIED);
    } finally {
      await stack.setFaults({ rules: [], replica_lag_ms: 0, read_fault: null });
    }
  });

  it('denies, then retries the CANCELLED operation as a new one (once only)', async () => {
    const created = await dx.executions.create(submission([charge(unique('order'), { requires_approval: true })]));
    const denied = await reviewer.operations.deny(created.operations[0].id, { reason: 'not today' });
    expect(denied.status).toBe(OperationStatus.CANCELLED);
    expect(denied.retry).toBe(RetryRule.SAFE);
    const settled = await dx.waitForSettled(created.id, { timeoutMs: 30_000 });
    expect(settled.effects.summary).toBe('none');

    const retried = await dx.operations.retry(denied.id);
    API_SCHEMAS.RetryResult.parse(retried);
    expect(retried.operation.retry_of).toBe(denied.id);
    expect(retried.execution.id).not.toBe(created.id);
    expect(retried.operation.status).toBe(OperationStatus.PREPARED);
    await expect(dx.operations.retry(denied.id)).rejects.toMatchObject({ status: 409, code: 'already-retried' });

    // The new operation asks for approval again (it inherits requires_approval); a reviewer denies it too.
    await reviewer.operations.deny(retried.operation.id, { reason: 'still no' });
    const done = await dx.waitForSettled(retried.execution.id, { timeoutMs: 30_000 });
    expect(done.operations[0].status).toBe(OperationStatus.CANCELLED);
    API_SCHEMAS.Execution.parse(done);
  });

  it('cancels: PREPARED operations become CANCELLED; a second cancel is a typed 409', async () => {
    const created = await dx.executions.create(submission([charge(unique('order'), { requires_approval: true })]));
    const cancelled = await dx.executions.cancel(created.id, { reason: 'changed my mind' });
    expect(cancelled.status).toBe(ExecutionStatus.CANCELLED);
    expect(cancelled.operations[0].status).toBe(OperationStatus.CANCELLED);
    const error = await dx.executions.cancel(created.id).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(VerityConflictError);
    expect(error).toMatchObject({ status: 409, code: 'already-decided' });
    const done = await dx.waitForSettled(created.id, { timeoutMs: 10_000 });
    expect(done.status).toBe(ExecutionStatus.CANCELLED);
    expect(done.effects.summary).toBe('none');
    API_SCHEMAS.Execution.parse(done);
  });

  it('lists with a status filter and cursor pagination', async () => {
    const first = await dx.executions.list({ limit: 2 });
    API_SCHEMAS.ExecutionList.parse(first);
    expect(first.data).toHaveLength(2);
    expect(first.next_cursor).toBe(first.data[1].id);
    const second = await dx.executions.list({ limit: 2, cursor: first.next_cursor! });
    expect(second.data.map((e) => e.id)).not.toContain(first.data[0].id);
    const completed = await dx.executions.list({ status: ExecutionStatus.COMPLETED, limit: 200 });
    expect(completed.data.length).toBeGreaterThan(0);
    expect(completed.data.every((e) => e.status === ExecutionStatus.COMPLETED)).toBe(true);
    const all: string[] = [];
    for await (const execution of dx.executions.listAll({ status: 'completed', limit: 1 })) all.push(execution.id);
    expect(all).toEqual(completed.data.map((e) => e.id));
  });

  it('reads the connector catalogue and the status model', async () => {
    const connectors = await dx.connectors();
    const byName = new Map(connectors.map((c) => [c.name, c]));
    expect(byName.get('sandbox.payments')).toMatchObject({
      read_back: true,
      provider_idempotency: true,
      reversible: false,
    });
    expect(byName.get('sandbox.sms')).toMatchObject({ read_back: false, can_reach_verified: false });
    expect(keysOf(byName.get('sandbox.payments')!)).toEqual(keysOf(CONNECTOR_KEYS));
    expect(byName.get('sandbox.payments')!.actions.map((a) => a.name)).toEqual(['charge']);
    expect(keysOf(byName.get('sandbox.payments')!.actions[0])).toEqual(keysOf(ACTION_KEYS));
    API_SCHEMAS.ConnectorList.parse({ data: connectors });

    const model = await dx.statusModel();
    expect(model.operation.statuses.map((s) => s.status)).toEqual(Object.values(OperationStatus));
    expect(model.execution.terminal).toEqual(['completed', 'failed', 'cancelled', 'expired']);
    API_SCHEMAS.StatusModel.parse(model);
  });

  it('never puts the key in a URL', () => {
    expect(recorder.urls.length).toBeGreaterThan(10);
    for (const url of recorder.urls) expect(url).not.toContain(DEMO.agent);
  });
});
