import IORedis from 'ioredis';
import { Queue, Worker } from 'bullmq';
import { JobName, JobProducer, QueueName } from '@verity/queues';
import { DEMO, Stack, waitFor } from '../support/stack';
import { TEST_REDIS_URL } from '../support/services';
import { http } from '../support/http';
import { TOO_DEEP } from '../../apps/api/src/bull-board';

/**
 * Bull Board lists a queue's jobs by reading their ids from the queue's sets, then each job's hash. Jobs that are odd
 * in Redis — removed between the two reads (removeOnComplete), a hash with no `data`, a field BullMQ cannot parse —
 * and many lists at once while a worker completes, fails and removes jobs: every list answers 200 with the jobs that
 * are there, never a 500 for the whole queue.
 */

interface BoardJob {
  id: string;
  data: unknown;
  progress: unknown;
}
interface BoardList {
  queues: { name: string; jobs: BoardJob[]; counts: Record<string, number> }[];
}

describe('Bull Board: odd jobs, and lists under load', () => {
  let stack: Stack;
  let redis: IORedis;
  let producer: JobProducer;
  let sweep: Queue;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'red24-bb-jobs', dispatchers: 0, reconcilers: 0 });
    ({ redis, producer } = await stack.queues());
    sweep = (await producer.everyQueue()).find(({ queue }) => queue.name === QueueName.SWEEP)!.queue;
  }, 60_000);
  // What a case leaves in the queue, removed even when it fails (so the next case meets an empty queue).
  let cleanup: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await cleanup?.();
    cleanup = undefined;
  });
  afterAll(async () => {
    await stack?.stop();
  });

  async function list(query: string) {
    return http<BoardList>(stack.apiUrl, 'GET', `/admin/queues/api/queues?activeQueue=sweep&${query}`, {
      key: DEMO.operator,
    });
  }
  const sweepJobs = (body: BoardList) => body.queues.find((q) => q.name === 'sweep')!.jobs;

  it('lists a job whose stored data, options, progress or parent BullMQ cannot parse, its stored text shown as it is', async () => {
    const spoiled: Record<string, [field: string, value: string]> = {
      'odd-data': ['data', '{"tenantId": "t1", cut off'],
      'odd-opts': ['opts', 'not json'],
      'odd-progress': ['progress', '{50%'],
      'odd-parent': ['parent', '{'],
    };
    await producer.enqueue(JobName.SWEEP, {}, { jobId: 'odd-fine', delay: 600_000 });
    for (const [id, [field, value]] of Object.entries(spoiled)) {
      await producer.enqueue(JobName.SWEEP, {}, { jobId: id, delay: 600_000 });
      await redis.hset(sweep.toKey(id), field, value);
    }
    for (const query of ['status=latest', 'status=delayed&page=1&jobsPerPage=50']) {
      const res = await list(query);
      expect({ query, status: res.status }).toEqual({ query, status: 200 });
      const jobs = sweepJobs(res.body);
      expect(jobs.map((job) => job.id).sort()).toEqual([
        'odd-data',
        'odd-fine',
        'odd-opts',
        'odd-parent',
        'odd-progress',
      ]);
      expect(jobs.find((job) => job.id === 'odd-data')!.data).toBe('{"tenantId": "t1", cut off');
      expect(jobs.find((job) => job.id === 'odd-progress')!.progress).toBe('{50%');
      expect(jobs.find((job) => job.id === 'odd-fine')!.data).toEqual({});
    }
    // Each one's own page too.
    for (const id of Object.keys(spoiled)) {
      const res = await http<{ job: BoardJob }>(stack.apiUrl, 'GET', `/admin/queues/api/queues/sweep/${id}`, {
        key: DEMO.operator,
      });
      expect({ id, status: res.status, jobId: res.body.job?.id }).toEqual({ id, status: 200, jobId: id });
    }
    await sweep.obliterate({ force: true });
  });

  it('lists a job whose stored options are JSON but not an object (null), or whose data nests deeper than an answer can hold', async () => {
    // Each parses, so BullMQ's read does not throw SyntaxError: `null` options throw TypeError as BullMQ decodes them,
    // and data nested 100,000 deep parses but cannot be written back as the answer's JSON (RangeError).
    const deep = '['.repeat(100_000) + ']'.repeat(100_000);
    cleanup = () => sweep.obliterate({ force: true });
    const spoiled: Record<string, [field: string, value: string]> = {
      'null-opts': ['opts', 'null'],
      'deep-data': ['data', deep],
    };
    await producer.enqueue(JobName.SWEEP, {}, { jobId: 'odd-fine', delay: 600_000 });
    for (const [id, [field, value]] of Object.entries(spoiled)) {
      await producer.enqueue(JobName.SWEEP, {}, { jobId: id, delay: 600_000 });
      await redis.hset(sweep.toKey(id), field, value);
    }
    for (const query of ['status=latest', 'status=delayed&page=1&jobsPerPage=50']) {
      const res = await list(query);
      expect({ query, status: res.status }).toEqual({ query, status: 200 });
      const jobs = sweepJobs(res.body);
      expect(jobs.map((job) => job.id).sort()).toEqual(['deep-data', 'null-opts', 'odd-fine']);
      expect(jobs.find((job) => job.id === 'deep-data')!.data).toBe(TOO_DEEP);
      expect(jobs.find((job) => job.id === 'null-opts')!.data).toEqual({});
    }
    for (const id of Object.keys(spoiled)) {
      const res = await http<{ job: BoardJob }>(stack.apiUrl, 'GET', `/admin/queues/api/queues/sweep/${id}`, {
        key: DEMO.operator,
      });
      expect({ id, status: res.status, jobId: res.body.job?.id }).toEqual({ id, status: 200, jobId: id });
    }
  });

  it('leaves out a job whose hash is gone (listed, then removed), shows one whose hash has no data, and a page past the last is empty', async () => {
    await producer.enqueue(JobName.SWEEP, {}, { jobId: 'kept', delay: 600_000 });
    await producer.enqueue(JobName.SWEEP, {}, { jobId: 'no-data', delay: 600_000 });
    await redis.hdel(sweep.toKey('no-data'), 'data');
    // In the delayed set, its hash gone: what the board meets when a job is removed between its list and its read.
    await producer.enqueue(JobName.SWEEP, {}, { jobId: 'gone', delay: 600_000 });
    await redis.del(sweep.toKey('gone'));
    const res = await list('status=delayed&page=1&jobsPerPage=50');
    expect(res.status).toBe(200);
    expect(
      sweepJobs(res.body)
        .map((job) => [job.id, job.data])
        .sort(),
    ).toEqual([
      ['kept', {}],
      ['no-data', {}],
    ]);
    const past = await list('status=delayed&page=1000&jobsPerPage=50');
    expect({ status: past.status, jobs: sweepJobs(past.body) }).toEqual({ status: 200, jobs: [] });
    await sweep.obliterate({ force: true });
  });

  it('answers every one of many concurrent lists 200 while a worker completes, fails and removes the jobs listed', async () => {
    const total = 600;
    for (let i = 0; i < total; i += 1) {
      const removeOnComplete = i % 2 === 0;
      await sweep.add(JobName.SWEEP, { i }, { jobId: `load-${i}`, removeOnComplete, removeOnFail: i % 3 === 0 });
    }
    for (let i = 0; i < 100; i += 1) await sweep.add(JobName.SWEEP, { i }, { jobId: `later-${i}`, delay: 600_000 });
    const connection = new IORedis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
    const worker = new Worker(
      sweep.name,
      async (job) => {
        if ((job.data as { i: number }).i % 5 === 0) throw new Error('fails on purpose');
      },
      { connection, prefix: sweep.opts.prefix, concurrency: 20 },
    );
    try {
      const statuses = ['latest', 'completed', 'failed', 'waiting', 'active', 'delayed'];
      const answers: { status: number; query: string }[] = [];
      // Rounds of twelve lists at once until the worker has taken every job, then one more.
      let done = false;
      const deadline = Date.now() + 90_000;
      while (!done && Date.now() < deadline) {
        done = (await sweep.getJobCounts('waiting', 'active')).waiting === 0;
        const round = await Promise.all(
          Array.from({ length: 12 }, async (_, n) => {
            const query = `status=${statuses[n % statuses.length]}&page=${(n % 3) + 1}&jobsPerPage=100`;
            return { status: (await list(query)).status, query };
          }),
        );
        answers.push(...round);
      }
      expect(done).toBe(true);
      expect(answers.filter((answer) => answer.status !== 200)).toEqual([]);
      expect(answers.length).toBeGreaterThanOrEqual(12);
      await waitFor(
        () => sweep.getJobCounts('active'),
        (counts) => counts.active === 0,
      );
      const after = await list('status=latest');
      expect(after.status).toBe(200);
    } finally {
      await worker.close();
      connection.disconnect();
    }
  }, 120_000);
});
