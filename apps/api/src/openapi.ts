import { applyDecorators, type INestApplication } from '@nestjs/common';
import { ApiResponse, DocumentBuilder, OpenAPIObject, SwaggerModule } from '@nestjs/swagger';
import { z } from 'zod';
import { API_SCHEMAS, SchemaName } from './schemas';

export { API_SCHEMAS } from './schemas';
export type { SchemaName } from './schemas';

export function schemaRef(name: SchemaName) {
  return { $ref: `#/components/schemas/${name}` };
}

const PROBLEM_DESCRIPTIONS: Record<number, string> = {
  400: 'Invalid input: `errors[]` names each field and the rule it breaks; nothing was written',
  401: 'No API key, or an unknown or revoked one',
  403: 'The key’s role may not do this (an operator key reads no tenant’s data)',
  408: 'The request body did not arrive in time (BODY_TIMEOUT_MS, 30 s by default)',
  404: 'No such resource visible to this key (other tenants’ resources are never visible)',
  409: 'Conflict with the current state; the problem names the rule',
  413: 'The body is larger than 256 KiB',
  415: 'The body is not JSON',
  422: 'Idempotency-Key reused with a different body',
  429: 'Rate limit (or open-stream limit) reached; see Retry-After',
  503: 'Postgres is unreachable; nothing was written; see Retry-After',
};

/** Documents the problem+json answers an endpoint can give (401, 429 and 503 apply to every authenticated one). */
export function ApiProblems(...statuses: number[]) {
  return applyDecorators(
    ...statuses.map((status) =>
      ApiResponse({
        status,
        description: PROBLEM_DESCRIPTIONS[status] ?? 'Problem',
        content: { 'application/problem+json': { schema: schemaRef('Problem') } },
      }),
    ),
  );
}

function problem(status: number) {
  return {
    description: PROBLEM_DESCRIPTIONS[status],
    content: { 'application/problem+json': { schema: schemaRef('Problem') } },
  };
}

/** Paths served outside Nest's controllers (express routers), documented here so /docs lists every endpoint. */
function extraPaths(): OpenAPIObject['paths'] {
  const html = { 'text/html': { schema: { type: 'string' as const } } };
  return {
    '/metrics': {
      get: {
        tags: ['operability'],
        summary:
          'Prometheus metrics (status counts from Postgres, request latency): operator key or METRICS_TOKEN as ' +
          'bearer token, unless METRICS_PUBLIC=true',
        security: [{ bearer: [] }],
        responses: {
          '200': { description: 'Prometheus text format', content: { 'text/plain': { schema: { type: 'string' } } } },
          '401': problem(401),
          '403': problem(403),
        },
      },
    },
    '/admin/queues': {
      get: {
        tags: ['operability'],
        summary:
          'Bull Board (operator role only; Bearer, or Basic with the key as password); read-only unless ' +
          'BULL_BOARD_WRITABLE=true',
        security: [{ bearer: [] }],
        responses: {
          '200': { description: 'The Bull Board UI', content: html },
          '401': problem(401),
          '403': problem(403),
        },
      },
    },
    '/console': {
      get: {
        tags: ['operability'],
        summary: 'Review console: pending approvals and manual reviews (reviewer key entered in the page)',
        responses: { '200': { description: 'The console page', content: html } },
      },
    },
    '/docs': {
      get: {
        tags: ['operability'],
        summary: 'This document as Swagger UI (JSON at /docs-json)',
        responses: { '200': { description: 'Swagger UI', content: html } },
      },
    },
  };
}

export function buildOpenApi(app: INestApplication): OpenAPIObject {
  const config = new DocumentBuilder()
    .setTitle('Verity API')
    .setDescription(
      'Action runtime for AI agents: execution status (the agent’s work) and operation status (whether each effect ' +
        'happened, VERIFIED only when read back) are reported separately. Authenticate with ' +
        '`Authorization: Bearer <api key>`. Errors are application/problem+json (RFC 9457). See docs/api.md.',
    )
    .setVersion('1')
    .addBearerAuth(undefined, 'bearer')
    .build();
  const document = SwaggerModule.createDocument(app, config);
  document.components = document.components ?? {};
  document.components.schemas = document.components.schemas ?? {};
  for (const [name, schema] of Object.entries(API_SCHEMAS)) {
    document.components.schemas[name] = z.toJSONSchema(schema, { target: 'openapi-3.0', io: 'output' }) as never;
  }
  document.paths = { ...document.paths, ...extraPaths() };
  return document;
}
