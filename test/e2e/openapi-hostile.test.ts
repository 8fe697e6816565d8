import { appRoutes as boardRoutes } from '@bull-board/api/dist/routes.js';
import { requestSchemas as boardSchemas } from '@bull-board/api/dist/schemas/requests.js';
import { DEMO, METRICS_TOKEN, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { FixtureStates, buildFixtures, isJsonRpcError, send, tableSignature } from '../fuzz/fuzz';
import { OpenApiDocument, OperationSpec, Parameter, operationsOf } from '../fuzz/requests';

/**
 * Hostile input over the whole documented surface, systematically and deterministically (the seeded random walk is
 * test/fuzz): for every operation of /docs-json a request that is valid (the document's example body, real ids of
 * executions and operations in real states, the right role's key) is sent once per hostile value at one location at a
 * time — each path parameter, each query parameter and header it declares, each body member at any depth, and the body
 * as a whole — and finally unchanged, which must then succeed (unless a mutation already used up what it acts on).
 *
 * Each answer must be below 500; a 4xx must be application/problem+json with type, title, status and detail, and must
 * write nothing (every table's row count and newest row version, as the fuzz checks). Two 4xx are not ours to shape:
 * Node's own 431 for headers over its limit (sent before any code of ours runs), and /mcp's JSON-RPC error objects,
 * the format MCP clients read.
 *
 * "Legitimately acceptable" (a 2xx, with no assertion on what it wrote) is any value the contract allows where it
 * lands: free text with bidi or zero-width characters around visible text, an unknown but well-formed id in a filter, a
 * repeated identical member, an empty body where none is required, `-0` where zero is allowed. The run does not decide
 * per value what must be refused — the hand-written hostile specs do that — it proves that nothing is a 5xx, a
 * non-problem 4xx or a 4xx that wrote. One thing it does require refused everywhere: a body sent to an operation that
 * reads none (anything but no body or `{}`), which would otherwise be ignored as an unknown field would be.
 * Reads (GET, HEAD, OPTIONS) must write nothing whatever they answer: checked once around all of an operation's probes;
 * a write's probes are checked one by one.
 *
 * The workers' ops ports and Bull Board's API routes (which the document does not list) get the same catalogue.
 */

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

const MB = 1024 * 1024;
const utf8 = (text: string) => Buffer.from(text, 'utf8');
/** A lone surrogate as raw bytes (its WTF-8 encoding): what no valid UTF-8 text can hold. */
const LONE_SURROGATE_BYTES = Buffer.from([0xed, 0xa0, 0x80]);

/** Values spliced into a JSON body as raw text, so that JSON.stringify cannot tidy them (1e309, -0, escapes). */
const JSON_VALUES: [string, Buffer][] = [
  ['true', utf8('true')],
  ['an object', utf8('{}')],
  ['an array', utf8('[]')],
  ['a number', utf8('0')],
  ['a string', utf8('"text"')],
  ['null', utf8('null')],
  ['1e309', utf8('1e309')],
  ['-1e309', utf8('-1e309')],
  ['-0', utf8('-0')],
  ['2**53+1', utf8('9007199254740993')],
  ['-1', utf8('-1')],
  ['1e-400', utf8('1e-400')],
  ['"NaN"', utf8('"NaN"')],
  ['a 1 MB string', utf8(`"${'a'.repeat(MB)}"`)],
  ['NUL', utf8('"a\\u0000b"')],
  ['control characters', utf8('"\\u0007\\u001b[31m\\r\\n"')],
  ['an escaped lone surrogate', utf8('"x\\ud800"')],
  ['an escaped lone low surrogate', utf8('"\\udfffx"')],
  ['a raw lone surrogate', Buffer.concat([utf8('"x'), LONE_SURROGATE_BYTES, utf8('"')])],
  ['bidi overrides', utf8('"\u202eevil\u202c"')],
  ['zero-width characters', utf8('"\u200b\u200c\ufeff"')],
  ['"__proto__"', utf8('"__proto__"')],
  ['"constructor"', utf8('"constructor"')],
  ['a __proto__ object', utf8('{"__proto__":{"polluted":true}}')],
  ['a constructor object', utf8('{"constructor":{"prototype":{"polluted":true}}}')],
  ['10k nested arrays', utf8('['.repeat(10_000) + ']'.repeat(10_000))],
  ['10k nested objects', utf8('{"a":'.repeat(10_000) + '1' + '}'.repeat(10_000))],
];

/** Keys added to each object of a body. */
const HOSTILE_KEYS = ['__proto__', 'constructor', 'prototype'];

/** Path segments as the server receives them (already percent-encoded, or on purpose not). */
const PATH_VALUES = [
  '%2F',
  'a%2Fb',
  '%00',
  'x%00y',
  '..%2F',
  '..%2F..%2Fhealth%2Flive',
  '..',
  '.',
  '%2e%2e',
  '%zz',
  '%',
  '%ED%A0%80',
  '%E2%80%AE',
  '%E2%80%8B',
  '%20',
  '%0A',
  '__proto__',
  'constructor',
  '-0',
  '1e309',
  'a'.repeat(10_000),
];

/** Query values, percent-encoded as sent. 20 000 characters goes past Node's header limit on purpose (its 431). */
const QUERY_VALUES = [
  '',
  '-1',
  '0',
  '-0',
  '1e309',
  '9007199254740993',
  'NaN',
  '1.5',
  'true',
  '%00',
  'a%00b',
  '%07%1B',
  '%ED%A0%80',
  '%E2%80%AE',
  '%E2%80%8B',
  '__proto__',
  'constructor',
  '%zz',
  '%',
  'x'.repeat(10_000),
  'x'.repeat(20_000),
];

/** Query shapes that turn a string into an array or an object in a lenient parser. */
const QUERY_SHAPES = (name: string) => [`${name}=1&${name}=2`, `${name}[]=x`, `${name}[__proto__]=x`, name];

/** Header values Node will send (latin-1, no controls): UTF-8 bytes go as latin-1 characters. */
const HEADER_VALUES = [
  '',
  ' ',
  'x'.repeat(8000),
  '\u00e9\u00ff',
  utf8('\u202eevil').toString('latin1'),
  LONE_SURROGATE_BYTES.toString('latin1'),
  '%00',
  '-1',
  '1e309',
  '__proto__',
  '*',
  'W/"x"',
  '"',
  '"unterminated',
];

/** Whole bodies besides the values above. */
const WHOLE_BODIES: [string, Buffer, Record<string, string>][] = [
  ['an empty JSON body', Buffer.alloc(0), { 'content-type': 'application/json' }],
  ['invalid UTF-8', Buffer.from('7b2261223a22ff227d', 'hex'), { 'content-type': 'application/json' }],
  ['a byte order mark', utf8('\ufeff{}'), { 'content-type': 'application/json' }],
  ['duplicate top-level keys', utf8('{"a":1,"a":2}'), { 'content-type': 'application/json' }],
  ['unterminated JSON', utf8('{"a":'), { 'content-type': 'application/json' }],
];

interface Probe {
  label: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: Buffer;
  stream: boolean;
  /** A body sent where none is taken: a 2xx would mean it was ignored. */
  mustRefuse?: boolean;
}

interface Base {
  spec: OperationSpec;
  key?: string;
  pathValues: Record<string, string>;
  query: string[];
  headers: Record<string, string>;
  body?: Json;
  /** A 2xx uses up what the request acts on (a decision, a cancel, a delete): a later one may be 404 or 409. */
  consumes: boolean;
}

interface Verdict {
  requests: number;
  accepted: string[];
  failures: string[];
}

const MARK = '\u0001hostile\u0001';
const MARK_TEXT = JSON.stringify(MARK);

/** Every member and element of a body: the path to it. */
function locations(value: Json, at: (string | number)[] = []): (string | number)[][] {
  if (Array.isArray(value)) return value.flatMap((v, i) => [[...at, i], ...locations(v, [...at, i])]);
  if (value !== null && typeof value === 'object')
    return Object.entries(value).flatMap(([k, v]) => [[...at, k], ...locations(v, [...at, k])]);
  return [];
}

function objectsOf(value: Json, at: (string | number)[] = []): (string | number)[][] {
  if (Array.isArray(value)) return value.flatMap((v, i) => objectsOf(v, [...at, i]));
  if (value !== null && typeof value === 'object')
    return [at, ...Object.entries(value).flatMap(([k, v]) => objectsOf(v, [...at, k]))];
  return [];
}

function valueAt(root: Json, at: (string | number)[]): Json {
  return at.reduce<Json>((v, k) => (v as Record<string, Json>)[k], root);
}

/** The body's text with the member at `at` replaced by `replacement` (raw bytes), or with a member added there. */
function splice(root: Json, at: (string | number)[], replacement: Buffer, addKey?: string): Buffer {
  const copy = structuredClone(root);
  if (addKey !== undefined) (valueAt(copy, at) as Record<string, Json>)[MARK] = MARK;
  else if (at.length === 0) return replacement;
  else (valueAt(copy, at.slice(0, -1)) as Record<string, Json>)[at[at.length - 1]] = MARK;
  const text = JSON.stringify(copy);
  const target = addKey !== undefined ? `${MARK_TEXT}:${MARK_TEXT}` : MARK_TEXT;
  const i = text.indexOf(target);
  const head = addKey !== undefined ? `${JSON.stringify(addKey)}:` : '';
  return Buffer.concat([utf8(text.slice(0, i) + head), replacement, utf8(text.slice(i + target.length))]);
}

function probe(base: Base, label: string, change: Partial<Omit<Probe, 'label'>> & { pathValues?: Base['pathValues'] }) {
  const values = { ...base.pathValues, ...change.pathValues };
  let path = base.spec.template;
  for (const [name, value] of Object.entries(values)) path = path.replace(`{${name}}`, value);
  const query = base.query.length ? `?${base.query.join('&')}` : '';
  const bodyHeaders: Record<string, string> = base.body !== undefined ? { 'content-type': 'application/json' } : {};
  return {
    label: `${base.spec.method} ${base.spec.template}: ${label}`,
    method: base.spec.method,
    path: change.path ?? `${path}${query}`,
    headers: {
      ...(base.key ? { authorization: `Bearer ${base.key}` } : {}),
      ...base.headers,
      ...(change.body ? {} : bodyHeaders),
      ...change.headers,
    },
    body: change.body ?? (base.body !== undefined ? utf8(JSON.stringify(base.body)) : undefined),
    stream: base.spec.stream,
  } satisfies Probe;
}

/** One probe per location and hostile value of the catalogue. */
function probesOf(base: Base): Probe[] {
  const probes: Probe[] = [];
  const { spec } = base;
  const json = { 'content-type': 'application/json' };
  for (const param of spec.pathParams)
    for (const value of PATH_VALUES)
      probes.push(probe(base, `path ${param.name}=${value.slice(0, 30)}`, { pathValues: { [param.name]: value } }));
  for (const param of spec.queryParams) {
    const others = base.query.filter((q) => !q.startsWith(`${param.name}=`));
    const pathOnly = probe(base, '', {}).path.split('?')[0];
    const shapes = [...QUERY_VALUES.map((v) => `${param.name}=${v}`), ...QUERY_SHAPES(param.name)];
    for (const part of shapes)
      probes.push(probe(base, `query ${part.slice(0, 40)}`, { path: `${pathOnly}?${[...others, part].join('&')}` }));
  }
  for (const param of spec.headerParams)
    for (const value of HEADER_VALUES)
      probes.push(
        probe(base, `header ${param.name}=${JSON.stringify(value.slice(0, 30))}`, {
          headers: { [param.name]: value },
        }),
      );
  if (base.body !== undefined) {
    for (const at of locations(base.body)) {
      const where = at.join('.');
      for (const [name, raw] of JSON_VALUES)
        probes.push(probe(base, `body ${where} = ${name}`, { body: splice(base.body, at, raw), headers: json }));
      const last = at[at.length - 1];
      if (typeof last === 'string') {
        const original = utf8(JSON.stringify(valueAt(base.body, at)));
        const twice = (second: string) => Buffer.concat([original, utf8(`,${JSON.stringify(last)}:${second}`)]);
        probes.push(
          probe(base, `body ${where} twice`, {
            body: splice(base.body, at, twice(original.toString())),
            headers: json,
          }),
        );
        probes.push(
          probe(base, `body ${where} twice, differing`, {
            body: splice(base.body, at, twice('"duplicate"')),
            headers: json,
          }),
        );
      }
    }
    for (const at of objectsOf(base.body))
      for (const key of HOSTILE_KEYS)
        probes.push(
          probe(base, `body ${at.join('.') || '(root)'} + ${key}`, {
            body: splice(base.body, at, utf8('{"polluted":true}'), key),
            headers: json,
          }),
        );
  }
  const valid = base.body !== undefined ? JSON.stringify(base.body) : '{}';
  const wholeBodies: Probe[] = [
    ...JSON_VALUES.map(([name, raw]) => probe(base, `whole body ${name}`, { body: raw, headers: json })),
    ...WHOLE_BODIES.map(([name, raw, headers]) => probe(base, `whole body ${name}`, { body: raw, headers })),
    ...['text/plain', 'application/x-www-form-urlencoded', 'application/json; charset=utf-16', ''].map((type) =>
      probe(base, `content-type ${JSON.stringify(type)}`, { body: utf8(valid), headers: { 'content-type': type } }),
    ),
    probe(base, 'trailing garbage', { body: utf8(`${valid}xyz`), headers: json }),
    probe(base, 'a second document', { body: utf8(`${valid}{}`), headers: json }),
  ];
  // Where no body is taken, only none (an empty body, or an empty JSON object) may pass: anything else is refused, as
  // an unknown field is, never ignored.
  const takesNoBody = base.body === undefined && !base.spec.body;
  for (const p of wholeBodies) p.mustRefuse = takesNoBody && !NO_BODY_SPELLINGS.some((name) => p.label.endsWith(name));
  return [...probes, ...wholeBodies];
}

/** What an endpoint that takes no body reads as none. */
const NO_BODY_SPELLINGS = ['whole body an object', 'whole body an empty JSON body', 'whole body a byte order mark'];

function sendProbe(origin: string, p: Probe) {
  const { label, body, mustRefuse: _mustRefuse, ...rest } = p;
  return send(
    new URL(origin),
    { ...rest, operation: label.split(':')[0], role: 'fixed', ...(body ? { bodyHex: body.toString('hex') } : {}) },
    15_000,
  );
}

/** Methods that write nothing whatever they answer: their probes are checked together, once per operation. */
const READS = ['GET', 'HEAD', 'OPTIONS'];

/** The problem a 4xx must be, or why it is not one. */
function problemFault(operation: string, answer: { status: number; contentType: string; body: string }): string | null {
  // Node's parser answers 431 (headers over its limit) before any code of ours; /mcp answers JSON-RPC errors.
  if (answer.status === 431 || isJsonRpcError(operation, answer)) return null;
  if (!answer.contentType.startsWith('application/problem+json')) return 'not problem+json';
  const problem = JSON.parse(answer.body) as Record<string, unknown>;
  const shaped =
    ['type', 'title', 'detail'].every((member) => typeof problem[member] === 'string') &&
    problem.status === answer.status;
  return shaped ? null : 'a problem without type, title, status and detail';
}

/**
 * Sends each probe in turn and checks each answer. A 4xx of a write must leave every table as it was (checked after
 * each probe); a read's probes must write nothing at all, whatever they answer (checked once around them).
 */
async function judge(
  stack: Stack,
  origin: string,
  probes: Probe[],
  verdict: Verdict,
  checkWrites: { tables: string[] } | null,
): Promise<void> {
  const signature = () => tableSignature(stack, checkWrites!.tables);
  const changedSince = (before: Record<string, string>, after: Record<string, string>) =>
    checkWrites!.tables.filter((t) => before[t] !== after[t]);
  const together = probes.length > 0 && READS.includes(probes[0].method);
  const first = checkWrites ? await signature() : {};
  let before = first;
  for (const p of probes) {
    const operation = p.label.split(':')[0];
    const answer = await sendProbe(origin, p);
    if (answer === 'unsendable') {
      verdict.failures.push(`${p.label}: Node would not send it (fix the catalogue)`);
      continue;
    }
    verdict.requests += 1;
    const said = `${answer.status} ${answer.contentType} ${answer.body.slice(0, 300)}`;
    const fault = answer.status >= 500 ? 'a 5xx' : answer.status >= 400 ? problemFault(operation, answer) : null;
    if (fault) verdict.failures.push(`${p.label}: ${fault}: ${said}`);
    if (answer.status < 400) verdict.accepted.push(`${p.label}: ${answer.status}`);
    if (answer.status < 400 && p.mustRefuse) verdict.failures.push(`${p.label}: a body ignored: ${said}`);
    if (!checkWrites || together) continue;
    const after = await signature();
    const changed = changedSince(before, after);
    if (answer.status >= 400 && changed.length)
      verdict.failures.push(`${p.label}: a ${answer.status} wrote ${changed}`);
    before = after;
  }
  if (checkWrites && together) {
    const changed = changedSince(first, await signature());
    if (changed.length) verdict.failures.push(`${probes[0].label.split(':')[0]}: a read wrote ${changed}`);
  }
}

/**
 * The API sweep sends about 4,500 requests, each write's followed by a signature query: 24 s on a quiet machine, 151 s
 * in a full CI run beside other suites. A budget it can overrun leaves its requests running into the next test, whose
 * "a read wrote" check then sees their writes; so the budget is generous, not tight.
 */
const SWEEP_BUDGET_MS = 600_000;

describe('hostile values at every location of every documented operation', () => {
  let stack: Stack;
  let doc: OpenApiDocument;
  let states: FixtureStates;
  let tables: string[];
  let webhookId: string;
  let deliveryId: string;

  beforeAll(async () => {
    stack = await Stack.start({
      label: 'oahostile',
      // One client sends thousands of requests: the per-key and per-address limits would answer most with 429.
      env: {
        RATE_LIMIT_PER_MINUTE: '100000000',
        AUTH_FAILURES_PER_MINUTE: '100000000',
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        // One attempt each: a delivery settles (failed) before the workers stop, and can then be redelivered.
        WEBHOOK_MAX_ATTEMPTS: '1',
      },
    });
  });
  afterAll(async () => stack?.stop());

  // First, while the workers run (the fixtures below stop them).
  it('answers hostile values on the workers’ ops ports (/health/live, /health/ready, /metrics) below 500, a 4xx as problem+json', async () => {
    for (const worker of [...stack.running('dispatcher'), ...stack.running('reconciler')]) {
      const bases = ['/health/live', '/health/ready', '/metrics'].map((template) => opsBase(template));
      // The workers write as they run (sweeps, deliveries): what a 4xx must not write is checked on the API below.
      const verdict = await sweep(stack, worker.opsUrl!, bases, null);
      expect(verdict.failures).toEqual([]);
    }
  }, 120_000);

  async function buildState(): Promise<void> {
    // A webhook first, so the fixtures' events leave deliveries of it (the reconciler records each attempt).
    const allow = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: 'api.example.com' }] },
    });
    expect(allow.status).toBe(200);
    const hook = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      key: DEMO.admin,
      body: { url: 'https://api.example.com/hook', events: ['operation.settled', 'operation.needs_review'] },
    });
    expect(hook.status).toBe(201);
    webhookId = hook.body.id;
    const fixtures = await buildFixtures(stack);
    states = fixtures.states;
    const deliveries = await waitFor(
      async () =>
        (
          await http<{ data: { id: string; status: string }[] }>(
            stack.apiUrl,
            'GET',
            `/v1/admin/webhooks/${webhookId}/deliveries`,
            {
              key: DEMO.admin,
            },
          )
        ).body.data,
      (data) => data.some((d) => d.status !== 'pending'),
    );
    deliveryId = deliveries.find((d) => d.status !== 'pending')!.id;
    doc = (await (await fetch(`${stack.apiUrl}/docs-json`)).json()) as OpenApiDocument;
    tables = (
      (await stack.db.dataSource.query(
        `SELECT table_name AS t FROM information_schema.tables
         WHERE table_schema = 'public' AND table_type = 'BASE TABLE' AND table_name <> 'migrations' ORDER BY 1`,
      )) as { t: string }[]
    ).map((r) => r.t);
  }

  /** The order the operations that use something up run in, after every other: each acts on a fixture of its own. */
  const CONSUMING = [
    'POST /v1/operations/{id}/recheck',
    'POST /v1/operations/{id}/approval',
    'POST /v1/operations/{id}/resolve',
    'POST /v1/operations/{id}/retry',
    'POST /v1/executions/{id}/cancel',
    'POST /v1/admin/webhooks/{id}/enable',
    'POST /v1/admin/webhooks/{id}/deliveries/{delivery_id}/redeliver',
    'DELETE /v1/admin/connector-settings/{connector}/secrets/{name}',
    'DELETE /v1/admin/connector-settings/{connector}',
    'DELETE /v1/admin/webhooks/{id}',
  ];

  function roleKey(spec: OperationSpec): string | undefined {
    const { template } = spec;
    if (['/', '/v1', '/v1/status-model', '/console', '/docs'].includes(template) || template.startsWith('/health'))
      return undefined;
    if (template.startsWith('/v1/admin')) return DEMO.admin;
    if (template === '/metrics' || template.startsWith('/admin/queues')) return DEMO.operator;
    if (template.startsWith('/v1/review') || /\/(approval|resolve|recheck)$/.test(template)) return DEMO.reviewer;
    return DEMO.agent;
  }

  function pathValue(spec: OperationSpec, param: Parameter): string {
    const { template } = spec;
    if (param.name === 'connector') return 'http';
    if (param.name === 'name') return 'TOKEN';
    if (param.name === 'delivery_id') return deliveryId;
    if (template.startsWith('/v1/admin/webhooks')) return webhookId;
    const held = states.held.operations[0].id;
    if (template.endsWith('/approval')) return states.waiting.operations[0].id;
    if (/\/(resolve|recheck)$/.test(template)) return held;
    if (template.endsWith('/retry')) return states.cancelled.operations[0].id;
    if (template.endsWith('/cancel')) return states.waiting.id;
    if (template.startsWith('/v1/operations')) return states.verified.operations[0].id;
    return states.verified.id;
  }

  /** Values of the documented query parameters that are valid without state (a cursor has to be handed out first). */
  function queryOf(spec: OperationSpec): string[] {
    return spec.queryParams.flatMap((p) => {
      const schema = p.schema ?? {};
      const enumeration = (schema.$ref ? doc.components?.schemas?.[schema.$ref.split('/').pop()!] : schema)?.enum;
      // GET /v1/admin/changes: only connector settings changes name a connector, so a `kind` beside `connector` is
      // that one (another kind with a connector is 400 only_with_connector_settings).
      if (
        p.name === 'kind' &&
        spec.queryParams.some((q) => q.name === 'connector') &&
        enumeration?.includes('connector_settings')
      )
        return [`${p.name}=connector_settings`];
      if (enumeration?.length) return [`${p.name}=${encodeURIComponent(String(enumeration[0]))}`];
      if (schema.type === 'integer') return [`${p.name}=${schema.minimum ?? 1}`];
      if (p.name === 'connector') return [`${p.name}=sandbox.payments`];
      if (p.name === 'q') return [`${p.name}=charge`];
      return [];
    });
  }

  function bodyOf(spec: OperationSpec): Json | undefined {
    if (spec.example !== undefined) return spec.example as Json;
    // The host the connector settings' example allows (its PUT runs, and ends valid, before this one).
    if (spec.template === '/v1/admin/webhooks' && spec.method === 'POST')
      return { url: 'https://api.example.org/other', events: ['operation.settled'] };
    if (spec.template === '/mcp' && spec.method === 'POST') return { jsonrpc: '2.0', id: 1, method: 'tools/list' };
    return undefined;
  }

  function baseOf(spec: OperationSpec): Base {
    const operation = `${spec.method} ${spec.template}`;
    return {
      spec,
      key: roleKey(spec),
      pathValues: Object.fromEntries(spec.pathParams.map((p) => [p.name, encodeURIComponent(pathValue(spec, p))])),
      query: queryOf(spec),
      headers: spec.template === '/mcp' ? { accept: 'application/json, text/event-stream' } : {},
      body: bodyOf(spec),
      consumes: CONSUMING.includes(operation),
    };
  }

  describe('with executions, operations, a webhook and settings in real states', () => {
    beforeAll(buildState, 180_000);

    it(
      'answers every hostile value below 500, a 4xx as problem+json that wrote nothing; the valid request still works',
      async () => {
        const specs = operationsOf(doc, ['get', 'post', 'put', 'patch', 'delete', 'options']);
        const rank = (s: OperationSpec) => CONSUMING.indexOf(`${s.method} ${s.template}`);
        specs.sort((a, b) => rank(a) - rank(b));
        const verdict = await sweep(stack, stack.apiUrl, specs.map(baseOf), { tables });
        expect(verdict.failures).toEqual([]);
        expect(verdict.requests).toBeGreaterThan(specs.length * 40);
      },
      SWEEP_BUDGET_MS,
    );

    it(
      'does the same on Bull Board’s API routes (operator key), which the document does not list',
      async () => {
        // A submission waits as a job (no worker runs now): a real queue and job to name.
        const submitted = await http(stack.apiUrl, 'POST', '/v1/executions', {
          key: DEMO.agent,
          body: submission([charge(unique('board'))]),
        });
        expect(submitted.status).toBe(201);
        type Listed = { queues: { name: string; counts: Record<string, number>; jobs: { id: string }[] }[] };
        const board = (query: string) =>
          http<Listed>(stack.apiUrl, 'GET', `/admin/queues/api/queues${query}`, { key: DEMO.operator });
        const queue = (await board('')).body.queues.find((q) => q.counts.waiting > 0);
        expect(queue).toBeDefined();
        const listed = await board(`?activeQueue=${queue!.name}&status=waiting`);
        const jobId = listed.body.queues.find((q) => q.name === queue!.name)?.jobs[0]?.id;
        expect(jobId).toBeDefined();
        const verdict = await sweep(stack, stack.apiUrl, boardBases(queue!.name, jobId!), { tables });
        expect(verdict.failures).toEqual([]);
      },
      SWEEP_BUDGET_MS,
    );
  });
});

/** Bull Board's API routes as operations: the operator's key, a real queue and job, its own query parameters. */
function boardBases(queueName: string, jobId: string): Base[] {
  const pathValues: Record<string, string> = {
    queueName,
    jobId: encodeURIComponent(jobId),
    queueStatus: 'completed',
    schedulerId: 'none',
  };
  const bodies: Record<string, Json> = {
    AddJobBody: { name: 'x', data: {} },
    UpdateJobDataBody: { jobData: {} },
    ChangeJobDelayBody: { runAt: 1 },
    ChangeJobPriorityBody: { priority: 1 },
    SetGlobalConcurrencyBody: { concurrency: 1 },
    SetRateLimitBody: { max: 1, duration: 1000 },
    ObliterateQueueBody: { force: false },
    UpdateJobSchedulerBody: { every: 1000 },
  };
  const validQuery: Record<string, string> = {
    activeQueue: queueName,
    status: 'waiting',
    page: '1',
    jobsPerPage: '10',
  };
  return boardRoutes.api.map((route) => {
    const path = (Array.isArray(route.route) ? route.route[0] : route.route) as string;
    const template = `/admin/queues${path.replace(/:(\w+)/g, '{$1}')}`;
    const names = [...path.matchAll(/:(\w+)/g)].map((m) => m[1]);
    const querySchema = route.spec?.query ? boardSchemas[route.spec.query as keyof typeof boardSchemas] : undefined;
    const queryNames = Object.keys(entriesOf(querySchema));
    const body = route.spec?.body ? bodies[route.spec.body] : undefined;
    return {
      spec: {
        method: String(route.method).toUpperCase(),
        template,
        pathParams: names.map((name) => ({ name, in: 'path' as const })),
        queryParams: queryNames.map((name) => ({ name, in: 'query' as const })),
        headerParams: [],
        body: null,
        bodyRequired: body !== undefined,
        stream: false,
      },
      key: DEMO.operator,
      pathValues: Object.fromEntries(names.map((name) => [name, pathValues[name]])),
      query: queryNames.filter((name) => validQuery[name]).map((name) => `${name}=${validQuery[name]}`),
      headers: {},
      body,
      // The board is read-only: every write is a 405, and its valid request is one too.
      consumes: String(route.method) !== 'get',
    };
  });
}

/** The members of a valibot object schema (through a pipe). */
function entriesOf(schema: unknown): Record<string, unknown> {
  const s = schema as { entries?: Record<string, unknown>; pipe?: { entries?: Record<string, unknown> }[] } | undefined;
  return s?.entries ?? s?.pipe?.find((p) => p.entries)?.entries ?? {};
}

/** A worker's ops endpoint: GET, with METRICS_TOKEN; it declares no parameters, so an undeclared one is tried. */
function opsBase(template: string): Base {
  return {
    spec: {
      method: 'GET',
      template,
      pathParams: [],
      queryParams: [{ name: 'verbose', in: 'query' }],
      headerParams: [],
      body: null,
      bodyRequired: false,
      stream: false,
    },
    key: template === '/metrics' ? METRICS_TOKEN : undefined,
    pathValues: {},
    query: [],
    headers: {},
    consumes: false,
  };
}

/**
 * Every probe of every base in turn, then each base unchanged: it must succeed (below 300), unless it uses something
 * up and one of its probes was accepted (then below 500).
 */
async function sweep(
  stack: Stack,
  origin: string,
  bases: Base[],
  checkWrites: { tables: string[] } | null,
): Promise<Verdict> {
  const verdict: Verdict = { requests: 0, accepted: [], failures: [] };
  const started = Date.now();
  for (const base of bases) {
    const accepted = verdict.accepted.length;
    await judge(stack, origin, probesOf(base), verdict, checkWrites);
    const usedUp = base.consumes && verdict.accepted.length > accepted;
    const unchanged = probe(base, 'the valid request', {});
    const answer = await sendProbe(origin, unchanged);
    if (answer === 'unsendable' || answer.status >= (usedUp || base.consumes ? 500 : 300))
      verdict.failures.push(
        `${unchanged.label}: ${answer === 'unsendable' ? answer : `${answer.status} ${answer.body.slice(0, 300)}`}`,
      );
  }
  console.log(
    `${origin}: ${verdict.requests} hostile requests over ${bases.length} operations in ${Math.round((Date.now() - started) / 1000)} s; ` +
      `${verdict.accepted.length} accepted:\n${verdict.accepted.join('\n')}`,
  );
  return verdict;
}
