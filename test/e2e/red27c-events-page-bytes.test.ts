import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Event, getExecution, submit } from './dispatcher-helpers';

const INVESTIGATIONS = 90;
/** Two of those investigations on each hold: 60 KB, within the 64 KiB of evidence a hold's investigations keep. */
const HOLDS = INVESTIGATIONS / 2;

/** Evidence as large as a resolution takes it: 10,000 characters of three bytes each. */
const evidence = (n: number) => `investigation ${n} `.padEnd(10_000, '€');

interface Page {
  data: Event[];
  next_cursor: string | null;
}

/**
 * A page of GET /v1/executions/{id}/events was bounded by its count (up to 1000) and never by its size, though an
 * event carries what a person wrote: a reviewer's "still unknown" on a held operation holds up to 10,000 characters of
 * evidence (30 KB), 100 of them per hold, on each of an execution's operations. A page of 1000 such events is 30 MB of
 * JSON, read whole into the API's heap. A page now ends early once its events hold 1 MiB of stored text (one event at
 * least), and `next_cursor` goes on from there.
 */
describe('a page of events is bounded by its size as well as its count', () => {
  let stack: Stack;
  let executionId: string;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'red27ceventbytes' });
    const created = await submit(
      stack,
      Array.from({ length: HOLDS }, (_, i) => ({
        ...charge(unique(`red27c-${i}`), { expected_state: { charged: true } }),
        key: `charge-${i}`,
      })),
    );
    executionId = created.id;
    const held = await waitFor(
      () => getExecution(stack, executionId),
      (e) => e.operations.every((o) => o.status === 'MANUAL_REVIEW'),
      60_000,
      200,
    );
    for (let n = 0; n < INVESTIGATIONS; n += 1) {
      const res = await http(stack.apiUrl, 'POST', `/v1/operations/${held.operations[n % HOLDS].id}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'MANUAL_REVIEW', evidence: evidence(n) },
      });
      expect(res.status).toBe(200);
    }
  }, 120_000);
  afterAll(async () => stack?.stop());

  it('a page of large events ends before its limit, and its cursors reach each event once, in order', async () => {
    const seen: Event[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const path: string = `/v1/executions/${executionId}/events?limit=1000${cursor ? `&after=${cursor}` : ''}`;
      const page = await http<Page>(stack.apiUrl, 'GET', path, { key: DEMO.agent });
      expect(page.status).toBe(200);
      expect(page.body.data.length).toBeGreaterThan(0);
      expect(Buffer.byteLength(page.text)).toBeLessThan(2 * 1024 * 1024);
      seen.push(...page.body.data);
      cursor = page.body.next_cursor;
      pages += 1;
    } while (cursor !== null && pages < INVESTIGATIONS + 10);
    expect(pages).toBeGreaterThan(1);
    expect(seen.map((e) => Number(e.seq))).toEqual(seen.map((_, i) => i + 1));
    const investigations = seen.filter(
      (e) => e.type === 'operation.still_unknown' && JSON.stringify(e.data).includes('investigation '),
    );
    expect(investigations).toHaveLength(INVESTIGATIONS);
  });

  it('a page of small events still holds its whole limit', async () => {
    const page = await http<Page>(stack.apiUrl, 'GET', `/v1/executions/${executionId}/events?limit=2`, {
      key: DEMO.agent,
    });
    expect(page.body.data.map((e) => Number(e.seq))).toEqual([1, 2]);
    expect(page.body.next_cursor).toBe(page.body.data[1].id);
  });
});
