import { skewedClock } from '../support/skewed-clock';
import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Op, submit, waitForOp } from './dispatcher-helpers';
import type { ProblemDetails as Problem } from '@verity/sdk';

const HOUR_MS = 3_600_000;

/**
 * An approval request is shown `withdrawn` once its execution's deadline has passed — by the database's clock, the one
 * `deadline_at` is on and an approve is refused by. An API process whose own clock is an hour off must show the
 * request as its approve would answer it: not `withdrawn` while an approve would still be granted (its clock ahead),
 * and not still `requested` when an approve is refused (behind). No reconciler runs: nothing expires the execution, so
 * the window between the deadline and the sweeper stays open.
 */
describe('an approval request is shown withdrawn by the database’s clock', () => {
  let stack: Stack;
  let clock: ReturnType<typeof skewedClock> | undefined;
  const skewedApis: Record<'ahead' | 'behind', string> = { ahead: '', behind: '' };

  beforeAll(async () => {
    clock = skewedClock();
    stack = await Stack.start({ label: 'approvalshownclock', reconcilers: 0 });
    skewedApis.ahead = await stack.startApi(clock.env(HOUR_MS));
    skewedApis.behind = await stack.startApi(clock.env(-HOUR_MS));
  });
  afterAll(async () => {
    await stack?.stop();
    clock?.remove();
  });

  /** A charge waiting for approval. */
  async function waitingForApproval() {
    const created = await submit(stack, [charge(unique('shown-clock'), { requires_approval: true })]);
    const waiting = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    return { executionId: created.id, opId: waiting.id };
  }

  /** The execution's deadline set `interval` from the database's now. */
  const setDeadline = (executionId: string, interval: string) =>
    stack.db.dataSource.query(`UPDATE executions SET deadline_at = now() + $2::interval WHERE id = $1`, [
      executionId,
      interval,
    ]);

  /** The approval state as each read of the API at `url` shows it: the operation, its execution, the queue. */
  async function shownBy(url: string, executionId: string, opId: string) {
    const read = async <T>(path: string) => {
      const res = await http<T>(url, 'GET', path, { key: DEMO.reviewer });
      expect(res.status).toBe(200);
      return res.body;
    };
    const operation = await read<Op>(`/v1/operations/${opId}`);
    const execution = await read<{ operations: Op[] }>(`/v1/executions/${executionId}`);
    const queue = await read<{ data: { operation: Op }[] }>(`/v1/review/approvals?q=${executionId}`);
    return {
      operation: operation.approval?.state,
      execution: execution.operations[0].approval?.state,
      queued: queue.data.map((item) => item.operation.id),
    };
  }

  const approve = (url: string, opId: string) =>
    http<Problem & Pick<Op, 'approval'>>(url, 'POST', `/v1/operations/${opId}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: 'clock test' },
    });

  /**
   * `work` with the dispatchers frozen: past its deadline, an execution is expired at the dispatcher's next look (a job
   * left from asking for approval), which ends the request with it — withdrawn then by its end, not by the deadline.
   */
  async function whileDispatchersFrozen(work: () => Promise<void>) {
    const dispatchers = stack.running('dispatcher');
    for (const dispatcher of dispatchers) dispatcher.child.kill('SIGSTOP');
    try {
      await work();
    } finally {
      for (const dispatcher of dispatchers) dispatcher.child.kill('SIGCONT');
    }
  }

  it('past the deadline, an API whose clock is an hour behind shows the request withdrawn, as its approve answers', async () => {
    const { executionId, opId } = await waitingForApproval();
    await whileDispatchersFrozen(async () => {
      await setDeadline(executionId, '-1 second');
      expect(await shownBy(skewedApis.behind, executionId, opId)).toEqual({
        operation: 'withdrawn',
        execution: 'withdrawn',
        queued: [],
      });
      const approved = await approve(skewedApis.behind, opId);
      expect(approved.status).toBe(409);
      expect(approved.body).toMatchObject({
        type: expect.stringContaining('not-awaiting-approval'),
        current_status: 'PREPARED',
      });
    });
  });

  it('before the deadline, an API whose clock is an hour ahead shows the request requested, as its approve answers', async () => {
    const { executionId, opId } = await waitingForApproval();
    await setDeadline(executionId, '10 minutes');
    expect(await shownBy(skewedApis.ahead, executionId, opId)).toEqual({
      operation: 'requested',
      execution: 'requested',
      queued: [opId],
    });
    const approved = await approve(skewedApis.ahead, opId);
    expect(approved.status).toBe(200);
    expect(approved.body.approval).toMatchObject({ state: 'granted' });
  });

  it('past the deadline, a decision naming a request decided before shows the request waiting now withdrawn, as the operation does', async () => {
    // An API whose grants expire as they are written: the dispatcher withdraws the grant and asks again.
    const expiring = await stack.startApi({ APPROVAL_TTL_MS: '1' });
    const created = await submit(stack, [charge(unique('shown-clock-again'), { requires_approval: true })]);
    const first = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    const shown = (first.approval as { requested_at: string }).requested_at;
    const granted = await http(expiring, 'POST', `/v1/operations/${first.id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', requested_at: shown },
    });
    expect(granted.status).toBe(200);
    await waitForOp(
      stack,
      created.id,
      'charge',
      (o) => o.approval?.state === 'requested' && (o.approval as { requested_at: string }).requested_at !== shown,
    );
    await whileDispatchersFrozen(async () => {
      await setDeadline(created.id, '-1 second');
      expect((await shownBy(stack.apiUrl, created.id, first.id)).operation).toBe('withdrawn');

      const late = await http<Problem & { approval?: string }>(
        stack.apiUrl,
        'POST',
        `/v1/operations/${first.id}/approval`,
        { key: DEMO.reviewer, body: { decision: 'approve', requested_at: shown } },
      );
      expect(late.status).toBe(409);
      expect(late.body).toMatchObject({
        type: expect.stringContaining('already-decided'),
        decision: 'approve',
        approval: 'withdrawn',
        current_status: 'PREPARED',
      });
    });
  });
});
