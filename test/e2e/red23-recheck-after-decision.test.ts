import type { ProblemDetails as Problem } from '@verity/sdk';
import { createApiKey } from '@verity/persistence/api-keys';
import { waitForLockWaiter } from '../support/lock-waits';
import { withSessions } from '../support/sessions';
import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Op, events, expectLegalHistory, getOperation, resetSandbox, submit, waitForOp } from './dispatcher-helpers';

/**
 * A reviewer's re-check is judged on the operation it read (held, not decided), then made in a transaction of its own.
 * Another reviewer's resolution committed in between ends the hold: the re-check must not be recorded (nor its job
 * asked for) on an operation that is no longer held — 409 already-decided naming the resolution, as for a re-check
 * sent after it. Made deterministic by holding the re-checking key's row (the re-check's transaction share-locks it
 * first) while the other reviewer resolves.
 */
describe('a re-check whose operation was decided after it was read', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'red23-recheck' });
  }, 60_000);
  afterAll(async () => stack?.stop());

  it('is 409 already-decided, and nothing is recorded for it', async () => {
    await stack.setFaults({ read_fault: 'unavailable' });
    const created = await submit(stack, [charge(unique('red23-recheck'))]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held.terminal_reason).toBe('SOURCE_UNREACHABLE');
    const asker = await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role: 'reviewer' });
    const db = stack.db.dataSource;

    const { recheck, resolved } = await withSessions(db, ['holder'], async ({ holder }) => {
      await holder.startTransaction();
      const [{ pid }] = (await holder.query(`SELECT pg_backend_pid() AS pid`)) as { pid: number }[];
      await holder.query(`SELECT 1 FROM api_keys WHERE id = $1 FOR UPDATE`, [asker.id]);
      let answered = false;
      const rechecking = http<Op & Problem>(stack.apiUrl, 'POST', `/v1/operations/${held.id}/recheck`, {
        key: asker.key,
      }).finally(() => (answered = true));
      // The re-check has read the operation held and waits to be made.
      await waitForLockWaiter(db, { blockedBy: pid, unless: () => answered });
      expect(answered).toBe(false);
      const resolving = await http<Op>(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'VERIFIED', evidence: 'seen on the provider dashboard' },
      });
      await holder.rollbackTransaction();
      return { recheck: await rechecking, resolved: resolving };
    });
    expect(resolved.status).toBe(200);
    expect({ status: recheck.status, body: recheck.body }).toMatchObject({
      status: 409,
      body: { type: 'https://verity.dev/problems/already-decided', decision: 'VERIFIED' },
    });
    expect(
      await db.query(`SELECT id FROM recheck_requests WHERE operation_id = $1 AND requested_by = $2`, [
        held.id,
        asker.id,
      ]),
    ).toEqual([]);
    expect((await getOperation(stack, held.id)).status).toBe('VERIFIED');
    expectLegalHistory(await events(stack, created.id));
    await resetSandbox(stack);
  }, 90_000);
});
