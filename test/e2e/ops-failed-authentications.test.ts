import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrivateService, freePort, startPrivateRedis } from '../../scripts/local-services';
import { METRICS_TOKEN, Stack } from '../support/stack';
import { http, unique } from '../support/http';

/**
 * Red team (hostile pass 3): the workers' ops ports put no limit on wrong METRICS_TOKEN guesses, where the API refuses
 * an address that keeps presenting unknown keys (429 too-many-failed-authentications, the right one included). The
 * ops ports now count failures by the same rule and in the same count as the API.
 */
describe('failed authentications on the workers’ ops ports', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({
      label: 'opsauthfail',
      dispatchers: 1,
      reconcilers: 1,
      env: { AUTH_FAILURES_PER_MINUTE: '3' },
    });
  });
  afterAll(async () => stack?.stop());

  it('after AUTH_FAILURES_PER_MINUTE wrong tokens, the right one is 429 too, on every port the count is shared with', async () => {
    const dispatcher = stack.running('dispatcher')[0].opsUrl!;
    const reconciler = stack.running('reconciler')[0].opsUrl!;
    // Without a token nothing is guessed: 401, never counted.
    for (let i = 0; i < 5; i += 1) expect((await http(dispatcher, 'GET', '/metrics')).status).toBe(401);
    expect((await http(dispatcher, 'GET', '/metrics', { key: METRICS_TOKEN })).status).toBe(200);
    for (let i = 0; i < 3; i += 1) {
      const wrong = await http<{ type: string }>(dispatcher, 'GET', '/metrics', { key: `wrong-${i}` });
      expect(wrong.status).toBe(401);
    }
    for (const url of [dispatcher, reconciler, stack.apiUrl]) {
      const right = await http<{ type: string; status: number }>(url, 'GET', '/metrics', { key: METRICS_TOKEN });
      expect({ url, status: right.status, type: right.body.type }).toEqual({
        url,
        status: 429,
        type: 'https://verity.dev/problems/too-many-failed-authentications',
      });
      expect(Number(right.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(right.headers.get('content-type')).toBe('application/problem+json; charset=utf-8');
    }
    // Probes ask for no credential: still served.
    expect((await http(dispatcher, 'GET', '/health/live')).status).toBe(200);
  });
});

/**
 * With Redis unreachable for the process, a scrape's check of the failed authentications does not wait on it: the
 * process's own count decides (fail open for an address that has not failed, closed for one that has used its
 * failures), on the workers' ops ports as on the API (docs/operations.md).
 */
describe('failed authentications with Redis unreachable', () => {
  let stack: Stack;
  const dirs: string[] = [];
  const services: PrivateService[] = [];
  beforeAll(async () => {
    stack = await Stack.start({ label: 'opsauthredis', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => {
    for (const service of services) await service.stop().catch(() => undefined);
    await stack?.stop();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it.each(['api', 'dispatcher', 'reconciler'] as const)(
    '%s: the right token is served, and refused (429) once the address has used its failures',
    async (name) => {
      const dir = mkdtempSync(join(tmpdir(), 'verity-opsauthredis-'));
      dirs.push(dir);
      const redis = await startPrivateRedis({ dir, port: await freePort() });
      services.push(redis);
      const port = await freePort();
      const app = await stack.startApp(name, {
        REDIS_URL: redis.url,
        QUEUE_PREFIX: `{${unique('opsauthredis')}}`,
        AUTH_FAILURES_PER_MINUTE: '3',
        ...(name === 'api' ? { PORT: String(port), HOST: '127.0.0.1' } : {}),
      });
      const url = name === 'api' ? `http://127.0.0.1:${port}` : app.opsUrl!;
      await redis.kill('SIGKILL');
      const scrape = (key: string) => http<{ type?: string }>(url, 'GET', '/metrics', { key });
      const right = await scrape(METRICS_TOKEN);
      expect(right.status).toBe(200);
      for (let i = 0; i < 3; i += 1) expect((await scrape(`wrong-${i}`)).status).toBe(401);
      const blocked = await scrape(METRICS_TOKEN);
      expect({ status: blocked.status, type: blocked.body.type }).toEqual({
        status: 429,
        type: 'https://verity.dev/problems/too-many-failed-authentications',
      });
    },
    60_000,
  );
});
