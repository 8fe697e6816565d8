import { skewedClock } from '../support/skewed-clock';
import { DEMO, Stack, freePort, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Op, getExecution, submit } from './dispatcher-helpers';

const HOUR_MS = 3_600_000;
const TTL_MS = 15 * 60_000;

/**
 * A grant lasts APPROVAL_TTL_MS by the database's clock, the one the statement that commits SENT compares its expiry
 * with — not by the clock of the API process that wrote it. Two API processes whose clocks differ by an hour must not
 * give one reviewer's approval 15 minutes and another's an hour and a quarter (or none at all, when the API is behind).
 */
describe('an approval grant expires by the database’s clock', () => {
  let stack: Stack;
  let clock: ReturnType<typeof skewedClock> | undefined;
  const skewedApis: Record<string, string> = {};

  beforeAll(async () => {
    stack = await Stack.start({ label: 'grantclock', env: { APPROVAL_TTL_MS: String(TTL_MS) } });
    // An API process whose clock (Date) runs CLOCK_SKEW_MS off the host's; the database's stays true.
    clock = skewedClock();
    for (const [name, skew] of [
      ['ahead', HOUR_MS],
      ['behind', -HOUR_MS],
    ] as const) {
      const port = await freePort();
      await stack.startApp('api', {
        PORT: String(port),
        HOST: '127.0.0.1',
        ...clock.env(skew),
      });
      skewedApis[name] = `http://127.0.0.1:${port}`;
    }
  });
  afterAll(async () => {
    await stack?.stop();
    clock?.remove();
  });

  const databaseNow = () => stack.databaseNow();

  it.each(['ahead', 'behind'] as const)(
    'a grant written by an API whose clock is an hour %s lasts the TTL from the database’s now, and is sent',
    async (skewed) => {
      const reference = unique(`grant-${skewed}`);
      const created = await submit(stack, [charge(reference, { requires_approval: true })]);
      const opId = created.operations[0].id;
      await waitFor(
        () => getExecution(stack, created.id),
        (e) => e.status === 'waiting_for_approval' && e.operations[0].approval?.state === 'requested',
        30_000,
        150,
      );
      const before = await databaseNow();
      const decided = await http<Op>(skewedApis[skewed], 'POST', `/v1/operations/${opId}/approval`, {
        key: DEMO.reviewer,
        body: { decision: 'approve', reason: 'clock test' },
      });
      const after = await databaseNow();
      expect(decided.status).toBe(200);
      const approval = decided.body.approval as { state: string; decided_at: string; expires_at: string };
      const decidedAt = Date.parse(approval.decided_at);
      const expiresAt = Date.parse(approval.expires_at);
      expect({ state: approval.state, decidedAt, ttl: expiresAt - decidedAt }).toEqual({
        state: 'granted',
        decidedAt: expect.any(Number),
        ttl: TTL_MS,
      });
      expect(decidedAt).toBeGreaterThanOrEqual(before - 1);
      expect(decidedAt).toBeLessThanOrEqual(after + 1);
      // Within its TTL by the database's clock: the send guard takes it, and the charge is made once.
      const done = await waitFor(
        () => getExecution(stack, created.id),
        (e) => e.status === 'completed',
        30_000,
        150,
      );
      expect(done.operations[0].status).toBe('VERIFIED');
      expect((await stack.effects()).charges[reference]?.count).toBe(1);
    },
  );
});
