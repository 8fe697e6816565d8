/**
 * Requests generated from the API's own OpenAPI document (/docs-json): for every operation, a key of some role (or
 * none, or a wrong one), path ids that are real, another tenant's, garbage or hostile, query and header values of the
 * documented parameters (valid ones and hostile ones, plus parameters nobody documents), and a body that starts
 * valid (from the operation's schema, or a known-good template) and is then mutated: fields removed, added, retyped,
 * lengthened, or filled with NUL, lone surrogates, RTL overrides, emoji and names of Object.prototype. Some bodies are
 * not JSON at all (invalid UTF-8, a wrong Content-Encoding, a wrong media type, too large, nested too deep).
 *
 * Everything a request is made of is a plain value, so fast-check prints (and shrinks) the exact request that failed.
 */
import fc from 'fast-check';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface JsonSchema {
  $ref?: string;
  type?: string;
  enum?: unknown[];
  nullable?: boolean;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean | JsonSchema;
  items?: JsonSchema;
  minItems?: number;
  maxItems?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: boolean | number;
  default?: unknown;
}

export interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header' | 'cookie';
  required?: boolean;
  schema?: JsonSchema;
}

interface Operation {
  parameters?: Parameter[];
  requestBody?: {
    required?: boolean;
    content?: Record<string, { schema?: JsonSchema; examples?: Record<string, { value?: unknown }> }>;
  };
  responses?: Record<string, unknown>;
}

export interface OpenApiDocument {
  paths: Record<string, Record<string, Operation>>;
  components?: { schemas?: Record<string, JsonSchema> };
}

/** One documented operation, flattened for generation. */
export interface OperationSpec {
  method: string;
  template: string;
  pathParams: Parameter[];
  queryParams: Parameter[];
  headerParams: Parameter[];
  body: JsonSchema | null;
  /** The document's first example of the JSON body, when it gives one. */
  example?: unknown;
  bodyRequired: boolean;
  /** Server-sent events: requested with a short abort, never left open. */
  stream: boolean;
}

export function operationsOf(
  doc: OpenApiDocument,
  methodsTaken: readonly string[] = ['get', 'post', 'put', 'patch', 'delete'],
): OperationSpec[] {
  const specs: OperationSpec[] = [];
  for (const [template, methods] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(methods)) {
      if (!methodsTaken.includes(method)) continue;
      const params = op.parameters ?? [];
      // The same header can be documented twice in different case (a decorator and an @ApiHeader); one is enough.
      const headers = new Map<string, Parameter>();
      for (const p of params.filter((q) => q.in === 'header')) headers.set(p.name.toLowerCase(), p);
      const content = op.requestBody?.content?.['application/json'];
      const json = content?.schema;
      specs.push({
        method: method.toUpperCase(),
        template,
        pathParams: params.filter((p) => p.in === 'path'),
        queryParams: params.filter((p) => p.in === 'query'),
        headerParams: [...headers.values()],
        body: json ?? null,
        example: Object.values(content?.examples ?? {})[0]?.value,
        bodyRequired: op.requestBody?.required === true,
        stream: template.endsWith('/stream'),
      });
    }
  }
  return specs;
}

/** What the fuzz knows about the running system: ids that exist, and which tenant owns them. */
export interface Fixtures {
  /** Keys by role; `other` is an agent of another tenant, `operator` belongs to no tenant. */
  keys: Record<string, string>;
  ownExecutions: string[];
  ownOperations: string[];
  otherExecutions: string[];
  otherOperations: string[];
  connectors: string[];
  actions: string[];
  operationKeys: string[];
  secretNames: string[];
  /** Known-good bodies by schema name (resolved through $ref), mutated like generated ones. */
  templates: Record<string, unknown[]>;
}

// ---------------------------------------------------------------------------------------------------------------
// Hostile values

/** Strings that have broken, or could break, something between the socket and Postgres. */
const NASTY_STRINGS: string[] = [
  '',
  ' ',
  '\u0000',
  'a\u0000b',
  '\u0000\u0000\u0000',
  '\u0001\u0007\u001b[31m',
  '\u007f',
  '\t\r\n',
  '\ud800',
  '\udfff',
  'x\ud83d',
  '\ude00x',
  '\udc00\ud800',
  '\u202eevil\u202c',
  '\u200f\u05e9\u05dc\u05d5\u05dd',
  'مرحبا',
  '\u200b\u200c\u200d\ufeff',
  '\ufffe\uffff',
  '👩‍👩‍👧‍👦🏳️‍🌈',
  '😀'.repeat(300),
  'Z̸̡̛̗̘̙̜̝̞̟̠̀́̂̃̄̅',
  '__proto__',
  'constructor',
  'prototype',
  'toString',
  'hasOwnProperty',
  'valueOf',
  "' OR 1=1 --",
  '"; DROP TABLE executions; --',
  '../../etc/passwd',
  '%00',
  '%',
  '%zz',
  '{{secret:TOKEN}}',
  '{{ref:charge.id}}',
  '$.amount',
  '<script>alert(1)</script>',
  'NaN',
  'Infinity',
  '-0',
  '1e308',
  'true',
  'null',
  '\\u0000',
  'exe_',
  'op_',
];

function longString(): fc.Arbitrary<string> {
  return fc
    .tuple(
      fc.constantFrom('a', 'é', '😀', '\u0000', '\ud800', 'ab'),
      fc.constantFrom(65, 201, 1001, 4001, 10_001, 70_000),
    )
    .map(([unit, n]) => unit.repeat(n));
}

/** Any string: printable, any code unit (lone surrogates and controls included), a nasty one or a long one. */
export function hostileString(): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(...NASTY_STRINGS) },
    { weight: 2, arbitrary: fc.string({ maxLength: 30, unit: 'grapheme' }) },
    { weight: 2, arbitrary: fc.string({ maxLength: 30, unit: 'binary' }) },
    {
      weight: 1,
      arbitrary: fc.string({
        maxLength: 10,
        unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)),
      }),
    },
    { weight: 1, arbitrary: longString() },
    {
      weight: 1,
      arbitrary: fc
        .tuple(fc.string({ maxLength: 8 }), fc.constantFrom(...NASTY_STRINGS), fc.string({ maxLength: 8 }))
        .map((p) => p.join('')),
    },
  );
}

/** A value of any JSON type, biased to the edges (numbers JSON cannot round-trip, deep nesting, big arrays). */
export function hostileValue(): fc.Arbitrary<Json | RawNumber> {
  const numbers = fc.oneof(
    fc.constantFrom(0, -0, -1, 1, 0.5, -1e308, 1e308, 2 ** 53 + 1, -(2 ** 31), 2 ** 31, 2 ** 63, 1e-320, 604801, 65536),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.integer(),
    fc.constantFrom<RawNumber>(
      { raw: '1e400' },
      { raw: '-1e400' },
      { raw: '1' + '0'.repeat(400) },
      { raw: '1.0e-99999' },
    ),
  );
  return fc.oneof(
    { weight: 4, arbitrary: hostileString() },
    { weight: 3, arbitrary: numbers },
    { weight: 1, arbitrary: fc.constantFrom<Json>(true, false, null, [], {}, [null], { '': '' }) },
    { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }) as fc.Arbitrary<Json> },
    {
      weight: 1,
      arbitrary: fc.tuple(fc.constantFrom(20, 70, 200), fc.boolean()).map(([depth, asArray]) => {
        let v: Json = 'deep';
        for (let i = 0; i < depth; i += 1) v = asArray ? [v] : { a: v };
        return v;
      }),
    },
    { weight: 1, arbitrary: fc.constantFrom(101, 1000).map((n) => Array.from({ length: n }, (_, i) => i) as Json) },
  );
}

/** A number JSON.stringify cannot write (it would become null): spliced into the body text as is. */
export interface RawNumber {
  raw: string;
}

const PROTO_KEYS = ['__proto__', 'constructor', 'prototype'];

/** A key to add to an object: an unknown field, a prototype name, or a hostile string. */
function extraKey(): fc.Arbitrary<string> {
  return fc.oneof(
    fc.constantFrom(...PROTO_KEYS, 'extra', 'id', 'tenant_id', 'status', 'role', ''),
    hostileString().map((s) => s.slice(0, 100)),
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Valid values from a schema

export class SchemaValues {
  constructor(
    private readonly doc: OpenApiDocument,
    private readonly fixtures: Fixtures,
  ) {}

  resolve(schema: JsonSchema): { schema: JsonSchema; name: string | null } {
    let name: string | null = null;
    let s = schema;
    for (let i = 0; s.$ref && i < 10; i += 1) {
      name = s.$ref.split('/').pop() ?? null;
      s = this.doc.components?.schemas?.[name ?? ''] ?? {};
    }
    return { schema: s, name };
  }

  /** A value the schema accepts (as far as the schema alone can say), with names the running system knows. */
  valid(raw: JsonSchema, field = '', depth = 0): fc.Arbitrary<Json> {
    const { schema, name } = this.resolve(raw);
    const templates = name ? (this.fixtures.templates[name] as Json[] | undefined) : undefined;
    const generated = this.generated(schema, field, depth);
    if (templates?.length) {
      return fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...templates) }, { weight: 1, arbitrary: generated });
    }
    if (schema.nullable)
      return fc.oneof({ weight: 4, arbitrary: generated }, { weight: 1, arbitrary: fc.constant(null) });
    return generated;
  }

  private generated(schema: JsonSchema, field: string, depth: number): fc.Arbitrary<Json> {
    if (schema.enum) return fc.constantFrom(...(schema.enum as Json[]));
    const known = this.knownValues(field);
    switch (schema.type) {
      case 'string': {
        const min = schema.minLength ?? 0;
        const max = Math.min(schema.maxLength ?? 40, 40);
        const fits = (s: string) => s.length >= min && s.length <= (schema.maxLength ?? Infinity);
        const free = schema.pattern
          ? fc.stringMatching(new RegExp(schema.pattern)).filter(fits)
          : fc.string({ minLength: min, maxLength: Math.max(min, max), unit: 'grapheme' });
        return known.length
          ? fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...known) }, { weight: 1, arbitrary: free })
          : free;
      }
      case 'integer':
        return fc.integer({ min: schema.minimum ?? -1_000_000, max: schema.maximum ?? 1_000_000 });
      case 'number': {
        const min = schema.minimum ?? -1e9;
        const exclusive = schema.exclusiveMinimum === true;
        return fc
          .double({ min, max: schema.maximum ?? 1e9, noNaN: true, noDefaultInfinity: true })
          .filter((n) => !exclusive || n > min);
      }
      case 'boolean':
        return fc.boolean();
      case 'array': {
        if (!schema.items || depth > 4) return fc.constant([]);
        const min = schema.minItems ?? 0;
        return fc.array(this.valid(schema.items, field, depth + 1), {
          minLength: min,
          maxLength: Math.max(min, Math.min(schema.maxItems ?? 3, 3)),
        });
      }
      case 'object':
      default: {
        const props = schema.properties ?? {};
        if (Object.keys(props).length === 0) {
          if (field === 'secrets')
            return fc.dictionary(
              fc.constantFrom(...this.fixtures.secretNames),
              fc.stringMatching(/^[\x20-\x7e]{1,20}$/),
              { maxKeys: 2 },
            );
          return depth > 4
            ? fc.constant({})
            : (fc.dictionary(fc.string({ maxLength: 10 }), fc.jsonValue({ maxDepth: 2 }), {
                maxKeys: 4,
              }) as fc.Arbitrary<Json>);
        }
        const record: Record<string, fc.Arbitrary<Json>> = {};
        for (const [key, prop] of Object.entries(props)) record[key] = this.valid(prop, key, depth + 1);
        return fc.record(record, { requiredKeys: schema.required ?? [] }) as fc.Arbitrary<Json>;
      }
    }
  }

  private knownValues(field: string): string[] {
    const f = this.fixtures;
    switch (field) {
      case 'connector':
        return f.connectors;
      case 'action':
        return f.actions;
      case 'key':
      case 'operation':
      case 'depends_on':
        return f.operationKeys;
      case 'host':
        return ['api.example.com', '127.0.0.1', 'localhost', '*.example.com'];
      case 'amount_field':
        return ['amount', '$.amount', 'body.amount'];
      case 'secrets':
        // The names an allowlist entry binds (allow_hosts[].secrets): the tenant's, and every one.
        return [...f.secretNames, '*'];
      default:
        return [];
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Mutations of a JSON body

/** One change to a body, applied at the `at`-th node (mod the number of nodes) of a walk of the value. */
export type Mutation =
  | { kind: 'remove'; at: number }
  | { kind: 'replace'; at: number; value: Json | RawNumber }
  | { kind: 'add'; at: number; key: string; value: Json | RawNumber }
  | { kind: 'duplicate'; at: number };

export function mutation(): fc.Arbitrary<Mutation> {
  const at = fc.nat({ max: 200 });
  return fc.oneof(
    fc.record({ kind: fc.constant('remove' as const), at }),
    fc.record({ kind: fc.constant('replace' as const), at, value: hostileValue() }),
    fc.record({ kind: fc.constant('add' as const), at, key: extraKey(), value: hostileValue() }),
    fc.record({ kind: fc.constant('duplicate' as const), at }),
  );
}

const RAW_MARK = '\u0001raw:';

/** Every container and member of `root` in a fixed order: [parent, key] pairs (the root has no parent). */
function nodes(root: Json): { parent: Json[] | Record<string, Json>; key: string | number }[] {
  const found: { parent: Json[] | Record<string, Json>; key: string | number }[] = [];
  const walk = (v: Json) => {
    if (Array.isArray(v)) {
      v.forEach((child, i) => {
        found.push({ parent: v, key: i });
        walk(child);
      });
    } else if (v !== null && typeof v === 'object') {
      for (const k of Object.keys(v)) {
        found.push({ parent: v, key: k });
        walk(v[k]);
      }
    }
  };
  walk(root);
  return found;
}

function materialize(value: Json | RawNumber): Json {
  if (
    value !== null &&
    typeof value === 'object' &&
    !Array.isArray(value) &&
    'raw' in value &&
    typeof value.raw === 'string' &&
    Object.keys(value).length === 1
  ) {
    return `${RAW_MARK}${value.raw}`;
  }
  return value as Json;
}

/**
 * The body text after the mutations. Keys are set with defineProperty so `__proto__` becomes a real key of the JSON
 * text (an assignment would change the prototype instead, and the key would never be sent).
 */
export function applyMutations(base: Json, mutations: Mutation[]): string {
  const root: Json = structuredClone(base) as Json;
  let body: Json = root;
  for (const m of mutations) {
    const all = nodes(body);
    if (m.kind === 'add') {
      const containers = [body, ...all.map((n) => (n.parent as Record<string, Json>)[n.key as never] as Json)].filter(
        (v): v is Record<string, Json> => v !== null && typeof v === 'object' && !Array.isArray(v),
      );
      if (containers.length === 0) continue;
      const target = containers[m.at % containers.length];
      Object.defineProperty(target, m.key, {
        value: materialize(m.value),
        enumerable: true,
        writable: true,
        configurable: true,
      });
      continue;
    }
    if (all.length === 0) {
      if (m.kind === 'replace') body = materialize(m.value);
      continue;
    }
    const { parent, key } = all[m.at % all.length];
    if (m.kind === 'remove') {
      if (Array.isArray(parent)) parent.splice(key as number, 1);
      else delete parent[key as string];
    } else if (m.kind === 'replace') {
      Object.defineProperty(parent, key, {
        value: materialize(m.value),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    } else if (Array.isArray(parent)) {
      parent.push(structuredClone(parent[key as number]));
    }
  }
  return JSON.stringify(body).replace(new RegExp(`"${RAW_MARK.replace('\u0001', '\\\\u0001')}([^"]*)"`, 'g'), '$1');
}

// ---------------------------------------------------------------------------------------------------------------
// Whole requests

export interface FuzzRequest {
  operation: string;
  role: string;
  method: string;
  /** Already percent-encoded, query included. */
  path: string;
  headers: Record<string, string>;
  /** The body text, or bytes as hex when the body is not text on purpose. */
  body?: string;
  bodyHex?: string;
  stream: boolean;
}

/** A path segment as the server receives it: percent-encoded text, or raw encodings nobody should send. */
function encodeSegment(value: string): string {
  let out = '';
  for (const ch of value) {
    const code = ch.codePointAt(0)!;
    if (code >= 0xd800 && code <= 0xdfff) {
      // A lone surrogate has no UTF-8 encoding; encodeURIComponent would throw. Send its WTF-8 bytes (invalid UTF-8).
      out += Buffer.from([0xe0 | (code >> 12), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f)])
        .toString('hex')
        .replace(/(..)/g, '%$1')
        .toUpperCase();
    } else out += encodeURIComponent(ch);
  }
  return out;
}

const RAW_SEGMENTS = [
  '%00',
  'exe_%00',
  'op_x%00y',
  '%zz',
  '%',
  '%E0%A4%A',
  '%C0%AF',
  '%ED%A0%80',
  '..',
  '.',
  '%2e%2e',
  '%2F',
  'a%2Fb',
  '%20',
  '%0A',
  '%FF%FE',
];

interface BodyPart {
  body?: string;
  bodyHex?: string;
  headers: Record<string, string>;
}

export class RequestFactory {
  private readonly values: SchemaValues;

  constructor(
    doc: OpenApiDocument,
    private readonly fixtures: Fixtures,
  ) {
    this.values = new SchemaValues(doc, fixtures);
  }

  private pathValue(param: Parameter, template: string): fc.Arbitrary<string> {
    const f = this.fixtures;
    const isOperation = template.includes('/operations/');
    let real: string[];
    let foreign: string[];
    if (param.name === 'connector') {
      real = [...f.connectors, 'sandbox.unknown'];
      foreign = PROTO_KEYS.concat(['toString', 'hasOwnProperty']);
    } else if (param.name === 'name') {
      real = f.secretNames;
      foreign = PROTO_KEYS;
    } else {
      real = isOperation ? f.ownOperations : f.ownExecutions;
      foreign = [
        ...(isOperation ? f.otherOperations : f.otherExecutions),
        ...(isOperation ? f.ownExecutions : f.ownOperations),
      ];
    }
    return fc.oneof(
      { weight: 5, arbitrary: fc.constantFrom(...real).map(encodeSegment) },
      { weight: 2, arbitrary: fc.constantFrom(...foreign).map(encodeSegment) },
      { weight: 2, arbitrary: fc.constantFrom(...RAW_SEGMENTS) },
      { weight: 2, arbitrary: hostileString().map((s) => encodeSegment(s.slice(0, 3000))) },
      {
        weight: 1,
        arbitrary: fc
          .tuple(fc.constantFrom(...real), fc.constantFrom('%00', '%20', 'x', '%ED%A0%80', '/', '?', '#'))
          .map(([id, tail]) => `${encodeSegment(id)}${tail}`),
      },
      { weight: 1, arbitrary: fc.constantFrom(200, 2000, 20_000).map((n) => `exe_${'a'.repeat(n)}`) },
    );
  }

  private queryValue(param: Parameter): fc.Arbitrary<string> {
    const schema = param.schema ?? {};
    const f = this.fixtures;
    const valid: fc.Arbitrary<string> =
      schema.enum && schema.enum.length
        ? fc.constantFrom(...schema.enum.map(String))
        : schema.type === 'integer'
          ? fc.integer({ min: schema.minimum ?? 0, max: schema.maximum ?? 1000 }).map(String)
          : fc.constantFrom(...f.ownExecutions, ...f.ownOperations, ...f.connectors, '1', 'charge', 'abc');
    return fc.oneof(
      { weight: 3, arbitrary: valid.map(encodeURIComponent) },
      { weight: 2, arbitrary: hostileString().map((s) => encodeSegment(s.slice(0, 3000))) },
      {
        weight: 1,
        arbitrary: fc.constantFrom(
          '-1',
          '0',
          '1e3',
          '1.5',
          '99999999999999999999',
          'NaN',
          '',
          '%00',
          '%zz',
          '%',
          'eyJ4Ijoie30ifQ',
          '%ED%A0%80',
        ),
      },
    );
  }

  private query(spec: OperationSpec): fc.Arbitrary<string> {
    const documented = spec.queryParams.map((p) =>
      fc.option(
        this.queryValue(p).map((v) => `${encodeURIComponent(p.name)}=${v}`),
        { freq: 2, nil: '' },
      ),
    );
    const extra = fc.array(
      fc.oneof(
        fc
          .tuple(
            extraKey().map(encodeSegment),
            hostileString().map((s) => encodeSegment(s.slice(0, 200))),
          )
          .map(([k, v]) => `${k}=${v}`),
        // Repeated and bracketed parameters: arrays and objects where the code expects a string.
        fc
          .constantFrom(...spec.queryParams.map((p) => p.name), 'limit', 'status')
          .chain((name) =>
            fc.constantFrom(
              `${name}=1&${name}=2`,
              `${name}[]=x`,
              `${name}[a]=b`,
              `${name}[__proto__]=x`,
              name,
              `${name}=`,
            ),
          ),
      ),
      { maxLength: 2 },
    );
    return fc.tuple(fc.tuple(...documented), extra).map(([doc, more]) => {
      const parts = [...doc, ...more].filter((p) => p !== '');
      return parts.length ? `?${parts.join('&')}` : '';
    });
  }

  private authorization(): fc.Arbitrary<{ role: string; header?: string }> {
    const keys = this.fixtures.keys;
    return fc.oneof(
      // The tenant's own roles most often, so most requests get past authorisation to the code behind it.
      ...Object.keys(keys).map((role) => ({
        weight: ['agent', 'reviewer', 'admin'].includes(role) ? 3 : 1,
        arbitrary: fc.constant({ role, header: `Bearer ${keys[role]}` }),
      })),
      { weight: 1, arbitrary: fc.constant({ role: 'none' }) },
      {
        weight: 1,
        arbitrary: fc
          .constantFrom(
            'Bearer ',
            'Bearer wrong-key',
            `bearer ${keys.admin}`,
            keys.admin,
            `Bearer ${keys.admin} extra`,
            `Bearer ${keys.admin}\t`,
            `Basic ${Buffer.from(`:${keys.operator}`).toString('base64')}`,
            `Basic ${Buffer.from(`x:${keys.admin}`).toString('base64')}`,
            'Basic !!!',
            `Bearer ${'k'.repeat(4000)}`,
            'Bearer \u00e9\u00ff',
          )
          .map((header) => ({ role: 'malformed', header })),
      },
    );
  }

  private headerValues(spec: OperationSpec): fc.Arbitrary<Record<string, string>> {
    // Header values must be latin-1 without controls, or Node refuses to send them.
    const headerText = fc.oneof(
      fc.stringMatching(/^[\x21-\x7e]{1,40}$/),
      fc.constantFrom(
        '',
        ' ',
        'a b',
        'x'.repeat(256),
        'x'.repeat(255),
        '\u00e9\u00ff',
        '%00',
        'exe_1',
        '-1',
        '0',
        'evt_x',
      ),
      fc.constantFrom(...this.fixtures.ownExecutions).map((id) => `${id}`),
    );
    const documented = spec.headerParams.map((p) =>
      fc.option(
        headerText.map((v) => [p.name, v] as const),
        { freq: 2, nil: null },
      ),
    );
    // Accept matters to content negotiation (and /mcp requires both JSON and event-stream).
    const accept = fc.option(
      fc
        .constantFrom('application/json, text/event-stream', 'text/event-stream', 'application/json', '*/*', 'x/y')
        .map((v) => ['accept', v] as const),
      { freq: 2, nil: null },
    );
    return fc
      .tuple(accept, ...documented)
      .map((pairs) => Object.fromEntries(pairs.filter((p): p is readonly [string, string] => p !== null)));
  }

  private body(spec: OperationSpec): fc.Arbitrary<BodyPart> {
    const json: Record<string, string> = { 'content-type': 'application/json' };
    const named = this.fixtures.templates[`${spec.method} ${spec.template}`] as Json[] | undefined;
    const generated: fc.Arbitrary<Json> = spec.body ? this.values.valid(spec.body) : fc.constant({});
    const base = named?.length
      ? fc.oneof({ weight: 2, arbitrary: fc.constantFrom(...named) }, { weight: 1, arbitrary: generated })
      : generated;
    // Half of the bodies stay as generated (mostly valid), the rest get one to three mutations.
    const mutations = fc.oneof(fc.constant<Mutation[]>([]), fc.array(mutation(), { minLength: 1, maxLength: 3 }));
    const structured = fc.tuple(base, mutations).map(([value, mutations]) => ({
      body: applyMutations(value, mutations),
      headers: json,
    }));
    const raw = fc.oneof(
      fc
        .constantFrom(
          '',
          '{',
          'null',
          '[]',
          '"text"',
          '123',
          'true',
          '{"a":1,"a":2}',
          '\ufeff{}',
          '{"__proto__":{"x":1}}',
          '{"a":"\\ud800"}',
          '{"a":"\\u0000"}',
          '['.repeat(10_000) + ']'.repeat(10_000),
          '{"a":' + '1'.repeat(1000) + '}',
        )
        .map((body) => ({ body, headers: json })),
      fc
        .tuple(
          base,
          fc.constantFrom(
            'text/plain',
            'application/x-www-form-urlencoded',
            'application/json; charset=latin1',
            'application/merge-patch+json',
            'application/json; charset=utf-16',
            'multipart/form-data; boundary=x',
            '',
          ),
        )
        .map(([value, type]) => ({
          body: JSON.stringify(value),
          headers: (type ? { 'content-type': type } : {}) as Record<string, string>,
        })),
      fc.tuple(base, fc.constantFrom('gzip', 'deflate', 'br', 'identity', 'x-unknown')).map(([value, encoding]) => ({
        body: JSON.stringify(value),
        headers: { ...json, 'content-encoding': encoding },
      })),
      fc
        .constantFrom('7b2261223a22ff227d', 'fffe7b007d00', 'c0af', '7b22c3', 'efbbbf7b7d')
        .map((bodyHex) => ({ bodyHex, headers: json })),
      fc
        .constantFrom(256 * 1024, 300 * 1024)
        .map((n) => ({ body: JSON.stringify({ agent_id: 'x'.repeat(n) }), headers: json })),
    );
    return fc.oneof(
      { weight: spec.body ? 6 : 1, arbitrary: structured },
      { weight: 2, arbitrary: raw },
      { weight: spec.bodyRequired ? 1 : 3, arbitrary: fc.constant<BodyPart>({ headers: {} }) },
    );
  }

  request(spec: OperationSpec): fc.Arbitrary<FuzzRequest> {
    const path = fc.tuple(...spec.pathParams.map((p) => this.pathValue(p, spec.template))).map((values) => {
      let filled = spec.template;
      spec.pathParams.forEach((p, i) => (filled = filled.replace(`{${p.name}}`, values[i])));
      return filled;
    });
    // A body is sent with POST/PUT/PATCH, and sometimes with GET/DELETE, which must ignore or refuse it.
    const withBody: fc.Arbitrary<BodyPart> = ['POST', 'PUT', 'PATCH'].includes(spec.method)
      ? this.body(spec)
      : fc.oneof(
          { weight: 5, arbitrary: fc.constant<BodyPart>({ headers: {} }) },
          { weight: 1, arbitrary: this.body(spec) },
        );
    return fc
      .tuple(path, this.query(spec), this.authorization(), this.headerValues(spec), withBody)
      .map(([p, q, auth, headers, body]) => ({
        operation: `${spec.method} ${spec.template}`,
        role: auth.role,
        method: spec.method,
        path: `${p}${q}`,
        headers: {
          ...headers,
          ...body.headers,
          ...(auth.header !== undefined ? { authorization: auth.header } : {}),
        },
        ...(body.body !== undefined ? { body: body.body } : {}),
        ...(body.bodyHex !== undefined ? { bodyHex: body.bodyHex } : {}),
        stream: spec.stream,
      }));
  }

  /** Every documented operation, equally likely. */
  any(specs: OperationSpec[]): fc.Arbitrary<FuzzRequest> {
    return fc.oneof(...specs.map((spec) => this.request(spec))).map(printable);
  }
}

/** Long values would bury the failure report: they print abbreviated (the seed and path replay them exactly). */
function printable(req: FuzzRequest): FuzzRequest {
  return Object.defineProperty(req, fc.toStringMethod, {
    enumerable: false,
    value: () =>
      JSON.stringify(req, (_key, value: unknown) =>
        typeof value === 'string' && value.length > 300
          ? `${value.slice(0, 120)}…(${value.length} chars in all)…${value.slice(-60)}`
          : value,
      ),
  });
}
