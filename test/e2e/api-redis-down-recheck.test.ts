import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrivateService, freePort, startPrivateRedis } from '../../scripts/local-services';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { resetSandbox, submit, waitForOp } from './dispatcher-helpers';

/**
 * The API's Redis gone, for the one request whose job is the request itself: a reviewer's re-check (no job, nothing
 * asked). It answered 500 internal ("an unexpected error occurred") after the producer's 2 s, and logged an error
 * per request: now 503, saying the re-check was not asked for and may be asked again.
 */
describe('re-check while the API has no Redis', () => {
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
});
