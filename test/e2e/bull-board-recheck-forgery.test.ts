import type { Queue } from 'bullmq';
import { createApiKey } from '@verity/persistence/api-keys';
import { JobName, QueueName, reviewerRecheckJobId } from '@verity/queues';
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

  it('a reviewer’s request run two hours late still re-checks in their name, saying when they asked; a replay of it writes nothing', async () => {
    // The API answered 202 and promised the result as events: a job that runs late (the reconcilers down, the queue
    // backed up) still reads for the reviewer. Made late here by stopping the reconcilers while the reviewer asks and
    // dating the request back two hours before they start again.
    const { executionId, opId, jobId } = await held();
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
    const [dated] = (await stack.db.dataSource.query(
      `SELECT to_char(requested_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS requested_at
       FROM recheck_requests WHERE id = $1`,
      [request.id],
    )) as { requested_at: string }[];
    for (let stopped = reconcilers.length; stopped > 0; stopped -= 1) await stack.startApp('reconciler');

    const log = await waitFor(
      () => events(stack, executionId),
      (l) => byReviewer(l, opId).length >= 1,
      30_000,
    );
    const [theirs] = byReviewer(log, opId);
    expect(theirs.data).toMatchObject({ requested_at: dated.requested_at, result: 'unreachable' });
    expect(typeof theirs.data.requested_by).toBe('string');
    expect(Date.parse(String(theirs.created_at)) - Date.parse(dated.requested_at)).toBeGreaterThan(2 * 60 * 60 * 1000);

    // The job replayed from the board after its request was used: nothing more in the reviewer's name.
    await editAndRun(jobId, { operationId: opId, executionId, requestId: request.id });
    await waitFor(
      async () => stack.running('reconciler').some((r) => r.output.join('').includes('no usable recorded request')),
      (logged) => logged,
    );
    expect(byReviewer(await events(stack, executionId), opId)).toHaveLength(1);
  }, 120_000);

  it('two reviewers asking at once (the same second) each get their re-check, each event naming its reviewer', async () => {
    // The job id was made from the second: the second request of a second was recorded (and answered 202) while its
    // job was deduplicated away, never read. Each recorded request has its own job (its id made from the request's).
    const { executionId, opId } = await held();
    const second = await createApiKey(stack.db.dataSource.manager, {
      tenantId: 'demo',
      role: 'reviewer',
      label: 'second reviewer',
    });
    // The reconcilers stopped while they ask: the first job still waits when the second request is recorded (a job
    // already run and removed would have let an equal id in again).
    const reconcilers = stack.running('reconciler');
    for (const reconciler of reconcilers) await stack.kill(reconciler, 'SIGTERM');
    const asked = await Promise.all(
      [DEMO.reviewer, second.key].map((key) => http(stack.apiUrl, 'POST', `/v1/operations/${opId}/recheck`, { key })),
    );
    expect(asked.map((a) => a.status)).toEqual([202, 202]);
    const requests = (await stack.db.dataSource.query(
      `SELECT id, requested_by FROM recheck_requests WHERE operation_id = $1 ORDER BY requested_by`,
      [opId],
    )) as { id: string; requested_by: string }[];
    expect(requests).toHaveLength(2);
    expect(requests.map((r) => r.requested_by)).toContain(second.id);
    // Both jobs wait, each under its request's id: the two asks may land in different seconds, so the events alone
    // would not tell a job id made from the second from one made from the request.
    for (const request of requests) {
      const job = await queue.getJob(reviewerRecheckJobId(opId, request.id));
      expect(job?.data).toMatchObject({ operationId: opId, requestId: request.id });
    }
    for (let stopped = reconcilers.length; stopped > 0; stopped -= 1) await stack.startApp('reconciler');
    const log = await waitFor(
      () => events(stack, executionId),
      (l) => byReviewer(l, opId).length >= 2,
      30_000,
    );
    expect(
      byReviewer(log, opId)
        .map((e) => e.data.requested_by)
        .sort(),
    ).toEqual(requests.map((r) => r.requested_by));
  }, 60_000);
});
