import { COMMIT_VALUES, FAILURE_CATEGORIES, FAILURE_CODES } from '@verity/status-model';
import { chargeOperation, insertTestExecution } from '../support/fixtures';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, sms, unique } from '../support/http';
import {
  Event,
  Op,
  events,
  expectLegalHistory,
  getExecution,
  resetSandbox,
  settle,
  submit,
} from './dispatcher-helpers';
import type { WireSchemas } from '@verity/sdk';

type Failure = WireSchemas['Failure'];
type OpView = Op & { commit: string; failure: Failure | null };
interface CriterionResult {
  key: string;
  verdict: string;
  rationale: string;
  evidence_event_ids: string[];
}
interface ExecutionView {
  id: string;
  status: string;
  failure: Failure | null;
  outcome: { result: string; evaluated_at: string } | null;
  criteria_results: CriterionResult[] | null;
  effects: {
    summary: string;
    commit: Record<string, number>;
    no_change_required: number;
    not_sent: number;
    held_not_sent: number;
  };
  operations: OpView[];
}

/**
 * Outcome and failure (docs/semantics.md): criteria judged again whenever their operation changes —
 * also after completion, when a reviewer resolves a hold — with `outcome.evaluated` events; a failure object wherever
 * something did not go as asked; `commit` on every operation. docs/semantics.md cites these cases by name.
 */
describe('outcome evaluation, failure objects and commit', () => {
  let stack: Stack;
  const seen: OpView[] = [];
  beforeAll(async () => {
    stack = await Stack.start({ label: 'outcome' });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  const view = async (id: string) => {
    const execution = (await getExecution(stack, id)) as unknown as ExecutionView;
    seen.push(...execution.operations);
    return execution;
  };
  const until = (id: string, predicate: (e: ExecutionView) => boolean, timeoutMs = 45_000) =>
    waitFor(() => view(id), predicate, timeoutMs, 150);
  const terminal = (e: ExecutionView) => ['completed', 'failed', 'cancelled', 'expired'].includes(e.status);
  const evaluations = (log: Event[]) => log.filter((e) => e.type === 'outcome.evaluated');
  const expectFailureShape = (failure: Failure | null) => {
    expect(failure).not.toBeNull();
    expect(FAILURE_CATEGORIES).toContain(failure!.category);
    expect(Object.keys(FAILURE_CODES)).toContain(failure!.code);
    expect(typeof failure!.retryable).toBe('boolean');
    expect(failure!.message.length).toBeGreaterThan(0);
    expect(Number.isNaN(Date.parse(failure!.at))).toBe(false);
  };

  it('a hold resolved VERIFIED after completion turns its criteria from pending to pass (expect_status and expect_evidence)', async () => {
    await stack.setFaults({ read_fault: 'field_missing' });
    const created = await submit(stack, [charge(unique('oc-resolve'))], {
      criteria: [
        { key: 'paid', operation: 'charge', expect_status: 'VERIFIED' },
        { key: 'amount', operation: 'charge', expect_evidence: { path: 'record.amount', equals: 1250 } },
      ],
    });
    // Held for a human: the execution completes (the agent's work is done) but the outcome is still pending.
    const held = await until(created.id, (e) => e.status === 'completed' && e.operations[0].status === 'MANUAL_REVIEW');
    expect(held.outcome).toMatchObject({ result: 'pending' });
    expect(held.criteria_results!.map((r) => [r.key, r.verdict])).toEqual([
      ['paid', 'pending'],
      ['amount', 'pending'],
    ]);
    expect(held.criteria_results![0].rationale).toContain('MANUAL_REVIEW');
    const op = held.operations[0];
    expect(op.commit).toBe('unknown');
    expect(op.failure).toMatchObject({
      code: 'verification_inconclusive',
      phase: 'verification',
      category: 'transient',
      retryable: false,
    });
    expect(op.failure!.message).toContain('FIELD_MISSING');
    const before = evaluations(await events(stack, created.id));
    expect(before.at(-1)!.data).toMatchObject({ result: 'pending' });

    await resetSandbox(stack);
    const res = await http(stack.apiUrl, 'POST', `/v1/operations/${op.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: 'provider dashboard shows the charge of 1250 EUR' },
    });
    expect(res.status).toBe(200);

    const after = await until(created.id, (e) => e.outcome?.result === 'satisfied');
    expect(after.status).toBe('completed');
    expect(after.criteria_results!.map((r) => [r.key, r.verdict])).toEqual([
      ['paid', 'pass'],
      ['amount', 'pass'],
    ]);
    expect(after.criteria_results![1].rationale).toBe('evidence record.amount is 1250');
    expect(Date.parse(after.outcome!.evaluated_at)).toBeGreaterThanOrEqual(Date.parse(held.outcome!.evaluated_at));
    expect(after.operations[0]).toMatchObject({ status: 'VERIFIED', commit: 'committed', failure: null });

    const log = await events(stack, created.id);
    expectLegalHistory(log);
    const resolution = log.find((e) => e.operation_id === op.id && e.to_status === 'VERIFIED')!;
    const latest = evaluations(log).at(-1)!;
    // A new evaluation, after the resolution, citing it as the evidence of both verdicts.
    expect(latest.seq).toBeGreaterThan(resolution.seq);
    expect(evaluations(log).length).toBe(before.length + 1);
    expect(latest.data).toEqual({
      result: 'satisfied',
      criteria: [
        { key: 'paid', verdict: 'pass', rationale: expect.any(String), evidence_event_ids: [resolution.id] },
        {
          key: 'amount',
          verdict: 'pass',
          rationale: 'evidence record.amount is 1250',
          evidence_event_ids: [resolution.id],
        },
      ],
    });
  });

  it('a rejected charge: FAILED with a provider_rejected failure, commit rejected; its dependent is not_applicable', async () => {
    const created = await submit(
      stack,
      [charge(unique('decline-oc')), sms(unique('oc-dep'), { depends_on: ['charge'] })],
      {
        criteria: [
          { key: 'paid', operation: 'charge', expect_status: 'VERIFIED' },
          { key: 'notified', operation: 'notify', expect_status: 'ACKNOWLEDGED' },
        ],
      },
    );
    await settle(stack, created.id);
    const done = await view(created.id);
    const [chargeOp, notifyOp] = done.operations;
    expect(chargeOp).toMatchObject({ status: 'FAILED', terminal_reason: 'CONNECTOR_REJECTED', commit: 'rejected' });
    expect(chargeOp.failure).toMatchObject({
      code: 'connector_rejected',
      phase: 'dispatch',
      category: 'provider_rejected',
      retryable: false,
    });
    expect(notifyOp).toMatchObject({ status: 'CANCELLED', commit: 'not_dispatched' });
    expect(notifyOp.failure).toMatchObject({ code: 'dependency_not_done', category: 'policy', retryable: false });
    expect(done.criteria_results!.map((r) => [r.key, r.verdict])).toEqual([
      ['paid', 'fail'],
      ['notified', 'not_applicable'],
    ]);
    expect(done.outcome!.result).toBe('unmet');
    expect(done.failure).toBeNull();
    // Both failures are dated by the event that made the move.
    const log = await events(stack, created.id);
    const failedEvent = log.find((e) => e.operation_id === chargeOp.id && e.to_status === 'FAILED')!;
    const cancelled = log.find((e) => e.operation_id === notifyOp.id && e.to_status === 'CANCELLED')!;
    expect(done.criteria_results![1].evidence_event_ids).toEqual([cancelled.id]);
    expect(done.criteria_results![0].evidence_event_ids).toEqual([failedEvent.id]);
  });

  it('cancelled: the execution and its never-sent operation carry failures (cancelled_by_caller, execution_cancelled)', async () => {
    const created = await submit(stack, [charge(unique('oc-cancel'), { requires_approval: true })]);
    await until(created.id, (e) => e.status === 'waiting_for_approval');
    const res = await http(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, {
      key: DEMO.agent,
      body: { reason: 'changed my mind' },
    });
    expect(res.status).toBe(200);
    const done = await until(created.id, terminal);
    expect(done.status).toBe('cancelled');
    expectFailureShape(done.failure);
    expect(done.failure).toMatchObject({
      code: 'cancelled_by_caller',
      phase: 'waiting_for_approval',
      category: 'caller_error',
      // Nothing of it was sent: the same request may be submitted again.
      retryable: true,
    });
    expect(done.operations[0]).toMatchObject({ status: 'CANCELLED', commit: 'not_dispatched' });
    expect(done.operations[0].failure).toMatchObject({ code: 'execution_cancelled', phase: 'dispatch' });
    expect(done.effects).toMatchObject({ summary: 'none', not_sent: 1, held_not_sent: 0 });
  });

  it('expired: the deadline passes while an approval is awaited (approval_timed_out, execution_expired)', async () => {
    const created = await submit(stack, [charge(unique('oc-expire'), { requires_approval: true })], {
      deadline_seconds: 1,
    });
    const done = await until(created.id, terminal);
    expect(done.status).toBe('expired');
    expectFailureShape(done.failure);
    expect(done.failure).toMatchObject({
      code: 'approval_timed_out',
      phase: 'waiting_for_approval',
      category: 'human',
    });
    expect(done.operations[0].failure).toMatchObject({ code: 'execution_expired', category: 'transient' });
  });

  it('failed: an execution that does not validate at the dispatcher (invalid_request)', async () => {
    const id = await insertTestExecution(stack.db.dataSource.manager, 'demo', {
      execution: { agentId: 'hand-written', intent: 'bypasses intake' },
      operations: [
        chargeOperation({ key: 'x', connector: 'acme.rockets', action: 'launch', params: {}, verification_method: '' }),
      ],
    });
    const done = await until(id, terminal);
    expect(done.status).toBe('failed');
    expectFailureShape(done.failure);
    expect(done.failure).toMatchObject({ code: 'invalid_request', phase: 'validating', retryable: false });
    expect(done.operations[0].failure).toMatchObject({ code: 'execution_invalid', category: 'caller_error' });
  });

  it('a deny: CANCELLED as approval_denied (policy), counted as not sent, commit not_dispatched', async () => {
    const created = await submit(stack, [charge(unique('oc-deny'), { requires_approval: true })], {
      criteria: [{ key: 'paid', operation: 'charge', expect_status: 'VERIFIED' }],
    });
    const waiting = await until(created.id, (e) => e.status === 'waiting_for_approval');
    const res = await http(stack.apiUrl, 'POST', `/v1/operations/${waiting.operations[0].id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'deny', reason: 'not this month' },
    });
    expect(res.status).toBe(200);
    const done = await until(created.id, (e) => terminal(e) && e.operations[0].status === 'CANCELLED');
    const op = done.operations[0];
    expect(op.commit).toBe('not_dispatched');
    expect(op.failure).toMatchObject({
      code: 'approval_denied',
      phase: 'approval',
      category: 'policy',
      retryable: false,
    });
    expect(done.effects).toMatchObject({ summary: 'none', not_sent: 1 });
    expect(done.effects.commit).toMatchObject({ not_dispatched: 1, rejected: 0 });
    expect(done.criteria_results!.map((r) => r.verdict)).toEqual(['fail']);
  });

  it('a knowledge conflict holds a never-sent operation: held_not_sent, summary none (not unknown), no change required apart', async () => {
    const created = await submit(stack, [charge(unique('oc-conflict'), { expected_state: { charged: true } })]);
    const held = await until(created.id, (e) => e.operations[0].status === 'MANUAL_REVIEW');
    const op = held.operations[0];
    expect(op).toMatchObject({ terminal_reason: 'KNOWLEDGE_CONFLICT', attempt: 0, commit: 'not_dispatched' });
    expect(op.failure).toMatchObject({ code: 'knowledge_conflict', phase: 'precondition', category: 'caller_error' });
    expect(held.effects).toMatchObject({ summary: 'none', not_sent: 1, held_not_sent: 1, no_change_required: 0 });

    // The same charge again: the source already holds it, so it is VERIFIED with no change required.
    const reference = unique('oc-nochange');
    const first = await submit(stack, [charge(reference)]);
    await settle(stack, first.id);
    const again = await submit(stack, [charge(reference)]);
    const done = await until(again.id, (e) => terminal(e) && e.operations[0].status !== 'PREPARED');
    expect(done.operations[0]).toMatchObject({
      status: 'VERIFIED',
      no_change_required: true,
      commit: 'not_dispatched',
    });
    expect(done.effects).toMatchObject({ summary: 'all_verified', no_change_required: 1, not_sent: 0 });
    expect(done.effects.commit).toMatchObject({ not_dispatched: 1, committed: 0 });
  });

  it('every operation seen in this file carried commit, and a failure exactly when FAILED, CANCELLED or MANUAL_REVIEW', () => {
    expect(seen.length).toBeGreaterThan(0);
    for (const op of seen) {
      expect(COMMIT_VALUES).toContain(op.commit);
      const shouldFail = ['FAILED', 'CANCELLED', 'MANUAL_REVIEW'].includes(op.status);
      if (shouldFail) expectFailureShape(op.failure);
      else expect(op.failure).toBeNull();
    }
    const statuses = new Set(seen.filter((o) => o.failure).map((o) => o.status));
    expect([...statuses].sort()).toEqual(['CANCELLED', 'FAILED', 'MANUAL_REVIEW']);
  });

  it.each([
    ['no expectation', { key: 'c', operation: 'charge' }, 'criteria[0]', 'one_expectation'],
    [
      'both expectations',
      { key: 'c', operation: 'charge', expect_status: 'VERIFIED', expect_evidence: { path: 'a', equals: 1 } },
      'criteria[0]',
      'one_expectation',
    ],
    [
      'a path that is not a JSON path',
      { key: 'c', operation: 'charge', expect_evidence: { path: 'a..b', equals: 1 } },
      'criteria[0].expect_evidence.path',
      'invalid_format',
    ],
    [
      'no equals',
      { key: 'c', operation: 'charge', expect_evidence: { path: 'record.amount' } },
      'criteria[0].expect_evidence.equals',
      'required',
    ],
    [
      'an unknown field',
      { key: 'c', operation: 'charge', expect_evidence: { path: 'a', equals: 1, op: 'gt' } },
      'criteria[0].expect_evidence.op',
      'unknown_field',
    ],
  ])(
    'a malformed criterion (%s) is a 400 naming the field and the rule, and writes nothing',
    async (_label, criterion, field, rule) => {
      const intent = unique('oc-invalid');
      const res = await http<{ errors: { field: string; rule: string }[] }>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: { agent_id: 'test-agent', intent, operations: [charge(unique('oc-invalid'))], criteria: [criterion] },
      });
      expect(res.status).toBe(400);
      expect(res.headers.get('content-type')).toContain('application/problem+json');
      expect(res.body.errors).toEqual(expect.arrayContaining([expect.objectContaining({ field, rule })]));
      const [row] = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions WHERE intent = $1`, [
        intent,
      ])) as { n: number }[];
      expect(row.n).toBe(0);
    },
  );

  it('GET /v1/status-model serves the commit rules, the failure codes and the outcome vocabulary', async () => {
    const res = await http<{
      operation: { commit: { values: { value: string }[]; rules: unknown[] }; terminal_reasons: string[] };
      failure: { categories: string[]; codes: { code: string }[] };
      outcome: { results: string[]; verdicts: string[] };
    }>(stack.apiUrl, 'GET', '/v1/status-model', { key: DEMO.agent });
    expect(res.status).toBe(200);
    expect(res.body.operation.commit.values.map((v) => v.value)).toEqual([...COMMIT_VALUES]);
    expect(res.body.operation.commit.rules.length).toBeGreaterThan(0);
    expect(res.body.operation.terminal_reasons).toEqual(expect.arrayContaining(['DENIED', 'PROVEN_ABSENT']));
    expect(res.body.failure.codes.map((c) => c.code).sort()).toEqual(Object.keys(FAILURE_CODES).sort());
    expect(res.body.outcome).toEqual({
      results: ['satisfied', 'unmet', 'pending'],
      verdicts: ['pass', 'fail', 'pending', 'not_applicable'],
    });
  });
});
