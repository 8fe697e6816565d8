import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { getExecution, submit } from './dispatcher-helpers';
import { DeliveryView, startReceiver } from './webhook-receiver';
import { allowLoopbackPort } from './connectors-support';

const HOLDS = 60;

/** Evidence as large as a resolution takes it: 10,000 characters of three bytes each. */
const evidence = (n: number) => `resolution ${n} `.padEnd(10_000, '€');

interface Page {
  data: DeliveryView[];
  next_cursor: string | null;
}

/**
 * A page of GET /v1/admin/webhooks/{id}/deliveries was bounded by its count (up to 200) and never by its size, though
 * each delivery keeps the message it sends, and an `operation.settled` message carries its event's record: a
 * reviewer's 10,000 characters of evidence (30 KB), or a read-back of up to 64 KiB. A page of 200 was 6–13 MB of JSON
 * read whole into the API's heap. A page now ends early once its deliveries hold 1 MiB of stored text (one at least),
 * and `next_cursor` goes on from there.
 */
describe('a page of webhook deliveries is bounded by its size as well as its count', () => {
  let stack: Stack;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let endpointId: string;
  beforeAll(async () => {
    receiver = await startReceiver(() => ({ status: 204 }));
    stack = await Stack.start({ label: 'red27cdeliverybytes', env: { WEBHOOK_SCAN_INTERVAL_MS: '100' } });
    await allowLoopbackPort(stack, receiver.port);
    const endpoint = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      key: DEMO.admin,
      body: { url: `${receiver.base}/settled`, events: ['operation.settled'] },
    });
    expect(endpoint.status).toBe(201);
    endpointId = endpoint.body.id;
    // Charges the agent expected already made: each is held before it is sent, for a person to resolve.
    const created = await submit(
      stack,
      Array.from({ length: HOLDS }, (_, i) => ({
        ...charge(unique(`red27c-${i}`), { expected_state: { charged: true } }),
        key: `charge-${i}`,
      })),
    );
    const held = await waitFor(
      () => getExecution(stack, created.id),
      (e) => e.operations.every((o) => o.status === 'MANUAL_REVIEW'),
      60_000,
      200,
    );
    for (const [n, op] of held.operations.entries()) {
      const res = await http(stack.apiUrl, 'POST', `/v1/operations/${op.id}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'CANCELLED', evidence: evidence(n) },
      });
      expect(res.status).toBe(200);
    }
    await waitFor(
      async () => receiver.seen.length,
      (n) => n >= HOLDS,
      60_000,
      200,
    );
  }, 180_000);
  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  it('a page of large deliveries ends before its limit, and its cursors reach each delivery once', async () => {
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const path: string = `/v1/admin/webhooks/${endpointId}/deliveries?limit=200${cursor ? `&cursor=${cursor}` : ''}`;
      const page = await http<Page>(stack.apiUrl, 'GET', path, { key: DEMO.admin });
      expect(page.status).toBe(200);
      expect(page.body.data.length).toBeGreaterThan(0);
      expect(Buffer.byteLength(page.text)).toBeLessThan(1.5 * 1024 * 1024);
      seen.push(...page.body.data.map((d) => d.id));
      cursor = page.body.next_cursor;
      pages += 1;
    } while (cursor !== null && pages < HOLDS + 1);
    expect(pages).toBeGreaterThan(1);
    expect(seen).toHaveLength(HOLDS);
    expect(new Set(seen).size).toBe(HOLDS);
    expect(seen).toEqual([...seen].sort().reverse());
  });

  it('a page whose deliveries fit within the bound still holds its whole limit', async () => {
    const page = await http<Page>(stack.apiUrl, 'GET', `/v1/admin/webhooks/${endpointId}/deliveries?limit=2`, {
      key: DEMO.admin,
    });
    expect(page.body.data).toHaveLength(2);
    expect(page.body.next_cursor).toBe(page.body.data[1].id);
  });
});
