import { QueueName } from '@verity/queues';
import type { Queue } from 'bullmq';
import { DEMO, METRICS_TOKEN, RunningApp, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { findPromtool, lintExposition, metricValue, promtoolCheck } from '../support/exposition';
import { settle, stackQueue, submit } from './dispatcher-helpers';

/**
 * What an operator scrapes: the API, every dispatcher and every reconciler serve /metrics (format-checked, and by
 * promtool where it is installed) and /health; queue depth and the latency histograms move when work flows.
 */
describe('metrics and health of every process', () => {
  let stack: Stack;
  let dispatchQueue: Queue;
  const promtool = findPromtool();

  beforeAll(async () => {
    // Every send through a dispatch job (not the advance job's own), so the dispatch queue's depth has jobs to show.
    stack = await Stack.start({ label: 'metrics', env: { SEND_IN_ADVANCE: 'false' } });
    dispatchQueue = stackQueue(stack, QueueName.DISPATCH);
  });
  afterAll(async () => {
    await dispatchQueue?.resume().catch(() => undefined);
    await dispatchQueue?.close();
    await stack?.stop();
  });

  const worker = (name: 'dispatcher' | 'reconciler'): RunningApp => stack.running(name)[0];

  async function scrape(url: string): Promise<string> {
    const res = await http<string>(url, 'GET', '/metrics', { key: METRICS_TOKEN });
    expect(res.status).toBe(200);
    return res.text;
  }

  it('each process serves /metrics that passes the format check (and promtool, where installed)', async () => {
    for (const url of [stack.apiUrl, worker('dispatcher').opsUrl!, worker('reconciler').opsUrl!]) {
      const text = await scrape(url);
      expect([url, lintExposition(text)]).toEqual([url, []]);
      if (promtool) expect([url, promtoolCheck(promtool, text)]).toEqual([url, []]);
      expect(text).toMatch(/^process_cpu_user_seconds_total \d/m);
    }
    const dispatcher = await scrape(worker('dispatcher').opsUrl!);
    expect(dispatcher).toMatch(/^verity_queue_jobs\{queue="dispatch",state="waiting"\} \d+$/m);
    expect(dispatcher).toMatch(/^verity_queue_jobs\{queue="executions",state="active"\} \d+$/m);
    const reconciler = await scrape(worker('reconciler').opsUrl!);
    expect(reconciler).toMatch(/^verity_queue_jobs\{queue="verify",state="delayed"\} \d+$/m);
    expect(reconciler).not.toMatch(/queue="dispatch"/);
  });

  it('a worker’s /metrics is closed like the API’s; /health/live and /health/ready answer', async () => {
    for (const app of [worker('dispatcher'), worker('reconciler')]) {
      const url = app.opsUrl!;
      expect((await http(url, 'GET', '/metrics')).status).toBe(401);
      expect((await http(url, 'GET', '/metrics', { key: `${METRICS_TOKEN}x` })).status).toBe(401);
      expect((await http(url, 'GET', '/metrics', { key: DEMO.agent })).status).toBe(401);
      expect((await http(url, 'GET', '/health/live')).body).toEqual({ status: 'ok' });
      const ready = await http(url, 'GET', '/health/ready');
      expect([ready.status, ready.body]).toEqual([
        200,
        { status: 'ok', checks: { postgres: 'up', redis: 'up', schema: 'up' } },
      ]);
      expect((await http(url, 'GET', '/nothing')).status).toBe(404);
    }
  });

  it('under load, queue depth rises and falls and the latency histograms count every operation', async () => {
    const n = 5;
    const dispatcherUrl = worker('dispatcher').opsUrl!;
    const reconcilerUrl = worker('reconciler').opsUrl!;
    const before = {
      dispatcher: await scrape(dispatcherUrl),
      reconciler: await scrape(reconcilerUrl),
    };
    const sends = (text: string) =>
      metricValue(text, 'verity_connector_call_duration_seconds_count', {
        connector: 'sandbox.payments',
        action: 'charge',
        call: 'send',
        outcome: 'acknowledged',
      });
    const readBacks = (text: string) =>
      metricValue(text, 'verity_connector_call_duration_seconds_count', {
        connector: 'sandbox.payments',
        call: 'read_back',
        outcome: 'found',
      });
    const toVerified = (text: string) => metricValue(text, 'verity_operation_intake_to_verified_seconds_count');
    const toSettled = (text: string) =>
      metricValue(text, 'verity_operation_intake_to_settled_seconds_count', { status: 'VERIFIED' });

    // The dispatch queue paused: the dispatch jobs of n submissions wait, visibly, on the dispatcher's /metrics.
    await dispatchQueue.pause();
    const ids: string[] = [];
    for (let i = 0; i < n; i += 1) {
      ids.push((await submit(stack, [charge(unique('metrics'))])).id);
    }
    const waiting = (text: string) => metricValue(text, 'verity_queue_jobs', { queue: 'dispatch', state: 'waiting' });
    await waitFor(
      () => scrape(dispatcherUrl),
      (text) => waiting(text) >= n,
    );
    await dispatchQueue.resume();
    for (const id of ids) expect((await settle(stack, id)).status).toBe('completed');
    const after = await waitFor(
      async () => ({ dispatcher: await scrape(dispatcherUrl), reconciler: await scrape(reconcilerUrl) }),
      (s) => waiting(s.dispatcher) === 0,
    );

    // Each charge was sent once (by the dispatcher) and read back (by the dispatcher right after the send, or by the
    // reconciler's verify job when that read did not conclude); whichever process committed VERIFIED observed intake →
    // VERIFIED and intake → settled, and counted the transition.
    const grew = (measure: (text: string) => number) =>
      measure(after.dispatcher) + measure(after.reconciler) - measure(before.dispatcher) - measure(before.reconciler);
    const transitions = (to: string) => (text: string) =>
      metricValue(text, 'verity_transitions_total', { type: 'operation.status_changed', to_status: to });
    expect(sends(after.dispatcher) - sends(before.dispatcher)).toBe(n);
    expect(grew(readBacks)).toBeGreaterThanOrEqual(n);
    expect(grew(toVerified)).toBe(n);
    expect(grew(toSettled)).toBe(n);
    expect(grew(transitions('SENT'))).toBe(n);
    expect(grew(transitions('VERIFIED'))).toBe(n);
    // The API counts the submissions it accepted.
    expect(metricValue(await scrape(stack.apiUrl), 'verity_submissions_total')).toBeGreaterThanOrEqual(n);
  });

  it('a worker whose metrics port is taken stops at start, naming the variable', async () => {
    const taken = new URL(worker('dispatcher').opsUrl!).port;
    await expect(stack.startApp('dispatcher', { DISPATCHER_METRICS_PORT: taken })).rejects.toThrow(
      /cannot serve \/metrics on 127\.0\.0\.1:\d+ \(DISPATCHER_METRICS_PORT; 0 turns it off\)/,
    );
    expect(stack.running('dispatcher')).toHaveLength(1);
  });

  it('a worker closes its HTTP port on SIGTERM and exits 0', async () => {
    const app = worker('reconciler');
    await stack.kill(app, 'SIGTERM');
    expect(await app.exited).toBe(0);
    await expect(fetch(`${app.opsUrl!}/health/live`)).rejects.toThrow();
  });
});
