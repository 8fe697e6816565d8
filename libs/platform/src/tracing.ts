import { ROOT_CONTEXT, TraceFlags, context, propagation, trace } from '@opentelemetry/api';
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import type { NodeSDK } from '@opentelemetry/sdk-node';
import { tracingOn, tracingVariables } from './config';

/**
 * Traces (OpenTelemetry), one per execution. This module imports nothing but `@opentelemetry/api` and the config
 * schema, so an app can import it first (`@verity/platform/tracing`) and start the SDK before Nest, pg and ioredis
 * are required: the instrumentations patch a module when it is first required, never after.
 */
export interface Tracing {
  /** Ends the batch: spans still buffered are exported (called on SIGTERM, after the app has closed). */
  shutdown(): Promise<void>;
}

/**
 * Starts the OpenTelemetry SDK when the standard variables ask for it (`tracingOn`), else does nothing and loads
 * nothing. Exporter, protocol, headers, sampler and batching come from `OTEL_*` as the SDK reads them; service.name
 * is OTEL_SERVICE_NAME, else `defaultServiceName`. Traces only: Verity's metrics are Prometheus (/metrics), its
 * logs pino on stdout.
 */
export function startTracing(defaultServiceName: string, env: NodeJS.ProcessEnv = process.env): Tracing | null {
  const variables = tracingVariables(env);
  if (!tracingOn(variables)) return null;
  // Required here, not imported at the top: with tracing off none of this is loaded.
  /* eslint-disable @typescript-eslint/no-require-imports */
  const sdkNode = require('@opentelemetry/sdk-node') as typeof import('@opentelemetry/sdk-node');
  const http = require('@opentelemetry/instrumentation-http') as typeof import('@opentelemetry/instrumentation-http');
  const pg = require('@opentelemetry/instrumentation-pg') as typeof import('@opentelemetry/instrumentation-pg');
  const ioredis =
    require('@opentelemetry/instrumentation-ioredis') as typeof import('@opentelemetry/instrumentation-ioredis');
  /* eslint-enable @typescript-eslint/no-require-imports */
  const sdk: NodeSDK = new sdkNode.NodeSDK({
    serviceName: variables.OTEL_SERVICE_NAME ? undefined : defaultServiceName,
    metricReaders: [],
    logRecordProcessors: [],
    instrumentations: [
      new http.HttpInstrumentation({
        // Called before the request's context is read from its headers: the one place to drop a caller's context.
        ignoreIncomingRequestHook: (request) => {
          forgetCallerContext(request);
          // Probes and scrapes are not executions: they would only bury the traces that are.
          return /^\/(health|metrics)(\/|\?|$)/.test(request.url ?? '');
        },
        // Applied after the instrumentation's own attributes, so it replaces the query it recorded.
        startIncomingSpanHook: (request) => {
          const query = redactedQuery(request.url);
          return query === undefined ? {} : { 'url.query': query };
        },
        // Likewise for the calls Verity makes (applied after url.full is recorded, so it replaces it): their URLs are
        // the tenants' — a webhook receiver's, an http operation's target — whose path or query may be a credential.
        startOutgoingSpanHook: (options) => ({ 'url.full': outgoingUrlRecorded(options) }),
      }),
      // Statements and commands are recorded inside a trace only: a worker's idle polling is not one.
      new pg.PgInstrumentation({ requireParentSpan: true }),
      new ioredis.IORedisInstrumentation({ requireParentSpan: true }),
    ],
  });
  sdk.start();
  return { shutdown: () => sdk.shutdown() };
}

/**
 * A request's query string as its span records it: only that there was one. No query parameter of the API carries a
 * credential, but a caller may put one there anyway (`?api_key=…`, refused with 401; or as a parameter's name), and the
 * span goes to the operator's trace store, where every reader of traces would find it. The logs keep no query either.
 */
export function redactedQuery(url: string | undefined): string | undefined {
  const at = url?.indexOf('?') ?? -1;
  return url === undefined || at < 0 || at === url.length - 1 ? undefined : 'REDACTED';
}

/**
 * The URL an outgoing call's span records: its origin only, the path and query replaced by REDACTED. A chat service's
 * incoming-webhook URL is its credential (a token in the path), and any target may take a token in the query; the
 * span goes to the operator's trace store, where every reader of traces would find it. The span still says where the
 * call went (`server.address`, `server.port`).
 */
export function outgoingUrlRecorded(options: {
  protocol?: string | null;
  hostname?: string | null;
  host?: string | null;
  port?: number | string | null;
}): string {
  const host = options.hostname ?? options.host ?? 'localhost';
  const literal = isIP(host) === 6 ? `[${host}]` : host;
  const port = options.port === undefined || options.port === null || options.port === '' ? '' : `:${options.port}`;
  return `${options.protocol ?? 'http:'}//${literal}${port}/REDACTED`;
}

/** The headers through which a caller could put a request into a trace of its choosing, or hand it baggage. */
const CALLER_CONTEXT_HEADERS = ['traceparent', 'tracestate', 'baggage'] as const;

/**
 * Every request Verity serves roots a trace of its own; a caller's trace context is not continued. Callers are
 * tenants: continuing theirs would let one choose its execution's `trace_id` (another tenant's, to mix its spans into
 * that trace), mark the whole execution "not sampled" and so hide it from the operator's traces (the stored
 * traceparent carries the flag to every later job), or force sampling, and would carry its `baggage` on to the
 * providers Verity calls.
 */
export function forgetCallerContext(request: IncomingMessage): void {
  const traceparent = request.headers.traceparent;
  if (typeof traceparent === 'string' && TRACEPARENT.test(traceparent)) {
    (request as CallerTraced)[CALLER_TRACEPARENT] = traceparent;
  }
  for (const name of CALLER_CONTEXT_HEADERS) delete request.headers[name];
}

const TRACEPARENT = /^00-(?!0{32})([0-9a-f]{32})-(?!0{16})([0-9a-f]{16})-[0-9a-f]{2}$/;
const CALLER_TRACEPARENT = Symbol('verity.callerTraceparent');
type CallerTraced = IncomingMessage & { [CALLER_TRACEPARENT]?: string };

/**
 * The caller's own trace is not continued, but it is not lost either: the request's span links to it (a link, unlike a
 * parent, cannot choose the trace, its sampling or its baggage), so an agent can still find Verity's trace from its own.
 * Called by the API for every request, inside the request's span; nothing happens with traces off or no traceparent.
 */
export function linkCallerTrace(request: IncomingMessage): void {
  const traceparent = (request as CallerTraced)[CALLER_TRACEPARENT];
  const span = trace.getActiveSpan();
  if (!traceparent || !span) return;
  const [, traceId, spanId] = TRACEPARENT.exec(traceparent) ?? [];
  span.addLink({
    context: { traceId, spanId, traceFlags: TraceFlags.NONE, isRemote: true },
    attributes: { 'verity.link': 'caller' },
  });
}

/** The W3C `traceparent` of the active span, or null (tracing off, or no span). Stored with each execution. */
export function currentTraceparent(): string | null {
  const carrier: { traceparent?: string } = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent ?? null;
}

/** The trace id in a W3C `traceparent` (`00-<trace id>-<span id>-<flags>`), or null. */
export function traceIdOf(traceparent: string | null | undefined): string | null {
  const match = /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(traceparent ?? '');
  return match ? match[1] : null;
}

/**
 * Runs `fn` in the trace a stored `traceparent` names (work the sweeper re-enqueues for an execution joins the
 * execution's trace, not the sweep's); as is when there is none or tracing is off.
 */
export function inTraceOf<T>(traceparent: string | null | undefined, fn: () => T): T {
  if (!traceparent) return fn();
  return context.with(propagation.extract(ROOT_CONTEXT, { traceparent }), fn);
}

/** `trace_id` and `span_id` of the active span, for every log line written inside one (a pino mixin). */
export function traceFields(): { trace_id?: string; span_id?: string } {
  const span = trace.getActiveSpan();
  if (!span) return {};
  const { traceId, spanId } = span.spanContext();
  return { trace_id: traceId, span_id: spanId };
}
