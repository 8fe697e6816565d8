import { createApiKey } from '@verity/persistence/api-keys';
import { DEMO, METRICS_TOKEN, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { startReceiver } from './webhook-receiver';

/**
 * The demo tenant's `operation.settled` webhooks go to `demoPath` on the receiver, the other tenant's to `/fast` (both
 * allowlist the receiver).
 */
async function subscribeBothTenants(
  stack: Stack,
  receiver: Awaited<ReturnType<typeof startReceiver>>,
  demoPath: string,
): Promise<void> {
  const otherAdmin = (
    await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'admin', label: 'test' })
  ).key;
  for (const [key, path] of [
    [DEMO.admin, demoPath],
    [otherAdmin, '/fast'],
  ]) {
    const put = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key,
      body: { allow_hosts: [{ host: '127.0.0.1', ports: [receiver.port], allow_private: true }] },
    });
    expect(put.status).toBe(200);
    const created = await http(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      key,
      body: { url: `${receiver.base}${path}`, events: ['operation.settled'] },
    });
    expect(created.status).toBe(201);
  }
}

/** The demo tenant submits `many` charges at once: as many `operation.settled` webhooks. */
async function demoBurst(stack: Stack, label: string, many: number): Promise<void> {
  const burst = await http(stack.apiUrl, 'POST', '/v1/executions', {
    key: DEMO.agent,
    body: submission(Array.from({ length: many }, (_, i) => charge(unique(`${label}-${i}`), { key: `c${i}` }))),
  });
  expect(burst.status).toBe(201);
}

/** Waits until `path` was called at least `n` times. */
function calledAtLeast(receiver: Awaited<ReturnType<typeof startReceiver>>, path: string, n: number) {
  return waitFor(
    async () => receiver.seen.filter((r) => r.path === path).length,
    (count) => count >= n,
    60_000,
    20,
  );
}

/**
 * One tenant's long line of deliveries to a slow receiver does not stand before another tenant's first delivery: a
 * delivery job is scheduled by its place in its own tenant's line (every tenant's first before any tenant's second).
 * One delivery slot (WORKER_CONCURRENCY 1) makes the order visible: first in, first out, the other tenant's delivery
 * would wait for all of the first tenant's.
 */
describe('webhooks: one tenant does not hold up another', () => {
  let stack: Stack;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  /** Who arrived, in order. */
  const arrivals = () => receiver.seen.map((r) => r.path);
  let otherAgent: string;

  beforeAll(async () => {
    // `/slow` answers after 300 ms, `/fast` at once.
    receiver = await startReceiver((path) => ({ status: 204, afterMs: path === '/slow' ? 300 : 0 }));
    stack = await Stack.start({
      label: 'whfair',
      env: { WEBHOOK_SCAN_INTERVAL_MS: '100', WORKER_CONCURRENCY: '1' },
    });
    otherAgent = DEMO.otherAgent;
    await subscribeBothTenants(stack, receiver, '/slow');
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  it("delivers another tenant's first webhook ahead of the line one tenant's slow receiver built up", async () => {
    const many = 16;
    await demoBurst(stack, 'whfair', many);
    // Its line has formed: the slow receiver is being served, and most of the line still waits.
    await calledAtLeast(receiver, '/slow', 1);
    const single = await http(stack.apiUrl, 'POST', '/v1/executions', {
      key: otherAgent,
      body: submission([charge(unique('whfair-other'))]),
    });
    expect(single.status).toBe(201);
    const slowBefore = await waitFor(
      async () => ({ fast: arrivals().indexOf('/fast'), arrivals: arrivals() }),
      (seen) => seen.fast >= 0,
      30_000,
      20,
    );
    const slowAhead = slowBefore.arrivals.slice(0, slowBefore.fast).length;
    // Behind at most the first tenant's deliveries that were already first in its line (or being sent), never the rest.
    expect(slowAhead).toBeLessThanOrEqual(4);
    expect(slowAhead).toBeLessThan(many);
    // And the first tenant's line is still served to the end.
    await calledAtLeast(receiver, '/slow', many);
  }, 120_000);
});

/**
 * A receiver that never answers holds a delivery slot until WEBHOOK_TIMEOUT_MS. With four slots, one tenant may hold
 * two: its third and later deliveries wait (no attempt spent) while another tenant's delivery goes out at once,
 * rather than after the first tenant's calls time out.
 */
describe('webhooks: one tenant holds at most half of the delivery slots', () => {
  let stack: Stack;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  const arrivals = () => receiver.seen.map((r) => r.path);

  beforeAll(async () => {
    // `/hang` never answers (within this test); `/fast` at once.
    receiver = await startReceiver((path) => ({ status: 204, afterMs: path === '/hang' ? 600_000 : 0 }));
    stack = await Stack.start({
      label: 'whshare',
      env: {
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        WORKER_CONCURRENCY: '4',
        WEBHOOK_TIMEOUT_MS: '120000',
        SHUTDOWN_GRACE_MS: '125000',
      },
    });
    await subscribeBothTenants(stack, receiver, '/hang');
  }, 60_000);

  afterAll(async () => {
    // The hanging calls end first, so the reconciler's shutdown does not wait for their timeout.
    await receiver?.close();
    await stack?.stop();
  });

  it("sends another tenant's delivery while the first tenant's hang, and never more than two of those at once", async () => {
    const many = 6;
    await demoBurst(stack, 'whshare', many);
    // Two hang, holding the tenant's share; the other four of its deliveries are scheduled and put back.
    await calledAtLeast(receiver, '/hang', 2);
    const deferred = async () => {
      const metrics = await http<string>(stack.running('reconciler')[0].opsUrl!, 'GET', '/metrics', {
        key: METRICS_TOKEN,
      });
      return Number(/^verity_webhook_deliveries_total\{result="deferred"\} (\d+)/m.exec(metrics.text)?.[1] ?? 0);
    };
    await waitFor(deferred, (n) => n >= many - 2, 30_000, 100);
    const single = await http(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.otherAgent,
      body: submission([charge(unique('whshare-other'))]),
    });
    expect(single.status).toBe(201);
    // Well before any hanging call could time out (120 s).
    await waitFor(
      async () => arrivals().includes('/fast'),
      (arrived) => arrived,
      30_000,
      20,
    );
    expect(arrivals().filter((p) => p === '/hang')).toHaveLength(2);
  }, 120_000);
});
