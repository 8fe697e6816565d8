import { DEMO, METRICS_TOKEN, Stack } from '../support/stack';
import { http } from '../support/http';

/**
 * The API's request histogram is labelled by route pattern, never by the path a caller sent: however many distinct
 * paths are asked for (ids no row has, paths nothing serves, the same path in other letter cases), /metrics keeps a
 * bounded set of series, and no label carries what a caller wrote.
 */
describe('/metrics series a caller cannot multiply', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'metricscard', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  /** Every letter of `text` in upper or lower case, as the bits of `n` say. */
  const cased = (text: string, n: number) => {
    let bit = 0;
    return [...text].map((c) => (/[a-z]/.test(c) && (n >> bit++) & 1 ? c.toUpperCase() : c)).join('');
  };

  const series = async () => {
    const res = await http<string>(stack.apiUrl, 'GET', '/metrics', { key: METRICS_TOKEN });
    expect(res.status).toBe(200);
    return res.text.split('\n').filter((line) => line.startsWith('verity_http_request_duration_seconds_count{'));
  };

  it('10,000 distinct paths, also Bull Board’s prefix in every letter case, add a bounded number of series', async () => {
    const before = await series();
    const shapes: ((i: number) => [string, string])[] = [
      (i) => [`/v1/nothing-${i}`, DEMO.agent],
      (i) => [`/v1/executions/exe_bogus${i}`, DEMO.agent],
      (i) => [`/console/x${i}`, DEMO.agent],
      (i) => [`/docs/x${i}`, DEMO.agent],
      (i) => [`/health/x${i}`, DEMO.agent],
      (i) => [`/admin/queues/api/queues/q${i}`, DEMO.operator],
      // The board's prefix in each letter case: a path a caller spells, never a label.
      (i) => [`${cased('/admin/queues', i)}/api/queues`, DEMO.operator],
      (i) => [`${cased('/admin/queues', i)}/api/redis/stats`, DEMO.operator],
    ];
    const total = 10_000;
    let next = 0;
    const statuses = new Set<number>();
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < total) {
          const i = next++;
          const [path, key] = shapes[i % shapes.length](Math.floor(i / shapes.length));
          statuses.add((await http(stack.apiUrl, 'GET', path, { key })).status);
        }
      }),
    );
    expect([...statuses].every((s) => s < 500)).toBe(true);
    const after = await series();
    const added = after.filter((line) => !before.some((b) => b.split(' ')[0] === line.split(' ')[0]));
    // A handful of route patterns × statuses, not one per path or per spelling.
    expect(added.length).toBeLessThanOrEqual(40);
    const written = (line: string) =>
      /nothing-|bogus|\/x\d|\/q\d/.test(line) || (/admin\/queues/i.test(line) && !line.includes('/admin/queues'));
    expect(after.filter(written)).toEqual([]);
  }, 180_000);
});
