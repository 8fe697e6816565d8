/**
 * Shared by the dispatcher-* and reconciler-* end-to-end tests: reading executions and their event logs through the
 * API, waiting for log markers of the test-only kill points, and checking that a history is legal against
 * libs/status-model (every consecutive pair of status events is an allowed move, and chains have no gap).
 */
import {
  EXECUTION_TRANSITIONS,
  ExecutionStatus,
  OPERATION_TRANSITIONS,
  isSettledOperation,
} from '@verity/status-model';
import type { Queue } from 'bullmq';
import { DEMO, RunningApp, Stack, waitFor } from '../support/stack';
import { TEST_REDIS_URL } from '../support/services';
import { charge, http, submission, unique } from '../support/http';
import type { Execution, ExecutionEvent as Event, Operation, OperationDetail } from '@verity/sdk';
export type { Execution, ExecutionEvent as Event } from '@verity/sdk';

/** An operation, inside an execution or from GET /v1/operations/{id} (which adds the permitted resolutions). */
export type Op = Operation & Partial<Pick<OperationDetail, 'permitted_resolutions' | 'resolution_options'>>;

export const TERMINAL_EXECUTION = ['completed', 'failed', 'cancelled', 'expired'];

/** As the demo tenant's agent unless another tenant's agent key is given (also to getExecution and settle). */
export async function submit(
  stack: Stack,
  operations: unknown[],
  extra: Record<string, unknown> = {},
  agentKey = DEMO.agent,
) {
  const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
    key: agentKey,
    body: submission(operations, extra),
  });
  if (created.status !== 201) throw new Error(`submit answered ${created.status}: ${created.text}`);
  return created.body;
}

export async function getExecution(stack: Stack, id: string, agentKey = DEMO.agent): Promise<Execution> {
  const res = await http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${id}`, { key: agentKey });
  if (res.status !== 200) throw new Error(`GET execution answered ${res.status}: ${res.text}`);
  return res.body;
}

export async function getOperation(stack: Stack, id: string): Promise<Op> {
  const res = await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${id}`, { key: DEMO.agent });
  if (res.status !== 200) throw new Error(`GET operation answered ${res.status}: ${res.text}`);
  return res.body;
}

export async function events(stack: Stack, id: string, agentKey = DEMO.agent): Promise<Event[]> {
  const res = await http<{ data: Event[] }>(stack.apiUrl, 'GET', `/v1/executions/${id}/events?limit=1000`, {
    key: agentKey,
  });
  if (res.status !== 200) throw new Error(`GET events answered ${res.status}: ${res.text}`);
  return res.body.data;
}

export function isSettled(op: Op): boolean {
  return isSettledOperation(op.status, op.verification_method);
}

/** Until the execution is terminal, its operations as they are then (see settle for every one settled too). */
export async function ended(stack: Stack, id: string, timeoutMs = 45_000): Promise<Execution> {
  return waitFor(
    () => getExecution(stack, id),
    (e) => TERMINAL_EXECUTION.includes(e.status),
    timeoutMs,
    150,
  );
}

/** Until the execution is terminal and every operation has settled (no automatic step will move it again). */
export async function settle(stack: Stack, id: string, timeoutMs = 45_000, agentKey = DEMO.agent): Promise<Execution> {
  return waitFor(
    () => getExecution(stack, id, agentKey),
    (e) => TERMINAL_EXECUTION.includes(e.status) && e.operations.every(isSettled),
    timeoutMs,
    150,
  );
}

export async function waitForOp(
  stack: Stack,
  executionId: string,
  key: string,
  until: (op: Op) => boolean,
  timeoutMs = 45_000,
): Promise<Op> {
  const execution = await waitFor(
    () => getExecution(stack, executionId),
    (e) => e.operations.some((o) => o.key === key && until(o)),
    timeoutMs,
    150,
  );
  return execution.operations.find((o) => o.key === key)!;
}

/**
 * Until the execution waits for approval of its first operation with approval requested at least `times` times (a
 * grant withdrawn asks again); the execution and its event log as then read.
 */
export async function waitForApprovalRequest(
  stack: Stack,
  executionId: string,
  times = 1,
): Promise<{ execution: Execution; log: Event[] }> {
  let log: Event[] = [];
  const execution = await waitFor(
    async () => {
      log = await events(stack, executionId);
      return getExecution(stack, executionId);
    },
    (e) =>
      e.status === 'waiting_for_approval' &&
      e.operations[0].approval?.state === 'requested' &&
      log.filter((x) => x.type === 'approval.requested').length >= times,
    30_000,
    150,
  );
  return { execution, log };
}

/**
 * Waits until a reviewer may resolve the held operation as `status`: a FAILED of a sent operation is accepted only
 * once no call of it can still reach the provider (the reconciler's own bound for believing an absent read).
 */
export async function waitForResolutionPermitted(stack: Stack, operationId: string, status: string): Promise<Op> {
  return waitFor(
    () => getOperation(stack, operationId),
    (op) => Boolean(op.permitted_resolutions?.includes(status as never)),
    45_000,
    150,
  );
}

/**
 * A charge that never reached the provider (dropped before it committed) while its reads were down: held
 * SOURCE_UNREACHABLE, the sandbox's faults cleared, and waited for until a reviewer may resolve it FAILED.
 */
export async function heldUnsentCharge(stack: Stack, reference: string): Promise<{ executionId: string; held: Op }> {
  await stack.setFaults({
    rules: [{ method: 'POST', path: '/v1/charges', fault: 'drop_before_commit', count: 1 }],
    read_fault: 'unavailable',
  });
  const created = await submit(stack, [charge(reference)]);
  const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
  expect(held.terminal_reason).toBe('SOURCE_UNREACHABLE');
  await resetSandbox(stack);
  await waitForResolutionPermitted(stack, held.id, 'FAILED');
  return { executionId: created.id, held };
}

/** A reviewer resolves the held operation VERIFIED (200). */
export async function resolveVerified(stack: Stack, operationId: string): Promise<void> {
  const res = await http(stack.apiUrl, 'POST', `/v1/operations/${operationId}/resolve`, {
    key: DEMO.reviewer,
    body: { status: 'VERIFIED', evidence: 'provider dashboard shows the charge' },
  });
  expect(res.status).toBe(200);
}

/**
 * Two charges (keys `a` and `b`, references from `prefix`), each with a criterion that expects it VERIFIED, held for a
 * human (their read shows no status field): the execution completed, both verdicts pending on MANUAL_REVIEW. Then the
 * sandbox's faults are cleared and the stack's dispatcher is stopped, so that the advances a reviewer's resolutions
 * enqueue are run by the test, by hand. The execution as read when both were held.
 */
export async function heldPairAwaitingOutcome(stack: Stack, prefix: string): Promise<Execution> {
  await stack.setFaults({ read_fault: 'field_missing' });
  const created = await submit(
    stack,
    [charge(unique(`${prefix}-a`), { key: 'a' }), charge(unique(`${prefix}-b`), { key: 'b' })],
    {
      criteria: [
        { key: 'a-paid', operation: 'a', expect_status: 'VERIFIED' },
        { key: 'b-paid', operation: 'b', expect_status: 'VERIFIED' },
      ],
    },
  );
  const held = await waitFor(
    () => getExecution(stack, created.id),
    (e) =>
      e.status === 'completed' &&
      e.operations.every((o) => o.status === 'MANUAL_REVIEW') &&
      e.criteria_results?.every((r) => (r.rationale ?? '').includes('MANUAL_REVIEW')) === true,
    45_000,
    150,
  );
  await resetSandbox(stack);
  const [dispatcher] = stack.running('dispatcher');
  await stack.kill(dispatcher);
  return held;
}

/** The status path of one operation as the event log tells it: PREPARED first, then each `to_status`. */
export function statusPath(log: Event[], operationId: string): string[] {
  return [
    'PREPARED',
    ...log
      .filter((e) => e.type === 'operation.status_changed' && e.operation_id === operationId)
      .map((e) => e.to_status!),
  ];
}

export function executionPath(log: Event[]): string[] {
  return log
    .filter((e) => e.type === 'execution.created' || e.type === 'execution.status_changed')
    .map((e) => e.to_status!);
}

/**
 * The whole history of one execution is legal: events are gap-free in seq; the execution's status events form one
 * chain of moves allowed by EXECUTION_TRANSITIONS; each operation's status events form one chain of moves in
 * OPERATION_TRANSITIONS (no event repeats a move, none starts from a status the operation was not in).
 */
export function expectLegalHistory(log: Event[]): void {
  log.forEach((e, i) => expect(e.seq).toBe(i + 1));
  const executionEvents = log.filter((e) => e.type === 'execution.status_changed');
  let current: string = ExecutionStatus.CREATED;
  for (const e of executionEvents) {
    expect({ move: `${e.from_status} -> ${e.to_status}`, from: e.from_status }).toEqual({
      move: `${current} -> ${e.to_status}`,
      from: current,
    });
    expect(EXECUTION_TRANSITIONS[current as ExecutionStatus]).toContain(e.to_status);
    current = e.to_status!;
  }
  const byOp = new Map<string, Event[]>();
  for (const e of log.filter((x) => x.type === 'operation.status_changed')) {
    byOp.set(e.operation_id!, [...(byOp.get(e.operation_id!) ?? []), e]);
  }
  const legal = new Set(OPERATION_TRANSITIONS.map((r) => `${r.from} -> ${r.to}`));
  for (const [opId, list] of byOp) {
    let status = 'PREPARED';
    for (const e of list) {
      expect({ op: opId, from: e.from_status }).toEqual({ op: opId, from: status });
      expect(legal.has(`${e.from_status} -> ${e.to_status}`)).toBe(true);
      status = e.to_status!;
    }
  }
}

/** A JSON log line of one app that matches: the test-only kill points log `{"msg": marker, "operationId"...}`. */
export function logLines(app: RunningApp): Record<string, unknown>[] {
  return app.output
    .join('')
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => {
      try {
        return JSON.parse(line) as Record<string, unknown>;
      } catch {
        return {};
      }
    });
}

/**
 * How an app stands, for a failure message: its pid, whether it still runs (or the code or signal it ended with), and
 * the last `count` lines it printed (JSON or not: a crash's stack is not JSON).
 */
export function appState(app: RunningApp, count = 40): string {
  const { pid, exitCode, signalCode } = app.child;
  const state =
    exitCode !== null ? `exited with code ${exitCode}` : signalCode !== null ? `ended by ${signalCode}` : 'running';
  const lines = app.output.join('').split('\n').filter(Boolean).slice(-count);
  return `${app.name}#${app.index} (pid ${pid}, ${state}); its last ${lines.length} lines:\n${lines.join('\n')}`;
}

/** Waits for a line of `app`'s log; on timeout, says how the app stands and what it printed last (`appState`). */
export async function waitForLog(
  app: RunningApp,
  until: (line: Record<string, unknown>) => boolean,
  timeoutMs = 30_000,
): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = logLines(app).find(until);
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`no such line in ${timeoutMs} ms from ${appState(app)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Every `msg === marker` line's operationId. */
export function markedOperations(app: RunningApp, marker: string): string[] {
  return logLines(app)
    .filter((l) => l.msg === marker)
    .map((l) => String(l.operationId));
}

/** Waits until `count` distinct operations have logged `marker` (a test-only pause point), and returns their ids. */
export async function waitForMarkers(app: RunningApp, marker: string, count = 1): Promise<string[]> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const ids = markedOperations(app, marker);
    if (new Set(ids).size >= count) return ids;
    if (Date.now() > deadline) {
      throw new Error(`${count} operations did not log "${marker}" in 30000 ms (${ids.length} did): ${appState(app)}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A BullMQ queue of the stack's own Redis prefix: for tests that enqueue a job the way a duplicate would arrive. */
export function stackQueue(stack: Stack, name: string): Queue {
  // Required here, not imported at the top: BullMQ is ~0.15-0.2 s of CPU to load into each of the many test files that use
  // these helpers, and few of them look at a queue.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { Queue: StackQueue } = require('bullmq') as typeof import('bullmq');
  const queue = new StackQueue(name, { connection: { url: TEST_REDIS_URL }, prefix: stack.prefix });
  queue.on('error', () => undefined);
  return queue;
}

export async function resetSandbox(stack: Stack): Promise<void> {
  if (stack.running('sandbox-provider').length === 0) return;
  await stack.setFaults({ rules: [], replica_lag_ms: 0, read_fault: null });
}

/**
 * The work of a one-charge execution got done, and once: it completes (read through `apiUrl`), its charge is VERIFIED
 * and the provider holds exactly one charge of `reference` — whichever path carried it (the queue, or the sweeper
 * after an enqueue that never happened).
 */
export async function expectDoneOnce(stack: Stack, apiUrl: string, executionId: string, reference: string) {
  const done = await waitFor(
    async () => (await http<Execution>(apiUrl, 'GET', `/v1/executions/${executionId}`, { key: DEMO.agent })).body,
    (e) => e.status === 'completed',
    60_000,
    200,
  );
  expect(done.operations[0].status).toBe('VERIFIED');
  expect((await stack.effects()).charges[reference].count).toBe(1);
}
