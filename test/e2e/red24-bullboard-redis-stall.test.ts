import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrivateService, freePort, startPrivateRedis } from '../../scripts/local-services';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http } from '../support/http';

/**
 * A Redis that answers late (frozen, overloaded, cut off) rather than refusing connections: the API's producer
 * connection stays 'ready' and each command fails after its timeout with ioredis' "Command timed out". Bull Board's
 * page polls its list every few seconds, so for as long as Redis is slow every poll failed. It answered 500 internal
 * (and an error line per request) where a Redis it cannot reach is 503 queue-unavailable, logged once per outage:
 * the 500s a load run saw from GET /admin/queues/api/queues for a while, and never on a repeat, are this.
 */
describe('Bull Board while its Redis does not answer', () => {
  let stack: Stack;
  let redis: PrivateService | undefined;
  let dir = '';

  beforeAll(async () => {
    stack = await Stack.start({ label: 'red24-bb-stall', dispatchers: 0, reconcilers: 0 });
  }, 60_000);
  afterAll(async () => {
    await redis?.kill('SIGCONT');
    await redis?.stop().catch(() => undefined);
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('answers each read and write 503 queue-unavailable within a bound, logged once, and lists again once Redis answers', async () => {
    dir = mkdtempSync(join(tmpdir(), 'verity-red24-bb-stall-'));
    redis = await startPrivateRedis({ dir, port: await freePort() });
    const port = await freePort();
    // The stack's database, but a Redis of its own that is about to stop answering.
    const api = await stack.startApp('api', {
      PORT: String(port),
      HOST: '127.0.0.1',
      REDIS_URL: redis.url,
      BULL_BOARD_WRITABLE: 'true',
    });
    const url = `http://127.0.0.1:${port}`;
    const board = (path: string) => http<{ type?: string }>(url, 'GET', `/admin/queues${path}`, { key: DEMO.operator });
    // The board has read its queues once, so the connection and the queues are up when Redis freezes.
    expect((await board('/api/queues')).status).toBe(200);
    const output = () => api.output.join('');
    const loggedOutage = () => output().split('"msg":"job queue unavailable: answering 503').length - 1;
    const before = loggedOutage();

    await redis.kill('SIGSTOP');
    const started = Date.now();
    // The page's polls (its list, of one queue's jobs and of every queue), a job's page, its log and the Redis panel.
    const answers = await Promise.all(
      [
        '/api/queues',
        '/api/queues?activeQueue=sweep&status=latest&page=1&jobsPerPage=50',
        '/api/queues?activeQueue=dispatch&status=failed&page=1&jobsPerPage=50',
        '/api/queues/sweep/some-job',
        '/api/queues/sweep/some-job/logs',
        '/api/redis/stats',
      ].map(async (path) => {
        const res = await board(path);
        return {
          path,
          status: res.status,
          type: res.body.type,
          contentType: res.headers.get('content-type'),
          retryAfter: res.headers.get('retry-after'),
        };
      }),
    );
    expect(Date.now() - started).toBeLessThan(15_000);
    for (const answer of answers) {
      expect(answer).toEqual({
        path: answer.path,
        status: 503,
        type: 'https://verity.dev/problems/queue-unavailable',
        contentType: expect.stringMatching(/^application\/problem\+json/),
        retryAfter: '1',
      });
    }
    // A write timed out too: it may have been made all the same (Redis runs it once it answers), and the answer says so.
    const pause = await http<{ type?: string; detail?: string }>(url, 'PUT', '/admin/queues/api/queues/sweep/pause', {
      key: DEMO.operator,
    });
    expect({ status: pause.status, type: pause.body.type }).toEqual({
      status: 503,
      type: 'https://verity.dev/problems/queue-unavailable',
    });
    expect(pause.body.detail).toContain('could not tell whether the change was made');
    expect(output()).not.toContain('Bull Board request failed');
    expect(loggedOutage() - before).toBeLessThanOrEqual(1);

    await redis.kill('SIGCONT');
    const back = await waitFor(
      () => board('/api/queues?activeQueue=sweep&status=latest&page=1&jobsPerPage=50'),
      (res) => res.status !== 503,
      30_000,
      250,
    );
    expect(back.status).toBe(200);
    // The pause the board could not confirm was made once Redis answered.
    const sweep = (back.body as { queues?: { name: string; isPaused: boolean }[] }).queues?.find(
      (q) => q.name === 'sweep',
    );
    expect(sweep?.isPaused).toBe(true);
  }, 120_000);
});
