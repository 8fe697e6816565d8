import type { ProblemDetails as Problem } from '@verity/sdk';
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
});
