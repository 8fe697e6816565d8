import type { Queue } from 'bullmq';
import { QueueName } from '@verity/queues';
import { appRoutes } from '@bull-board/api/dist/routes';
import { DEMO, Stack } from '../support/stack';
import { http } from '../support/http';
import { stackQueue } from './dispatcher-helpers';

/**
 * Bull Board is not scoped by tenant: it shows and acts on every tenant's jobs, so it is the platform operator's only.
 * On a writable board, every route the installed board serves (read from the package, so a route a new version adds is
 * judged too — reads, a job's log, retry, remove, promote, empty, clean, pause and resume, add, obliterate…), aimed at
 * a tenant's job and at the queue every tenant shares, answers each tenant key (admin, reviewer, agent, another
 * tenant's) 403 problem+json, and Redis holds what it held. Query strings the board reads that are out of range or
 * odd are a 4xx problem+json on a list the operator may read, never a 5xx.
 */
describe('Bull Board, hostile: tenant keys on every route, odd query strings', () => {
  let stack: Stack;
  let writable: string;
  let queue: Queue;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'red24-bb-hostile', dispatchers: 0, reconcilers: 0 });
    writable = await stack.startApi({ BULL_BOARD_WRITABLE: 'true' });
    queue = stackQueue(stack, QueueName.DISPATCH);
  }, 60_000);
  afterAll(async () => {
    await queue?.close();
    await stack?.stop();
  });

  /** The shared queue as Redis holds it: the tenant's job, its log, counts, pause, schedulers, concurrency. */
  const state = async () =>
    JSON.stringify({
      job: (await queue.getJob('tenant-job'))?.toJSON(),
      failed: (await queue.getJob('tenant-failed'))?.toJSON(),
      logs: await queue.getJobLogs('tenant-job'),
      counts: await queue.getJobCounts(),
      paused: await queue.isPaused(),
      schedulers: await queue.getJobSchedulers(),
      concurrency: await queue.getGlobalConcurrency(),
    });

  /** A body each of these takes (the board checks a body before anything else it does). */
  const BODIES: Record<string, unknown> = {
    'update-data': { jobData: { operationId: 'op_other', executionId: 'exe_other' } },
    delay: { runAt: Date.now() + 1000 },
    priority: { priority: 1 },
    concurrency: { concurrency: 1 },
    'rate-limit': { max: 1, duration: 1000 },
    'tenant-scheduler': { every: 1000 },
  };

  it('answers every route 403 to each tenant key (Bearer or Basic), and changes nothing', async () => {
    await queue.add(
      'dispatch-operation',
      { operationId: 'op_tenant', executionId: 'exe_tenant' },
      { jobId: 'tenant-job', delay: 3_600_000 },
    );
    await queue.add('dispatch-operation', { operationId: 'op_f', executionId: 'exe_f' }, { jobId: 'tenant-failed' });
    await queue.addJobLog('tenant-job', 'a tenant’s log line');
    await queue.upsertJobScheduler('tenant-scheduler', { every: 3_600_000 }, { name: 'sweep', data: {} });
    // The operator reads it: the routes below are aimed at what is there.
    const seen = await http(writable, 'GET', '/admin/queues/api/queues/dispatch/tenant-job/logs', {
      key: DEMO.operator,
    });
    expect({ status: seen.status, body: seen.body }).toEqual({ status: 200, body: ['a tenant’s log line'] });
    const before = await state();

    const routes = appRoutes.api.flatMap((route) =>
      [route.method].flat().flatMap((method) => [route.route].flat().map((path) => ({ method, path }))),
    );
    expect(routes.length).toBeGreaterThan(25);
    const answers: unknown[] = [];
    for (const { method, path } of routes) {
      const concrete = path
        .replace(':queueName', 'dispatch')
        .replace(':jobId', 'tenant-job')
        .replace(':queueStatus', 'delayed')
        .replace(':schedulerId', 'tenant-scheduler');
      for (const key of [DEMO.admin, DEMO.reviewer, DEMO.agent, DEMO.otherAgent]) {
        for (const authorization of [`Bearer ${key}`, `Basic ${Buffer.from(`x:${key}`).toString('base64')}`]) {
          const res = await http<{ type?: string }>(writable, method.toUpperCase(), `/admin/queues${concrete}`, {
            headers: { authorization },
            body: method === 'get' ? undefined : (BODIES[concrete.split('/').pop()!] ?? { name: 'x', data: {} }),
          });
          answers.push([method, concrete, key, res.status, res.body.type]);
        }
      }
    }
    expect(answers).toEqual(
      answers.map((answer) => [...(answer as unknown[]).slice(0, 3), 403, 'https://verity.dev/problems/forbidden']),
    );
    expect(await state()).toEqual(before);
  }, 120_000);

  /** The query, and the answer: 400 naming the parameter the board refuses, or 200 for what names no queue. */
  const ODD_QUERIES: [query: string, answer: 200 | string][] = [
    ['page=-1', 'page'],
    ['page=0', 'page'],
    ['page=1.5', 'page'],
    ['jobsPerPage=0', 'jobsPerPage'],
    ['jobsPerPage=-5', 'jobsPerPage'],
    ['status=unknown', 'status'],
    ['status=latest%00', 'status'],
    ['page=1&page=2', 'page'],
    // Read as no status (the board takes an empty parameter as absent): every status of the queue.
    ['status=', 200],
    // A control character in any query value is refused before the board (as under /v1).
    ['activeQueue=dispatch%00', 'activeQueue'],
    // A name no queue has: the list of every queue, none by that name (the board's page says "Queue not found").
    [`activeQueue=${'q'.repeat(4_000)}`, 200],
  ];
  it.each(
    ODD_QUERIES.map(([query, answer]) => [
      query.length > 80 ? `${query.slice(0, 20)}… (${query.length} characters)` : query,
      query,
      answer,
    ]),
  )(
    'answers ?%s on the list: a 400 naming the parameter, or 200 listing no queue by that name',
    async (_label, query, answer) => {
      const path = query.startsWith('activeQueue=')
        ? `/admin/queues/api/queues?${query}&status=latest`
        : `/admin/queues/api/queues?activeQueue=dispatch&${query}`;
      const res = await http<{ queues?: { name: string }[] }>(stack.apiUrl, 'GET', path, { key: DEMO.operator });
      if (answer === 200) {
        expect(res.status).toBe(200);
        expect(res.body.queues?.map((queue) => queue.name)).toContain('dispatch');
        return;
      }
      expect({ status: res.status, type: res.headers.get('content-type') }).toEqual({
        status: 400,
        type: expect.stringMatching(/^application\/problem\+json/),
      });
      expect(res.text).toContain(`"field":"${answer}"`);
    },
  );
});
