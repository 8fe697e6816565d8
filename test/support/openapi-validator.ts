import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import Ajv, { _, type ErrorObject, type Options, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import standaloneCode from 'ajv/dist/standalone';

/**
 * Every response a test sees from an API of a test stack is checked against the OpenAPI document that API serves
 * (/docs-json): the status must be documented for the method and path (or covered by `4XX`/`default`), the
 * content type must be one of the documented media types, documented headers must have their documented shape, and a
 * JSON body must validate against the documented schema (ajv, $refs resolved in the document itself). A test whose
 * request gets an undescribed answer fails, naming the method, path, status and what does not match.
 *
 * The check wraps `globalThis.fetch` (test/support/validate-responses.ts, a jest setupFilesAfterEnv), so the `http()`
 * helper, the SDK, the MCP client and the SSE helper are all covered without each test opting in. It applies only to
 * the origins of APIs a Stack started (`watchApi`): the sandbox provider, webhook receivers and canaries on other
 * ports are no part of the API's contract.
 *
 * Compiling the document's schemas is most of the check's cost to a test file (~0.25 s of CPU each, in ~240 files), so
 * each document's response and request schemas are compiled once per machine, to standalone JavaScript (ajv's
 * standalone code, from the same schemas with the same options) kept under node_modules/.cache by the hash of the
 * document's text and of this file; a test file loads only the ones it uses (see CompiledSchemas).
 *
 * Not checked, by design:
 * - the body of a `text/event-stream` (the stream may never end; status and content type are checked) and of
 *   non-JSON media types (HTML, Prometheus text): their content type is checked, their text is not;
 * - paths the document deliberately leaves to their owners: Swagger UI's assets under /docs/, /docs-json itself and
 *   its YAML twin /docs-yaml,
 *   the console's assets and client-side routes under /console/, and Bull Board's own pages and API under
 *   /admin/queues/ (third-party; /docs, /console and /admin/queues themselves are documented and checked).
 * Any other path the document does not name (under /v1, /health, / or anywhere else) must be answered like an
 * unknown route: 404 application/problem+json valid against the Problem schema; a method a documented path does not
 * have may also get 405 with an Allow header (GET /mcp, which MCP clients try, is refused that way).
 */

export interface Violation {
  method: string;
  url: string;
  status: number;
  problems: string[];
  message: string;
}

interface MediaType {
  schema?: unknown;
}
interface Header {
  required?: boolean;
  schema?: { type?: string };
}
interface ResponseObject {
  headers?: Record<string, Header>;
  content?: Record<string, MediaType>;
}
interface OperationObject {
  responses: Record<string, ResponseObject>;
}
export interface OpenApiDocument {
  paths: Record<string, Record<string, OperationObject>>;
  components?: { schemas?: Record<string, unknown> };
}

/** Paths under these prefixes are served by others (Swagger UI, the console's static files, Bull Board). */
const UNDOCUMENTED_BY_DESIGN = ['/docs/', '/docs-json', '/docs-yaml', '/console/', '/admin/queues/'];

const PROBLEM = '#/components/schemas/Problem';

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'];

interface Route {
  template: string;
  pattern: RegExp;
  params: number;
}

/**
 * The ajv every schema of a document is compiled with (in process, or to standalone code with `code`). strict: false
 * lets OpenAPI's own keywords (example, nullable handled by ajv, xml, …) through; allErrors so a failure names every
 * mismatch at once.
 */
export function documentAjv(doc: OpenApiDocument, code?: Options['code']): Ajv {
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: true, ...(code ? { code } : {}) });
  addFormats(ajv);
  // zod writes `format: starts_with` beside the `pattern` that does the checking.
  ajv.addFormat('starts_with', true);
  ajv.addSchema(draft04Bounds(doc) as object, 'openapi.json');
  return ajv;
}

/** One compiled document: its routes and a cache of compiled response schemas. */
export class ResponseValidator {
  private ajvOfDocument?: Ajv;
  private readonly routes: Route[];
  private readonly compiled = new Map<string, ValidateFunction>();

  /**
   * `precompiled`: the document's schemas compiled ahead (the disk cache, see loadValidator); any other is compiled
   * here when first needed.
   */
  constructor(
    private readonly doc: OpenApiDocument,
    private readonly precompiled?: CompiledSchemas,
  ) {
    this.routes = Object.keys(doc.paths)
      .map((template) => ({
        template,
        pattern: new RegExp(
          `^${template
            .split(/(\{[^}]+\})/)
            .map((part) => (part.startsWith('{') ? '([^/]+)' : part.replace(/[.*+?^$()|[\]\\]/g, '\\$&')))
            .join('')}$`,
        ),
        params: (template.match(/\{/g) ?? []).length,
      }))
      // A literal path wins over a template that also matches it.
      .sort((a, b) => a.params - b.params);
  }

  /** The documented path template for a concrete path, if any. */
  route(path: string): string | undefined {
    return this.routes.find((r) => r.pattern.test(path))?.template;
  }

  /**
   * What is wrong with this response (an empty list when the document describes it). `body` is the response's text
   * when it was read (JSON media types), undefined when it was not (streams, HTML, text).
   */
  check(method: string, path: string, status: number, headers: Headers, body: string | undefined): string[] {
    const template = this.route(path);
    // HEAD is GET without the body (express answers it on every GET route).
    const head = method.toUpperCase() === 'HEAD' && template !== undefined && !this.doc.paths[template].head;
    const verb = head ? 'get' : method.toLowerCase();
    const operation = template ? this.doc.paths[template][verb] : undefined;
    if (head) body = undefined;
    if (!template || !operation || !HTTP_METHODS.includes(verb)) {
      if (UNDOCUMENTED_BY_DESIGN.some((prefix) => path === prefix || path.startsWith(prefix))) return [];
      // A route the API does not have: the answer must be a "not found" problem. A method a documented path does
      // not have may also be refused as HTTP says, 405 with Allow (OpenAPI cannot describe a method's absence; an
      // operation answering only 405 would be an operation without a success).
      if (status === 405 && template) {
        const problems = headers.get('allow') ? [] : ['a 405 without an Allow header'];
        return [...problems, ...this.checkBody(PROBLEM, 'application/problem+json', status, headers, body)];
      }
      if (status !== 404) {
        const what = template
          ? `${method} is not documented for ${template}`
          : `${method} ${path} is not in the document`;
        return [`${what}, and the answer is ${status}, not a 404 problem${template ? ' or a 405 with Allow' : ''}`];
      }
      return this.checkBody(PROBLEM, 'application/problem+json', status, headers, body);
    }
    const key = [String(status), `${String(status)[0]}XX`, 'default'].find((k) => operation.responses[k]);
    if (!key) {
      const documented = Object.keys(operation.responses).join(', ');
      return [`status ${status} is not documented for ${verb} ${template} (documented: ${documented})`];
    }
    const response = operation.responses[key];
    const pointer = `#/paths/${escape(template)}/${verb}/responses/${escape(key)}`;
    const problems = this.checkHeaders(response, headers);
    const contentType = mediaType(headers);
    const content = response.content ?? {};
    // A HEAD answer has the GET's headers and no body: nothing more to compare.
    if (head && status < 300) return problems;
    if (Object.keys(content).length === 0) {
      if (contentType || (body !== undefined && body !== '')) {
        problems.push(`${status} is documented without a body, but one came (${contentType ?? 'no content type'})`);
      }
      return problems;
    }
    const documentedType = Object.keys(content).find((type) => matchesMediaType(type, contentType));
    if (!documentedType) {
      problems.push(
        `content type ${contentType ?? '(none)'} is not documented for ${status} ` +
          `(documented: ${Object.keys(content).join(', ')})`,
      );
      return problems;
    }
    if (!content[documentedType].schema || !isJson(contentType)) return problems;
    problems.push(
      ...this.checkBody(
        `${pointer}/content/${escape(documentedType)}/schema`,
        contentType ?? documentedType,
        status,
        headers,
        body,
      ),
    );
    return problems;
  }

  /**
   * What is wrong with this JSON request body for the method and path (an empty list when the document's request
   * body schema accepts it): the docs' example requests are checked with it.
   */
  checkRequest(method: string, path: string, body: unknown): string[] {
    const template = this.route(path);
    const verb = method.toLowerCase();
    const operation = template ? (this.doc.paths[template][verb] as { requestBody?: unknown } | undefined) : undefined;
    if (!template || !operation) return [`${method} ${path} is not in the document`];
    if (!operation.requestBody) return [`${method} ${template} is documented without a request body`];
    const validate = this.validator(`#/paths/${escape(template)}/${verb}/requestBody/content/application~1json/schema`);
    return validate(body) ? [] : formatErrors(validate.errors ?? []);
  }

  /** Whether the body of this content type is read and validated (JSON) or left alone (streams, HTML, text). */
  static readsBody(headers: Headers): boolean {
    return isJson(mediaType(headers));
  }

  private checkHeaders(response: ResponseObject, headers: Headers): string[] {
    const problems: string[] = [];
    for (const [name, header] of Object.entries(response.headers ?? {})) {
      const value = headers.get(name);
      if (value === null) {
        if (header.required) problems.push(`header ${name} is required but missing`);
        continue;
      }
      const type = header.schema?.type;
      if (type === 'integer' && !/^\d+$/.test(value)) problems.push(`header ${name}: "${value}" is not an integer`);
      if (type === 'number' && !Number.isFinite(Number(value))) {
        problems.push(`header ${name}: "${value}" is not a number`);
      }
      if (type === 'boolean' && value !== 'true' && value !== 'false') {
        problems.push(`header ${name}: "${value}" is not a boolean`);
      }
    }
    return problems;
  }

  private checkBody(
    pointer: string,
    expectedType: string,
    status: number,
    headers: Headers,
    body: string | undefined,
  ): string[] {
    const contentType = mediaType(headers);
    if (!matchesMediaType(expectedType, contentType)) {
      return [`content type ${contentType ?? '(none)'} is not ${expectedType}`];
    }
    if (body === undefined) return [];
    let value: unknown;
    try {
      value = JSON.parse(body);
    } catch {
      return [`the body is not JSON: ${body.slice(0, 200)}`];
    }
    const validate = this.validator(pointer);
    const problems = validate(value) ? [] : formatErrors(validate.errors ?? []);
    // RFC 9457: a problem's `status` is the HTTP status it was sent with.
    if (contentType === 'application/problem+json' && (value as { status?: unknown })?.status !== status) {
      problems.push(`the problem's status ${String((value as { status?: unknown })?.status)} is not ${status}`);
    }
    return problems;
  }

  private validator(pointer: string): ValidateFunction {
    let validate = this.compiled.get(pointer);
    if (!validate) {
      validate = this.precompiled?.load(pointer);
      if (!validate) {
        this.ajvOfDocument ??= documentAjv(this.doc);
        validate = this.ajvOfDocument.compile({ $ref: `openapi.json${pointer}` });
      }
      this.compiled.set(pointer, validate);
    }
    return validate;
  }
}

/** The pointer of every schema `check` and `checkRequest` may validate a body with: what is compiled ahead. */
export function schemaPointers(doc: OpenApiDocument): string[] {
  const pointers = [PROBLEM];
  for (const [template, operations] of Object.entries(doc.paths)) {
    for (const [verb, operation] of Object.entries(operations)) {
      if (!HTTP_METHODS.includes(verb)) continue;
      for (const [key, response] of Object.entries(operation.responses ?? {})) {
        for (const [type, media] of Object.entries(response.content ?? {})) {
          if (!media.schema) continue;
          pointers.push(`#/paths/${escape(template)}/${verb}/responses/${escape(key)}/content/${escape(type)}/schema`);
        }
      }
      const body = (operation as { requestBody?: { content?: Record<string, MediaType> } }).requestBody;
      if (body?.content?.['application/json']?.schema) {
        pointers.push(`#/paths/${escape(template)}/${verb}/requestBody/content/application~1json/schema`);
      }
    }
  }
  return pointers;
}

/**
 * A document's schemas compiled to standalone code (ajv's `standaloneCode`, one module per schema, from the ajv the
 * document is checked with and the same options): a folder per document under node_modules/.cache, named by the hash
 * of the document's text, of this file and of ajv's version, with `index.json` mapping each schema's pointer to its
 * module. Written once per machine (into a folder of its own, renamed into place when complete, so a file never reads
 * half a cache); a test file then evaluates only the modules of the schemas it uses. A schema ajv could not compile
 * has no module: it is compiled in process when used, and fails there as it did.
 */
export class CompiledSchemas {
  private constructor(
    private readonly folder: string,
    private readonly index: Record<string, string>,
    /** The functions themselves, in the process that compiled them. */
    private readonly functions = new Map<string, ValidateFunction>(),
  ) {}

  /** The folder of this document's compiled schemas. */
  static folderOf(text: string): string {
    const hash = createHash('sha256');
    for (const pkg of ['ajv', 'ajv-formats']) {
      hash.update(
        `${pkg}@${(JSON.parse(readFileSync(require.resolve(`${pkg}/package.json`), 'utf8')) as { version: string }).version}\n`,
      );
    }
    hash.update(readFileSync(__filename)).update('\n').update(text);
    const nodeModules = dirname(dirname(require.resolve('ajv/package.json')));
    return join(nodeModules, '.cache', 'verity-response-validators', hash.digest('hex').slice(0, 32));
  }

  /** The compiled schemas of the document in `folder`, if they were written. */
  static read(folder: string): CompiledSchemas | undefined {
    const index = join(folder, 'index.json');
    if (!existsSync(index)) return undefined;
    return new CompiledSchemas(folder, JSON.parse(readFileSync(index, 'utf8')) as Record<string, string>);
  }

  /**
   * Compiles every schema of `doc` (schemaPointers) and writes them to `folder`; the answer holds the functions
   * compiled (the file that wrote them uses them as they are).
   */
  static write(folder: string, doc: OpenApiDocument): CompiledSchemas {
    const ajv = documentAjv(doc, {
      source: true,
      formats: _`require("ajv-formats/dist/formats").fullFormats`,
    });
    const building = `${folder}.${process.pid}-${randomBytes(4).toString('hex')}`;
    mkdirSync(building, { recursive: true });
    const index: Record<string, string> = {};
    const functions = new Map<string, ValidateFunction>();
    schemaPointers(doc).forEach((pointer, i) => {
      let code: string;
      try {
        const validate = ajv.compile({ $ref: `openapi.json${pointer}` });
        code = standaloneCode(ajv, validate);
        functions.set(pointer, validate);
      } catch {
        return;
      }
      index[pointer] = `${i}.js`;
      writeFileSync(join(building, index[pointer]), code);
    });
    writeFileSync(join(building, 'index.json'), JSON.stringify(index));
    try {
      renameSync(building, folder);
    } catch {
      // Another process wrote the same document's first: its folder is as good.
      rmSync(building, { recursive: true, force: true });
    }
    CompiledSchemas.prune(folder);
    return new CompiledSchemas(folder, index, functions);
  }

  /**
   * Each edit of the API's document or of this file makes a folder (~6 MB): the others written more than a day ago
   * go when a new one is written. A file still reading one that goes compiles what it can no longer read (load).
   */
  private static prune(kept: string): void {
    const parent = dirname(kept);
    const before = Date.now() - 24 * 60 * 60 * 1000;
    for (const name of readdirSync(parent)) {
      const path = join(parent, name);
      if (path === kept) continue;
      try {
        if (statSync(path).mtimeMs < before) rmSync(path, { recursive: true, force: true });
      } catch {
        // Gone already (another process pruned it).
      }
    }
  }

  /** The validate function of the schema at `pointer`, or undefined when it was not compiled ahead (or is gone). */
  load(pointer: string): ValidateFunction | undefined {
    const file = this.index[pointer];
    if (file === undefined) return undefined;
    const compiled = this.functions.get(pointer);
    if (compiled) return compiled;
    let code: string;
    try {
      code = readFileSync(join(this.folder, file), 'utf8');
    } catch {
      return undefined;
    }
    const module = { exports: {} as unknown };
    // The module as Node would run it, with this module's require (ajv's runtime and ajv-formats' formats).
    new Function('require', 'module', 'exports', code)(require, module, module.exports);
    return module.exports as ValidateFunction;
  }
}

/**
 * OpenAPI 3.0 keeps JSON Schema draft 4's boolean `exclusiveMinimum`/`exclusiveMaximum` beside `minimum`/`maximum`;
 * ajv (draft 7 and later) wants the bound itself as the exclusive value.
 */
function draft04Bounds(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(draft04Bounds);
  if (node === null || typeof node !== 'object') return node;
  const out = Object.fromEntries(Object.entries(node).map(([k, v]) => [k, draft04Bounds(v)])) as Record<
    string,
    unknown
  >;
  for (const [exclusive, bound] of [
    ['exclusiveMinimum', 'minimum'],
    ['exclusiveMaximum', 'maximum'],
  ] as const) {
    if (typeof out[exclusive] !== 'boolean') continue;
    if (out[exclusive] === true && typeof out[bound] === 'number') {
      out[exclusive] = out[bound];
      delete out[bound];
    } else delete out[exclusive];
  }
  return out;
}

function escape(segment: string): string {
  return segment.replace(/~/g, '~0').replace(/\//g, '~1');
}

function mediaType(headers: Headers): string | undefined {
  return headers.get('content-type')?.split(';')[0].trim().toLowerCase() || undefined;
}

function isJson(type: string | undefined): boolean {
  return type !== undefined && (type === 'application/json' || /^application\/[^/]+\+json$/.test(type));
}

function matchesMediaType(documented: string, actual: string | undefined): boolean {
  if (!actual) return false;
  if (documented === '*/*') return true;
  if (documented.endsWith('/*')) return actual.startsWith(documented.slice(0, -1));
  return documented.toLowerCase() === actual;
}

function formatErrors(errors: ErrorObject[]): string[] {
  return errors.slice(0, 20).map((e) => {
    const where = e.instancePath || '(body)';
    const extra =
      e.keyword === 'additionalProperties'
        ? ` (${String((e.params as { additionalProperty?: string }).additionalProperty)})`
        : e.keyword === 'enum'
          ? ` (${JSON.stringify((e.params as { allowedValues?: unknown }).allowedValues)})`
          : '';
    return `${where} ${e.message ?? e.keyword}${extra}`;
  });
}

// ---------------------------------------------------------------------------------------------------------------
// The registry of watched APIs and the fetch wrapper. State lives on globalThis so that the jest setup file and the
// test's own modules (stack.ts) share it whatever module registry loaded them.

interface State {
  installed: boolean;
  realFetch: typeof fetch;
  /** origin -> the validator for that API's document (fetched once per origin, compiled once per document). */
  apis: Map<string, Promise<ResponseValidator>>;
  byDocument: Map<string, ResponseValidator>;
  violations: Violation[];
}

const KEY = Symbol.for('verity.openapi-response-validator');

function state(): State {
  const g = globalThis as unknown as Record<symbol, State | undefined>;
  g[KEY] ??= {
    installed: false,
    realFetch: globalThis.fetch,
    apis: new Map(),
    byDocument: new Map(),
    violations: [],
  };
  return g[KEY];
}

/** Loads (and compiles) the document an API serves. */
async function loadValidator(origin: string): Promise<ResponseValidator> {
  const s = state();
  const res = await s.realFetch(`${origin}/docs-json`);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${origin}/docs-json answered ${res.status}: ${text.slice(0, 200)}`);
  let validator = s.byDocument.get(text);
  if (!validator) {
    const doc = JSON.parse(text) as OpenApiDocument;
    const folder = CompiledSchemas.folderOf(text);
    validator = new ResponseValidator(doc, CompiledSchemas.read(folder) ?? CompiledSchemas.write(folder, doc));
    s.byDocument.set(text, validator);
  }
  return validator;
}

/**
 * Checks every later response from this API (an origin such as http://127.0.0.1:41234) against the document it
 * serves. Called by Stack for each API it starts, once the API answers; harmless where the wrapper is not installed.
 */
export function watchApi(origin: string): void {
  const s = state();
  if (!s.installed) return;
  const key = new URL(origin).origin;
  if (s.apis.has(key)) return;
  const loading = loadValidator(key);
  // A failure to load surfaces at the first response checked, not as an unhandled rejection here.
  loading.catch(() => undefined);
  s.apis.set(key, loading);
}

export function unwatchApi(origin: string): void {
  state().apis.delete(new URL(origin).origin);
}

/**
 * Checks this API's later responses against `doc` instead of what it serves (the validator's own test); returns the
 * function that restores the served document.
 */
export function useDocument(origin: string, doc: OpenApiDocument): () => void {
  const { apis } = state();
  const key = new URL(origin).origin;
  const served = apis.get(key);
  apis.set(key, Promise.resolve(new ResponseValidator(doc)));
  return () => {
    if (served) apis.set(key, served);
    else apis.delete(key);
  };
}

/** The violations recorded since the last call (and forgets them). */
export function takeViolations(): Violation[] {
  return state().violations.splice(0);
}

/** The validator of a watched API (for checking a synthetic response against the document it serves). */
export async function validatorFor(origin: string): Promise<ResponseValidator> {
  const found = state().apis.get(new URL(origin).origin);
  return found ?? loadValidator(new URL(origin).origin);
}

/**
 * Checks one response of a watched API (or against `validator`, given); returns the violation (also recorded) or
 * undefined. A response from an origin that is not watched is not checked.
 */
export async function checkResponse(
  method: string,
  url: string,
  response: Response,
  given?: ResponseValidator,
): Promise<Violation | undefined> {
  const s = state();
  const parsed = new URL(url);
  const loading = given ? Promise.resolve(given) : s.apis.get(parsed.origin);
  if (!loading) return undefined;
  const validator = await loading;
  // Never consume the caller's body: read a clone, and only for JSON (a stream may never end).
  let body: string | undefined;
  if (response.body === null) body = '';
  else if (ResponseValidator.readsBody(response.headers)) body = await response.clone().text();
  const problems = validator.check(method, parsed.pathname, response.status, response.headers, body);
  if (problems.length === 0) return undefined;
  const violation: Violation = {
    method,
    url,
    status: response.status,
    problems,
    message:
      `the response to ${method} ${parsed.pathname} (${response.status}) is not what /docs-json describes:\n` +
      problems.map((p) => `  - ${p}`).join('\n'),
  };
  s.violations.push(violation);
  return violation;
}

/**
 * For the few tests that must speak raw HTTP (a body cut short, a GET with a body), where the fetch wrapper cannot
 * see the answer: checks what they received, and throws as the wrapper would. The answer is always checked, against
 * the document `url`'s API serves, also when that API is not watched: a check asked for never passes unseen.
 */
export async function expectDescribed(
  method: string,
  url: string,
  answer: { status: number; headers: Record<string, string | string[] | undefined>; body?: string },
): Promise<void> {
  const headers = new Headers();
  for (const [name, value] of Object.entries(answer.headers)) {
    if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(', ') : value);
  }
  const violation = await checkResponse(
    method,
    url,
    new Response(answer.body ?? null, { status: answer.status, headers }),
    await validatorFor(url),
  );
  if (violation) throw new UndocumentedResponseError(violation);
}

export class UndocumentedResponseError extends Error {
  constructor(readonly violation: Violation) {
    super(violation.message);
    this.name = 'UndocumentedResponseError';
  }
}

/** Replaces globalThis.fetch with one that checks the responses of watched APIs (idempotent). */
export function installResponseValidation(): void {
  const s = state();
  if (s.installed) return;
  s.installed = true;
  s.realFetch = globalThis.fetch;
  const realFetch = s.realFetch;
  globalThis.fetch = async function validatingFetch(...[input, init]: Parameters<typeof fetch>) {
    const response = await realFetch(input, init);
    const url = input instanceof Request ? input.url : String(input);
    const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
    const violation = await checkResponse(method, url, response);
    if (violation) throw new UndocumentedResponseError(violation);
    return response;
  };
}
