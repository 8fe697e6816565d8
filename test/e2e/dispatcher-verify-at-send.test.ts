import { TransitionService } from '@verity/persistence';
import { OperationStatus, TerminalReason, VerificationMethod } from '@verity/status-model';
import type { WireRequest } from '../../apps/sandbox-provider/src/sandbox-provider';
import { Stack, waitFor } from '../support/stack';
import { charge, unique } from '../support/http';
import {
  events,
  expectLegalHistory,
  getExecution,
  waitForMarkers,
  resetSandbox,
  settle,
  submit,
} from './dispatcher-helpers';

/**
 * The happy path in one job (VERIFY_AT_SEND, on by default): the dispatcher reads an acknowledged charge back right
 * after the send and settles it VERIFIED when the read finds it — no verify job, no reconciler needed. Any other read
 * is the verify job's, as before: a lagging replica leaves the operation ACKNOWLEDGED for the reconciler.
 */
describe('dispatcher: verified in the send’s own job', () => {
  let stack: Stack;
  beforeAll(async () => {
    // No reconciler: whatever reaches VERIFIED here was verified by the dispatcher.
    stack = await Stack.start({ label: 'vsend', reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  it('a charge the read-back finds is VERIFIED and its execution completed without a reconciler', async () => {
    const reference = unique('vsend');
    const created = await submit(stack, [charge(reference)]);
    const done = await settle(stack, created.id);
    expect(done.status).toBe('completed');
    const op = done.operations[0];
    expect(op.status).toBe('VERIFIED');
    expect(op.evidence).toMatchObject({ method: 'read_after_write' });
    expect(op.observation).toBe('converged');
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(
      log.filter((e) => e.type === 'operation.status_changed').map((e) => `${e.from_status} -> ${e.to_status}`),
    ).toEqual(['PREPARED -> SENT', 'SENT -> ACKNOWLEDGED', 'ACKNOWLEDGED -> VERIFIED']);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('the last VERIFIED completes the execution in its own statement; an earlier one does not', async () => {
    const first = unique('vsend-first');
    const second = unique('vsend-second');
    const created = await submit(stack, [charge(first), charge(second, { key: 'second', depends_on: ['charge'] })]);
    const done = await settle(stack, created.id);
    expect(done.status).toBe('completed');
    expect(done.operations.map((op) => op.status)).toEqual(['VERIFIED', 'VERIFIED']);
    expectLegalHistory(await events(stack, created.id));
    // Which transaction wrote each move (events carry their writer's transaction id).
    const rows = (await stack.db.dataSource.query(
      `SELECT coalesce(o.key, 'execution') AS who, v.to_status AS to, v.txid::text AS tx
         FROM events v LEFT JOIN operations o ON o.id = v.operation_id
        WHERE v.execution_id = $1 AND v.to_status IN ('VERIFIED', 'validating_output', 'completed')
        ORDER BY v.seq`,
      [created.id],
    )) as { who: string; to: string; tx: string }[];
    expect(rows.map((r) => `${r.who} ${r.to}`)).toEqual([
      'charge VERIFIED',
      'second VERIFIED',
      'execution validating_output',
      'execution completed',
    ]);
    // The second charge was the last to settle: its VERIFIED and the completion are one statement's. The first one's
    // VERIFIED was written while the second was still to be sent: alone.
    expect(new Set(rows.slice(1).map((r) => r.tx)).size).toBe(1);
    expect(rows[0].tx).not.toBe(rows[1].tx);
  });

  it('a read that does not find it yet is left to the verify job: ACKNOWLEDGED until a reconciler reads it', async () => {
    await stack.setFaults({ replica_lag_ms: 60_000 });
    const reference = unique('vsend-lag');
    const created = await submit(stack, [charge(reference)]);
    // The send's job is over once its execution waits for the tool: the dispatcher has read and not concluded.
    const waiting = await waitFor(
      () => getExecution(stack, created.id),
      (e) => e.status === 'waiting_for_tool' && e.operations[0].status === 'ACKNOWLEDGED',
      30_000,
    );
    expect(waiting.operations[0].evidence).toBeNull();
    // It was read back after the send (the read before it is the context read of resolving_context).
    const wire = (await (await stack.sandbox('/__requests')).json()) as { requests: WireRequest[] };
    const send = wire.requests.find((r) => r.method === 'POST' && r.reference === reference);
    expect(send).toBeDefined();
    expect(wire.requests.filter((r) => r.method === 'GET' && r.seq > send!.seq).length).toBeGreaterThanOrEqual(1);

    await stack.setFaults({ replica_lag_ms: 0 });
    await stack.startApp('reconciler');
    const done = await settle(stack, created.id);
    expect(done.operations[0].status).toBe('VERIFIED');
    expect(done.status).toBe('completed');
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });
});

/**
 * A dispatcher that dies between the acknowledgement and its read at send (test-only kill point
 * TEST_PAUSE_BEFORE_READ_MS, then SIGKILL) leaves the operation ACKNOWLEDGED with its check due: the sweeper owes it a
 * verify job and the reconciler settles it from the source. Never a second send.
 */
describe('dispatcher: killed between the acknowledgement and its read at send', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'vsendkill', dispatchers: 0 });
  });
  afterAll(async () => stack?.stop());

  it('the sweeper and the reconciler verify it; one charge, one send', async () => {
    const dispatcher = await stack.startApp('dispatcher', { TEST_PAUSE_BEFORE_READ_MS: '60000' });
    const reference = unique('vsend-kill');
    const created = await submit(stack, [charge(reference)]);
    const [operationId] = await waitForMarkers(dispatcher, 'paused before read-back');
    const mid = (await stack.db.dataSource.query(`SELECT status FROM operations WHERE id = $1`, [operationId])) as {
      status: string;
    }[];
    expect(mid[0].status).toBe('ACKNOWLEDGED');
    await stack.kill(dispatcher, 'SIGKILL');
    await stack.startApp('dispatcher');

    const done = await settle(stack, created.id);
    expect(done.operations[0].status).toBe('VERIFIED');
    expect(done.status).toBe('completed');
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(log.filter((e) => e.type === 'operation.status_changed' && e.to_status === 'SENT')).toHaveLength(1);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });
});

/**
 * The read at send finds the effect, but the operation moved while it read (here to UNKNOWN, as a verify job the
 * sweeper owed it can move it: written by the test through the one transition writer while the dispatcher is paused
 * before its read). Its VERIFIED loses the compare-and-set, and the job must not take the operation for VERIFIED:
 * the execution waits for the tool, it does not complete around an UNKNOWN operation.
 */
describe('dispatcher: the read at send loses to a move made while it read', () => {
  let stack: Stack;
  beforeAll(async () => {
    // No reconciler: nothing but the test moves the operation while the dispatcher reads.
    stack = await Stack.start({ label: 'vsendlost', reconcilers: 0, dispatchers: 0 });
  });
  afterAll(async () => stack?.stop());

  it('does not complete the execution: it reads the operations again and waits for the tool', async () => {
    const dispatcher = await stack.startApp('dispatcher', { TEST_PAUSE_BEFORE_READ_MS: '3000' });
    const reference = unique('vsend-lost');
    const created = await submit(stack, [charge(reference)]);
    const [operationId] = await waitForMarkers(dispatcher, 'paused before read-back');
    const moved = await new TransitionService().operation(stack.db.dataSource.manager, {
      operation: {
        id: operationId,
        status: OperationStatus.ACKNOWLEDGED,
        attempt: 1,
        verificationMethod: VerificationMethod.READ_AFTER_WRITE,
      },
      to: OperationStatus.UNKNOWN,
      reason: TerminalReason.CONNECTOR_ERROR,
      eventData: { detail: 'moved by the test while the dispatcher read' },
    });
    expect(moved.won).toBe(true);
    // The job is over once the execution leaves running (to wherever it goes).
    const after = await waitFor(
      () => getExecution(stack, created.id),
      (e) => e.status !== 'running',
      30_000,
    );
    expect(after.status).toBe('waiting_for_tool');
    expect(after.operations[0].status).toBe('UNKNOWN');
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(log.some((e) => e.to_status === 'VERIFIED' || e.to_status === 'completed')).toBe(false);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });
});
