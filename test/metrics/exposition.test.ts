import {
  collectProcessMetrics,
  connectorCalls,
  enqueueFailures,
  intakeToSettled,
  intakeToVerified,
  metricsRegistry,
  queueJobs,
  transitionsCounter,
} from '@verity/platform';
import {
  executionsInFlight,
  httpDuration,
  openObligations,
  operationsInFlight,
  overdueObligations,
  submissions,
} from '../../apps/api/src/metrics/metrics';
import { dispatchRefused } from '../../apps/dispatcher/src/metrics';
import { reconcileAttempts, webhookDeliveries } from '../../apps/reconciler/src/metrics';
import { loadConfig } from '@verity/platform';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findPromtool, lintExposition, promtoolCheck } from '../support/exposition';

const ROOT = join(__dirname, '..', '..');

/**
 * Every metric any Verity process serves, in the exposition format, checked by the same rules as
 * `promtool check metrics` (and by promtool itself where it is installed: CI installs it, .ci/run). The e2e metrics
 * test checks what each running process really serves.
 */
describe('metric names and format', () => {
  const promtool = findPromtool();

  beforeAll(() => {
    collectProcessMetrics();
    // One sample of each, so labelled families render their samples too.
    transitionsCounter.inc({ type: 'operation.status_changed', to_status: 'VERIFIED' });
    intakeToVerified.observe(1.5);
    intakeToSettled.observe({ status: 'VERIFIED' }, 1.5);
    connectorCalls.observe(
      { connector: 'sandbox.payments', action: 'charge', call: 'send', outcome: 'acknowledged' },
      0.02,
    );
    queueJobs.set({ queue: 'dispatch', state: 'waiting' }, 3);
    enqueueFailures.inc({ job: 'dispatch-operation' });
    httpDuration.observe({ method: 'GET', route: '/v1/executions/:id', status: '200' }, 0.004);
    executionsInFlight.set({ status: 'running' }, 2);
    operationsInFlight.set({ status: 'SENT' }, 1);
    openObligations.set({ age: 'not_due' }, 1);
    overdueObligations.set(0);
    submissions.inc();
    dispatchRefused.inc({ reason: 'status_moved' });
    reconcileAttempts.inc({ job: 'reconcile-operation', outcome: 'verified' });
    webhookDeliveries.inc({ result: 'delivered' });
  });

  it('every family of every process is clean', async () => {
    const text = await metricsRegistry.metrics();
    expect(text).toMatch(/^verity_connector_call_duration_seconds_bucket\{.*le="\+Inf"/m);
    expect(lintExposition(text)).toEqual([]);
    if (promtool) expect(promtoolCheck(promtool, text)).toEqual([]);
  });

  it.each([
    [
      'a gauge named like a counter',
      '# HELP a_total x\n# TYPE a_total gauge\na_total 1\n',
      /only counters end in _total/,
    ],
    ['a counter without _total', '# HELP b x\n# TYPE b counter\nb 1\n', /must end in _total/],
    ['no HELP', '# TYPE c gauge\nc 1\n', /without HELP/],
    ['an abbreviated unit', '# HELP d_ms x\n# TYPE d_ms gauge\nd_ms 1\n', /base units/],
    ['a broken sample', '# HELP e x\n# TYPE e gauge\ne{a="1" 1\n', /not a sample|unparsable/],
  ])('finds %s (as promtool does)', (_what, text, problem) => {
    expect(lintExposition(text).join('\n')).toMatch(problem);
    if (promtool) expect(promtoolCheck(promtool, text)).not.toEqual([]);
  });

  it('says whether promtool ran', () => {
    // Not a failure without it: the rules above stand in. Visible in the output, so CI logs show which ran.
    process.stdout.write(promtool ? `promtool: ${promtool}\n` : 'promtool not installed: the format check ran alone\n');
    expect(true).toBe(true);
  });
});

describe('deploy/', () => {
  const promtool = findPromtool();

  it('the Grafana dashboard queries only metrics that some process serves', async () => {
    const dashboard = readFileSync(join(ROOT, 'deploy/grafana/dashboards/verity.json'), 'utf8');
    const served = new Set((await metricsRegistry.getMetricsAsJSON()).map((m) => m.name));
    const queried = [...dashboard.matchAll(/\bverity_[a-z_]+/g)].map((m) => m[0].replace(/_(bucket|sum|count)$/, ''));
    expect(queried.length).toBeGreaterThan(10);
    expect([...new Set(queried)].filter((name) => !served.has(name))).toEqual([]);
    for (const name of ['verity_queue_jobs', 'verity_open_obligations', 'verity_webhook_deliveries_total']) {
      expect(queried).toContain(name);
    }
  });

  it('the Prometheus scrape config reaches each process on its default port (and promtool accepts it)', () => {
    const text = readFileSync(join(ROOT, 'deploy/prometheus.yml'), 'utf8');
    const defaults = loadConfig({});
    for (const [job, port] of [
      ['verity-api', defaults.PORT],
      ['verity-dispatcher', defaults.DISPATCHER_METRICS_PORT],
      ['verity-reconciler', defaults.RECONCILER_METRICS_PORT],
    ] as const) {
      expect(text).toMatch(new RegExp(`job_name: ${job}\\n(?:(?!.*job_name).*\\n)*?\\s+port: ${port}\\n`));
    }
    if (!promtool) return;
    // promtool wants the token file to exist: check a copy that points at a scratch one.
    const dir = mkdtempSync(join(tmpdir(), 'verity-prom-'));
    try {
      writeFileSync(join(dir, 'token'), 'x'.repeat(16));
      writeFileSync(join(dir, 'prometheus.yml'), text.replaceAll('/tmp/metrics-token', join(dir, 'token')));
      const result = spawnSync(promtool, ['check', 'config', join(dir, 'prometheus.yml')], { encoding: 'utf8' });
      expect([result.status, result.stderr]).toEqual([0, '']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
