import { DEMO, Stack, freePort } from '../support/stack';
import { http } from '../support/http';

/**
 * Red team (round 9, keys): the published demo keys (README, docs/api.md) are seeded only by the local demo, and
 * SEED_DEMO=true stops a production app at boot. But seeding is not undone: a database the local demo once ran
 * against (`npm start` with DATABASE_URL set to it, to try the quick start) keeps `demo-admin-key`,
 * `demo-operator-key`, … and a production API that later runs on it accepted them — keys anyone can read in the
 * docs, an operator key (every tenant's jobs in Bull Board, /metrics) among them. In production a published demo key
 * authenticates as nobody, whatever the database holds.
 */
describe('published demo keys in production', () => {
  let stack: Stack;
  let production: string;

  beforeAll(async () => {
    // The test stack seeds the demo keys, as `npm start` would have on this database.
    stack = await Stack.start({ label: 'demoprod', dispatchers: 0, reconcilers: 0 });
    const port = await freePort();
    await stack.startApp('api', {
      PORT: String(port),
      HOST: '127.0.0.1',
      NODE_ENV: 'production',
      SEED_DEMO: 'false',
      TENANT_PRIVATE_EGRESS: 'false',
    });
    production = `http://127.0.0.1:${port}`;
  });
  afterAll(async () => stack?.stop());

  it('a development API accepts them (the local demo)', async () => {
    expect((await http(stack.apiUrl, 'GET', '/v1/executions', { key: DEMO.agent })).status).toBe(200);
  });

  it('a production API on the same database answers 401 to every one, the operator key included', async () => {
    for (const key of [DEMO.agent, DEMO.reviewer, DEMO.admin, 'demo-other-agent-key']) {
      const answer = await http<{ type: string }>(production, 'GET', '/v1/executions', { key });
      expect({ key, status: answer.status }).toEqual({ key, status: 401 });
    }
    const board = await http(production, 'GET', '/admin/queues/api/queues', { key: 'demo-operator-key' });
    expect(board.status).toBe(401);
    const metrics = await http(production, 'GET', '/metrics', { key: 'demo-operator-key' });
    expect(metrics.status).toBe(401);
  });
});
