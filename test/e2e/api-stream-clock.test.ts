import { skewedClock } from '../support/skewed-clock';
import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { heldOpen, openStream } from './api-sse';
import { heldUnsentCharge, resetSandbox, submit } from './dispatcher-helpers';

/** How far the API host's clock runs ahead of the database's: past the deadline given below. */
const AHEAD_MS = 10 * 60_000;
/** How long a read of the source is given: with SEND_GRACE_MS, how long a read begun before a FAILED may land. */
const CONNECTOR_TIMEOUT_MS = 4_000;
const READ_WINDOW_MS = CONNECTOR_TIMEOUT_MS + 500;

/**
 * Whether an execution's stream ends compares times the database stamped — the execution's deadline, a person's
 * resolution — with now. Compared with the API host's clock, one ahead of the database's ended the stream of a
 * completed execution with a held operation as past its deadline minutes early, and ended the stream of an operation
 * a person had just resolved FAILED before a re-check's read begun before it could land.
 */
describe('the execution stream on an API host whose clock is ahead of the database’s', () => {
  let stack: Stack;
  let clock: ReturnType<typeof skewedClock> | undefined;
  beforeAll(async () => {
    clock = skewedClock();
    stack = await Stack.start({
      label: 'streamclock',
      apis: 0,
      env: { SSE_HEARTBEAT_MS: '200', CONNECTOR_TIMEOUT_MS: String(CONNECTOR_TIMEOUT_MS) },
    });
    stack.apiUrl = await stack.startApi(clock.env(AHEAD_MS));
  });
  afterAll(async () => {
    await stack?.stop();
    clock?.remove();
  });
  afterEach(async () => resetSandbox(stack));

  const streamOf = (id: string) => openStream(`${stack.apiUrl}/v1/executions/${id}/stream`, DEMO.agent);
  const databaseNow = () => stack.databaseNow();

  it('keeps the stream of a completed execution with a held operation open before its deadline', async () => {
    // The read-back shows the charge with another amount: held for a human, the execution completed.
    await stack.setFaults({ read_fault: 'amount_mismatch' });
    const created = await submit(stack, [charge(unique('stream-clock-held'))], { deadline_seconds: 300 });
    const stream = await streamOf(created.id);
    try {
      await stream.waitFor((frames) =>
        frames.some((f) => f.event === 'execution.status_changed' && JSON.parse(f.data).to_status === 'completed'),
      );
      await heldOpen(stream);
    } finally {
      stream.abort();
    }
  });

  it('ends settled after a person’s FAILED only once a read begun before it can no longer land', async () => {
    const { executionId, held } = await heldUnsentCharge(stack, unique('stream-clock-failed'));
    const stream = await streamOf(executionId);
    try {
      const failed = await http<{ recovery_obligation: { resolution: { at: string } } }>(
        stack.apiUrl,
        'POST',
        `/v1/operations/${held.id}/resolve`,
        { key: DEMO.reviewer, body: { status: 'FAILED', evidence: 'the provider dashboard shows no charge' } },
      );
      expect(failed.status).toBe(200);
      await stream.closed;
      const endedAt = await databaseNow();
      const end = stream.frames.at(-1)!;
      expect(end.event).toBe('end');
      expect(JSON.parse(end.data)).toEqual({ reason: 'settled' });
      expect(endedAt).toBeGreaterThanOrEqual(
        Date.parse(failed.body.recovery_obligation.resolution.at) + READ_WINDOW_MS,
      );
    } finally {
      stream.abort();
    }
  });
});
