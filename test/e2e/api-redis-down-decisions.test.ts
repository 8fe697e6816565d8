import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrivateService, freePort, startPrivateRedis } from '../../scripts/local-services';
import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { settle, submit, waitForApprovalRequest } from './dispatcher-helpers';
import type { Execution } from '@verity/sdk';

/**
 * A person's decision made through an API whose Redis is gone: answered at once, recorded, and acted on by the
 * workers (on their own Redis) without anyone asking again — the decision is not lost with the job the API could not
 * enqueue. (api-outages.test.ts pins the same for intake.)
 */
describe('decisions while the API has no Redis', () => {
  let stack: Stack;
  let redis: PrivateService;
  let dir: string;
  let url: string;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'redisdecide' });
    dir = mkdtempSync(join(tmpdir(), 'verity-redisdecide-'));
    redis = await startPrivateRedis({ dir, port: await freePort() });
    const port = await freePort();
    await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', REDIS_URL: redis.url });
    url = `http://127.0.0.1:${port}`;
    await redis.kill('SIGKILL');
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('approve: 200 with Redis gone, and the operation is sent and verified', async () => {
    const created = await submit(stack, [charge(unique('approve-redis-down'), { requires_approval: true })]);
    await waitForApprovalRequest(stack, created.id);
    const res = await http(url, 'POST', `/v1/operations/${created.operations[0].id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: 'redis down' },
    });
    // Answered with Redis gone for good: not held for it (the producer's bound is 2 s per command).
    expect(res.status).toBe(200);
    const done = await settle(stack, created.id);
    expect(done.status).toBe('completed');
    expect(done.operations[0].status).toBe('VERIFIED');
  }, 90_000);

  it('cancel: answered at once, and the execution ends cancelled', async () => {
    const created = await submit(stack, [charge(unique('cancel-redis-down'), { requires_approval: true })]);
    await waitForApprovalRequest(stack, created.id);
    const res = await http<Execution>(url, 'POST', `/v1/executions/${created.id}/cancel`, { key: DEMO.agent });
    expect(res.status).toBe(200);
    const done = await settle(stack, created.id);
    expect(done.status).toBe('cancelled');
  }, 90_000);

  it('deny: 200, and the operation ends CANCELLED, nothing sent', async () => {
    const created = await submit(stack, [charge(unique('deny-redis-down'), { requires_approval: true })]);
    await waitForApprovalRequest(stack, created.id);
    const res = await http(url, 'POST', `/v1/operations/${created.operations[0].id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'deny', reason: 'redis down' },
    });
    expect(res.status).toBe(200);
    const done = await settle(stack, created.id);
    expect(done.status).toBe('completed');
    expect(done.operations[0].status).toBe('CANCELLED');
    expect(done.effects.summary).toBe('none');
  }, 90_000);
});
