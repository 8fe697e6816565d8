import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import type { LocalServer } from '../support/local-server';
import { stackBehindProxy } from '../support/provider-proxy';
import { resetSandbox, submit, waitForOp } from './dispatcher-helpers';

/**
 * A reviewer's re-check whose job is tried again — the reconciler running it was killed while it read the source
 * (BullMQ runs a stalled job again; a failed attempt is retried the same way) — still reads and writes in the
 * reviewer's name: the request is used only with the write of what a read found. Before: it was claimed before the
 * read, every later attempt found it used (`skipped: no recorded request`), and the reviewer's re-check was lost
 * with no event and no word to them.
 */
describe('a reviewer’s re-check whose job is tried again', () => {
  let stack: Stack;
  let proxy: LocalServer;
  /** While set, the reconciler's reads of the provider are taken and never answered. */
  let hang = false;
  let hungReads = 0;

  beforeAll(async () => {
    ({ stack, proxy } = await stackBehindProxy(
      {
        label: 'recheckretried',
        // No scheduled re-check runs during the test: the only read after the hold is the reviewer's.
        env: { RECHECK_BACKOFF_MS: '600000', RECHECK_BACKOFF_MAX_MS: '600000', OBLIGATION_DUE_MS: '3600000' },
      },
      'reconciler',
      {
        answer: (req) => {
          if (!hang || req.method !== 'GET') return undefined;
          hungReads += 1;
          return 'never';
        },
      },
    ));
  });
  afterAll(async () => {
    await stack?.stop();
    await proxy?.close();
  });

  it('is written in the reviewer’s name by the attempt after the killed one', async () => {
    await stack.setFaults({ read_fault: 'unavailable' });
    const created = await submit(stack, [charge(unique('recheck-retried'))]);
    const op = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(op.terminal_reason).toBe('SOURCE_UNREACHABLE');
    await resetSandbox(stack);

    hang = true;
    const asked = await http(stack.apiUrl, 'POST', `/v1/operations/${op.id}/recheck`, { key: DEMO.reviewer });
    expect(asked.status).toBe(202);
    await waitFor(
      async () => hungReads,
      (n) => n > 0,
    );
    const [first] = stack.running('reconciler');
    await stack.kill(first);
    hang = false;
    await stack.startApp('reconciler', { SANDBOX_URL: proxy.url });

    const verified = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'VERIFIED', 60_000);
    expect(verified.evidence).toMatchObject({ recheck: { trigger: 'reviewer', held_for: 'SOURCE_UNREACHABLE' } });
    expect((verified.evidence as { recheck: { requested_by?: string } }).recheck.requested_by).toEqual(
      expect.any(String),
    );
  }, 120_000);
});
