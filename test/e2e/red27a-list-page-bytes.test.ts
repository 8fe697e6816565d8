import { DEMO, Stack } from '../support/stack';
import { http, submission } from '../support/http';
import { Verity, type ListExecutionsQuery } from '@verity/sdk';

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

  it('with a status filter and every limit, cut pages and small ones between reach each execution once, newest first', async () => {
    const status = (
      await http<{ status: string }>(stack.apiUrl, 'GET', `/v1/executions/${submitted[0]}`, { key: DEMO.agent })
    ).body.status;
    // Every limit below, at and above where the 1 MiB cut falls, with the filter and without: a cut whose cursor went
    // past the last execution kept would lose one; the small execution written after them is newest, so listed first.
    const expected = [...submitted].reverse();
    for (const limit of [1, 2, 3, 5, 200]) {
      for (const filter of [`&status=${status}`, '']) {
        const seen: string[] = [];
        let cursor: string | null = null;
        let pages = 0;
        do {
          const path: string = `/v1/executions?limit=${limit}${filter}${cursor ? `&cursor=${cursor}` : ''}`;
          const page = await http<Page>(stack.apiUrl, 'GET', path, { key: DEMO.agent });
          expect(page.status).toBe(200);
          expect(page.body.data.length).toBeGreaterThan(0);
          expect(page.body.data.length).toBeLessThanOrEqual(limit);
          seen.push(...page.body.data.map((e) => e.id));
          cursor = page.body.next_cursor;
          pages += 1;
        } while (cursor !== null && pages < 100);
        const large = seen.filter((id) => submitted.includes(id));
        expect([limit, filter, large]).toEqual([limit, filter, expected]);
        expect(new Set(seen).size).toBe(seen.length);
        expect([...seen].sort().reverse()).toEqual(seen);
      }
    }
    // The SDK's iterator reads on past every page cut short.
    const client = new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.agent });
    const listed: string[] = [];
    for await (const execution of client.executions.listAll({
      limit: 200,
      status: status as ListExecutionsQuery['status'],
    }))
      listed.push(execution.id);
    expect(listed.filter((id) => submitted.includes(id))).toEqual(expected);
  });
});
