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
});
