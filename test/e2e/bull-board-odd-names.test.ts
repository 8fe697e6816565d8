import type IORedis from 'ioredis';
import { JobName, JobProducer, QueueName } from '@verity/queues';
import { DEMO, Stack } from '../support/stack';
import { rawExchange } from '../support/http';

/**
 * Bull Board asked about job ids, queue names and statuses that are odd (empty, 10 kB long, `%2F`, `%00`, `..`,
 * unicode, another deployment's or shard's name): each answer is a 4xx problem+json — 404 for what is not there, 400
 * for what is malformed — never a 2xx as if it were there (the list of every queue, which names none such, aside),
 * never a 5xx, and nothing in Redis changes; on a read-only board and on a writable one (BULL_BOARD_WRITABLE=true)
 * alike.
 */

interface Answer {
  status: number;
  type: string;
  body: { type?: string; status?: number; error?: { key?: string }; errors?: { field: string; rule: string }[] };
}

const LONG = 'a'.repeat(10_000);

describe('Bull Board: odd ids, queue names and statuses', () => {
  let stack: Stack;
  let redis: IORedis;
  let producer: JobProducer;
  let boards: Record<'read-only' | 'writable', string>;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'boardodd', dispatchers: 0, reconcilers: 0 });
    boards = { 'read-only': stack.apiUrl, writable: await stack.startApi({ BULL_BOARD_WRITABLE: 'true' }) };
    ({ redis, producer } = await stack.queues());
  });
  afterAll(async () => {
    await stack?.stop();
  });

  /** A request as sent, byte for byte (`..`, `%2E%2E` and `%2F` stay as they are: no client resolves them first). */
  async function ask(base: string, method: string, path: string): Promise<Answer> {
    const head = [
      `${method} /admin/queues${path} HTTP/1.1`,
      'host: 127.0.0.1',
      `authorization: Bearer ${DEMO.operator}`,
    ];
    const answer = await rawExchange(
      base,
      `${[...head, 'content-length: 0', 'connection: close'].join('\r\n')}\r\n\r\n`,
      {
        halfClose: false,
      },
    );
    let body: Answer['body'] = {};
    try {
      body = JSON.parse(answer.body) as Answer['body'];
    } catch {
      // Not JSON: the assertions on the body say so.
    }
    return { status: answer.status, type: answer.headers['content-type'] ?? '', body };
  }

  /** What the queues hold in Redis: every key of the stack's prefix with its type and size. */
  async function redisState(): Promise<Record<string, string>> {
    const keys = await redis.keys(`${stack.prefix}*`);
    const state: Record<string, string> = {};
    for (const key of keys.sort()) {
      const type = await redis.type(key);
      const size =
        type === 'zset'
          ? await redis.zrange(key, 0, -1, 'WITHSCORES')
          : type === 'list'
            ? await redis.lrange(key, 0, -1)
            : type === 'stream'
              ? await redis.xlen(key)
              : type === 'hash'
                ? await redis.hgetall(key)
                : type === 'set'
                  ? await redis.smembers(key)
                  : await redis.get(key);
      state[key] = `${type} ${JSON.stringify(size)}`;
    }
    return state;
  }

  const MODES = ['read-only', 'writable'] as const;

  describe.each(MODES)('on a %s board', (mode) => {
    it('answers the log of a job that is not there 404 JOB_NOT_FOUND, as every other read of it, and still reads an existing one', async () => {
      const existing = `board-odd-${mode}`;
      await producer.enqueue(JobName.SWEEP, {}, { jobId: existing });
      expect((await ask(boards[mode], 'GET', `/api/queues/sweep/${existing}/logs`)).status).toBe(200);
      const before = await redisState();
      for (const id of [
        'no-such-job',
        LONG,
        'a%2Fb',
        '%2F',
        '..',
        '%2E%2E',
        '%C3%A9',
        '%F0%9F%92%A5',
        'bull:sweep:1',
      ]) {
        for (const read of [
          `/api/queues/sweep/${id}`,
          `/api/queues/sweep/${id}/logs`,
          `/api/queues/sweep/${id}/flow`,
        ]) {
          const answer = await ask(boards[mode], 'GET', read);
          expect({
            read: read.slice(0, 80),
            status: answer.status,
            type: answer.type,
            key: answer.body.error?.key,
          }).toEqual({
            read: read.slice(0, 80),
            status: 404,
            type: expect.stringMatching(/^application\/problem\+json/),
            key: 'ERRORS.JOB_NOT_FOUND',
          });
        }
      }
      expect(await redisState()).toEqual(before);
    });

    it('refuses writes to jobs with odd ids as 4xx problems and changes nothing', async () => {
      const before = await redisState();
      for (const id of ['no-such-job', LONG, 'a%2Fb', '%00', '..', '%2E%2E', '%C3%A9', 'bull:sweep:1']) {
        for (const [method, write] of [
          ['PUT', `/api/queues/sweep/${id}/retry`],
          ['PUT', `/api/queues/sweep/${id}/clean`],
          ['PUT', `/api/queues/sweep/${id}/promote`],
          ['PATCH', `/api/queues/sweep/${id}/update-data`],
        ]) {
          const answer = await ask(boards[mode], method, write);
          expect(answer.status).toBeGreaterThanOrEqual(400);
          expect({ write: write.slice(0, 60), status: answer.status < 500, type: answer.type }).toEqual({
            write: write.slice(0, 60),
            status: true,
            type: expect.stringMatching(/^application\/problem\+json/),
          });
        }
      }
      expect(await redisState()).toEqual(before);
    });

    it.each([
      ['another deployment’s prefixed name', 'bull%3Asweep'],
      ['another shard’s name', '1.sweep'],
      ['another letter case', 'Sweep'],
      ['a dot segment', '%2E%2E'],
      ['a slash', 'sw%2Feep'],
      ['unicode', '%C3%A9'],
      ['10 kB', LONG],
    ])(
      'answers ?queueName= naming no queue of the board (%s) 404 QUEUE_NOT_FOUND; ?activeQueue= lists every queue, none by that name',
      async (_case, name) => {
        const read = `/api/job-schedulers?queueName=${name}`;
        const answer = await ask(boards[mode], 'GET', read);
        expect({ read: read.slice(0, 80), status: answer.status, type: answer.type, body: answer.body }).toEqual({
          read: read.slice(0, 80),
          status: 404,
          type: expect.stringMatching(/^application\/problem\+json/),
          body: expect.objectContaining({
            type: 'https://verity.dev/problems/not-found',
            error: { key: 'ERRORS.QUEUE_NOT_FOUND' },
          }),
        });
        // The board's page shows "Queue not found" beside its menu from this list (a stale link): it must answer.
        const listed = await ask(boards[mode], 'GET', `/api/queues?activeQueue=${name}&status=latest`);
        expect(listed.status).toBe(200);
        const queues = (listed.body as { queues?: { name: string; jobs: unknown[] }[] }).queues ?? [];
        expect(queues.map((queue) => queue.name)).toContain('sweep');
        expect(queues.map((queue) => queue.name)).not.toContain(decodeURIComponent(name));
        expect(queues.flatMap((queue) => queue.jobs)).toEqual([]);
        // The same names in the path: the board's own 404 (or, for one HTTP cannot carry, the parser's 400).
        expect((await ask(boards[mode], 'GET', `/api/queues/${name}/metrics`)).status).toBe(404);
      },
    );

    it('answers an empty ?activeQueue= or ?queueName= 400, and still lists a queue named as it is', async () => {
      for (const [read, field] of [
        ['/api/queues?activeQueue=&status=latest', 'activeQueue'],
        ['/api/job-schedulers?queueName=', 'queueName'],
      ]) {
        const answer = await ask(boards[mode], 'GET', read);
        expect(answer.status).toBe(400);
        expect(answer.type).toMatch(/^application\/problem\+json/);
        expect(answer.body.errors).toEqual([expect.objectContaining({ field, rule: 'too_small' })]);
      }
      expect((await ask(boards[mode], 'GET', '/api/queues?activeQueue=sweep&status=latest')).status).toBe(200);
      expect((await ask(boards[mode], 'GET', '/api/job-schedulers?queueName=sweep')).status).toBe(200);
    });

    it('refuses “clean all” of a status the board does not offer with 400, before anything in Redis is read or written', async () => {
      // A due job scheduler, as one is once its run time has passed with no worker to take it.
      const schedulers = producer.queue(QueueName.SWEEP).toKey('repeat');
      await redis.zadd(schedulers, 1, `board-odd-scheduler-${mode}`);
      const before = await redisState();
      for (const status of ['x', 'repeat', 'events', 'meta', 'latest', '%2E%2E', 'Failed', LONG]) {
        const answer = await ask(boards[mode], 'PUT', `/api/queues/sweep/clean/${status}`);
        expect({ status: status.slice(0, 20), answer: answer.status, type: answer.type }).toEqual({
          status: status.slice(0, 20),
          answer: 400,
          type: expect.stringMatching(/^application\/problem\+json/),
        });
        expect(answer.body.errors).toEqual([expect.objectContaining({ field: 'queueStatus', rule: 'invalid_value' })]);
      }
      expect(await redisState()).toEqual(before);
      expect(await redis.zscore(schedulers, `board-odd-scheduler-${mode}`)).toBe('1');
      // A status the board offers: cleaned on a writable board, refused as a write on a read-only one.
      expect((await ask(boards[mode], 'PUT', '/api/queues/sweep/clean/failed')).status).toBe(
        mode === 'writable' ? 200 : 405,
      );
    });
  });
});
