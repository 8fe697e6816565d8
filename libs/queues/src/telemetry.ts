import { TracingVariables, tracingOn } from '@verity/platform';
import type { Telemetry } from 'bullmq';
import { BullMQOtel } from 'bullmq-otel';

/**
 * BullMQ's OpenTelemetry integration, when traces are on: a queue records an `add` span and stores the trace context
 * in the job (its options, beside the data), and a worker runs the job inside a `process` span continuing that trace —
 * so everything a job does (the connector's HTTP call, its statements, the jobs it enqueues) joins the execution's
 * trace. Undefined when traces are off: BullMQ then does no tracing work at all.
 */
export function queueTelemetry(variables: TracingVariables): Telemetry | undefined {
  return tracingOn(variables) ? new BullMQOtel({ tracerName: 'verity' }) : undefined;
}
