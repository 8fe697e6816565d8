import type { ProblemDetails as Problem } from '@verity/sdk';
import { waitForLockWaiter } from '../support/lock-waits';
import { skewedClock } from '../support/skewed-clock';
import { DEMO, Stack, freePort, waitFor } from '../support/stack';
import { charge, http, sms, unique } from '../support/http';
import { Op, events, submit, waitForOp } from './dispatcher-helpers';

/** How far behind the database's clock the API host's clock runs. */
const BEHIND_MS = 10 * 60_000;

type Detail = Op & { permitted_resolutions: string[]; resolution_options: { status: string; permitted: boolean }[] };

/**
 * A release (`resolve` SENT) of a held, never-sent operation is offered and taken only while its execution's deadline
 * has not passed — by the database's clock, the one the dispatcher judges the deadline by and the one an approval's
 * statement checks it with. Judged by the API host's own clock, a host 10 minutes behind offered SENT and answered 200 to
 * a release (and the grant of its approval) that nothing would ever carry out.
 */
describe('a release past its execution’s deadline, by the database’s clock', () => {
  let stack: Stack;
  let clock: ReturnType<typeof skewedClock> | undefined;
  let behindApi = '';
  beforeAll(async () => {
    clock = skewedClock();
    // No reconciler: its sweeper would expire the execution (and cancel the hold) before the API is asked.
    stack = await Stack.start({ label: 'releaseclock', reconcilers: 0 });
    const port = await freePort();
    await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', ...clock.env(-BEHIND_MS) });
    behindApi = `http://127.0.0.1:${port}`;
  });
  afterAll(async () => {
    await stack?.stop();
    clock?.remove();
  });

  /**
   * A charge held before it was ever sent (a knowledge conflict), with a message depending on it that keeps its execution
   * running; a dispatcher is started to hold it and stopped once it did, so nothing else moves the execution.
   */
  async function heldNeverSent(label: string, deadlineSeconds: number) {
    await stack.startApp('dispatcher');
    const created = await submit(
      stack,
      [
        charge(unique(label), { expected_state: { charged: true } }),
        sms(unique(`${label}-sms`), { depends_on: ['charge'] }),
      ],
      { deadline_seconds: deadlineSeconds },
    );
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    for (const app of stack.running('dispatcher')) await stack.kill(app, 'SIGTERM');
    return { created, held };
  }

  it('is not offered and is 409 resolution-not-permitted by an API whose clock is behind, and writes nothing', async () => {
    // Held before it was ever sent (a knowledge conflict), with an approval it needs: a release would grant it. The
    // message that depends on it keeps the execution running (waiting for it): its deadline still binds.
    const created = await submit(
      stack,
      [
        charge(unique('release-clock'), { expected_state: { charged: true }, requires_approval: true }),
        sms(unique('release-clock-sms'), { depends_on: ['charge'] }),
      ],
      { deadline_seconds: 3 },
    );
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held.attempt).toBe(0);
    // Nothing expires the execution meanwhile: the dispatcher (which would at its deadline) is stopped.
    for (const app of stack.running('dispatcher')) await stack.kill(app, 'SIGTERM');
    const [{ deadline_at: deadlineAt, status }] = (await stack.db.dataSource.query(
      'SELECT deadline_at, status FROM executions WHERE id = $1',
      [created.id],
    )) as { deadline_at: Date; status: string }[];
    expect(status).not.toMatch(/^(completed|failed|cancelled|expired)$/);
    await waitFor(
      () => stack.databaseNow(),
      (now) => now > new Date(deadlineAt).getTime() + 100,
      15_000,
      100,
    );
    const before = await events(stack, created.id);

    const shown = await http<Detail>(behindApi, 'GET', `/v1/operations/${held.id}`, { key: DEMO.reviewer });
    expect(shown.status).toBe(200);
    expect(shown.body.status).toBe('MANUAL_REVIEW');
    expect(shown.body.permitted_resolutions).not.toContain('SENT');
    expect(shown.body.resolution_options.find((o) => o.status === 'SENT')).toMatchObject({ permitted: false });

    const released = await http<Problem & { permitted_resolutions?: string[] }>(
      behindApi,
      'POST',
      `/v1/operations/${held.id}/resolve`,
      { key: DEMO.reviewer, body: { status: 'SENT', evidence: 'the conflict is understood: send it' } },
    );
    expect({ status: released.status, type: released.body.type }).toEqual({
      status: 409,
      type: 'https://verity.dev/problems/resolution-not-permitted',
    });
    expect(released.body.permitted_resolutions).not.toContain('SENT');
    // Nothing written: no resolution, no approval granted with it.
    expect(await events(stack, created.id)).toEqual(before);
    const after = await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${held.id}`, { key: DEMO.reviewer });
    expect(after.body.approval?.state).not.toBe('granted');
    expect(
      (after.body as Op & { recovery_obligation?: { resolution?: unknown } }).recovery_obligation?.resolution ?? null,
    ).toBeNull();
  });

  it('whose deadline passes while its statement waits for the row: 409 resolution-not-permitted, nothing written', async () => {
    // Judged before the deadline (by the API on the database's clock), written after it: the statement checks it.
    const { created, held } = await heldNeverSent('release-race', 4);
    const [{ deadline_at: deadlineAt }] = (await stack.db.dataSource.query(
      'SELECT deadline_at FROM executions WHERE id = $1',
      [created.id],
    )) as { deadline_at: Date }[];
    const before = await events(stack, created.id);
    const writer = stack.db.dataSource.createQueryRunner();
    await writer.connect();
    try {
      await writer.startTransaction();
      // Another writer of the row (a write that changes nothing the decision is made on): the statement waits for it,
      // then judges the row again as committed.
      await writer.query('UPDATE operations SET updated_at = updated_at WHERE id = $1', [held.id]);
      expect(await stack.databaseNow()).toBeLessThan(new Date(deadlineAt).getTime() - 500);
      let answered = false;
      const releasing = http<Problem & { permitted_resolutions?: string[] }>(
        stack.apiUrl,
        'POST',
        `/v1/operations/${held.id}/resolve`,
        { key: DEMO.reviewer, body: { status: 'SENT', evidence: 'the conflict is understood: send it' } },
      ).finally(() => (answered = true));
      await waitForLockWaiter(stack.db.dataSource, {
        statementLike: '%UPDATE operations SET%FROM api_keys k%',
        unless: () => answered,
      });
      await waitFor(
        () => stack.databaseNow(),
        (now) => now > new Date(deadlineAt).getTime() + 100,
        15_000,
        100,
      );
      await writer.commitTransaction();
      const released = await releasing;
      expect({ status: released.status, type: released.body.type }).toEqual({
        status: 409,
        type: 'https://verity.dev/problems/resolution-not-permitted',
      });
      expect(released.body.permitted_resolutions).not.toContain('SENT');
    } finally {
      if (writer.isTransactionActive) await writer.rollbackTransaction();
      await writer.release();
    }
    expect(await events(stack, created.id)).toEqual(before);
  });

  it('whose execution ends after the options were read: the statement refuses it (409), nothing written', async () => {
    // The release is judged twice: by the options the API reads (the execution running, its deadline far), and by the
    // statement that records it, which must judge the execution as it stands then — not by a read of the API's made
    // before it. Here the execution ends between the two: its row is cancelled while its held operation is still on
    // file (the state a path that ends an execution leaves until the sweeper ends its holds), while the decision waits
    // for the tenant's row (held by a policy write; the options were read before: a plain read waits for no row lock),
    // which a decision on a version share-locks before its statement (the version covers the tenant's approval rules).
    const { created, held } = await heldNeverSent('release-ended', 600);
    expect(held.attempt).toBe(0);
    const shown = await http<Detail>(stack.apiUrl, 'GET', `/v1/operations/${held.id}`, { key: DEMO.reviewer });
    expect(shown.body.permitted_resolutions).toContain('SENT');
    const before = await events(stack, created.id);
    const policyLock = stack.db.dataSource.createQueryRunner();
    await policyLock.connect();
    try {
      await policyLock.startTransaction();
      await policyLock.query(
        'SELECT 1 FROM tenants WHERE id = (SELECT tenant_id FROM operations WHERE id = $1) FOR UPDATE',
        [held.id],
      );
      let answered = false;
      const releasing = http<Problem & { permitted_resolutions?: string[] }>(
        stack.apiUrl,
        'POST',
        `/v1/operations/${held.id}/resolve`,
        {
          key: DEMO.reviewer,
          body: { status: 'SENT', evidence: 'the conflict is understood: send it' },
          // On the version the page was read at: the decision share-locks the tenant's row first (the version covers
          // its approval rules), so it waits for the policy write holding that row.
          headers: { 'if-match': shown.headers.get('etag') ?? '' },
        },
      ).finally(() => (answered = true));
      await waitForLockWaiter(stack.db.dataSource, {
        statementLike: 'SELECT 1 FROM tenants WHERE id = $1 FOR SHARE',
        unless: () => answered,
      });
      expect(answered).toBe(false);
      await stack.db.dataSource.query(`UPDATE executions SET status = 'cancelled' WHERE id = $1`, [created.id]);
      await policyLock.commitTransaction();
      const released = await releasing;
      expect({ status: released.status, type: released.body.type }).toEqual({
        status: 409,
        type: 'https://verity.dev/problems/resolution-not-permitted',
      });
      expect(released.body.permitted_resolutions).not.toContain('SENT');
    } finally {
      if (policyLock.isTransactionActive) await policyLock.rollbackTransaction();
      await policyLock.release();
    }
    expect(await events(stack, created.id)).toEqual(before);
    const [{ resolution }] = (await stack.db.dataSource.query(
      `SELECT obligation->'resolution' AS resolution FROM operations WHERE id = $1`,
      [held.id],
    )) as { resolution: unknown }[];
    expect(resolution).toBeNull();
  });
});
