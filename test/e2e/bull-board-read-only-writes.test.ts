import type { Queue } from 'bullmq';
import { QueueName } from '@verity/queues';
import { appRoutes } from '@bull-board/api/dist/routes';
import { DEMO, Stack } from '../support/stack';
import { http } from '../support/http';
import { stackQueue } from './dispatcher-helpers';

/**
 * With BULL_BOARD_WRITABLE unset, no route of the board that writes changes anything: every one the installed Bull
 * Board serves (read from the package, so a route a new version adds is judged too), aimed at a queue and a job that
 * are there, answers 405 problem+json, and Redis holds what it held.
 */
describe('Bull Board, read-only: every write route', () => {
  let stack: Stack;
  let queue: Queue;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'boardro', dispatchers: 0, reconcilers: 0 });
    queue = stackQueue(stack, QueueName.DISPATCH);
  });
  afterAll(async () => {
    await queue?.close();
    await stack?.stop();
  });

  /** The queue's job as Redis holds it, its counts, schedulers, pause, rate limit and concurrency (as JSON). */
  const state = async () =>
    JSON.stringify({
      job: (await queue.getJob('ro-job'))?.toJSON(),
      counts: await queue.getJobCounts(),
      paused: await queue.isPaused(),
      schedulers: await queue.getJobSchedulers(),
      rateLimit: await queue.getRateLimitTtl(),
      concurrency: await queue.getGlobalConcurrency(),
    });

  /** A body each of these takes (the board checks a body before it checks the queue is writable). */
  const BODIES: Record<string, unknown> = {
    'update-data': { jobData: {} },
    delay: { runAt: Date.now() + 1000 },
    priority: { priority: 1 },
    concurrency: { concurrency: 1 },
    'rate-limit': { max: 1, duration: 1000 },
    'ro-scheduler': { every: 1000 },
  };

  it('answers 405 to each, and changes nothing in Redis', async () => {
    await queue.add(
      'dispatch-operation',
      { operationId: 'op_ro', executionId: 'exe_ro' },
      { jobId: 'ro-job', delay: 3_600_000 },
    );
    await queue.upsertJobScheduler('ro-scheduler', { every: 3_600_000 }, { name: 'sweep', data: {} });
    const before = await state();
    const writes = appRoutes.api.flatMap((route) =>
      [route.method].flat().flatMap((method) => [route.route].flat().map((path) => ({ method, path }))),
    );
    expect(writes.filter(({ method }) => method !== 'get').length).toBeGreaterThan(10);
    const answers = [];
    for (const { method, path } of writes) {
      if (method !== 'get') {
        const concrete = path
          .replace(':queueName', 'dispatch')
          .replace(':jobId', 'ro-job')
          .replace(':queueStatus', 'delayed')
          .replace(':schedulerId', 'ro-scheduler');
        const res = await http<{ status?: number }>(stack.apiUrl, method.toUpperCase(), `/admin/queues${concrete}`, {
          key: DEMO.operator,
          body: BODIES[concrete.split('/').pop()!] ?? { name: 'x', data: {} },
        });
        answers.push([method, concrete, res.status, res.headers.get('content-type')?.split(';')[0]]);
      }
    }
    expect(answers).toEqual(answers.map(([method, path]) => [method, path, 405, 'application/problem+json']));
    expect(await state()).toEqual(before);
  });
});
