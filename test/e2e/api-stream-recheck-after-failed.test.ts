import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http } from '../support/http';
import { closedAfterEachTest, listenLocally } from '../support/local-server';
import { orderAt } from '../support/fixtures';
import { openStream } from './api-sse';
import { submit, waitForOp, waitForResolutionPermitted } from './dispatcher-helpers';
import { allowLoopbackPort } from './connectors-support';

/**
 * A re-check's read is under way when a reviewer resolves the hold FAILED (their own read found nothing: the source
 * flaps), and the re-check's read then shows the effect: it lands on the FAILED operation (`operation.rechecked` with
 * `after: "FAILED"`, commit unknown, retry forbidden, criteria judged again). The stream ended `settled` right after
 * the FAILED, before that read landed: a client that stops at `end` kept "FAILED, a retry is safe" and an outcome that
 * changed a moment later. The stream now stays open while a read begun before a person's FAILED may still land on it.
 */
describe('the stream of an execution whose hold is resolved FAILED while a re-check reads', () => {
  let stack: Stack;
  beforeAll(async () => {
    // A read is given 4 s: the reviewer's resolution and the release of the held read fit well within it.
    stack = await Stack.start({ label: 'streamrecheck', env: { CONNECTOR_TIMEOUT_MS: '4000' } });
  });
  afterAll(async () => stack?.stop());
  const closeAfter = closedAfterEachTest();

  it('does not end before the re-check that lands after the FAILED is delivered', async () => {
    // A third party whose writes are committed and answered 500 (outcome unknown); its reads are down (the hold is
    // SOURCE_UNREACHABLE), then the next read is held and every other read finds nothing, until the held one answers.
    const orders = new Set<string>();
    const state = { reads: 'down' as 'down' | 'hold' | 'absent', held: [] as { res: ServerResponse; id: string }[] };
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        res.setHeader('content-type', 'application/json');
        if (req.method === 'POST') {
          orders.add((JSON.parse(body) as { id: string }).id);
          res.writeHead(500);
          return res.end(JSON.stringify({ error: { code: 'internal' } }));
        }
        const id = decodeURIComponent((req.url ?? '').slice('/orders/'.length));
        if (state.reads === 'down') {
          res.writeHead(503);
          return res.end(JSON.stringify({ error: { code: 'maintenance' } }));
        }
        if (state.reads === 'hold') {
          state.held.push({ res, id });
          state.reads = 'absent';
          return;
        }
        res.writeHead(404);
        res.end(JSON.stringify({}));
      });
    });
    const local = closeAfter(await listenLocally(server));
    await allowLoopbackPort(stack, local.port);

    const created = await submit(stack, [orderAt(local.port, 'order')]);
    const held = await waitForOp(stack, created.id, 'order', (o) => o.status === 'MANUAL_REVIEW');
    expect(held.terminal_reason).toBe('SOURCE_UNREACHABLE');
    await waitForResolutionPermitted(stack, held.id, 'FAILED');
    const stream = await openStream(`${stack.apiUrl}/v1/executions/${created.id}/stream`, DEMO.agent);
    try {
      state.reads = 'hold';
      const asked = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/recheck`, { key: DEMO.reviewer });
      expect(asked.status).toBe(202);
      await waitFor(
        async () => state.held.length,
        (n) => n === 1,
      );
      const failed = await http<{ status: string }>(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'FAILED', evidence: 'their dashboard shows no order' },
      });
      expect(failed.status).toBe(200);
      // The stream has pushed the FAILED; then the re-check's read answers: the order is there.
      await stream.waitFor((frames) =>
        frames.some((f) => f.event === 'operation.status_changed' && JSON.parse(f.data).to_status === 'FAILED'),
      );
      const { res, id } = state.held.shift()!;
      res.writeHead(200);
      res.end(JSON.stringify({ data: { id, status: 'created' } }));
      await stream.closed;
      const types = stream.frames.map((f) => ({ event: f.event, data: JSON.parse(f.data) as Record<string, unknown> }));
      const landed = types.findIndex(
        (f) => f.event === 'operation.rechecked' && (f.data.data as { after?: string }).after === 'FAILED',
      );
      const end = types.findIndex((f) => f.event === 'end');
      expect(landed).toBeGreaterThan(-1);
      expect(end).toBe(types.length - 1);
      expect(landed).toBeLessThan(end);
      expect(types[end].data).toEqual({ reason: 'settled' });
    } finally {
      stream.abort();
    }
  }, 90_000);
});
