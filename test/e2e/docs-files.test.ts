import { Stack } from '../support/stack';
import { http } from '../support/http';

/**
 * Red team (hostile pass 4): /docs served every file of the swagger-ui-dist package, not only those Swagger UI's page
 * loads: `/docs/package.json` (the exact version, for anyone matching it against advisories), its README, source maps,
 * the OAuth2 redirect page and bundles the page never loads. Only the page's own files are served now; any other path
 * under /docs is a 404 problem+json, however it is spelled.
 */
describe('/docs serves Swagger UI’s page and the files it loads, nothing else', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'docsfiles', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  it('serves the page and every file it references, from /docs and from /docs/', async () => {
    for (const page of ['/docs', '/docs/']) {
      const res = await http<string>(stack.apiUrl, 'GET', page);
      expect(res.status).toBe(200);
      const base = new URL(page, stack.apiUrl);
      const refs = [...res.text.matchAll(/(?:src|href)=["']([^"']+)["']/g)].map((m) => new URL(m[1], base).pathname);
      expect(refs.length).toBeGreaterThanOrEqual(5);
      for (const ref of refs) {
        const file = await fetch(new URL(ref, stack.apiUrl));
        expect({ page, ref, status: file.status }).toEqual({ page, ref, status: 200 });
        await file.arrayBuffer();
      }
    }
  });

  it.each([
    '/docs/package.json',
    '/docs/README.md',
    '/docs/NOTICE',
    '/docs/absolute-path.js',
    '/docs/index.js',
    '/docs/index.css',
    '/docs/swagger-ui.js',
    '/docs/swagger-ui-bundle.js.map',
    '/docs/swagger-ui-es-bundle.js',
    '/docs/oauth2-redirect.html',
    '/docs/log.bundle-sizes.swagger-ui.txt',
    '/docs//package.json',
    '/docs/%70ackage.json',
    '/docs/Package.json',
    '/docs/./package.json',
    '/docs/swagger-ui.css/',
  ])('%s is 404 problem+json, with GET and HEAD', async (path) => {
    const res = await fetch(`${stack.apiUrl}${path}`);
    const body = await res.text();
    expect({ path, status: res.status, type: res.headers.get('content-type') }).toEqual({
      path,
      status: 404,
      type: 'application/problem+json; charset=utf-8',
    });
    expect(JSON.parse(body)).toMatchObject({ type: 'https://verity.dev/problems/not-found', status: 404 });
    expect(body).not.toMatch(/swagger-ui-dist|"version"/);
    const head = await fetch(`${stack.apiUrl}${path}`, { method: 'HEAD' });
    expect({ path, status: head.status }).toEqual({ path, status: 404 });
    // Nor is it a resource another method is refused at (405 says it exists).
    const post = await fetch(`${stack.apiUrl}${path}`, { method: 'POST' });
    expect({ path, status: post.status }).toEqual({ path, status: 404 });
  });

  it('a file the page loads takes GET and HEAD only (405 with Allow)', async () => {
    const post = await fetch(`${stack.apiUrl}/docs/swagger-ui-bundle.js`, { method: 'POST' });
    expect([post.status, post.headers.get('allow')]).toEqual([405, 'GET, HEAD']);
  });
});
