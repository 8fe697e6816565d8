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
