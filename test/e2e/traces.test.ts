import { createServer, IncomingMessage, Server } from 'node:http';
import { AddressInfo } from 'node:net';
import { charge, http, submission, unique } from '../support/http';
import { DEMO, Stack, waitFor } from '../support/stack';
import type { Execution } from '@verity/sdk';
import { events, getExecution, settle, statusPath, submit } from './dispatcher-helpers';
import { startReceiver } from './webhook-receiver';
import { allowLoopbackPort } from './connectors-support';

/** One span as the OTLP/HTTP JSON exporter sends it, with the service and instrumentation scope it came from. */
interface ReceivedSpan {
  service: string;
  scope: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  /** Nanoseconds since the epoch, as a decimal string (spans arrive in the order they end, not start). */
  startTime: bigint;
  attributes: Record<string, unknown>;
  events: { name: string; attributes: Record<string, unknown> }[];
  links: { traceId: string; spanId: string; attributes: Record<string, unknown> }[];
}

type OtlpValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };
type OtlpAttribute = { key: string; value: OtlpValue };
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  startTimeUnixNano?: string | number;
  attributes?: OtlpAttribute[];
  events?: { name: string; attributes?: OtlpAttribute[] }[];
  links?: { traceId: string; spanId: string; attributes?: OtlpAttribute[] }[];
}
interface OtlpTraces {
  resourceSpans?: {
    resource?: { attributes?: OtlpAttribute[] };
    scopeSpans?: { scope?: { name?: string }; spans?: OtlpSpan[] }[];
  }[];
}

const SPAN_KIND_SERVER = 2;
const SPAN_KIND_CLIENT = 3;

/** Ids arrive as hex in OTLP/JSON; base64 (protobuf-style JSON) is accepted too. */
function hexId(id: string | undefined): string {
  if (!id) return '';
  return /^[0-9a-f]+$/.test(id) ? id : Buffer.from(id, 'base64').toString('hex');
}

function attributes(list: OtlpAttribute[] | undefined): Record<string, unknown> {
  return Object.fromEntries(
    (list ?? []).map((a) => [
      a.key,
      a.value.stringValue ?? a.value.intValue ?? a.value.boolValue ?? a.value.doubleValue,
    ]),
  );
}

/** A local OTLP/HTTP collector (JSON): keeps every span it is sent. */
class Collector {
  readonly spans: ReceivedSpan[] = [];
  private server!: Server;
  url = '';

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      void this.receive(req).then(
        () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'),
        () => res.writeHead(400).end(),
      );
    });
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  private async receive(req: IncomingMessage): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    if (req.url !== '/v1/traces') return;
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpTraces;
    for (const resourceSpans of body.resourceSpans ?? []) {
      const service = String(attributes(resourceSpans.resource?.attributes)['service.name'] ?? '');
      for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
        for (const span of scopeSpans.spans ?? []) {
          this.spans.push({
            service,
            scope: scopeSpans.scope?.name ?? '',
            traceId: hexId(span.traceId),
            spanId: hexId(span.spanId),
            parentSpanId: hexId(span.parentSpanId),
            name: span.name,
            kind: span.kind,
            startTime: BigInt(span.startTimeUnixNano ?? 0),
            attributes: attributes(span.attributes),
            events: (span.events ?? []).map((e) => ({ name: e.name, attributes: attributes(e.attributes) })),
            links: (span.links ?? []).map((l) => ({
              traceId: hexId(l.traceId),
              spanId: hexId(l.spanId),
              attributes: attributes(l.attributes),
            })),
          });
        }
      }
    }
  }

  trace(traceId: string): ReceivedSpan[] {
    return this.spans.filter((s) => s.traceId === traceId);
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

/**
 * Traces: with an OTLP endpoint set (the standard variables only), one execution is one trace, from the intake request
 * through the dispatcher's job and its connector call to the reconciler's read-back, with the Postgres and Redis calls
 * made along the way; the API answers with its trace id and the logs carry it.
 */
describe('traces (OpenTelemetry, OTLP/HTTP)', () => {
  const collector = new Collector();
  let stack: Stack;
  beforeAll(async () => {
    await collector.start();
    stack = await Stack.start({
      label: 'traces',
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_BSP_SCHEDULE_DELAY: '200',
      },
    });
  });
  afterAll(async () => {
    await stack?.stop();
    await collector.stop();
  });

  it('one execution yields one trace: API, dispatcher, connector call, reconciler, Postgres and Redis', async () => {
    // The charge times out after the provider committed it: UNKNOWN, and the reconciler's read-back settles it.
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
    });
    const reference = unique('trace');
    const created = await submit(stack, [charge(reference)]);
    const traceId = created.trace_id;
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);

    const execution = await settle(stack, created.id);
    expect(execution.trace_id).toBe(traceId);
    const [op] = execution.operations;
    expect(op.status).toBe('VERIFIED');
    expect(statusPath(await events(stack, created.id), op.id)).toEqual([
      'PREPARED',
      'SENT',
      'UNKNOWN',
      'RECONCILING',
      'VERIFIED',
    ]);

    const sandboxPort = String(stack.sandboxPort);
    const toSandbox = (s: ReceivedSpan) =>
      s.kind === SPAN_KIND_CLIENT &&
      s.scope === '@opentelemetry/instrumentation-http' &&
      Object.values(s.attributes).some((v) => String(v).includes(sandboxPort));
    const spans = await waitFor(
      async () => collector.trace(traceId!),
      (found) =>
        ['verity-api', 'verity-dispatcher', 'verity-reconciler'].every((service) =>
          found.some((s) => s.service === service),
        ) &&
        found.some((s) => s.service === 'verity-dispatcher' && toSandbox(s)) &&
        found.some((s) => s.service === 'verity-reconciler' && toSandbox(s)) &&
        found.some((s) => s.events.some((e) => e.attributes['verity.to'] === 'VERIFIED')) &&
        // Spans are exported as they end: wait for the parents of those already here.
        found.every((s) => s.parentSpanId === '' || found.some((p) => p.spanId === s.parentSpanId)),
      30_000,
      200,
    );

    // The intake request is the root: the only span of the trace without a parent.
    const roots = spans.filter((s) => s.parentSpanId === '');
    expect(roots).toHaveLength(1);
    expect(roots[0]).toMatchObject({ service: 'verity-api', scope: '@opentelemetry/instrumentation-http' });
    // The connector's call is a child of the dispatcher's job span; the read-back of the reconciler's.
    const byId = new Map(spans.map((s) => [s.spanId, s]));
    const send = spans.find((s) => s.service === 'verity-dispatcher' && toSandbox(s))!;
    expect(byId.get(send.parentSpanId)?.service).toBe('verity-dispatcher');
    const readBack = spans.find((s) => s.service === 'verity-reconciler' && toSandbox(s))!;
    expect(byId.get(readBack.parentSpanId)?.service).toBe('verity-reconciler');

    // Postgres and Redis from the standard instrumentations.
    expect(spans.some((s) => s.scope === '@opentelemetry/instrumentation-pg')).toBe(true);
    expect(spans.some((s) => s.scope === '@opentelemetry/instrumentation-ioredis')).toBe(true);
    // Each transition is an event on the span that made it.
    const moves = spans.flatMap((s) => s.events.filter((e) => e.name === 'verity.transition'));
    expect(moves.map((e) => e.attributes['verity.to'])).toEqual(
      expect.arrayContaining(['SENT', 'UNKNOWN', 'RECONCILING', 'VERIFIED', 'running']),
    );

    // The logs carry the trace id.
    const traced = (app: 'api' | 'dispatcher') =>
      stack
        .logs(app)
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as { trace_id?: string; span_id?: string; msg?: string })
        .filter((line) => line.trace_id === traceId);
    expect(traced('dispatcher').some((line) => line.msg === 'dispatch' && /^[0-9a-f]{16}$/.test(line.span_id!))).toBe(
      true,
    );
    expect(traced('api').some((line) => line.msg === 'request')).toBe(true);

    // A read of the execution answers with the same trace id.
    expect((await getExecution(stack, created.id)).trace_id).toBe(traceId);
  });

  it("a lone charge's happy path: the dispatcher reads the execution once and holds what it read until completion", async () => {
    const created = await submit(stack, [charge(unique('trace-statements'))]);
    const done = await settle(stack, created.id);
    expect(done.status).toBe('completed');
    expect(done.operations[0].status).toBe('VERIFIED');
    const spans = await waitFor(
      async () => collector.trace(created.trace_id!),
      (found) =>
        found.some((s) => s.events.some((e) => e.attributes['verity.to'] === 'completed')) &&
        found.every((s) => s.parentSpanId === '' || found.some((p) => p.spanId === s.parentSpanId)),
      30_000,
      200,
    );
    // Every statement the dispatcher sent to Postgres for this execution, in the order it sent them, by what it does.
    // A move that writes the database's clock reads it first in a `stamp` (taken once the statement holds its rows).
    const MOVED = String.raw`^WITH (?:stamp AS MATERIALIZED \(.*?\),\s*)?moved AS \(`;
    const kinds: [RegExp, string][] = [
      [/^START TRANSACTION/, 'BEGIN'],
      [/^COMMIT/, 'COMMIT'],
      [/^SELECT t\..*FOR UPDATE/s, 'lock the operations'],
      [/^SELECT status FROM executions .*FOR UPDATE/s, 'lock the execution'],
      [/^SELECT e\./, 'read the execution, its operations and tenant'],
      [/^SELECT o\./, 'read the operation to send'],
      [/^SELECT t\./, 'read the operations'],
      [new RegExp(`${MOVED}\\s*UPDATE executions`, 's'), 'move the execution'],
      [
        new RegExp(
          `${MOVED}\\s*UPDATE operations.*\\), follows AS.*INSERT INTO events \\([^)]*\\)\\s*SELECT m\\.event_id`,
          's',
        ),
        'move the execution, then the operation',
      ],
      [new RegExp(`${MOVED}\\s*UPDATE operations.*\\), follows AS`, 's'), 'move the operation, then the execution'],
      [new RegExp(`${MOVED}\\s*UPDATE operations`, 's'), 'move the operation'],
    ];
    const statements = spans
      .filter((s) => s.service === 'verity-dispatcher' && s.name.startsWith('pg.query'))
      .sort((a, b) => (a.startTime < b.startTime ? -1 : a.startTime > b.startTime ? 1 : 0))
      .map((s) => String(s.attributes['db.query.text'] ?? s.attributes['db.statement']))
      .map((text) => kinds.find(([pattern]) => pattern.test(text))?.[1] ?? text.slice(0, 80));
    expect(statements).toEqual([
      'read the execution, its operations and tenant',
      // created → … → running: the context read agrees and nothing needs approval, so the moves are all that is
      // written for the preparation — and the advance job sends the one operation from the rows it holds, so they go
      // in the statement that commits its SENT: created → … → running, then PREPARED → SENT.
      'move the execution, then the operation',
      // SENT → ACKNOWLEDGED → VERIFIED.
      'move the operation',
      // VERIFIED is final and it was the last operation: the same statement moves the execution running →
      // validating_output → completed (nothing is read again, no statement of its own).
      'move the operation, then the execution',
    ]);
    // The moves that statement made, as its trace tells them: the operation's, then the execution's two, in order.
    const moves = spans
      .filter((s) => s.service === 'verity-dispatcher')
      .flatMap((s) => s.events.filter((e) => e.name === 'verity.transition'))
      .map(
        (e) =>
          `${String(e.attributes['verity.kind'])} ${String(e.attributes['verity.from'])} → ${String(e.attributes['verity.to'])}`,
      );
    // The first statement's: the execution's four, then the operation's SENT.
    expect(moves.slice(0, 5)).toEqual([
      'execution created → validating',
      'execution validating → resolving_context',
      'execution resolving_context → planning',
      'execution planning → running',
      'operation PREPARED → SENT',
    ]);
    expect(moves.slice(-3)).toEqual([
      'operation ACKNOWLEDGED → VERIFIED',
      'execution running → validating_output',
      'execution validating_output → completed',
    ]);
  });

  it("a reviewer's approval is its own request, but the send it releases joins the execution's trace", async () => {
    const reference = unique('trace-approval');
    const created = await submit(stack, [charge(reference, { requires_approval: true })]);
    const waiting = await waitFor(
      () => getExecution(stack, created.id),
      (e) => e.status === 'waiting_for_approval',
      30_000,
      150,
    );
    const approved = await http(stack.apiUrl, 'POST', `/v1/operations/${waiting.operations[0].id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: 'traced' },
    });
    expect(approved.status).toBe(200);
    expect((await settle(stack, created.id)).operations[0].status).toBe('VERIFIED');
    const traceId = created.trace_id!;
    const sends = await waitFor(
      async () => collector.trace(traceId).filter((s) => s.service === 'verity-dispatcher' && s.name === 'POST'),
      (found) => found.length > 0,
      30_000,
      200,
    );
    expect(sends).toHaveLength(1);
    // The approval request itself is a trace of its own.
    const approvalRequests = await waitFor(
      async () =>
        collector.spans.filter(
          (s) =>
            s.service === 'verity-api' &&
            s.parentSpanId === '' &&
            Object.values(s.attributes).some((v) => String(v).endsWith('/approval')),
        ),
      (found) => found.length > 0,
      30_000,
      200,
    );
    expect(approvalRequests).toHaveLength(1);
    expect(approvalRequests[0].traceId).not.toBe(traceId);
  });

  it("work the sweeper re-enqueues from Postgres joins the execution's trace", async () => {
    // No dispatcher: the advance the API enqueued waits, the execution goes stale, and the sweeper enqueues it again.
    for (const dispatcher of stack.running('dispatcher')) await stack.kill(dispatcher, 'SIGTERM');
    const created = await submit(stack, [charge(unique('trace-sweep'))]);
    const traceId = created.trace_id!;
    const reEnqueued = await waitFor(
      async () =>
        collector
          .trace(traceId)
          .filter((s) => s.service === 'verity-reconciler' && s.name === 'add executions.advance-execution'),
      (found) => found.length > 0,
      30_000,
      200,
    );
    // A child of the intake request (the stored traceparent), not of the sweep's own job.
    const root = collector.trace(traceId).find((s) => s.parentSpanId === '')!;
    expect(root.service).toBe('verity-api');
    expect(reEnqueued[0].parentSpanId).toBe(root.spanId);
    await stack.startApp('dispatcher');
    expect((await settle(stack, created.id)).operations[0].status).toBe('VERIFIED');
  });

  it("a caller's traceparent is not continued: it cannot choose its execution's trace, join another's or unsample it", async () => {
    // A trace id the caller took from elsewhere (another tenant's execution, say), unsampled, with baggage to smuggle.
    const chosen = '0af7651916cd43dd8448eb211c80319c';
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('trace-hostile'))]),
      headers: {
        traceparent: `00-${chosen}-b7ad6b7169203331-00`,
        tracestate: 'evil=1',
        baggage: 'tenant=someone-else',
      },
    });
    expect(created.status).toBe(201);
    const traceId = created.body.trace_id!;
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(traceId).not.toBe(chosen);
    expect((await settle(stack, created.body.id)).operations[0].status).toBe('VERIFIED');
    // Recorded (the caller's "not sampled" flag is ignored) and rooted at the intake request; nothing in its trace.
    const spans = await waitFor(
      async () => collector.trace(traceId),
      (found) => found.some((s) => s.parentSpanId === '') && found.some((s) => s.service === 'verity-dispatcher'),
      30_000,
      200,
    );
    const root = spans.find((s) => s.parentSpanId === '')!;
    expect(root).toMatchObject({ service: 'verity-api' });
    expect(collector.trace(chosen)).toEqual([]);
    // Not lost either: the intake request's span links to the caller's trace, so the agent can find this one from it.
    expect(root.links).toEqual([
      { traceId: chosen, spanId: 'b7ad6b7169203331', attributes: { 'verity.link': 'caller' } },
    ]);
  });

  it('records no key a caller put in the query string: a request span keeps no query, as the logs keep none', async () => {
    // Not a credential (401), but the URL still reaches the request's span, which an OTLP collector stores and shows.
    const marker = unique('trace-query');
    const refused = await http(
      stack.apiUrl,
      'GET',
      `/v1/executions?api_key=${encodeURIComponent(DEMO.agent)}&marker=${marker}`,
    );
    expect(refused.status).toBe(401);
    const accepted = await http(stack.apiUrl, 'GET', `/v1/executions?limit=1&token=${DEMO.reviewer}`, {
      key: DEMO.agent,
    });
    expect(accepted.status).toBe(400);
    // As a parameter's name, with no value.
    expect((await http(stack.apiUrl, 'GET', `/v1/executions?${DEMO.admin}`)).status).toBe(401);
    // The three requests' spans, before anything is said about what no span holds.
    const served = await waitFor(
      async () =>
        collector.spans.filter(
          (s) =>
            s.service === 'verity-api' &&
            s.kind === SPAN_KIND_SERVER &&
            s.attributes['url.path'] === '/v1/executions' &&
            [400, 401].includes(Number(s.attributes['http.response.status_code'])),
        ),
      (found) => found.length >= 3,
      30_000,
      200,
    );
    const recorded = JSON.stringify(collector.spans.map((s) => [s.name, s.attributes, s.events]));
    for (const key of [DEMO.agent, DEMO.reviewer, DEMO.admin]) expect(recorded).not.toContain(key);
    expect(served.map((s) => s.attributes['url.query'])).toEqual(['REDACTED', 'REDACTED', 'REDACTED']);
  });

  it("records no webhook URL's path or query in the delivery's span: they may be the receiver's credential", async () => {
    // A chat service's incoming-webhook URL is its credential (a token in the path); others put one in the query.
    const receiver = await startReceiver(() => ({ status: 204 }));
    try {
      await allowLoopbackPort(stack, receiver.port);
      const pathToken = unique('pathtoken');
      const queryToken = unique('querytoken');
      const created = await http(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
        key: DEMO.admin,
        body: { url: `${receiver.base}/services/${pathToken}?token=${queryToken}`, events: ['execution.finished'] },
      });
      expect(created.status).toBe(201);
      await settle(stack, (await submit(stack, [charge(unique('trace-webhook'))])).id);
      await waitFor(
        async () => receiver.seen.length,
        (n) => n >= 1,
      );
      // The delivery's own span (the reconciler's call to the receiver), before anything is said about what none holds.
      const delivered = await waitFor(
        async () =>
          collector.spans.filter(
            (s) =>
              s.service === 'verity-reconciler' &&
              s.kind === SPAN_KIND_CLIENT &&
              s.attributes['server.port'] === receiver.port,
          ),
        (found) => found.length >= 1,
        30_000,
        200,
      );
      expect(delivered[0].attributes['url.full']).toBe(`${receiver.base}/REDACTED`);
      const recorded = JSON.stringify(collector.spans.map((s) => [s.name, s.attributes, s.events]));
      expect(recorded).not.toContain(pathToken);
      expect(recorded).not.toContain(queryToken);
    } finally {
      await receiver.close();
    }
  });

  it('links no caller trace when the request carries none, or a malformed one', async () => {
    const cases: Record<string, string>[] = [{}, { traceparent: '00-zzzz-b7ad6b7169203331-01' }];
    for (const headers of cases) {
      const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([charge(unique('trace-nolink'))]),
        headers,
      });
      expect(created.status).toBe(201);
      const traceId = created.body.trace_id!;
      const root = (
        await waitFor(
          async () => collector.trace(traceId).filter((s) => s.parentSpanId === ''),
          (found) => found.length > 0,
          30_000,
          200,
        )
      )[0];
      expect(root.links).toEqual([]);
    }
  });
});
