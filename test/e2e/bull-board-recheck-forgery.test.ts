import type { Queue } from 'bullmq';
import { JobName, QueueName } from '@verity/queues';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Event, events, resetSandbox, stackQueue, submit, waitForOp } from './dispatcher-helpers';

/**
 * A re-check a reviewer asks for is recorded as theirs (`operation.rechecked`, `trigger: "reviewer"`, `requested_by`).
 * On a writable Bull Board (BULL_BOARD_WRITABLE=true) an operator can edit a queued job's data and run it: a re-check
 * job naming a reviewer wrote another event naming them, though they asked once or never. The request is recorded by
 * the API in Postgres and the job only points to it; a job naming no recorded request, or one already used, writes
 * nothing attributed to a person.
 */
describe('Bull Board: a re-check job cannot speak for a reviewer', () => {
  let stack: Stack;
  let board: string;
  let queue: Queue;
  beforeAll(async () => {
    stack = await Stack.start({
      label: 'boardrecheck',
      // The scheduled re-check of a hold waits in the queue (delayed) for as long as the test runs.
      env: { RECHECK_BACKOFF_MS: '600000', RECHECK_BACKOFF_MAX_MS: '600000', OBLIGATION_DUE_MS: '3600000' },
    });
    board = await stack.startApi({ BULL_BOARD_WRITABLE: 'true' });
    queue = stackQueue(stack, QueueName.RECONCILE);
  });
  afterAll(async () => {
    await queue?.close();
    await stack?.stop();
  });
  afterEach(async () => resetSandbox(stack));

  const byReviewer = (log: Event[], opId: string) =>
    log.filter((e) => e.type === 'operation.rechecked' && e.operation_id === opId && e.data.trigger === 'reviewer');

  /** A charge sent and held SOURCE_UNREACHABLE (its source could not be read), its scheduled re-check queued. */
  async function held(): Promise<{ executionId: string; opId: string; jobId: string }> {
    await stack.setFaults({ read_fault: 'unavailable' });
    const created = await submit(stack, [charge(unique('forged-recheck'))]);
    const op = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(op.terminal_reason).toBe('SOURCE_UNREACHABLE');
    const jobId = await scheduledRecheck(op.id);
    return { executionId: created.id, opId: op.id, jobId };
  }

  /** The id of the operation's delayed (scheduled) re-check job, once there is one not yet seen. */
  async function scheduledRecheck(opId: string, not: string[] = []): Promise<string> {
    const ids = await waitFor(
      async () =>
        (await queue.getJobs(['delayed']))
          .filter((j) => j?.name === JobName.RECHECK_OPERATION && j.data?.operationId === opId)
          .map((j) => j.id!)
          .filter((id) => !not.includes(id)),
      (found) => found.length > 0,
    );
    return ids[0];
  }

  /** What an operator does on the board: replace the job's data, promote it, and wait until a reconciler ran it. */
  async function editAndRun(jobId: string, jobData: Record<string, unknown>): Promise<void> {
    const path = `/admin/queues/api/queues/${QueueName.RECONCILE}/${encodeURIComponent(jobId)}`;
    const edited = await http(board, 'PATCH', `${path}/update-data`, { key: DEMO.operator, body: { jobData } });
    expect(edited.status).toBe(200);
    expect((await queue.getJob(jobId))?.data).toEqual(jobData);
    const promoted = await http(board, 'PUT', `${path}/promote`, { key: DEMO.operator });
    expect(promoted.status).toBeLessThan(300);
    // Completed jobs of this queue are removed; a failed one is kept (and would be a failure of this test).
    const state = await waitFor(
      async () => ((await queue.getJob(jobId)) ? await queue.getJobState(jobId) : 'removed'),
      (s) => s === 'removed' || s === 'failed',
    );
    expect(state).toBe('removed');
  }

  it('a scheduled re-check edited to name a reviewer who never asked records no reviewer', async () => {
    const { executionId, opId, jobId } = await held();
    await editAndRun(jobId, {
      operationId: opId,
      executionId,
      requestedBy: 'key_never_asked',
      requestId: 'rcq_never_recorded',
    });
    expect(byReviewer(await events(stack, executionId), opId)).toEqual([]);
  });

  it('a reviewer’s request is used once: a job pointed at it again records nothing more of theirs', async () => {
    const { executionId, opId, jobId } = await held();
    const asked = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/recheck`, { key: DEMO.reviewer });
    expect(asked.status).toBe(202);
    const log = await waitFor(
      () => events(stack, executionId),
      (l) => byReviewer(l, opId).length >= 1,
    );
    const [theirs] = byReviewer(log, opId);
    const [request] = (await stack.db.dataSource.query(
      `SELECT id FROM recheck_requests WHERE operation_id = $1 AND used_at IS NOT NULL`,
      [opId],
    )) as { id: string }[];
    expect(request).toBeDefined();
    await editAndRun(jobId, {
      operationId: opId,
      executionId,
      requestedBy: theirs.data.requested_by,
      requestId: request.id,
    });
    expect(byReviewer(await events(stack, executionId), opId)).toHaveLength(1);
  });

  it('a reviewer’s request run only after its age names no one, and the sweep prunes it (a live one stays)', async () => {
    // A request that outlived its use — the job that was to use it failed and is re-run from the board hours later,
    // after more people may have judged the hold — no longer speaks for the reviewer. Aged here by dating it back: the
    // reconcilers are stopped while the reviewer asks, so its job waits until after that.
    const { executionId, opId } = await held();
    const reconcilers = stack.running('reconciler');
    for (const reconciler of reconcilers) await stack.kill(reconciler, 'SIGTERM');
    const asked = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/recheck`, { key: DEMO.reviewer });
    expect(asked.status).toBe(202);
    const [request] = (await stack.db.dataSource.query(`SELECT id FROM recheck_requests WHERE operation_id = $1`, [
      opId,
    ])) as { id: string }[];
    const [job] = (await queue.getJobs(['waiting', 'prioritized'])).filter((j) => j?.data?.requestId === request.id);
    expect(job).toBeDefined();
    await stack.db.dataSource.query(
      `UPDATE recheck_requests SET requested_at = requested_at - interval '2 hours' WHERE id = $1`,
      [request.id],
    );
    for (let stopped = reconcilers.length; stopped > 0; stopped -= 1) await stack.startApp('reconciler');
    const state = await waitFor(
      async () => ((await queue.getJob(job.id!)) ? await queue.getJobState(job.id!) : 'removed'),
      (s) => s === 'removed' || s === 'failed',
      30_000,
    );
    expect(state).toBe('removed');
    expect(byReviewer(await events(stack, executionId), opId)).toEqual([]);
    // The job's removal (Redis) and its log line (the reconciler's stdout) come by two channels: the line is waited for.
    await waitFor(
      async () => stack.running('reconciler').some((r) => r.output.join('').includes('no usable recorded request')),
      (logged) => logged,
    );

    // Recorded a moment ago for the same hold and not used yet: a job may still use it, so it is kept.
    await stack.db.dataSource.query(
      `INSERT INTO recheck_requests (id, tenant_id, operation_id, requested_by, attempt)
       SELECT 'rcq_live_e2e', tenant_id, id, 'key_live', attempt FROM operations WHERE id = $1`,
      [opId],
    );

    await stack.sweepsPassed(1);
    const left = (await stack.db.dataSource.query(
      `SELECT id, used_at FROM recheck_requests WHERE operation_id = $1 ORDER BY id`,
      [opId],
    )) as { id: string; used_at: Date | null }[];
    expect(left).toEqual([{ id: 'rcq_live_e2e', used_at: null }]);
  }, 120_000);
});
