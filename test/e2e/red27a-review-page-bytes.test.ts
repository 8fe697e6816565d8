import { DEMO, Stack } from '../support/stack';
import { http, submission } from '../support/http';
import { allowLoopbackPort, httpOp, startTarget } from './connectors-support';
import { waitForApprovalRequest } from './dispatcher-helpers';

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
    for (let n = 0; n < HELD; n += 1) {
      // ~60 KB of body (an http body takes 64 KiB of JSON): 6 strings of 10 000 characters, the longest a string may be.
      const parts = Array.from({ length: 6 }, (_, i) => `part ${n}.${i} `.padEnd(10_000, 'p'));
      const created = await http<{ id: string; operations: { id: string }[] }>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([
          httpOp('big', { method: 'POST', url: `${target.base}/orders`, body: { parts } }, { requires_approval: true }),
        ]),
      });
      expect([created.status, created.status === 201 ? '' : created.text]).toEqual([201, '']);
      held.push(created.body.operations[0].id);
    }
    for (const id of held) {
      const op = await http<{ execution_id: string }>(stack.apiUrl, 'GET', `/v1/operations/${id}`, { key: DEMO.agent });
      await waitForApprovalRequest(stack, op.body.execution_id);
    }
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
