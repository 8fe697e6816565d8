import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrivateService, freePort, startPrivateRedis } from '../../scripts/local-services';
import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { expectDoneOnce } from './dispatcher-helpers';
import type { Execution } from '@verity/sdk';

/**
 * A Redis that stops answering (frozen, or cut off by the network) rather than refusing connections: the producer's
 * connection stays 'ready' and a command on it gets no reply. Intake must answer as it does with Redis down (201: the
 * commit is what counts, the sweeper owes the enqueue) within a bounded time, never hang on the enqueue; and the API
 * still stops on SIGTERM with exit 0. Before: POST /v1/executions never answered (the client gave up after 40 s).
 */
describe('a stalled Redis', () => {
  let stack: Stack;
  let redis: PrivateService | undefined;
  let dir = '';

  beforeAll(async () => {
    stack = await Stack.start({ label: 'apiredisstall' });
  });
  afterAll(async () => {
    await redis?.kill('SIGCONT');
    await redis?.stop().catch(() => undefined);
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('answers 201 with Redis frozen, the sweeper gets the execution processed, and SIGTERM exits 0', async () => {
    dir = mkdtempSync(join(tmpdir(), 'verity-api-redisstall-'));
    redis = await startPrivateRedis({ dir, port: await freePort() });
    const port = await freePort();
    // Same database as the stack's workers, but a Redis of its own that is about to stop answering.
    const api = await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', REDIS_URL: redis.url });
    const url = `http://127.0.0.1:${port}`;
    // Its producer has enqueued once already, so the connection and the queue are up when Redis freezes.
    const warm = await http<Execution>(url, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('order'))]),
    });
    expect(warm.status).toBe(201);

    await redis.kill('SIGSTOP');
    const reference = unique('order');
    const res = await http<Execution>(url, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(reference)]),
      headers: { 'idempotency-key': unique('redis-stalled') },
    });
    // Answered with Redis frozen: the enqueue gave up at its bound (with none, the request would hang with Redis).
    expect(res.status).toBe(201);

    const ready = await http<{ checks: Record<string, string> }>(url, 'GET', '/health/ready');
    expect(ready.status).toBe(503);
    expect(ready.body.checks).toEqual({ postgres: 'up', redis: 'down', schema: 'up' });

    // Nothing reached its queue; the reconciler's sweep (on the shared Redis) finds it and the work is done once.
    await expectDoneOnce(stack, stack.apiUrl, res.body.id, reference);

    api.child.kill('SIGTERM');
    // 0: the stop finished (held on the frozen Redis, it is the forced exit 1 at the grace).
    expect(await api.exited).toBe(0);
  }, 120_000);
});
