import type { Queue } from 'bullmq';
import { QueueName } from '@verity/queues';
import { appRoutes } from '@bull-board/api/dist/routes';
import { DEMO, Stack } from '../support/stack';
import { http } from '../support/http';
import { stackQueue } from './dispatcher-helpers';

/**
 * With BULL_BOARD_WRITABLE unset, no route of the board that writes changes anything: every one the installed Bull
 * Board serves (read from the package, so a route a new version adds is judged too), aimed at a queue and a job that
 * are there, answers 405 problem+json, and Redis holds what it held. A writable board takes nothing from a tenant's
 * keys: it shows every tenant, and a tenant's admin pausing a queue would pause every tenant's work.
 */
describe('Bull Board: no write from a read-only board or a tenant’s key', () => {
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

  /** The queue's jobs as Redis holds them, its counts, schedulers, pause, rate limit and concurrency (as JSON). */
  const state = async () =>
    JSON.stringify({
      jobs: [(await queue.getJob('ro-job'))?.toJSON(), (await queue.getJob('tenant-job'))?.toJSON()],
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

  it('on a writable board, a tenant’s keys (admin, reviewer, agent; Bearer or Basic) read and write nothing: 403', async () => {
    const writable = await stack.startApi({ BULL_BOARD_WRITABLE: 'true' });
    await queue.add(
      'dispatch-operation',
      { operationId: 'op_t', executionId: 'exe_t' },
      { jobId: 'tenant-job', delay: 3_600_000 },
    );
    const before = await state();
    const asked: [string, string][] = [
      ['GET', '/api/queues'],
      ['GET', '/api/queues/dispatch/tenant-job'],
      ['PUT', '/api/queues/dispatch/pause'],
      ['PUT', '/api/queues/pause'],
      ['PUT', '/api/queues/dispatch/tenant-job/promote'],
      ['PUT', '/api/queues/dispatch/tenant-job/clean'],
      ['PUT', '/api/queues/dispatch/clean/delayed'],
      ['PATCH', '/api/queues/dispatch/tenant-job/update-data'],
    ];
    const answers = [];
    for (const key of [DEMO.admin, DEMO.reviewer, DEMO.agent, DEMO.otherAgent]) {
      for (const authorization of [`Bearer ${key}`, `Basic ${Buffer.from(`x:${key}`).toString('base64')}`]) {
        for (const [method, path] of asked) {
          const res = await http(writable, method, `/admin/queues${path}`, {
            headers: { authorization },
            body: method === 'GET' ? undefined : { jobData: { operationId: 'op_other' } },
          });
          answers.push([key, authorization.split(' ')[0], method, path, res.status]);
        }
      }
    }
    expect(answers).toEqual(answers.map(([key, scheme, method, path]) => [key, scheme, method, path, 403]));
    expect(await state()).toEqual(before);
  });
});
