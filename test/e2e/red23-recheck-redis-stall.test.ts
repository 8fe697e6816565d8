import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ProblemDetails as Problem } from '@verity/sdk';
import { PrivateService, freePort, startPrivateRedis } from '../../scripts/local-services';
import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Op, getOperation, resetSandbox, submit, waitForOp } from './dispatcher-helpers';

/**
 * A reviewer's re-check is recorded and enqueued while the operation's row is share-locked (whileHeld), so no
 * resolution commits between the check and the job. A Redis that stops answering must not hold that lock for long:
 * the re-check answers 503 queue-unavailable within a bound, records nothing, and the operation can be resolved
 * right after.
 */
describe('a re-check while Redis is stalled', () => {
  let stack: Stack;
  let redis: PrivateService | undefined;
  let dir = '';

  beforeAll(async () => {
    stack = await Stack.start({ label: 'red23-recheck-stall' });
  }, 60_000);
  afterAll(async () => {
    await redis?.kill('SIGCONT');
    await redis?.stop().catch(() => undefined);
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('is 503 queue-unavailable (its enqueue gave up at its bound), nothing recorded, and the hold stays resolvable', async () => {
    await stack.setFaults({ read_fault: 'unavailable' });
    const created = await submit(stack, [charge(unique('red23-recheck-stall'))]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');

    dir = mkdtempSync(join(tmpdir(), 'verity-red23-recheck-stall-'));
    redis = await startPrivateRedis({ dir, port: await freePort() });
    const port = await freePort();
    // Same database as the stack's workers, but a Redis of its own that is about to stop answering.
    await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', REDIS_URL: redis.url });
    const url = `http://127.0.0.1:${port}`;
    // Its producer has enqueued once already, so the connection and the queue are up when Redis freezes.
    const warm = await http(url, 'POST', `/v1/operations/${held.id}/recheck`, { key: DEMO.reviewer });
    expect(warm.status).toBe(202);

    await redis.kill('SIGSTOP');
    const res = await http<Problem>(url, 'POST', `/v1/operations/${held.id}/recheck`, { key: DEMO.reviewer });
    expect({ status: res.status, type: res.body.type }).toEqual({
      status: 503,
      type: 'https://verity.dev/problems/queue-unavailable',
    });
    // The warm-up's request only: the stalled one was rolled back with its transaction.
    const requests = (await stack.db.dataSource.query(`SELECT id FROM recheck_requests WHERE operation_id = $1`, [
      held.id,
    ])) as unknown[];
    expect(requests).toHaveLength(1);

    // The row is no longer share-locked: a resolution (on the stack's API) commits at once.
    const resolved = await http<Op>(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: 'seen on the provider dashboard' },
    });
    expect(resolved.status).toBe(200);
    expect((await getOperation(stack, held.id)).status).toBe('VERIFIED');
    await resetSandbox(stack);
  }, 90_000);
});
