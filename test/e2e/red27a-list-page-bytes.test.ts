import { DEMO, Stack } from '../support/stack';
import { http, submission } from '../support/http';

const EXECUTIONS = 12;

/** An execution as large as an agent's body limit lets it be with text messages: 100 of 1600 characters each. */
function largeSubmission(n: number) {
  const body = `message ${n} `.padEnd(1600, 'x');
  return submission(
    Array.from({ length: 100 }, (_, i) => ({
      key: `notify-${i}`,
      connector: 'sandbox.sms',
      action: 'send',
      params: { to: '+15550100', body, client_ref: `ref-${n}-${i}-`.padEnd(200, 'r') },
    })),
  );
}

interface Page {
  data: { id: string; operations: unknown[] }[];
  next_cursor: string | null;
}

/**
 * A page of GET /v1/executions was bounded by its count (at most 200) and never by its size: an agent key that
 * submitted 200 executions of 100 operations, each as large as the body limit lets it, made one page 50 MB, and three
 * such pages asked for at once ran the API out of its 128 MB heap (SIGABRT) for every tenant. A page now ends early
 * once the executions in it hold 1 MiB of stored text (one execution at least), and `next_cursor` goes on from there.
 */
describe('a page of executions is bounded by its size as well as its count', () => {
  let stack: Stack;
  const submitted: string[] = [];
  beforeAll(async () => {
    stack = await Stack.start({ label: 'red27alistbytes', dispatchers: 0, reconcilers: 0 });
    for (let n = 0; n < EXECUTIONS; n += 1) {
      const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: largeSubmission(n),
      });
      expect(created.status).toBe(201);
      submitted.push(created.body.id);
    }
  });
  afterAll(async () => stack?.stop());

  it('a page of large executions ends before its limit, and its cursors reach each execution once, whole', async () => {
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const path: string = `/v1/executions?limit=200${cursor ? `&cursor=${cursor}` : ''}`;
      const page = await http<Page>(stack.apiUrl, 'GET', path, { key: DEMO.agent });
      expect(page.status).toBe(200);
      expect(page.body.data.length).toBeGreaterThan(0);
      expect(page.text.length).toBeLessThan(2 * 1024 * 1024);
      for (const execution of page.body.data) expect(execution.operations).toHaveLength(100);
      seen.push(...page.body.data.map((e) => e.id));
      cursor = page.body.next_cursor;
      pages += 1;
    } while (cursor !== null && pages < EXECUTIONS + 1);
    expect(pages).toBeGreaterThan(1);
    expect(seen).toEqual([...submitted].reverse());
  });

  it('a page of small executions still holds its whole limit', async () => {
    const small = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([
        { key: 'n', connector: 'sandbox.sms', action: 'send', params: { to: '+15550100', body: 'hi' } },
      ]),
    });
    expect(small.status).toBe(201);
    const page = await http<Page>(stack.apiUrl, 'GET', '/v1/executions?limit=1', { key: DEMO.agent });
    expect(page.body.data.map((e) => e.id)).toEqual([small.body.id]);
    expect(page.body.next_cursor).toBe(small.body.id);
  });

  it('one execution larger than the bound alone is still a page of one', async () => {
    const page = await http<Page>(stack.apiUrl, 'GET', `/v1/executions?limit=1&cursor=${submitted[1]}`, {
      key: DEMO.agent,
    });
    expect(page.status).toBe(200);
    expect(page.body.data.map((e) => e.id)).toEqual([submitted[0]]);
  });
});
