import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { http, unique } from '../support/http';
import {
  CompiledSchemas,
  documentAjv,
  OpenApiDocument,
  schemaPointers,
  takeViolations,
  useDocument,
  validatorFor,
} from '../support/openapi-validator';
import { Stack } from '../support/stack';

const ROOT = join(__dirname, '..', '..');
const REDOCLY = join(ROOT, 'node_modules', '@redocly', 'cli', 'bin', 'cli.js');
const DEMO = { agent: 'demo-agent-key', operator: 'demo-operator-key' };

interface Example {
  summary?: string;
  value: Record<string, unknown>;
}
interface Operation {
  operationId?: string;
  security?: Record<string, string[]>[];
  parameters?: { name: string; in: string; required?: boolean }[];
  requestBody?: { content: Record<string, { examples?: Record<string, Example> }> };
  responses: Record<string, { content?: Record<string, { examples?: Record<string, Example> }> }>;
}
interface Document {
  servers: { url: string }[];
  paths: Record<string, Record<string, Operation>>;
  components: { securitySchemes: Record<string, Record<string, unknown>> };
}

/**
 * The served OpenAPI document is what tools see: Redocly's recommended rules pass with nothing to report, and what
 * it says about headers, security and problems is what the API does (checked by asking the API).
 */
describe('the OpenAPI document (/docs-json)', () => {
  let stack: Stack;
  let doc: Document;
  let dir: string;

  beforeAll(async () => {
    // Only the API and the sandbox: nothing here needs an operation to be sent.
    stack = await Stack.start({ label: 'openapi', dispatchers: 0, reconcilers: 0 });
    const res = await http<Document>(stack.apiUrl, 'GET', '/docs-json');
    expect(res.status).toBe(200);
    doc = res.body;
    dir = mkdtempSync(join(tmpdir(), 'verity-openapi-'));
  });
  afterAll(async () => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    await stack?.stop();
  });

  const operations = () =>
    Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.entries(item).map(([method, operation]) => ({ path, method, operation })),
    );
  const example = (path: string, method: string, status: number, code: string) =>
    doc.paths[path][method].responses[String(status)]?.content?.['application/problem+json']?.examples?.[code]?.value;

  it('is the checked-in document the SDK’s types are generated from (libs/sdk/src/generated/openapi.json)', () => {
    // The generator builds the document without a server (Nest's preview mode): this holds it to the served one.
    const checkedIn = JSON.parse(readFileSync(join(ROOT, 'libs', 'sdk', 'src', 'generated', 'openapi.json'), 'utf8'));
    expect(doc).toEqual(checkedIn);
  });

  it('passes `redocly lint` (recommended rules) with no error and no warning', async () => {
    const file = join(dir, 'openapi.json');
    writeFileSync(file, JSON.stringify(doc));
    // Run in an empty directory with the rule set named, so no configuration file can soften the rules.
    const lint = await promisify(execFile)(
      process.execPath,
      [REDOCLY, 'lint', '--extends=recommended', '--format=json', '--max-problems=1000', file],
      {
        cwd: dir,
        timeout: 60_000,
        maxBuffer: 16 * 1024 * 1024,
        env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' },
      },
    ).catch((error: { stdout?: string; stderr?: string }) => ({ stdout: error.stdout ?? '', stderr: error.stderr }));
    const report = JSON.parse(lint.stdout) as {
      totals: { errors: number; warnings: number };
      problems: { ruleId: string; message: string; location: { pointer: string }[] }[];
    };
    const problems = report.problems.map((p) => `${p.ruleId} ${p.location[0]?.pointer}: ${p.message}`);
    expect(problems).toEqual([]);
    expect(report.totals).toMatchObject({ errors: 0, warnings: 0 });
  });

  it('declares the Idempotency-Key header once, optional', () => {
    const headers = (doc.paths['/v1/executions'].post.parameters ?? []).filter((p) => p.in === 'header');
    expect(headers).toEqual([expect.objectContaining({ name: 'Idempotency-Key', required: false })]);
  });

  it('names opaque Bearer keys (no JWT) and Basic for Bull Board, and has servers and unique operationIds', () => {
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(doc.components.securitySchemes.bearer.bearerFormat).toBeUndefined();
    expect(doc.components.securitySchemes.basic).toMatchObject({ type: 'http', scheme: 'basic' });
    expect(doc.paths['/admin/queues'].get.security).toEqual([{ bearer: [] }, { basic: [] }]);
    expect(doc.servers.length).toBeGreaterThan(0);
    const ids = operations().map(({ operation }) => operation.operationId);
    expect(ids.filter((id) => !id)).toEqual([]);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('says which routes need a key as the API does: a request without one gets 401 exactly where security is set', async () => {
    const wrong: string[] = [];
    for (const { path, method, operation } of operations()) {
      const url = path
        .replace('{id}', path.startsWith('/v1/operations') ? 'op_01nothere' : 'exe_01nothere')
        .replace('{connector}', 'http')
        .replace('{name}', 'NOTHERE');
      const res = await fetch(`${stack.apiUrl}${url}`, { method: method.toUpperCase() });
      await res.body?.cancel();
      const secured = (operation.security ?? []).length > 0;
      if ((res.status === 401) !== secured) wrong.push(`${method} ${path}: ${res.status}, security ${secured}`);
      if (!operation.responses[String(res.status)]) wrong.push(`${method} ${path}: ${res.status} is not documented`);
    }
    expect(wrong).toEqual([]);
  });

  it('pre-fills "Try it out" with the README’s submission, which the API accepts', async () => {
    const media = doc.paths['/v1/executions'].post.requestBody!.content['application/json'];
    const submission = structuredClone(Object.values(media.examples!)[0].value) as {
      operations: { params: Record<string, string> }[];
    };
    // A fresh reference, so that this run and the README's own never meet at the provider.
    submission.operations[0].params.reference = unique('order');
    const res = await http<{ status: string; operations: { status: string }[] }>(
      stack.apiUrl,
      'POST',
      '/v1/executions',
      { key: DEMO.agent, body: submission },
    );
    expect(res.status).toBe(201);
    const created = Object.values(
      doc.paths['/v1/executions'].post.responses['201'].content!['application/json'].examples!,
    )[0].value;
    expect(Object.keys(res.body).sort()).toEqual(Object.keys(created).sort());
    expect(res.body.operations.map((o) => o.status)).toEqual(['PREPARED', 'PREPARED']);
  });

  it('shows as examples the problems the API really answers', async () => {
    const body = (res: { body: unknown }) => {
      const { instance: _instance, ...rest } = res.body as Record<string, unknown>;
      return rest;
    };
    const documented = (path: string, method: string, status: number, code: string) => {
      const value = example(path, method, status, code);
      expect([path, method, status, code, value !== undefined]).toEqual([path, method, status, code, true]);
      const { instance: _instance, ...rest } = value!;
      return rest;
    };
    const exe = '/v1/executions/exe_01m8pvhh2er6qkdabxc471q72t';

    expect(body(await http(stack.apiUrl, 'GET', exe))).toEqual(
      documented('/v1/executions/{id}', 'get', 401, 'unauthorized'),
    );
    expect(body(await http(stack.apiUrl, 'GET', exe, { key: DEMO.operator }))).toEqual(
      documented('/v1/executions/{id}', 'get', 403, 'operator-not-tenant'),
    );
    expect(body(await http(stack.apiUrl, 'GET', exe, { key: DEMO.agent }))).toEqual(
      documented('/v1/executions/{id}', 'get', 404, 'not-found'),
    );
    expect(body(await http(stack.apiUrl, 'GET', '/v1/review/summary', { key: DEMO.agent }))).toEqual(
      documented('/v1/review/summary', 'get', 403, 'forbidden'),
    );
    expect(
      body(
        await http(stack.apiUrl, 'POST', '/v1/executions', {
          key: DEMO.agent,
          rawBody: 'hello',
          headers: { 'content-type': 'text/plain' },
        }),
      ),
    ).toEqual(documented('/v1/executions', 'post', 415, 'unsupported-media-type'));
    expect(
      body(
        await http(stack.apiUrl, 'POST', '/v1/executions', {
          key: DEMO.agent,
          rawBody: JSON.stringify({ padding: 'x'.repeat(300 * 1024) }),
          headers: { 'content-type': 'application/json' },
        }),
      ),
    ).toEqual(documented('/v1/executions', 'post', 413, 'payload-too-large'));

    const submission = {
      agent_id: 'billing-bot',
      intent: 'Charge order 1234',
      operations: [
        {
          key: 'charge',
          connector: 'sandbox.payments',
          action: 'charge',
          params: { amount: -5, currency: 'EUR', reference: 'order-1234' },
        },
      ],
    };
    expect(body(await http(stack.apiUrl, 'POST', '/v1/executions', { key: DEMO.agent, body: submission }))).toEqual(
      documented('/v1/executions', 'post', 400, 'validation-error'),
    );
    const key = unique('key');
    submission.operations[0].params = { amount: 1250, currency: 'EUR', reference: unique('order') };
    const headers = { 'idempotency-key': key };
    expect(
      (await http(stack.apiUrl, 'POST', '/v1/executions', { key: DEMO.agent, body: submission, headers })).status,
    ).toBe(201);
    submission.intent = 'Something else';
    expect(
      body(await http(stack.apiUrl, 'POST', '/v1/executions', { key: DEMO.agent, body: submission, headers })),
    ).toEqual(documented('/v1/executions', 'post', 422, 'idempotency-key-reused'));
  });

  describe('the response check every e2e test runs (test/support/openapi-validator.ts)', () => {
    const exe = '/v1/executions/exe_01m8pvhh2er6qkdabxc471q72t';
    const problem = (status: number) =>
      JSON.stringify({ type: 'https://verity.dev/problems/not-found', title: 'Not found', status });
    const json = (type = 'application/json') => new Headers({ 'content-type': type });

    it('is installed: the fetch every test uses is the checking one', () => {
      expect(globalThis.fetch.name).toBe('validatingFetch');
    });

    it('names an undocumented status, a wrong content type and a wrong shape in a synthetic response', async () => {
      const validator = await validatorFor(stack.apiUrl);
      expect(validator.route(exe)).toBe('/v1/executions/{id}');
      expect(validator.check('GET', exe, 418, json('application/problem+json'), problem(418))).toEqual([
        expect.stringMatching(/^status 418 is not documented for get \/v1\/executions\/\{id\} \(documented: 200, /),
      ]);
      expect(validator.check('GET', exe, 200, json('text/plain'), undefined)).toEqual([
        'content type text/plain is not documented for 200 (documented: application/json)',
      ]);
      expect(validator.check('GET', exe, 200, json(), JSON.stringify({ id: 5 }))).toEqual(
        expect.arrayContaining(['/id must be string', "(body) must have required property 'agent_id'"]),
      );
      expect(validator.check('GET', exe, 404, json('application/problem+json'), problem(410))).toEqual([
        "the problem's status 410 is not 404",
      ]);
      // A problem code the API does not list (problem codes are one enum).
      const teapot = JSON.stringify({ type: 'https://verity.dev/problems/teapot', title: 'Teapot', status: 404 });
      expect(validator.check('GET', exe, 404, json('application/problem+json'), teapot)).toEqual([
        expect.stringContaining('/type must be equal to one of the allowed values'),
      ]);
      expect(validator.check('DELETE', '/v1/admin/webhooks/whk_01nothere', 204, json(), '{}')).toEqual([
        '204 is documented without a body, but one came (application/json)',
      ]);
      expect(validator.check('GET', '/v1/nothing-here', 200, json(), '{}')).toEqual([
        'GET /v1/nothing-here is not in the document, and the answer is 200, not a 404 problem',
      ]);
      // The documented answers pass: a problem with its documented header, a route the API does not have.
      const limited = new Headers({ 'content-type': 'application/problem+json', 'retry-after': '12' });
      expect(validator.check('GET', exe, 429, limited, problem(429))).toEqual([]);
      limited.set('retry-after', 'soon');
      expect(validator.check('GET', exe, 429, limited, problem(429))).toEqual([
        'header Retry-After: "soon" is not an integer',
      ]);
      expect(validator.check('GET', '/v1/nothing-here', 404, json('application/problem+json'), problem(404))).toEqual(
        [],
      );
      // A method a documented path does not have (MCP clients try GET /mcp): 405 with Allow, as HTTP says.
      const refused = new Headers({ 'content-type': 'application/problem+json', allow: 'POST' });
      expect(validator.check('GET', '/mcp', 405, refused, problem(405))).toEqual([]);
      refused.delete('allow');
      expect(validator.check('GET', '/mcp', 405, refused, problem(405))).toEqual(['a 405 without an Allow header']);
    });

    it('checks with the schemas compiled once per machine, which answer as the document compiled in process', async () => {
      const text = await (await fetch(`${stack.apiUrl}/docs-json`)).text();
      // validatorFor (the stack's API is watched) wrote them if no file before this one had.
      await validatorFor(stack.apiUrl);
      const compiled = CompiledSchemas.read(CompiledSchemas.folderOf(text));
      expect(compiled).toBeDefined();
      const served = JSON.parse(text) as OpenApiDocument;
      const ajv = documentAjv(served);
      const pointers = schemaPointers(served);
      expect(pointers.length).toBeGreaterThan(100);
      // Each schema's documented examples (valid) and values no schema of the API accepts.
      const pick = (pointer: string) =>
        pointer
          .slice(2)
          .split('/')
          .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
          .slice(0, -1)
          .reduce<unknown>((node, key) => (node as Record<string, unknown>)[key], served) as {
          examples?: Record<string, { value: unknown }>;
        };
      for (const pointer of pointers) {
        const fromCache = compiled!.load(pointer);
        expect({ pointer, compiled: typeof fromCache }).toEqual({ pointer, compiled: 'function' });
        const inProcess = ajv.compile({ $ref: `openapi.json${pointer}` });
        const examples = Object.values(pick(pointer).examples ?? {}).map((e) => e.value);
        for (const value of [...examples, {}, null, [], 'x', { id: 5, status: 'nope' }]) {
          const answer = (validate: typeof inProcess) => ({
            pointer,
            value,
            valid: validate(value),
            errors: validate.errors,
          });
          expect(answer(fromCache!)).toEqual(answer(inProcess));
        }
      }
    });

    it('fails the request when a real response is not what the document says (a status and a shape removed)', async () => {
      const altered = structuredClone(doc) as unknown as OpenApiDocument;
      delete altered.paths['/v1/executions/{id}'].get.responses['404'];
      const problemSchema = altered.components!.schemas!.Problem as { required: string[] };
      problemSchema.required = [...problemSchema.required, 'remedy'];
      const restore = useDocument(stack.apiUrl, altered);
      try {
        // The API answers 404, which the altered document no longer describes: the request itself fails.
        await expect(http(stack.apiUrl, 'GET', exe, { key: DEMO.agent })).rejects.toThrow(
          /the response to GET \/v1\/executions\/exe_01m8pvhh2er6qkdabxc471q72t \(404\)[^]*status 404 is not documented/,
        );
        // A 401 problem is still documented, but no longer its shape: every problem now lacks `remedy`.
        await expect(fetch(`${stack.apiUrl}${exe}`)).rejects.toThrow(
          /\(401\)[^]*\(body\) must have required property 'remedy'/,
        );
        expect(takeViolations().map((v) => `${v.method} ${v.status}`)).toEqual(['GET 404', 'GET 401']);
      } finally {
        restore();
      }
      // The served document describes both again.
      expect((await http(stack.apiUrl, 'GET', exe, { key: DEMO.agent })).status).toBe(404);
      expect((await http(stack.apiUrl, 'GET', exe)).status).toBe(401);
    });
  });
});
