import { METRICS_TOKEN, Stack } from '../support/stack';
import { http } from '../support/http';

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
