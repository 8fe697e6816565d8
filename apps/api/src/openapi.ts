import type { INestApplication } from '@nestjs/common';
import { DocumentBuilder, OpenAPIObject, SwaggerModule } from '@nestjs/swagger';
import { EXECUTION_STATUSES, OPERATION_STATUSES, RetryRule, TERMINAL_REASONS } from '@verity/status-model';
import { z } from 'zod';
import { CriterionSchema, SubmissionSchema } from './executions/submission';
import { ApprovalBody, ResolveBody } from './operations/operations.controller';

const DateTime = z.string();
const Json = z.record(z.string(), z.unknown());
const OperationStatusEnum = z.enum(OPERATION_STATUSES as [string, ...string[]]);

const Operation = z.object({
  id: z.string(),
  execution_id: z.string(),
  key: z.string(),
  connector: z.string(),
  action: z.string(),
  params: Json,
  irreversible: z.boolean(),
  requires_approval: z.boolean(),
  verification_method: z.enum(['read_after_write', '']),
  expected_state: Json.nullable(),
  depends_on: z.array(z.string()),
  status: OperationStatusEnum,
  terminal_reason: z.enum(TERMINAL_REASONS as [string, ...string[]]).nullable(),
  retry: z.enum(Object.values(RetryRule) as [string, ...string[]]),
  attempt: z.number().int(),
  no_change_required: z.boolean(),
  evidence: Json.nullable(),
  observation: z.enum(['converged', 'superseded', 'degraded', 'unavailable']).nullable(),
  approval: Json.nullable(),
  recovery_obligation: Json.nullable(),
  retry_of: z.string().nullable(),
  sent_at: DateTime.nullable(),
  acknowledged_at: DateTime.nullable(),
  created_at: DateTime,
  updated_at: DateTime,
});

const Execution = z.object({
  id: z.string(),
  agent_id: z.string(),
  intent: z.string(),
  status: z.enum(EXECUTION_STATUSES as [string, ...string[]]),
  effects: z.object({
    summary: z.enum(['all_verified', 'partial', 'none', 'unverified', 'unknown']),
    counts: z.record(z.string(), z.number().int()),
  }),
  failure: z
    .object({
      code: z.string(),
      phase: z.string(),
      category: z.enum(['transient', 'caller_error', 'internal']),
      retryable: z.boolean(),
      message: z.string(),
      at: DateTime,
    })
    .nullable(),
  criteria: z.array(CriterionSchema),
  criteria_results: z
    .array(
      CriterionSchema.extend({
        verdict: z.enum(['pass', 'fail', 'not_applicable']),
        evidence_event_ids: z.array(z.string()),
      }),
    )
    .nullable(),
  deadline_at: DateTime,
  created_at: DateTime,
  updated_at: DateTime,
  operations: z.array(Operation),
});

const Event = z.object({
  id: z.string(),
  execution_id: z.string(),
  operation_id: z.string().nullable(),
  seq: z.number().int(),
  type: z.string(),
  from_status: z.string().nullable(),
  to_status: z.string().nullable(),
  data: Json,
  created_at: DateTime,
});

/** Response and request schemas, from zod: the same definitions the tests validate real responses against. */
export const API_SCHEMAS = {
  Submission: SubmissionSchema,
  Operation,
  OperationDetail: Operation.extend({ permitted_resolutions: z.array(OperationStatusEnum) }),
  Execution,
  ExecutionList: z.object({ data: z.array(Execution), next_cursor: z.string().nullable() }),
  Event,
  EventList: z.object({ data: z.array(Event), next_cursor: z.string().nullable() }),
  ApprovalRequest: ApprovalBody,
  ResolveRequest: ResolveBody,
  RetryResult: z.object({ operation: Operation, execution: Execution }),
  Problem: z.object({
    type: z.string(),
    title: z.string(),
    status: z.number().int(),
    detail: z.string().optional(),
    instance: z.string().optional(),
    errors: z.array(z.object({ field: z.string(), rule: z.string(), message: z.string() })).optional(),
  }),
} as const;

export type SchemaName = keyof typeof API_SCHEMAS;

export function schemaRef(name: SchemaName) {
  return { $ref: `#/components/schemas/${name}` };
}

export function buildOpenApi(app: INestApplication): OpenAPIObject {
  const config = new DocumentBuilder()
    .setTitle('Verity API')
    .setDescription(
      'Action runtime for AI agents: execution status (the agent’s work) and operation status (whether each effect ' +
        'happened, VERIFIED only when read back) are reported separately. Errors are application/problem+json.',
    )
    .setVersion('1')
    .addBearerAuth()
    .build();
  const document = SwaggerModule.createDocument(app, config);
  document.components = document.components ?? {};
  document.components.schemas = document.components.schemas ?? {};
  for (const [name, schema] of Object.entries(API_SCHEMAS)) {
    document.components.schemas[name] = z.toJSONSchema(schema, { target: 'openapi-3.0', io: 'output' }) as never;
  }
  return document;
}
