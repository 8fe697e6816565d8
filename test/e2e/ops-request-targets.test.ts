import { METRICS_TOKEN, Stack } from '../support/stack';
import { rawExchange } from '../support/http';

/**
 * Red team (hostile pass 4): the workers' ops ports read the request target as a path only. `OPTIONS *` (a question
 * about the server, RFC 9110 section 9.3.7) was 405, where the API answers 204 with Allow; an absolute-form target
 * (`GET http://host/metrics`, which a server must accept, RFC 9112 section 3.2.2) was 404, where the API serves the
 * path it names. They now answer both as the API does, with the same check (a target naming another host than Host,
 * or `*` with another method, is a 400).
 */
describe('request targets on the workers’ ops ports', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'opstargets', dispatchers: 1, reconcilers: 1 });
  });
  afterAll(async () => stack?.stop());

  const ports = () => [stack.running('dispatcher')[0].opsUrl!, stack.running('reconciler')[0].opsUrl!];
  const exchange = (url: string, head: string) =>
    rawExchange(url, `${head}\r\nconnection: close\r\n\r\n`, { halfClose: false });

  it('answers OPTIONS * with 204 and the methods served, and refuses * with another method (400), as the API does', async () => {
    for (const url of [...ports(), stack.apiUrl]) {
      const options = await exchange(url, 'OPTIONS * HTTP/1.1\r\nhost: 127.0.0.1');
      expect({ url, status: options.status, body: options.body }).toEqual({ url, status: 204, body: '' });
      expect(options.headers.allow).toMatch(/\bGET, HEAD\b/);
      const star = await exchange(url, 'GET * HTTP/1.1\r\nhost: 127.0.0.1');
      expect({ url, status: star.status }).toEqual({ url, status: 400 });
      expect(star.headers['content-type']).toBe('application/problem+json; charset=utf-8');
      expect(JSON.parse(star.body)).toMatchObject({ type: 'https://verity.dev/problems/bad-request', status: 400 });
    }
    for (const url of ports()) {
      expect((await exchange(url, 'OPTIONS * HTTP/1.1\r\nhost: 127.0.0.1')).headers.allow).toBe('GET, HEAD, OPTIONS');
    }
  });

  it('serves the path an absolute-form target names, and refuses one naming another host than Host (400)', async () => {
    for (const url of [...ports(), stack.apiUrl]) {
      const authority = new URL(url).host;
      const live = await exchange(url, `GET http://${authority}/health/live HTTP/1.1\r\nhost: ${authority}`);
      // (A worker's answer may be chunked: its body is looked for, not parsed.)
      expect({ url, status: live.status }).toEqual({ url, status: 200 });
      expect(live.body).toContain('{"status":"ok"}');
      const metrics = await exchange(
        url,
        `GET http://${authority}/metrics HTTP/1.1\r\nhost: ${authority}\r\nauthorization: Bearer ${METRICS_TOKEN}`,
      );
      expect({ url, status: metrics.status }).toEqual({ url, status: 200 });
      expect(metrics.body).toMatch(/^process_cpu_user_seconds_total \d/m);
      // The query is read from the target too: refused as on a path.
      const query = await exchange(url, `GET http://${authority}/health/live?verbose=1 HTTP/1.1\r\nhost: ${authority}`);
      expect({ url, status: query.status }).toEqual({ url, status: 400 });
      expect(JSON.parse(query.body)).toMatchObject({ errors: [{ field: 'verbose', rule: 'unknown_field' }] });
      const elsewhere = await exchange(url, `GET http://other.example/metrics HTTP/1.1\r\nhost: ${authority}`);
      expect({ url, status: elsewhere.status }).toEqual({ url, status: 400 });
      expect(JSON.parse(elsewhere.body)).toMatchObject({
        type: 'https://verity.dev/problems/bad-request',
        title: 'Request target and Host disagree',
      });
      const notHttp = await exchange(url, `GET ftp://${authority}/metrics HTTP/1.1\r\nhost: ${authority}`);
      expect({ url, status: notHttp.status }).toEqual({ url, status: 400 });
    }
  });
});
