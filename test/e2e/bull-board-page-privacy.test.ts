import { request } from 'node:http';
import { DEMO, Stack } from '../support/stack';

/**
 * Bull Board shows every tenant's jobs to the platform operator. Its page asks nothing of another origin (the board's
 * own page linked Google Fonts: each opening told a third party that, and when, an operator looked at the queues),
 * and its content policy lets the page load only the board's own files, so nothing else can be added that would. No
 * answer of the board is kept by a shared cache: its API answers (tenants' jobs) and its page are `no-store`, its
 * files (the same for everyone, but served only to an operator) `private`.
 */
describe('Bull Board’s page: nothing from another origin, nothing kept by a shared cache', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'boardprivacy', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const get = (path: string) =>
    fetch(`${stack.apiUrl}/admin/queues${path}`, { headers: { authorization: `Bearer ${DEMO.operator}` } });

  /** The directives of a Content-Security-Policy header, by name. */
  const directives = (csp: string | null) =>
    Object.fromEntries(
      (csp ?? '')
        .split(';')
        .map((part) => part.trim().split(/\s+/))
        .filter(([name]) => name)
        .map(([name, ...sources]) => [name, sources]),
    ) as Record<string, string[]>;

  it('the page links and loads nothing of another origin, and its policy allows only its own', async () => {
    for (const path of ['', '/', '/queue/dispatch']) {
      const res = await get(path);
      const html = await res.text();
      expect([path, res.status, res.headers.get('content-type')]).toEqual([
        path,
        200,
        expect.stringMatching(/^text\/html/),
      ]);
      // Every href and src the page holds is its own: relative to its <base>, or on its own path.
      const references = [...html.matchAll(/\b(?:href|src)\s*=\s*["']([^"']*)["']/gi)].map((m) => m[1]);
      expect(references.length).toBeGreaterThan(3);
      expect(references.filter((ref) => /^([a-z][a-z0-9+.-]*:|\/\/)/i.test(ref))).toEqual([]);
      expect(html).not.toMatch(/googleapis|gstatic/i);
      const csp = directives(res.headers.get('content-security-policy'));
      expect(csp).toMatchObject({
        'default-src': ["'none'"],
        'script-src': ["'self'"],
        'connect-src': ["'self'"],
        'font-src': ["'self'"],
        'base-uri': ["'self'"],
        'form-action': ["'self'"],
        'frame-ancestors': ["'none'"],
      });
      // No source of the policy names another origin, nor lets a script be written inline or evaluated.
      const sources = Object.values(csp).flat();
      expect(sources.filter((source) => /^(https?:|\*|'unsafe-eval'$)|\/\//.test(source))).toEqual([]);
      expect(csp['script-src']).not.toContain("'unsafe-inline'");
    }
  });

  /** One request as sent, headers repeated as given (fetch would join them): its status and headers. */
  const exchange = (method: string, path: string, headers: [string, string][], body?: string) =>
    new Promise<{ status: number; csp: unknown; cacheControl: unknown }>((resolve, reject) => {
      const url = new URL(stack.apiUrl);
      const flat = ['host', url.host, ...headers.flat()];
      if (body !== undefined) flat.push('content-length', String(Buffer.byteLength(body)));
      const req = request({ host: url.hostname, port: url.port, method, path, headers: flat }, (res) => {
        res.resume();
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            csp: res.headers['content-security-policy'],
            cacheControl: res.headers['cache-control'],
          }),
        );
      });
      req.on('error', reject);
      req.end(body);
    });

  it('every answer under /admin/queues has the board’s policy and no-store: refusals before the board too', async () => {
    const operator: [string, string] = ['authorization', `Bearer ${DEMO.operator}`];
    const json: [string, string] = ['content-type', 'application/json'];
    const pause = '/admin/queues/api/queues/dispatch/pause';
    // [what, method, path, headers, body, status]
    const cases: [string, string, string, [string, string][], string | undefined, number][] = [
      ['no key', 'GET', '/admin/queues/', [], undefined, 401],
      ['a tenant’s key', 'GET', '/admin/queues/', [['authorization', `Bearer ${DEMO.agent}`]], undefined, 403],
      ['a write from another site', 'PUT', pause, [operator, ['sec-fetch-site', 'cross-site']], undefined, 403],
      ['a write to a read-only board', 'PUT', pause, [operator], undefined, 405],
      ['an unknown job', 'GET', '/admin/queues/api/queues/dispatch/nope', [operator], undefined, 404],
      ['a path the board does not have', 'GET', '/admin/queues/nope', [operator], undefined, 404],
      ['too many jobs per page', 'GET', '/admin/queues/api/queues?jobsPerPage=100000', [operator], undefined, 400],
      ['the page by HEAD', 'HEAD', '/admin/queues/', [operator], undefined, 200],
      ['OPTIONS', 'OPTIONS', '/admin/queues/', [operator], undefined, 200],
      // Under the files' path, but no file: an error, not kept as a file is.
      ['a file without a key', 'GET', '/admin/queues/static/js/main.js', [], undefined, 401],
      ['no such file', 'GET', '/admin/queues/static/nope.js', [operator], undefined, 404],
      // Refused by the API before the board's own layers run.
      ['a body that is not JSON', 'PUT', pause, [operator, json], '{nope', 400],
      ['a prototype key in the body', 'PUT', pause, [operator, json], '{"__proto__":{"x":1}}', 400],
      ['Authorization twice', 'GET', '/admin/queues/', [operator, operator], undefined, 400],
      [
        'a body in another charset',
        'PUT',
        pause,
        [operator, ['content-type', 'application/json; charset=latin1']],
        '{}',
        415,
      ],
    ];
    const seen = [];
    for (const [what, method, path, headers, body] of cases) {
      const { status, csp, cacheControl } = await exchange(method, path, headers, body);
      seen.push([what, status, typeof csp === 'string' && directives(csp)['default-src']?.[0], cacheControl]);
    }
    expect(seen).toEqual(cases.map(([what, , , , , status]) => [what, status, "'none'", 'no-store']));
  });

  it('no answer of the board is kept by a shared cache: its API and page no-store, its files private', async () => {
    const page = await get('/');
    const html = await page.text();
    const files = [...html.matchAll(/\b(?:href|src)="(static\/[^"]+)"/g)].map((m) => `/${m[1]}`);
    expect(files.length).toBeGreaterThan(3);
    const seen: [string, number, string | null][] = [];
    const paths = [
      '',
      '/queue/dispatch',
      '/api/queues?activeQueue=dispatch&status=latest&page=1&jobsPerPage=10',
      '/api/redis/stats',
      '/api/queues/dispatch/nope',
      ...files,
    ];
    for (const path of paths) {
      const res = await get(path);
      await res.arrayBuffer();
      seen.push([path, res.status, res.headers.get('cache-control')]);
    }
    expect(seen).toEqual(
      paths.map((path) => [
        path,
        path === '/api/queues/dispatch/nope' ? 404 : 200,
        path.startsWith('/static/') ? 'private, no-cache' : 'no-store',
      ]),
    );
  });

  it('Swagger UI keeps its own headers, as before the board had a policy: frame-ancestors only, no Cache-Control', async () => {
    const seen = [];
    for (const path of ['/docs', '/docs/', '/docs-json']) {
      const res = await fetch(`${stack.apiUrl}${path}`);
      await res.arrayBuffer();
      seen.push([path, res.status, res.headers.get('content-security-policy'), res.headers.get('cache-control')]);
    }
    expect(seen).toEqual([
      ['/docs', 200, "frame-ancestors 'none'", null],
      ['/docs/', 200, "frame-ancestors 'none'", null],
      ['/docs-json', 200, "frame-ancestors 'none'", null],
    ]);
  });
});
