import { DEMO_SANDBOX_ACCOUNT, Stack, waitFor } from '../support/stack';
import { charge, unique } from '../support/http';
import { Event, Op, events, getOperation, resetSandbox, settle, statusPath, submit } from './dispatcher-helpers';

/**
 * Observation after VERIFIED (observation is its own dimension; docs/semantics.md). The sweeper hands recently
 * VERIFIED operations back to the reconciler every OBSERVE_INTERVAL_MS (short here); each read sets `observation` to
 * converged, superseded, degraded or unavailable — with an `operation.observed` event when it changes — and never
 * rewrites how the operation ended (status, terminal_reason, evidence).
 */
describe('reconciler: observation after VERIFIED', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'robserve', env: { OBSERVE_INTERVAL_MS: '300' } });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  async function verifiedCharge(prefix: string): Promise<{ executionId: string; op: Op; reference: string }> {
    const reference = unique(prefix);
    const created = await submit(stack, [charge(reference)]);
    const execution = await settle(stack, created.id);
    const op = execution.operations[0];
    expect(op).toMatchObject({ status: 'VERIFIED', observation: 'converged' });
    return { executionId: created.id, op, reference };
  }

  async function observed(executionId: string, opId: string, observation: string): Promise<Event[]> {
    let log: Event[] = [];
    await waitFor(
      async () => {
        log = await events(stack, executionId);
        return getOperation(stack, opId);
      },
      (op) =>
        op.observation === observation &&
        log.some((e) => e.type === 'operation.observed' && e.data.observation === observation),
      30_000,
      150,
    );
    return log;
  }

  /** How the operation ended, which observation must never touch. */
  function ending(op: Op) {
    return { status: op.status, terminal_reason: op.terminal_reason, evidence: op.evidence, attempt: op.attempt };
  }

  it('unavailable while the source cannot be read, converged again once it can', async () => {
    const { executionId, op } = await verifiedCharge('ob-unavailable');
    await stack.setFaults({ read_fault: 'unavailable' });
    const down = await observed(executionId, op.id, 'unavailable');
    const event = down.find((e) => e.type === 'operation.observed')!;
    expect(event.data).toMatchObject({ observation: 'unavailable', previous: 'converged' });
    expect(event.to_status).toBeNull();

    await resetSandbox(stack);
    const up = await observed(executionId, op.id, 'converged');
    const back = up.filter((e) => e.type === 'operation.observed').at(-1)!;
    expect(back.data).toMatchObject({
      observation: 'converged',
      previous: 'unavailable',
      evidence: { record: { id: (op.evidence!.record as { id: string }).id } },
    });
    const now = await getOperation(stack, op.id);
    expect(ending(now)).toEqual(ending(op));
    // Observation is not a status change: the operation's status history is untouched.
    expect(statusPath(up, op.id)).toEqual(['PREPARED', 'SENT', 'ACKNOWLEDGED', 'VERIFIED']);
  });

  it('converged: repeated reads that show the verified record change nothing and add no event', async () => {
    const { executionId, op } = await verifiedCharge('ob-converged');
    const before = await events(stack, executionId);
    const dueAt = async () =>
      new Date(
        (
          (await stack.db.dataSource.query(`SELECT next_check_at FROM operations WHERE id = $1`, [op.id])) as {
            next_check_at: Date;
          }[]
        )[0].next_check_at,
      ).getTime();
    const first = await dueAt();
    // Several observation rounds (OBSERVE_INTERVAL_MS is 300): each claim moves the next read further out.
    await waitFor(dueAt, (t) => t > first + 900, 15_000, 200);
    const after = await events(stack, executionId);
    expect(after.filter((e) => e.type === 'operation.observed')).toEqual([]);
    expect(after.length).toBe(before.length);
    expect((await getOperation(stack, op.id)).observation).toBe('converged');
  });

  it('superseded: a newer charge for the same reference was written since, by someone else', async () => {
    const { executionId, op, reference } = await verifiedCharge('ob-superseded');
    const other = await stack.sandbox('/v1/charges', {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'idempotency-key': unique('someone-else'),
        ...DEMO_SANDBOX_ACCOUNT,
      },
      body: JSON.stringify({ amount: 4000, currency: 'EUR', reference }),
    });
    expect(other.status).toBe(201);
    const newer = (await other.json()) as { id: string; version: number };
    const log = await observed(executionId, op.id, 'superseded');
    const event = log.find((e) => e.type === 'operation.observed')!;
    expect(event.data).toMatchObject({
      observation: 'superseded',
      previous: 'converged',
      evidence: { record: { id: newer.id, version: newer.version, amount: 4000 } },
    });
    expect(newer.version).toBeGreaterThan(Number((op.evidence!.record as { version: number }).version));
    // The verified charge is still what this operation did: its ending stays.
    expect(ending(await getOperation(stack, op.id))).toEqual(ending(op));
  });

  it('degraded: the source answers, but without the field the verification relied on', async () => {
    const { executionId, op } = await verifiedCharge('ob-degraded');
    await stack.setFaults({ read_fault: 'field_missing' });
    const log = await observed(executionId, op.id, 'degraded');
    expect(log.find((e) => e.type === 'operation.observed')!.data).toMatchObject({
      observation: 'degraded',
      detail: expect.stringContaining('status'),
    });
    expect(ending(await getOperation(stack, op.id))).toEqual(ending(op));
  });

  it('bounded: operations older than the observation window are no longer read', async () => {
    const { op } = await verifiedCharge('ob-window');
    // Pretend it was created long ago (beyond OBSERVE_WINDOW_MS, an hour by default).
    await stack.db.dataSource.query(`UPDATE operations SET created_at = now() - interval '2 hours' WHERE id = $1`, [
      op.id,
    ]);
    await waitFor(
      async () =>
        (await stack.db.dataSource.query(`SELECT next_check_at FROM operations WHERE id = $1`, [op.id])) as {
          next_check_at: Date | null;
        }[],
      (rows) => rows[0].next_check_at === null,
      10_000,
      200,
    );
    await stack.setFaults({ read_fault: 'unavailable' });
    // Sweeps that would hand it to the reconciler again have run: it was not read (the failing read would show).
    await stack.sweepsPassed(3);
    expect((await getOperation(stack, op.id)).observation).toBe('converged');
  });
});
