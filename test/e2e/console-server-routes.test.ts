import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEMO, METRICS_TOKEN, Stack } from '../support/stack';
import { charge, http, rawExchange, submission, unique } from '../support/http';

/**
 * The console's server routes as a hostile browser link would reach them: every page and file under /console carries
 * the console's content policy and the page headers, none repeats what the link wrote, none serves a file outside
 * the console's own (`..`, `%2e%2e`, `%2f`, `%00`, backslashes), and no answer of authenticated data asks a shared
 * cache to keep it (`public`).
 */
describe('the console’s server routes', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'consoleroutes', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  /** A request as sent, byte for byte: no client resolves `..` or `%2e%2e` first. */
  const ask = async (path: string) => {
    const answer = await rawExchange(
      stack.apiUrl,
      `GET ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: text/html\r\nconnection: close\r\n\r\n`,
      { halfClose: false },
    );
    return { status: answer.status, headers: answer.headers, body: answer.body };
  };

  const XSS = '%3Cscript%3Ealert(1)%3C%2Fscript%3E';

  it('every page and file carries the content policy and page headers, and repeats nothing of the link', async () => {
    const paths = [
      '/console',
      '/console/',
      '/console/executions/exe_abc',
      '/console/operations/op_abc/',
      '/console/app.js',
      '/console/app.css',
      '/console/favicon.svg',
      `/console/executions/exe_abc?q=${XSS}`,
      `/console/executions/${XSS}`,
      `/console/${XSS}`,
      '/console/nothing%22%3E%3Csvg%20onload=alert(1)%3E',
    ];
    const seen = [];
    for (const path of paths) {
      const res = await ask(path);
      seen.push({
        path,
        html: res.status < 300 || !/json/.test(res.headers['content-type'] ?? ''),
        csp: res.headers['content-security-policy'],
        frame: res.headers['x-frame-options'],
        nosniff: res.headers['x-content-type-options'],
        publicCache: /public/i.test(res.headers['cache-control'] ?? ''),
        reflected: /<script>alert|onload=|alert\(1\)/i.test(res.body),
      });
    }
    const csp = seen[0].csp;
    expect(csp).toMatch(/default-src 'none'/);
    expect(csp).toMatch(/script-src 'self'(;|$)/);
    expect(seen).toEqual(
      seen.map(({ path, html }) => ({
        path,
        html,
        csp,
        frame: 'DENY',
        nosniff: 'nosniff',
        publicCache: false,
        reflected: false,
      })),
    );
  });

  it('serves no file outside its own, however the path is spelled', async () => {
    const pkg = readFileSync(join(__dirname, '../../package.json'), 'utf8');
    const name = (JSON.parse(pkg) as { name: string }).name;
    for (const path of [
      '/console/../package.json',
      '/console/..%2f..%2fpackage.json',
      '/console/..%2F..%2F..%2Fpackage.json',
      '/console/%2e%2e/%2e%2e/package.json',
      '/console/%2e%2e%2f%2e%2e%2fpackage.json',
      '/console/..%5c..%5cpackage.json',
      '/console/app.js%00',
      '/console/app.js%00.html',
      '/console/%00',
      '/console/assets/console.js',
      '/console/console.js',
      '/console//etc/passwd',
      '/console/executions/..%2f..%2f..%2fpackage.json',
    ]) {
      const res = await ask(path);
      expect({
        path,
        status: res.status,
        leaked: res.body.includes(`"name": "${name}"`) || /root:/.test(res.body),
      }).toEqual({ path, status: 404, leaked: false });
    }
  });

  it('no answer of authenticated data is kept by a shared cache (no Cache-Control: public)', async () => {
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('console-cache'))]),
    });
    expect(created.status).toBe(201);
    for (const [key, path] of [
      [DEMO.agent, '/v1/executions'],
      [DEMO.agent, `/v1/executions/${created.body.id}`],
      [DEMO.reviewer, '/v1/review/approvals'],
      [DEMO.admin, '/v1/admin/connector-settings'],
      [DEMO.operator, '/admin/queues/api/queues'],
      [METRICS_TOKEN, '/metrics'],
    ]) {
      const res = await http(stack.apiUrl, 'GET', path, { key });
      expect([path, res.status, /public|s-maxage/i.test(res.headers.get('cache-control') ?? '')]).toEqual([
        path,
        200,
        false,
      ]);
    }
  });
});
