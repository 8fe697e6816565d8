import { DEMO, Stack } from '../support/stack';
import { http } from '../support/http';
import { allowLoopbackPort, largeApprovalRequests, startTarget } from './connectors-support';

const HELD = 30;

interface QueuePage {
  data: { operation: { id: string } }[];
  total: number;
  next_cursor: string | null;
}

/**
 * The review queues were paged by count alone (at most 200): an agent that asked for approval of 200 http requests
 * whose bodies each filled the limit of an http body made the reviewer's queue page 13 MB — the console asks for it — and a few
 * of those at once ran the API out of its heap for every tenant. A queue page now ends early once its operations hold
 * 1 MiB of stored text (one at least), and `next_cursor` goes on from there.
 */
describe('a page of a review queue is bounded by its size as well as its count', () => {
  let stack: Stack;
  let target: Awaited<ReturnType<typeof startTarget>>;
  const held: string[] = [];
  beforeAll(async () => {
    stack = await Stack.start({ label: 'red27areviewbytes', reconcilers: 0 });
    target = await startTarget();
    await allowLoopbackPort(stack, target.port);
    held.push(...(await largeApprovalRequests(stack, target, HELD)));
  });
  afterAll(async () => {
    await target?.close();
    await stack?.stop();
  });

  it('a page of large operations ends before its limit, and its cursors reach each operation once', async () => {
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const path: string = `/v1/review/approvals?limit=200${cursor ? `&cursor=${cursor}` : ''}`;
      const page = await http<QueuePage>(stack.apiUrl, 'GET', path, { key: DEMO.reviewer });
      expect(page.status).toBe(200);
      expect(page.body.total).toBe(HELD);
      expect(page.body.data.length).toBeGreaterThan(0);
      expect(page.text.length).toBeLessThan(1.5 * 1024 * 1024);
      seen.push(...page.body.data.map((entry) => entry.operation.id));
      cursor = page.body.next_cursor;
      pages += 1;
    } while (cursor !== null && pages < HELD + 1);
    expect(pages).toBeGreaterThan(1);
    expect(seen).toEqual([...held].reverse());
  });

  it('one operation larger than the bound alone is still a page of one', async () => {
    const page = await http<QueuePage>(stack.apiUrl, 'GET', `/v1/review/approvals?limit=1&cursor=${held[1]}`, {
      key: DEMO.reviewer,
    });
    expect(page.body.data.map((entry) => entry.operation.id)).toEqual([held[0]]);
  });
});
