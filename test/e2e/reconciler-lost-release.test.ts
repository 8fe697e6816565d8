import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import {
  events,
  expectLegalHistory,
  getOperation,
  logLines,
  markedOperations,
  stackQueue,
  statusPath,
  submit,
  waitForLog,
  waitForOp,
} from './dispatcher-helpers';

/**
 * I7 for a reviewer's release: `resolve { "status": "SENT" }` of a held, never-sent operation is recorded on the row
 * and carried out by one dispatch job. A lost job — its dispatcher SIGKILLed before SENT (a dispatch job is never
 * re-run), Redis losing it, or a job that ended without sending — must not leave the release recorded and never sent
 * (MANUAL_REVIEW for good, with every other resolution refused): the sweeper re-arms the job, and the charge is sent
 * exactly once.
 */
describe('reconciler: a reviewer’s release whose dispatch job was lost', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'lostrel', dispatchers: 0 });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => {
    for (const app of stack.running('dispatcher')) await stack.kill(app, 'SIGKILL');
  });

  /** A charge held for a knowledge conflict (never sent), released by a reviewer: the held operation's id. */
  async function heldAndReleased(label: string): Promise<{ executionId: string; operationId: string; ref: string }> {
    const ref = unique(label);
    const created = await submit(stack, [charge(ref, { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held).toMatchObject({ terminal_reason: 'KNOWLEDGE_CONFLICT', attempt: 0 });
    const released = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'SENT', evidence: 'checked by the test: release it' },
    });
    expect(released.status).toBe(200);
    return { executionId: created.id, operationId: held.id, ref };
  }

  /** Sent once by the release, verified, with the one reviewer's decision; and the sweeper is what re-armed it. */
  async function expectSentOnce(release: { executionId: string; operationId: string; ref: string }) {
    const verified = await waitForOp(stack, release.executionId, 'charge', (o) => o.status === 'VERIFIED', 30_000);
    expect(verified.attempt).toBe(1);
    const effects = await stack.effects();
    expect(effects.charges[release.ref].count).toBe(1);
    expect(effects.duplicates).toEqual([]);
    const log = await events(stack, release.executionId);
    expectLegalHistory(log);
    expect(statusPath(log, release.operationId)).toEqual([
      'PREPARED',
      'MANUAL_REVIEW',
      'SENT',
      'ACKNOWLEDGED',
      'VERIFIED',
    ]);
    expect(log.filter((e) => e.type === 'operation.resolved')).toHaveLength(1);
    const [reconciler] = stack.running('reconciler');
    expect(
      logLines(reconciler).some(
        (line) =>
          line.msg === 'a recorded release had no dispatch job: armed again' &&
          line.operationId === release.operationId,
      ),
    ).toBe(true);
  }

  it('SIGKILL of the release’s dispatcher right before SENT: the sweeper re-arms the release, sent once, VERIFIED', async () => {
    const paused = await stack.startApp('dispatcher', { TEST_PAUSE_BEFORE_SENT_MS: '60000' });
    const release = await heldAndReleased('lostrel-kill');
    // The release's job has read the operation and waits right before its SENT statement: killed there.
    await waitFor(
      async () => markedOperations(paused, 'paused before SENT'),
      (ids) => ids.includes(release.operationId),
      30_000,
      20,
    );
    await stack.kill(paused, 'SIGKILL');
    await stack.startApp('dispatcher');

    await expectSentOnce(release);
  });

  it('the release’s job lost from Redis before any dispatcher took it: re-armed by the sweeper, sent once', async () => {
    const first = await stack.startApp('dispatcher');
    const ref = unique('lostrel-redis');
    const created = await submit(stack, [charge(ref, { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    // No dispatcher while the release's job is lost: only a job the sweeper puts back can carry the release out.
    await stack.kill(first, 'SIGTERM');
    const released = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'SENT', evidence: 'checked by the test: release it' },
    });
    expect(released.status).toBe(200);
    const queue = stackQueue(stack, 'dispatch');
    try {
      const jobId = `${held.id}.dispatch.release`;
      expect(await queue.getJobState(jobId)).toBe('waiting');
      await queue.remove(jobId);
      // Put back by the sweeper once the release is older than its grace.
      await waitFor(
        () => queue.getJobState(jobId),
        (state) => state === 'waiting',
        30_000,
      );
    } finally {
      await queue.close();
    }
    await stack.startApp('dispatcher');

    await expectSentOnce({ executionId: created.id, operationId: held.id, ref });
  });

  it('a recorded release its execution’s cancel overtook ends CANCELLED with it: never sent, never re-armed', async () => {
    const first = await stack.startApp('dispatcher');
    const waitingRef = unique('lostrel-waiting');
    const heldRef = unique('lostrel-ended');
    // One charge waits for approval (the execution stays open to be cancelled), the other is held, never sent.
    const created = await submit(stack, [
      charge(waitingRef, { requires_approval: true }),
      charge(heldRef, { key: 'second', expected_state: { charged: true } }),
    ]);
    const held = await waitForOp(stack, created.id, 'second', (o) => o.status === 'MANUAL_REVIEW');
    await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    await stack.kill(first, 'SIGTERM');
    const released = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'SENT', evidence: 'checked by the test: release it' },
    });
    expect(released.status).toBe(200);
    const queue = stackQueue(stack, 'dispatch');
    try {
      await queue.remove(`${held.id}.dispatch.release`);
    } finally {
      await queue.close();
    }
    // Cancelled while no job carries the release: the held operation ends with the execution, so the sweeper has no
    // recorded release left to arm again (before, it armed one, which the SENT statement refused and withdrew).
    const cancelled = await http(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, { key: DEMO.agent });
    expect(cancelled.status).toBe(200);
    expect(await getOperation(stack, held.id)).toMatchObject({ status: 'CANCELLED', attempt: 0 });
    await stack.startApp('dispatcher');

    // Two whole sweeps after the cancel: neither armed it (nothing is held to carry out any more).
    await stack.sweepsPassed(2);
    const [reconciler] = stack.running('reconciler');
    const rearms = logLines(reconciler).filter(
      (line) => line.msg === 'a recorded release had no dispatch job: armed again' && line.operationId === held.id,
    );
    expect(rearms).toHaveLength(0);
    const log = await events(stack, created.id);
    expect(log.find((e) => e.operation_id === held.id && e.to_status === 'CANCELLED')!.data).toMatchObject({
      cause: 'execution_cancelled',
    });
    expect(log.some((e) => e.type === 'operation.release_withdrawn')).toBe(false);
    const effects = await stack.effects();
    expect([effects.charges[waitingRef], effects.charges[heldRef]]).toEqual([undefined, undefined]);
    expectLegalHistory(log);
  });

  it('a release refused twice for settings changed under it is tried again, not left recorded: sent once', async () => {
    // Each pause is the window in which the test spots the marker and changes the settings through the API: 1.5 s was
    // outlasted by a loaded machine, and the send went ahead before the change.
    const slow = await stack.startApp('dispatcher', { TEST_PAUSE_BEFORE_SENT_MS: '5000' });
    const release = await heldAndReleased('lostrel-settings');
    const pauses = () => markedOperations(slow, 'paused before SENT').filter((id) => id === release.operationId);
    // The job reads the settings, waits before SENT, is refused for the change, reads again and is refused again.
    for (const [round, max] of [
      [1, 1_000_000],
      [2, 2_000_000],
    ]) {
      await waitFor(
        async () => pauses().length,
        (n) => n >= round,
        30_000,
        20,
      );
      const changed = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/sandbox.payments', {
        key: DEMO.admin,
        body: { spending_caps: [{ period: 'day', max_amount: max, amount_field: 'amount' }] },
      });
      expect(changed.status).toBe(200);
    }
    await waitForLog(
      slow,
      (line) =>
        line.msg === 'dispatch' &&
        line.operationId === release.operationId &&
        String(line.outcome).includes('settings_changed'),
    );

    await expectSentOnce(release);
    expect(pauses().length).toBe(3);
  });
});
