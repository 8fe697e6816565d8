import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { CONFIG_VARIABLES } from '../../libs/platform/src/config';
import { PROBLEM_CODES } from '../../apps/api/src/problem/problem';
import { QueueName } from '../../libs/queues/src/names';
import { TERMINAL_REASONS } from '../../libs/status-model/src/operation';
import { userDocs } from '../support/user-docs';

/**
 * What the docs name must exist: a route is one the API documents (or the sandbox provider serves), a problem code
 * one the API sends, an environment variable one a program reads. Each check is shown to refuse a made-up name.
 */
const ROOT = join(__dirname, '..', '..');
const DOCS = userDocs();
const TEXTS = DOCS.map((file) => ({ file, text: readFileSync(join(ROOT, file), 'utf8') }));

function files(path: string): string[] {
  return statSync(path).isFile()
    ? [path]
    : readdirSync(path)
        .filter((name) => name !== 'node_modules' && name !== 'dist' && name !== 'generated' && !name.startsWith('.'))
        .flatMap((name) => files(join(path, name)));
}

/** The source of the programs and tests (not their specs' fixtures): where a name the docs use must be read. */
const SOURCE = ['apps', 'libs', 'scripts', 'test']
  .flatMap((dir) => files(join(ROOT, dir)))
  .filter((file) => file.endsWith('.ts') && !file.endsWith('docs-names.test.ts'))
  .map((file) => ({ file: relative(ROOT, file), text: readFileSync(file, 'utf8') }));

// --- routes ---------------------------------------------------------------------------------------------------

const OPENAPI = JSON.parse(readFileSync(join(ROOT, 'libs/sdk/src/generated/openapi.json'), 'utf8')) as {
  paths: Record<string, Record<string, unknown>>;
};
const API_ROUTES = Object.entries(OPENAPI.paths).flatMap(([path, item]) =>
  Object.keys(item).map((method) => ({ method: method.toUpperCase(), path })),
);
const SANDBOX_ROUTES = (() => {
  const source = readFileSync(join(ROOT, 'apps/sandbox-provider/src/sandbox-provider.ts'), 'utf8');
  return [
    ...[...source.matchAll(/path === '([^']+)' && method === '([A-Z]+)'/g)].map(([, path, method]) => ({
      method,
      path,
    })),
    ...[...source.matchAll(/method === '([A-Z]+)' && path === '([^']+)'/g)].map(([, method, path]) => ({
      method,
      path,
    })),
  ];
})();
/** Named by the docs as what the API refuses: a method a documented path does not take. */
const REFUSED_METHODS = ['DELETE /v1/executions/{id}', 'PUT /v1/executions', 'DELETE /mcp'];

function routeExists(method: string, path: string): boolean {
  // A template matches itself (`/v1/operations/{id}`) and every path it stands for (`/v1/operations/op_1`).
  const matches = (template: string) =>
    template === path ||
    new RegExp(
      `^${template
        .split(/\{[^}]+\}/)
        .map((part) => part.replace(/[.*+?^$()|[\]\\]/g, '\\$&'))
        .join('[^/]+')}/?$`,
    ).test(path);
  return [...API_ROUTES, ...SANDBOX_ROUTES].some(
    (route) => (route.method === method || (method === 'HEAD' && route.method === 'GET')) && matches(route.path),
  );
}

function documentedRoutes(): { where: string; method: string; path: string }[] {
  return TEXTS.flatMap(({ file, text }) =>
    [...text.matchAll(/\b(GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS) `?(\/[A-Za-z0-9_\-{}./]*)/g)].map((m) => ({
      where: `${file}:${text.slice(0, m.index).split('\n').length}`,
      method: m[1],
      // A sentence's full stop is not part of the path.
      path: m[2].replace(/\.$/, ''),
    })),
  );
}

describe('the routes the docs name', () => {
  it('are operations of the OpenAPI document or routes of the sandbox provider', () => {
    const unknown = documentedRoutes().filter(
      ({ method, path }) =>
        !REFUSED_METHODS.includes(`${method} ${path}`) &&
        !routeExists(method, path) &&
        // `GET /v1/review/…`: the review endpoints, each of which the document has.
        !(
          path.endsWith('/') &&
          path !== '/' &&
          API_ROUTES.some((route) => route.method === method && route.path.startsWith(path))
        ),
    );
    expect(unknown).toEqual([]);
  });

  it('refuse a made-up one', () => {
    expect(documentedRoutes().length).toBeGreaterThan(50);
    expect(routeExists('GET', '/v1/executions/exe_1/events')).toBe(true);
    expect(routeExists('GET', '/v1/executions/exe_1/frobs')).toBe(false);
    expect(routeExists('DELETE', '/v1/executions/{id}')).toBe(false);
  });
});

// --- problem codes --------------------------------------------------------------------------------------------

/** A problem's type URL, or a name after a status code: `409 operation-moved`, 409 `operation-moved`. */
function documentedProblemCodes(text: string): string[] {
  return [
    ...[...text.matchAll(/verity\.dev\/problems\/([a-z0-9-]+)/g)].map((m) => m[1]),
    ...[...text.matchAll(/`[45]\d\d ([a-z]+(?:-[a-z]+)*)`/g)].map((m) => m[1]),
    ...[...text.matchAll(/\b[45]\d\d`?,? (?:problem )?`([a-z]+(?:-[a-z]+)+)`/g)].map((m) => m[1]),
  ];
}

describe('the problem codes the docs name', () => {
  it('are codes the API sends', () => {
    const unknown = TEXTS.flatMap(({ file, text }) =>
      documentedProblemCodes(text)
        .filter((code) => !(PROBLEM_CODES as readonly string[]).includes(code))
        .map((code) => `${file}: ${code}`),
    );
    expect(unknown).toEqual([]);
  });

  it('refuse a made-up one', () => {
    const found = documentedProblemCodes(
      '`409 execution-busy`, https://verity.dev/problems/made-up and 409 `made-up-too`',
    );
    expect(found.filter((code) => !(PROBLEM_CODES as readonly string[]).includes(code))).toEqual([
      'made-up',
      'execution-busy',
      'made-up-too',
    ]);
  });
});

// --- environment variables ------------------------------------------------------------------------------------

/** Read by the OpenTelemetry SDK, a container image or the system, not by Verity's code. */
const READ_BY_OTHERS = [/^OTEL_/, /^NODE_OPTIONS$/, /^POSTGRES_(PASSWORD|HOST_AUTH_METHOD)$/];
/**
 * Not variables: misspellings the docs give as examples of what start-up refuses or warns about, and a constant of the
 * code the docs name as one (`PRODUCER_COMMAND_TIMEOUT_MS` in libs/platform).
 */
const NOT_VARIABLES = [
  'SWEEP_INTERVAL',
  'BULL_BOARD_WRITEABLE',
  'DATABASE_URI',
  'SECRET_KEY',
  'PRODUCER_COMMAND_TIMEOUT_MS',
];
/** `npm run chaos` reads each of its flags from CHAOS_<FLAG> too (test/chaos/run.ts). */
const CHAOS_FLAGS = [...readFileSync(join(ROOT, 'test/chaos/run.ts'), 'utf8').matchAll(/^ {2}'?([a-z-]+)'?: \{/gm)].map(
  (m) => `CHAOS_${m[1].toUpperCase().replace(/-/g, '_')}`,
);

/** The variables docker-compose.yml reads (`${NAME:-default}`). */
const COMPOSE = [...readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8').matchAll(/\$\{([A-Z][A-Z0-9_]*)/g)].map(
  (m) => m[1],
);

/** Whether a program or test reads this variable from the environment. */
function readFromEnvironment(name: string): boolean {
  if ([...CONFIG_VARIABLES, ...COMPOSE, ...CHAOS_FLAGS].includes(name)) return true;
  if (READ_BY_OTHERS.some((pattern) => pattern.test(name))) return true;
  const reads = [
    new RegExp(`\\benv\\.${name}\\b`),
    new RegExp(`\\benv\\[['"]${name}['"]\\]`),
    new RegExp(`['"]${name}['"]`), // passed by name to a reader (parsePort('SANDBOX_PORT'), a settings table)
    new RegExp(`^\\s+${name}: wholeNumberVariable\\(`, 'm'),
  ];
  return SOURCE.some(({ text }) => reads.some((read) => read.test(text)));
}

/**
 * The names the docs give as environment variables: in backticks, `NAME` or `NAME=value`, where NAME reads like a
 * setting (a duration, port, URL, path, flag or limit). Status names, failure codes and constants of the code
 * (`VERIFIED`, `SOURCE_UNREACHABLE`, `RELEASABLE_EXECUTION_STATUSES`) are other things.
 */
function documentedVariables(text: string): string[] {
  const setting =
    /_(MS|PORT|URL|BIN|DIR|KEY|TOKEN|HOST|BIND|LEVEL|FORMAT|ENV|SIZE|BATCH|BUDGET|SHARDS|NODES|PREFIX|PROXY|ORIGINS|CONCURRENCY|ATTEMPTS|AFTER|SEED|RUNS|LOG|WRITABLE|WRITEABLE|PUBLIC|DEMO|EGRESS|MIGRATIONS|ENDPOINT|NAME|DISABLED|EXPORTER|PROTOCOL|HEADERS|SAMPLER|SAMPLER_ARG|ATTRIBUTES|PASSWORD|METHOD|MINUTE|PROCESS|EFFECTS|REQUESTS|KEY_ID|URI|INTERVAL|SEND|ADVANCE|ID)$|^(PORT|HOST|NODE_ENV|NO_COLOR|TRUST_PROXY)$/;
  return [
    ...new Set(
      [...text.matchAll(/`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)(?:=[^`]*)?`/g)]
        .map((m) => m[1])
        .filter((name) => setting.test(name) || text.includes(`\`${name}=`)),
    ),
  ];
}

describe('the environment variables the docs name', () => {
  it('are read by a program, a test, docker-compose.yml or the OpenTelemetry SDK', () => {
    const unknown = TEXTS.flatMap(({ file, text }) =>
      documentedVariables(text)
        .filter((name) => !NOT_VARIABLES.includes(name) && !readFromEnvironment(name))
        .map((name) => `${file}: ${name}`),
    );
    expect(unknown).toEqual([]);
  });

  it('refuse a made-up one', () => {
    expect(documentedVariables('`VERITY_FROB_MS`, `FROB=1`, `VERIFIED`')).toEqual(['VERITY_FROB_MS', 'FROB']);
    expect(readFromEnvironment('VERITY_FROB_MS')).toBe(false);
    expect(readFromEnvironment('SWEEP_INTERVAL_MS')).toBe(true);
    expect(readFromEnvironment('SANDBOX_MAX_EFFECTS')).toBe(true);
    expect(readFromEnvironment('CHAOS_REDIS_CLUSTER')).toBe(true);
    expect(readFromEnvironment('CHAOS_FROB')).toBe(false);
  });
});

// --- tests ----------------------------------------------------------------------------------------------------

/**
 * Whether `test/<dir>/<name>.test.ts` has a test whose title holds each piece of `title` (pieces cut at "…"); a title
 * written with `%s` (it.each) holds a piece that has its text before the `%s`.
 */
function testExists(name: string, title: string): boolean {
  const source = SOURCE.find(({ file }) => new RegExp(`^test/[a-z0-9]+/${name}\\.test\\.ts$`).test(file))?.text;
  if (source === undefined) return false;
  const flat = source.replace(/\s+/g, ' ');
  const templates = [...flat.matchAll(/'([^']*%[sdpij][^']*)'/g)].map((m) => m[1].split(/%[sdpij]/)[0]);
  return title
    .replace(/\s+/g, ' ')
    .split('…')
    .map((piece) => piece.trim().replace(/[;:,]$/, ''))
    .filter(Boolean)
    .every((piece) => flat.includes(piece) || templates.some((fixed) => fixed !== '' && piece.startsWith(fixed)));
}

function documentedTests(): { where: string; name: string; title: string }[] {
  return TEXTS.flatMap(({ file, text }) =>
    [...text.matchAll(/`([a-z0-9-]+) › ([^`]+)`/g)]
      // "`file › test name`" says how the others are written.
      .filter((m) => m[1] !== 'file')
      .map((m) => ({ where: `${file}:${text.slice(0, m.index).split('\n').length}`, name: m[1], title: m[2] })),
  );
}

describe('the tests the docs name (`file › test name`)', () => {
  it('are tests of that file', () => {
    expect(documentedTests().filter(({ name, title }) => !testExists(name, title))).toEqual([]);
  });

  it('refuse a made-up one', () => {
    expect(documentedTests().length).toBeGreaterThan(20);
    expect(testExists('late-rejection', 'comes after a reviewer’s VERIFIED: …')).toBe(true);
    expect(testExists('late-rejection', 'comes after a frob …')).toBe(false);
    expect(testExists('no-such-file', 'anything')).toBe(false);
  });
});

// --- files ----------------------------------------------------------------------------------------------------

/** The files of the repository the docs name in backticks (`apps/…`, `libs/…`, `test/…`, `scripts/…`, `deploy/…`). */
function documentedFiles(text: string): string[] {
  return [...text.matchAll(/`((?:apps|libs|test|scripts|deploy)\/[A-Za-z0-9_./-]+)`/g)]
    .map((m) => m[1].replace(/[.,:]$/, ''))
    .filter((path) => !/^libs\/sdk\/(dist|verity-sdk-[\d.]+\.tgz)/.test(path)); // made by npm run build / npm pack
}

describe('the files the docs name', () => {
  it('exist (a path in the SDK README may be relative to libs/sdk)', () => {
    const missing = TEXTS.flatMap(({ file, text }) =>
      documentedFiles(text)
        .filter(
          (path) =>
            !existsSync(join(ROOT, path)) &&
            !(file.startsWith('libs/sdk/') && existsSync(join(ROOT, 'libs/sdk', path))),
        )
        .map((path) => `${file}: ${path}`),
    );
    expect(missing).toEqual([]);
  });

  it('refuse a made-up one', () => {
    const found = documentedFiles('`apps/api/src/frob.ts`, `libs/sdk/dist/index.js`, `test/e2e/api-reads.test.ts`');
    expect(found).toEqual(['apps/api/src/frob.ts', 'test/e2e/api-reads.test.ts']);
    expect(found.filter((path) => !existsSync(join(ROOT, path)))).toEqual(['apps/api/src/frob.ts']);
    expect(TEXTS.flatMap(({ text }) => documentedFiles(text)).length).toBeGreaterThan(20);
  });
});

// --- validation rules and refusal reasons ---------------------------------------------------------------------

/** zod's own issue codes, which a 400 may name as its rule where no rule of ours applies. */
const ZOD_CODES = ['too_small', 'too_big', 'invalid_type', 'invalid_format', 'invalid_value', 'unrecognized_keys'];

/** A rule (`400 rule`, `400` (`rule`), rule `rule`, "rule": "rule") or a send-guard refusal the docs name. */
function documentedRules(text: string): string[] {
  const flat = text.replace(/\s+/g, ' ');
  return [
    ...flat.matchAll(/rule:? `([a-z_]+)`/g),
    ...flat.matchAll(/`400` \(?`([a-z_]+)`/g),
    ...flat.matchAll(/`400 ([a-z_]+)`/g),
    ...flat.matchAll(/"rule": "([a-z_]+)"/g),
    ...flat.matchAll(/refusal `([a-z_]+)`/g),
  ].map((m) => m[1]);
}

/** Whether the programs (not their specs) write this rule or reason as a string. */
function ruleExists(rule: string): boolean {
  return (
    ZOD_CODES.includes(rule) ||
    SOURCE.some(
      ({ file, text }) =>
        /^(apps|libs)\//.test(file) &&
        !file.endsWith('.spec.ts') &&
        (text.includes(`'${rule}'`) || text.includes(`"${rule}"`)),
    )
  );
}

describe('the validation rules and send-guard refusals the docs name', () => {
  it('are written by the code', () => {
    const unknown = TEXTS.flatMap(({ file, text }) =>
      documentedRules(text)
        .filter((rule) => !ruleExists(rule))
        .map((rule) => `${file}: ${rule}`),
    );
    expect(unknown).toEqual([]);
  });

  it('refuse a made-up one', () => {
    expect(TEXTS.flatMap(({ text }) => documentedRules(text)).length).toBeGreaterThan(30);
    expect(documentedRules('a `400` (`frob_rule`), send-guard refusal `frob_refusal`')).toEqual([
      'frob_rule',
      'frob_refusal',
    ]);
    expect(ruleExists('frob_rule')).toBe(false);
    expect(ruleExists('known_key')).toBe(true);
  });
});

// --- query parameters -----------------------------------------------------------------------------------------

/** Named by the docs as what the API refuses: a query parameter an endpoint does not take. */
const REFUSED_QUERIES = ['POST /mcp?dry_run'];

/** `GET /v1/executions?status=&cursor=&limit=`: the route and the names of the parameters the docs show it with. */
function documentedQueries(text: string): { method: string; path: string; names: string[] }[] {
  return [...text.matchAll(/\b(GET|POST|PUT|DELETE) (\/[A-Za-z0-9_\-{}./]*)\?((?:[a-z_]+=[^&`\s]*&?)+)/g)].map((m) => ({
    method: m[1],
    path: m[2],
    names: [...m[3].matchAll(/([a-z_]+)=/g)].map((n) => n[1]),
  }));
}

/** The query parameters the OpenAPI document gives the operation a path is routed to. */
function queryParameters(method: string, path: string): string[] | undefined {
  const template = Object.keys(OPENAPI.paths).find(
    (t) =>
      t === path ||
      new RegExp(
        `^${t
          .split(/\{[^}]+\}/)
          .map((part) => part.replace(/[.*+?^$()|[\]\\]/g, '\\$&'))
          .join('[^/]+')}$`,
      ).test(path),
  );
  const operation = template
    ? (OPENAPI.paths[template][method.toLowerCase()] as { parameters?: { in: string; name: string }[] } | undefined)
    : undefined;
  return operation?.parameters?.filter((p) => p.in === 'query').map((p) => p.name);
}

describe('the query parameters the docs show an endpoint with', () => {
  it('are parameters the OpenAPI document gives it', () => {
    const unknown = TEXTS.flatMap(({ file, text }) =>
      documentedQueries(text).flatMap(({ method, path, names }) => {
        const known = queryParameters(method, path);
        // A route of the sandbox provider (`GET /v1/charges?reference=`) is not the API's.
        if (known === undefined && SANDBOX_ROUTES.some((route) => route.method === method && route.path === path))
          return [];
        return names
          .filter((name) => !(known ?? []).includes(name) && !REFUSED_QUERIES.includes(`${method} ${path}?${name}`))
          .map((name) => `${file}: ${method} ${path}?${name}=`);
      }),
    );
    expect(unknown).toEqual([]);
  });

  it('refuse a made-up one', () => {
    expect(TEXTS.flatMap(({ text }) => documentedQueries(text)).length).toBeGreaterThan(5);
    expect(documentedQueries('`GET /v1/executions?status=&frob=`')).toEqual([
      { method: 'GET', path: '/v1/executions', names: ['status', 'frob'] },
    ]);
    expect(queryParameters('GET', '/v1/executions')).toContain('status');
    expect(queryParameters('GET', '/v1/executions')).not.toContain('frob');
    expect(queryParameters('GET', '/v1/executions/exe_1/events')).toEqual(expect.arrayContaining(['after', 'limit']));
  });
});

// --- queues ---------------------------------------------------------------------------------------------------

describe('docs/contract.md §6, "Queues and workers"', () => {
  it('names every queue the workers consume (QueueName), and no other', () => {
    const contract = readFileSync(join(ROOT, 'docs/contract.md'), 'utf8');
    const section = contract.split('\n## 6. Queues and workers\n')[1]?.split('\n## ')[0] ?? '';
    const named = [...section.split('.')[0].matchAll(/`([a-z]+)`/g)].map((m) => m[1]);
    expect(named.length).toBeGreaterThan(0);
    expect([...new Set(named)].sort()).toEqual([...(Object.values(QueueName) as string[])].sort());
  });
});

// --- terminal reasons -----------------------------------------------------------------------------------------

describe('docs/contract.md §2, the `terminal_reason` values', () => {
  it('are every terminal reason the status model has (TERMINAL_REASONS), and no other', () => {
    const contract = readFileSync(join(ROOT, 'docs/contract.md'), 'utf8');
    const section = contract.split('\n## 2. Operation status')[1]?.split('\n## ')[0] ?? '';
    // The paragraph that lists them: from "`terminal_reason`:" to the sentence's end.
    const list = /\n`terminal_reason`: ([^]*?)\.\n/.exec(section)?.[1] ?? '';
    const named = [...list.matchAll(/`([A-Z_]+)`/g)].map((m) => m[1]);
    expect(named.length).toBeGreaterThan(0);
    expect([...new Set(named)].sort()).toEqual([...(TERMINAL_REASONS as readonly string[])].sort());
  });
});

// --- the endpoints without a key ------------------------------------------------------------------------------

describe('docs/api.md, "Authentication and roles"', () => {
  it('names every /v1 endpoint that takes no key (the OpenAPI document’s without security), and no other', () => {
    const api = readFileSync(join(ROOT, 'docs/api.md'), 'utf8').replace(/\s+/g, ' ');
    const sentence = /Every `\/v1` endpoint except (.*?) needs `Authorization/.exec(api)?.[1] ?? '';
    const named = [...sentence.matchAll(/`(GET|POST|PUT|DELETE) (\/v1[^`]*)`/g)].map((m) => `${m[1]} ${m[2]}`);
    const open = Object.entries(OPENAPI.paths).flatMap(([path, item]) =>
      Object.entries(item as Record<string, { security?: unknown[] }>)
        .filter(([, operation]) => (path === '/v1' || path.startsWith('/v1/')) && operation.security?.length === 0)
        .map(([method]) => `${method.toUpperCase()} ${path}`),
    );
    expect(named.length).toBeGreaterThan(0);
    expect([...named].sort()).toEqual([...open].sort());
  });
});
