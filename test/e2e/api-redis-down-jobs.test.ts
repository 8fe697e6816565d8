import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrivateService, freePort, startPrivateRedis } from '../../scripts/local-services';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { resetSandbox, submit, waitForOp } from './dispatcher-helpers';

/**
 * The API's Redis gone, for the requests that are nothing but Redis: a reviewer's re-check (the job is the request)
 * and Bull Board (the queues are what it shows). Each answered 500 internal and logged an error line per request (the
 * board's page asks every few seconds): now 503 queue-unavailable, logged once per outage.
 */
describe('requests that are only jobs, while the API has no Redis', () => {
  let stack: Stack;
  let redis: PrivateService;
  let dir: string;
  let url: string;
  let api: Awaited<ReturnType<Stack['startApp']>>;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'redisrecheck' });
    dir = mkdtempSync(join(tmpdir(), 'verity-redisrecheck-'));
    redis = await startPrivateRedis({ dir, port: await freePort() });
    const port = await freePort();
    api = await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', REDIS_URL: redis.url });
    url = `http://127.0.0.1:${port}`;
  }, 120_000);
  afterAll(async () => {
    await redis?.stop().catch(() => undefined);
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('answers 503 problem+json, not 500, and nothing is asked; once Redis is back the re-check is taken', async () => {
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'drop_before_commit', count: 1 }],
      read_fault: 'unavailable',
    });
    const created = await submit(stack, [charge(unique('recheck-redis-down'))]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    await resetSandbox(stack);
    await redis.kill('SIGKILL');

    const res = await http<{ type: string; detail: string }>(url, 'POST', `/v1/operations/${held.id}/recheck`, {
      key: DEMO.reviewer,
    });
    expect({ status: res.status, type: res.body.type }).toEqual({
      status: 503,
      type: 'https://verity.dev/problems/queue-unavailable',
    });
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.headers.get('retry-after')).toBe('1');
    expect(res.body.detail).toContain('not asked');
    expect(api.output.join('')).not.toContain('"msg":"request failed"');

    await redis.restart();
    // The API's connection comes back by itself; meanwhile each try is the same 503.
    const again = await waitFor(
      () => http(url, 'POST', `/v1/operations/${held.id}/recheck`, { key: DEMO.reviewer }),
      (r) => r.status !== 503,
      30_000,
      250,
    );
    expect(again.status).toBe(202);
  }, 120_000);

  it('Bull Board: 503 problem+json, not 500, logged once; it shows the queues again once Redis is back', async () => {
    await redis.kill('SIGKILL');
    const logged = () => api.output.join('').split('"msg":"job queue unavailable: answering 503').length - 1;
    const before = logged();
    for (let poll = 0; poll < 3; poll += 1) {
      const res = await http<{ type: string }>(url, 'GET', '/admin/queues/api/queues', { key: DEMO.operator });
      expect({ status: res.status, type: res.body.type }).toEqual({
        status: 503,
        type: 'https://verity.dev/problems/queue-unavailable',
      });
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.headers.get('retry-after')).toBe('1');
    }
    expect(api.output.join('')).not.toContain('Bull Board request failed');
    expect(logged() - before).toBeLessThanOrEqual(1);

    await redis.restart();
    await waitFor(
      () => http(url, 'GET', '/admin/queues/api/queues', { key: DEMO.operator }),
      (r) => r.status === 200,
      30_000,
      250,
    );
  }, 120_000);
});
