import { applyDecorators, type INestApplication } from '@nestjs/common';
import {
  ApiBody,
  ApiOperation,
  ApiParam,
  ApiQuery,
  type ApiParamOptions,
  ApiResponse,
  DocumentBuilder,
  OpenAPIObject,
  SwaggerModule,
} from '@nestjs/swagger';
import type {
  OperationObject,
  ResponseObject,
  SchemaObject,
} from '@nestjs/swagger/dist/interfaces/open-api-spec.interface';
import { z } from 'zod';
import { PAGE_SIZE } from './http/parse';
import { PROBLEMS, ProblemCode, problemBody } from './openapi-examples';
import { VERSION_ETAG, preconditionFailed, unmatchableIfMatch } from './http/if-match';
import { MCP_PATH } from './mcp/json-rpc-error';
import { Problem, problemType } from './problem/problem';
import { API_SCHEMAS, SchemaName } from './schemas';

export { API_SCHEMAS } from './schemas';
export type { SchemaName } from './schemas';
export type { ProblemCode } from './openapi-examples';

export function schemaRef(name: SchemaName) {
  return { $ref: `#/components/schemas/${name}` };
}

/** A request or response body with one named example (Swagger UI pre-fills "Try it out" with it). */
export function jsonExample(summary: string, value: unknown) {
  return { examples: { [summary.toLowerCase().replace(/[^a-z0-9]+/g, '_')]: { summary, value } } };
}

/**
 * A zod schema written out in the document where it is used (bodies that are no component of API_SCHEMAS). The named
 * schemas it uses (`.meta({ id: 'WebhookEndpoint' })`) come out as its `definitions`, which buildOpenApi makes
 * components (hoistDefinitions).
 */
export function inlineSchema(schema: z.ZodType) {
  return z.toJSONSchema(schema, { target: 'openapi-3.0', io: 'input', unrepresentable: 'any' }) as never;
}

/** A body's schema: a component's name (written as a $ref) or a zod schema (written inline). */
type BodySchema = SchemaName | z.ZodType;

function bodySchema(schema: BodySchema) {
  return typeof schema === 'string' ? schemaRef(schema) : inlineSchema(schema);
}

/** One named example of a body. */
interface Example {
  summary: string;
  value: unknown;
}

/** What the document says about one route (the layers in front add their answers: see addCrossCuttingAnswers). */
export interface EndpointDoc {
  /** The operationId: the SDK's method name. */
  id: string;
  summary: string;
  description?: string;
  /** Path parameters, in the order of the path. */
  params?: ApiParamOptions[];
  body?: { schema: BodySchema; example?: Example; required?: boolean };
  /** The success answer; 200 unless `status` says otherwise. */
  response?: {
    status?: number;
    description?: string;
    schema?: BodySchema;
    example?: Example;
    headers?: ResponseObject['headers'];
    content?: ResponseObject['content'];
  };
  /** As for ApiProblems. */
  problems?: (number | ProblemCode)[];
}

/** Drops the keys left undefined, so that a field not given is absent, as with a decorator not written. */
function defined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

/** A route's operation, path parameters, body, success answer and problems, in one decorator. */
export function ApiEndpoint(doc: EndpointDoc) {
  const { body, response } = doc;
  const decorators = [
    ApiOperation(defined({ operationId: doc.id, summary: doc.summary, description: doc.description })),
    ...(doc.params ?? []).map((param) => ApiParam(param)),
    ...(body
      ? [
          ApiBody(
            defined({
              schema: bodySchema(body.schema),
              required: body.required,
              ...(body.example ? jsonExample(body.example.summary, body.example.value) : {}),
            }),
          ),
        ]
      : []),
    ...(response
      ? [
          ApiResponse(
            defined({
              status: response.status ?? 200,
              description: response.description,
              schema: response.schema === undefined ? undefined : bodySchema(response.schema),
              ...(response.example ? jsonExample(response.example.summary, response.example.value) : {}),
              headers: response.headers as never,
              content: response.content as never,
            }),
          ),
        ]
      : []),
    ...(doc.problems ? [ApiProblems(...doc.problems)] : []),
  ];
  // Applied last first, as a stack of decorators written in this order would be: the document lists parameters in
  // the order they were applied.
  return applyDecorators(...decorators.reverse());
}

/**
 * The query parameters of a cursor-paged list (cursorPageQuery's), `cursor` and `limit`. Applied limit first, as the
 * two decorators written cursor above limit would be.
 */
export function ApiPageQuery() {
  return applyDecorators(
    ApiQuery({
      name: 'limit',
      required: false,
      schema: { type: 'integer', minimum: 1, maximum: PAGE_SIZE.max, default: PAGE_SIZE.default },
    }),
    ApiQuery({ name: 'cursor', required: false, type: String, description: '`next_cursor` of the previous page' }),
  );
}

const PROBLEM_DESCRIPTIONS: Record<number, string> = {
  400: 'Invalid input (a query parameter, the body or a header): `errors[]` names each field and the rule it breaks; nothing was written',
  401: 'No API key, or an unknown or revoked one',
  403: 'The key’s role may not do this (an operator key reads no tenant’s data)',
  404: 'No such resource visible to this key (other tenants’ resources are never visible)',
  408: 'The request body did not arrive in time (BODY_TIMEOUT_MS, 30 s by default)',
  409: 'Conflict with the current state; the problem names the rule',
  412: 'The resource changed since the version If-Match names; nothing was written',
  413: 'The body is larger than 256 KiB',
  415: 'The body is not JSON',
  422: 'Idempotency-Key reused with a different body',
  429: 'Rate limit (or open-stream limit) reached; see Retry-After',
  503: 'Postgres is unreachable (nothing was written), or this process cannot open the tenant’s secrets; see Retry-After',
};

/** The problems each status stands for when a route names only the status. */
const PROBLEMS_BY_STATUS: Record<number, ProblemCode[]> = {
  400: ['validation-error'],
  401: ['unauthorized'],
  403: ['forbidden', 'operator-not-tenant'],
  404: ['not-found'],
  408: ['request-timeout'],
  409: [],
  412: ['precondition-failed'],
  413: ['payload-too-large'],
  415: ['unsupported-media-type'],
  422: ['idempotency-key-reused'],
  429: ['rate-limited', 'too-many-failed-authentications'],
  503: ['database-unavailable'],
};

// Required: every 401 names its scheme (RFC 9110), every 429 and 503 problem says when to come back.
const RETRY_AFTER = {
  description: 'seconds to wait before trying again',
  required: true,
  schema: { type: 'integer' as const },
};
const RESPONSE_HEADERS: Record<number, ResponseObject['headers']> = {
  401: {
    'WWW-Authenticate': {
      description: '`Bearer` (or `Basic` on Bull Board)',
      required: true,
      schema: { type: 'string' },
    },
  },
  429: { 'Retry-After': RETRY_AFTER },
  503: { 'Retry-After': RETRY_AFTER },
};

/** Headers only some problems of a status carry (a 409 "retry shortly" says when). */
const PROBLEM_HEADERS: Partial<Record<ProblemCode, ResponseObject['headers']>> = {
  'resolution-not-permitted': {
    'Retry-After': {
      ...RETRY_AFTER,
      required: false,
      description:
        'with resolution-not-permitted for a FAILED that only waits until no call of the operation can still land ' +
        '(`absence_evident_at`): ' +
        RETRY_AFTER.description,
    },
  },
  'idempotency-key-in-flight': {
    'Retry-After': {
      ...RETRY_AFTER,
      required: false,
      description: 'with idempotency-key-in-flight: ' + RETRY_AFTER.description,
    },
  },
  'delivery-pending': {
    'Retry-After': {
      ...RETRY_AFTER,
      required: false,
      description:
        'with delivery-pending: the longest an attempt in flight takes (WEBHOOK_TIMEOUT_MS and a second); by then the ' +
        'round has settled or its next attempt shows in the delivery log. ' +
        RETRY_AFTER.description,
    },
  },
};

function problemResponse(status: number, codes: ProblemCode[], path: string): ResponseObject {
  const examples = Object.fromEntries(
    codes.map((code) => [code, { summary: PROBLEMS[code].summary, value: problemBody(code, path) }]),
  );
  const headers = Object.assign({}, RESPONSE_HEADERS[status], ...codes.map((code) => PROBLEM_HEADERS[code] ?? {}));
  return {
    description: PROBLEM_DESCRIPTIONS[status] ?? 'Problem',
    ...(Object.keys(headers).length ? { headers } : {}),
    content: { 'application/problem+json': { schema: schemaRef('Problem'), ...(codes.length ? { examples } : {}) } },
  };
}

/**
 * The problems an endpoint answers beyond the ones every endpoint of its kind answers (buildOpenApi adds those: 400
 * for a query value no route accepts, 401/403/429/503 wherever a key is checked, 404 wherever the path has an id,
 * 408/413/415 wherever a body is read). Name a problem (`'retry-not-allowed'`) to show its example, or a status for
 * its usual problems.
 */
export function ApiProblems(...answers: (number | ProblemCode)[]) {
  const byStatus = new Map<number, ProblemCode[]>();
  for (const answer of answers) {
    const status = typeof answer === 'number' ? answer : PROBLEMS[answer].status;
    const codes = typeof answer === 'number' ? (PROBLEMS_BY_STATUS[answer] ?? []) : [answer];
    byStatus.set(status, [...(byStatus.get(status) ?? []), ...codes]);
  }
  return applyDecorators(
    ...[...byStatus].map(([status, codes]) => {
      const { description, headers, content } = problemResponse(status, [...new Set(codes)], '');
      return ApiResponse({ status, description, headers: headers as never, content: content as never });
    }),
  );
}

const HTML = { 'text/html': { schema: { type: 'string' as const } } };

/** Paths served outside Nest's controllers (express routers), documented here so /docs lists every endpoint. */
function extraPaths(): OpenAPIObject['paths'] {
  return {
    '/metrics': {
      get: {
        tags: ['operability'],
        operationId: 'getMetrics',
        summary: 'Prometheus metrics',
        description:
          'Status counts from Postgres and request latency. Send an operator key or METRICS_TOKEN as the bearer ' +
          'token (Prometheus’ `bearer_token`); with METRICS_PUBLIC=true no key is needed.',
        security: [{ bearer: [] }],
        responses: {
          '200': {
            description: 'Prometheus text format',
            content: {
              'text/plain': {
                schema: { type: 'string' },
                example: 'verity_executions_in_flight{status="running"} 1\n',
              },
            },
          },
        },
      },
    },
    '/admin/queues': {
      get: {
        tags: ['operability'],
        operationId: 'getBullBoard',
        summary: 'Bull Board (operator role only)',
        description:
          'The queues’ dashboard. Bearer, or HTTP Basic with the operator key as the password (so a browser can ' +
          'open it). Read-only unless BULL_BOARD_WRITABLE=true.',
        security: [{ bearer: [] }, { basic: [] }],
        responses: { '200': { description: 'The Bull Board UI', content: HTML } },
      },
    },
    '/console': {
      get: {
        tags: ['operability'],
        operationId: 'getConsole',
        summary: 'Review console: pending approvals and manual reviews',
        description: 'The page needs no key; the reviewer key is entered in the page and sent as a Bearer header.',
        security: [],
        responses: { '200': { description: 'The console page', content: HTML } },
      },
    },
    '/docs': {
      get: {
        tags: ['operability'],
        operationId: 'getApiDocs',
        summary: 'This document as Swagger UI (JSON at /docs-json)',
        security: [],
        responses: { '200': { description: 'Swagger UI', content: HTML } },
      },
    },
  };
}

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'options'] as const;

/** The path of the examples: the README's execution, its charge, the http connector. */
function examplePath(path: string): string {
  const id = path.startsWith('/v1/operations') ? 'op_01m8pvhh2eyfvxnkaq1cqt2qvy' : 'exe_01m8pvhh2er6qkdabxc471q72t';
  return path.replace('{id}', id).replace('{connector}', 'http').replace('{name}', 'API_TOKEN');
}

/** Every problem example of an operation names its own path, and a 404 the kind of thing the path names. */
function setInstances(operation: OperationObject, path: string): void {
  const instance = examplePath(path);
  const what = path.startsWith('/v1/operations')
    ? ['Operation', 'op_01m8pvhh2eyfvxnkaq1cqt2qvy']
    : path.startsWith('/v1/admin/connector-settings')
      ? path.endsWith('{name}')
        ? ['Secret', 'API_TOKEN']
        : ['Connector', 'http']
      : ['Execution', 'exe_01m8pvhh2er6qkdabxc471q72t'];
  for (const [status, response] of Object.entries(operation.responses) as [string, ResponseObject][]) {
    const examples = response.content?.['application/problem+json']?.examples ?? {};
    for (const example of Object.values(examples) as { value: Record<string, unknown> }[]) {
      example.value.instance = instance;
      if (status === '404') {
        example.value.title = `${what[0]} not found`;
        example.value.detail = `no ${what[0].toLowerCase()} ${what[1]} is visible to this key`;
      }
    }
  }
}

/**
 * Adds a problem response, or the examples of these problems to the response the route already declares. `bodyCheck`:
 * the answer of a check of the request's body, which a route answering in its own format gets in that format (/mcp's
 * JSON-RPC errors, see mcp/json-rpc-error.ts), so no problem+json is added beside it.
 */
function addProblems(
  operation: OperationObject,
  status: number,
  codes: ProblemCode[],
  path: string,
  bodyCheck = false,
): void {
  const key = String(status);
  const existing = operation.responses[key] as ResponseObject | undefined;
  const media = existing?.content?.['application/problem+json'];
  const fresh = problemResponse(status, codes, path);
  if (!existing) {
    operation.responses[key] = fresh;
    return;
  }
  if (!media) {
    if (bodyCheck) return;
    // The route answers this status in its own format too (/mcp's JSON-RPC errors): the layers in front may still
    // answer problem+json (the URL check's 400).
    existing.content = { ...existing.content, ...fresh.content };
    existing.headers ??= fresh.headers;
    return;
  }
  // Examples declared by the route keep their order; the cross-cutting ones follow.
  const examples = { ...(media.examples ?? {}), ...(fresh.content?.['application/problem+json']?.examples ?? {}) };
  existing.content = { 'application/problem+json': { schema: schemaRef('Problem'), examples } };
  existing.headers ??= fresh.headers;
}

/**
 * What every route of a kind can answer, from the layers in front of the controllers (main.ts): the URL check (400
 * for a query value with a control character), the body parser and its limits (408, 413, 415, 400) on every method
 * that reads a body, the key check (401, 403 for an operator key on tenant data, 429, 503 when Postgres cannot look
 * the key up) wherever a key is required, and 404 wherever the path names something. Public routes get
 * `security: []`. Keeping this here, not on each controller, is what makes it hold for routes added later.
 */
function addCrossCuttingAnswers(document: OpenAPIObject): void {
  for (const [path, item] of Object.entries(document.paths)) {
    const instance = examplePath(path);
    for (const method of METHODS) {
      const operation = item[method];
      if (!operation) continue;
      // A class-level decorator (Roles' 403) gives every route of its controller the same response objects: each
      // route gets its own copy before its path is written into the examples.
      operation.responses = structuredClone(operation.responses);
      if (!operation.security || operation.security.length === 0) operation.security = [];
      const authenticated = operation.security.length > 0;
      addProblems(operation, 400, ['validation-error'], instance);
      if (path.includes('{')) addProblems(operation, 404, ['not-found'], instance);
      // A preflight carries no body (/mcp's, the only OPTIONS route).
      if (method !== 'get' && method !== 'options') {
        addProblems(operation, 408, ['request-timeout'], instance, true);
        addProblems(operation, 413, ['payload-too-large'], instance, true);
        addProblems(operation, 415, ['unsupported-media-type'], instance, true);
        if (path.startsWith('/v1/') || (path === MCP_PATH && method === 'post')) {
          documentUnmatchableIfMatch(operation, method, instance);
        }
      }
      if (authenticated) {
        addProblems(operation, 401, ['unauthorized'], instance);
        addProblems(operation, 403, ['operator-not-tenant'], instance);
        addProblems(operation, 429, ['rate-limited', 'too-many-failed-authentications'], instance);
        addProblems(operation, 503, ['database-unavailable', 'secrets-unreadable'], instance);
        if (method !== 'get') documentSecretsUnreadableAfterWrite(operation);
        if (method !== 'get' && path.startsWith('/v1/')) documentUncertainWrite(operation);
      }
      setInstances(operation, path);
      operation.responses = Object.fromEntries(
        Object.entries(operation.responses).sort(([a], [b]) => a.localeCompare(b)),
      ) as OperationObject['responses'];
    }
  }
}

/**
 * A write of a resource with no ETag (every /v1 write but the admin settings, which take If-Match) refuses any If-Match
 * but `*`: 412 (RefuseUnmatchableIfMatch), shown with the guard's own answer. An approval's 412 for a request that
 * does not wait keeps its own example, with its own words.
 */
function documentUnmatchableIfMatch(operation: OperationObject, method: string, instance: string): void {
  const takesIfMatch = (operation.parameters ?? []).some((p) => 'name' in p && p.name === 'If-Match');
  const existing = operation.responses['412'] as ResponseObject | undefined;
  const media = existing?.content?.['application/problem+json'];
  if (takesIfMatch) {
    if (existing && media && instance.startsWith('/v1/operations/')) documentStaleOperation(existing, media, instance);
    return;
  }
  const refused = unmatchableIfMatch(method.toUpperCase(), instance);
  const example = {
    summary: 'An If-Match on a resource that has no ETag: it can never match',
    value: { type: problemType(refused.code), title: refused.title, status: refused.status, detail: refused.detail },
  };
  if (existing && media) {
    media.examples = { ...media.examples, 'if-match-without-etag': example };
    return;
  }
  operation.responses['412'] = {
    description: 'An If-Match was sent, but this resource has no ETag: it can never match; nothing was written',
    content: {
      'application/problem+json': { schema: schemaRef('Problem'), examples: { 'if-match-without-etag': example } },
    },
  };
}

/**
 * A decision on an operation sent with the ETag of a version that is no longer current (a second hold, an approval
 * asked for again): 412 naming the current one, shown with the API's own words; an approval decision's 412 for a
 * request (`requested_at`) that does not wait is shown beside it.
 */
function documentStaleOperation(
  response: ResponseObject,
  media: NonNullable<ResponseObject['content']>[string],
  instance: string,
): void {
  const stale = preconditionFailed('the operation', '0c2a6b5e9d1f4a3b8c7d6e5f4a3b2c1d');
  media.examples = {
    'precondition-failed': {
      summary: 'The operation changed since the version If-Match names (another hold, a new approval request)',
      value: {
        type: problemType(stale.code),
        title: stale.title,
        status: stale.status,
        detail: stale.detail,
        instance,
        ...stale.extras,
      },
    },
  };
  response.description =
    'The operation is no longer at the version If-Match names (the ETag of the GET the decision was made on); ' +
    'nothing was written. The answer names the current version (`current_etag`, and its ETag)';
  response.headers = {
    ETag: {
      ...VERSION_ETAG.ETag,
      required: false,
      description: 'with a stale If-Match: the operation’s current version',
    },
  };
  if (!instance.endsWith('/approval')) return;
  media.examples['request-not-waiting'] = {
    summary: 'The decision names an approval request that does not wait',
    value: {
      type: problemType('precondition-failed'),
      title: stale.title,
      status: 412,
      detail:
        'the decision answers the approval request of 2026-11-30T10:00:00.000Z, which is not the one waiting ' +
        '(requested at 2026-11-30T10:05:00.000Z); nothing was written: read the operation again and decide on ' +
        'what it shows now',
      instance,
      requested_at: '2026-11-30T10:05:00.000Z',
      current_status: 'PREPARED',
    },
  };
  response.description =
    'The operation is no longer at the version If-Match names, or the decision names an approval request ' +
    '(requested_at) that does not wait; nothing was written';
}

/**
 * A write's 503 is not always "nothing was written": a statement sent that got no answer in time may still be carried
 * out by the database (Problem.unavailable(true)). A client that took every 503 for "nothing was written" would send a
 * submission again without its Idempotency-Key, or repeat a decision, after one that was recorded.
 */
/** A write's `secrets-unreadable` comes after its handler ran: its example says the change may have been made. */
function documentSecretsUnreadableAfterWrite(operation: OperationObject): void {
  const example = (operation.responses['503'] as ResponseObject).content?.['application/problem+json']?.examples?.[
    'secrets-unreadable'
  ] as { value?: { detail?: string } } | undefined;
  if (example?.value) example.value = { ...example.value, detail: Problem.secretsUnreadable(true).detail };
}

function documentUncertainWrite(operation: OperationObject): void {
  const response = operation.responses['503'] as ResponseObject;
  const uncertain = Problem.unavailable(true);
  response.description =
    'Postgres is unreachable (nothing was written), or a statement of this write got no answer in time: then it ' +
    'may still have been recorded (the detail says which) — repeat it with the same Idempotency-Key, or read the ' +
    'current state, before sending it again; see Retry-After';
  const media = response.content?.['application/problem+json'];
  if (!media) return;
  media.examples = {
    ...media.examples,
    'database-unavailable-outcome-unknown': {
      summary: 'A statement of the write got no answer in time: it may still have been recorded',
      value: {
        type: problemType(uncertain.code),
        title: uncertain.title,
        status: uncertain.status,
        detail: uncertain.detail,
        instance: '',
      },
    },
  };
}

/**
 * The component schemas, generated from API_SCHEMAS in one pass so that a schema used inside another (an Operation in
 * an Execution, an Event in an EventList) is a $ref to its component.
 */
export function componentSchemas(): Record<string, SchemaObject> {
  const registry = z.registry<{ id: string }>();
  for (const [name, schema] of Object.entries(API_SCHEMAS)) registry.add(schema, { id: name });
  const { schemas } = z.toJSONSchema(registry, {
    target: 'openapi-3.0',
    io: 'output',
    uri: (id) => `#/components/schemas/${id}`,
  });
  return Object.fromEntries(
    Object.entries(schemas).map(([name, schema]) => {
      const { $id: _id, ...rest } = schema;
      return [name, bareRefs(nullableRefs(nullableEnums(rest))) as SchemaObject];
    }),
  );
}

/**
 * What a nullable use of a component also accepts: null and nothing else. OpenAPI 3.0 has no null type; `nullable`
 * adds null to the values of the type beside it, and the enum then keeps only null.
 */
const NULL_ONLY = { type: 'string', nullable: true, enum: [null] } as const;

/**
 * zod writes a nullable use of a component (`failure: Failure.nullable()`) as `nullable: true` beside
 * `allOf: [{ $ref }]`. In OpenAPI 3.0 that does not accept null: `nullable` only acts beside a `type`, and each
 * schema of an allOf must accept the value by itself (ajv refuses to compile it). Written instead as the component or
 * null: `anyOf: [{ $ref }, NULL_ONLY]`, which generates `components['schemas']['Failure'] | null`.
 */
function nullableRefs(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(nullableRefs);
  if (node === null || typeof node !== 'object') return node;
  const { nullable, allOf, ...rest } = node as { nullable?: unknown; allOf?: unknown[] };
  if (nullable === true && allOf?.length === 1 && Object.keys(allOf[0] as object).join() === '$ref') {
    return { ...(nullableRefs(rest) as object), anyOf: [allOf[0], NULL_ONLY] };
  }
  return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, nullableRefs(v)]));
}

/**
 * OpenAPI 3.0 reads `enum` before `nullable`: a nullable enum must list null itself, or validators (Redocly,
 * Prism) reject the `null` the API sends (`terminal_reason: null`).
 */
function nullableEnums(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(nullableEnums);
  if (node === null || typeof node !== 'object') return node;
  const out = Object.fromEntries(Object.entries(node).map(([k, v]) => [k, nullableEnums(v)])) as Record<
    string,
    unknown
  >;
  if (out.nullable === true && Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
  return out;
}

/**
 * zod writes an optional use of a component as `allOf: [{ $ref }]`;
 * alone, that is the $ref itself, and the form linters ask for (Redocly: allOf with one schema is illogical).
 */
function bareRefs(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(bareRefs);
  if (node === null || typeof node !== 'object') return node;
  const { allOf } = node as { allOf?: unknown[] };
  if (Object.keys(node).length === 1 && allOf?.length === 1) return bareRefs(allOf[0]);
  return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, bareRefs(v)]));
}

const DEFINITIONS = '#/definitions/';

/**
 * A schema written inline may carry named schemas of its own under `definitions`, referred to as `#/definitions/Name`
 * (what zod writes for the schemas a body uses that have an id, see inlineSchema; a hand-written JSON schema may do the
 * same): each becomes the component of that name, and the references point there, so that a schema several bodies
 * use is written once. A name given twice must be the same schema, and none may be a component of API_SCHEMAS.
 */
function hoistDefinitions(document: OpenAPIObject): void {
  const schemas = document.components!.schemas!;
  const hoisted = new Set<string>();
  const refs = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(refs);
    if (node === null || typeof node !== 'object') return node;
    return Object.fromEntries(
      Object.entries(node).map(([k, v]) => [
        k,
        k === '$ref' && typeof v === 'string' && v.startsWith(DEFINITIONS)
          ? `#/components/schemas/${v.slice(DEFINITIONS.length)}`
          : refs(v),
      ]),
    );
  };
  const schemaOf = (root: Record<string, unknown>): unknown => {
    const { definitions, ...rest } = root as { definitions?: Record<string, unknown> };
    for (const [name, definition] of Object.entries(definitions ?? {})) {
      const component = bareRefs(nullableRefs(refs(definition))) as SchemaObject;
      if (name in schemas && !(hoisted.has(name) && JSON.stringify(schemas[name]) === JSON.stringify(component))) {
        throw new Error(`two different schemas are named ${name} in the OpenAPI document`);
      }
      hoisted.add(name);
      schemas[name] = component;
    }
    return definitions ? bareRefs(nullableRefs(refs(rest))) : root;
  };
  // Every `schema` of a parameter, a header, a request or a response body.
  const visit = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(visit);
    if (node === null || typeof node !== 'object') return node;
    return Object.fromEntries(
      Object.entries(node).map(([k, v]) => [
        k,
        k === 'schema' && v !== null && typeof v === 'object' ? schemaOf(v as Record<string, unknown>) : visit(v),
      ]),
    );
  };
  document.paths = visit(document.paths) as OpenAPIObject['paths'];
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
    .setLicense('UNLICENSED (proprietary)', 'https://docs.npmjs.com/cli/configuring-npm/package-json#license')
    // Relative: the API answers where this document is served (http://localhost:3000 under `npm start`).
    .addServer('/', 'The server that serves this document')
    // The key is an opaque random string, looked up hashed: no bearerFormat (it is no JWT).
    .addSecurity('bearer', { type: 'http', scheme: 'bearer', description: 'An API key: `Authorization: Bearer <key>`' })
    .addSecurity('basic', {
      type: 'http',
      scheme: 'basic',
      description: 'Bull Board only: any user name, the operator key as the password',
    })
    .build();
  const document = SwaggerModule.createDocument(app, config);
  document.components = document.components ?? {};
  document.components.schemas = document.components.schemas ?? {};
  Object.assign(document.components.schemas, componentSchemas());
  document.paths = { ...document.paths, ...extraPaths() };
  hoistDefinitions(document);
  addCrossCuttingAnswers(document);
  return document;
}
