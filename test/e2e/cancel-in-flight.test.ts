import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { closedAfterEachTest, listenLocally } from '../support/local-server';
import { Event, Execution, events, expectLegalHistory, getExecution, settle, submit } from './dispatcher-helpers';
import type { ProblemDetails as Problem } from '@verity/sdk';
import { orderAt } from '../support/fixtures';
import { allowLoopbackPort } from './connectors-support';

/**
 * An execution that ends (a caller's cancel, or its deadline) while one of its sends is in flight: SENT is committed
 * and the call is outstanding at a third party that holds its answer. The end never claims the in-flight effect did
 * not happen (I11): the sent operation is neither cancelled nor failed, the execution's end is written once, and when
 * the third party answers, its effect is read back and recorded VERIFIED in the ended execution — with one request at
 * the wire and one gap-free history. The chaos run neither cancels nor lets deadlines pass; this holds the call so the
 * end lands exactly between SENT and the answer.
 */
describe('an execution ended while a send is in flight', () => {
  let stack: Stack;
  beforeAll(async () => {
    // The call is held for seconds: the connector waits longer than that before it calls the outcome unknown.
    stack = await Stack.start({ label: 'cancel-in-flight', env: { CONNECTOR_TIMEOUT_MS: '15000' } });
  });
  afterAll(async () => stack?.stop());
  const closeAfter = closedAfterEachTest();

  /** A third party that commits each order on arrival, holds its answer until released, and reads orders back. */
  async function holdingThirdParty() {
    const orders = new Map<string, ServerResponse>();
    const posts: string[] = [];
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        if (req.method === 'POST') {
          const { id } = JSON.parse(body) as { id: string };
          posts.push(id);
          orders.set(id, res);
          return;
        }
        const id = decodeURIComponent((req.url ?? '').slice('/orders/'.length));
        res.writeHead(orders.has(id) ? 200 : 404, { 'content-type': 'application/json' });
        res.end(JSON.stringify(orders.has(id) ? { data: { id, status: 'created' } } : {}));
      });
    });
    const local = closeAfter(await listenLocally(server));
    await allowLoopbackPort(stack, local.port);
    return {
      port: local.port,
      posts,
      /** Until the order's request has arrived: SENT is committed and the call is outstanding. */
      arrived: (id: string) =>
        waitFor(
          async () => orders.has(id),
          (yes) => yes,
        ),
      answer: (id: string) => {
        const res = orders.get(id)!;
        res.writeHead(201, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id, status: 'created' }));
      },
    };
  }

  /** The execution's history after its end: the end written once, nothing of the execution's moved after it. */
  function expectEndedOnce(log: Event[], end: string): void {
    expectLegalHistory(log);
    const ends = log.filter((e) => e.type === 'execution.status_changed' && e.to_status === end);
    expect(ends).toHaveLength(1);
    const after = log.filter((e) => e.seq > ends[0].seq && e.type === 'execution.status_changed');
    expect(after).toEqual([]);
  }

  async function inFlight(extra: Record<string, unknown> = {}) {
    const party = await holdingThirdParty();
    const created = await submit(
      stack,
      [orderAt(party.port, 'order'), charge(unique('cif-after'), { key: 'after', depends_on: ['order'] })],
      extra,
    );
    const order = created.operations.find((o) => o.key === 'order')!;
    await party.arrived(order.id);
    return { party, created, order };
  }

  it('cancel: answered at once with the send still SENT, once; the answer that comes later is read back VERIFIED', async () => {
    const { party, created, order } = await inFlight();
    // Five callers cancel at once while the call is outstanding.
    const answers = await Promise.all(
      Array.from({ length: 5 }, () =>
        http<Execution | Problem>(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, {
          key: DEMO.agent,
          body: { reason: 'changed my mind' },
        }),
      ),
    );
    const won = answers.filter((a) => a.status === 200);
    expect(won).toHaveLength(1);
    // The losers are told who cancelled and when: the cancel the history holds.
    const cancelEvent = (await events(stack, created.id)).find(
      (e) => e.type === 'execution.status_changed' && e.to_status === 'cancelled',
    )!;
    for (const lost of answers.filter((a) => a.status !== 200)) {
      expect(lost.status).toBe(409);
      expect(lost.body).toMatchObject({
        type: expect.stringContaining('already-decided'),
        decision: 'cancel',
        decided_by: cancelEvent.data.by,
        decided_at: cancelEvent.created_at,
      });
    }
    expect(cancelEvent.data.by).toEqual(expect.any(String));
    const cancelled = won[0].body as Execution;
    expect(cancelled.status).toBe('cancelled');
    // Never "it did not happen" of a call that may have landed: the order is still SENT, only the unsent one is cancelled.
    expect(Object.fromEntries(cancelled.operations.map((o) => [o.key, o.status]))).toEqual({
      order: 'SENT',
      after: 'CANCELLED',
    });
    expect(cancelled.operations.find((o) => o.key === 'order')!.retry).toBe('wait');

    party.answer(order.id);
    const execution = await settle(stack, created.id);
    expect(execution.status).toBe('cancelled');
    // The order was sent: submitting the same request again would send it again, so the failure is not retryable.
    expect(execution.failure).toMatchObject({ code: 'cancelled_by_caller', retryable: false });
    const settled = execution.operations.find((o) => o.key === 'order')!;
    expect(settled.status).toBe('VERIFIED');
    expect(settled.evidence).toMatchObject({ method: 'read_after_write' });
    const log = await events(stack, created.id);
    expectEndedOnce(log, 'cancelled');
    expect(log.filter((e) => e.operation_id === order.id && e.to_status === 'SENT')).toHaveLength(1);
    expect(party.posts).toEqual([order.id]);
    // The record agrees with itself afterwards too.
    expect((await getExecution(stack, created.id)).operations.map((o) => o.status)).toEqual(['VERIFIED', 'CANCELLED']);
  });

  it('deadline: the execution expires around the outstanding call; the answer that comes later is read back VERIFIED', async () => {
    const { party, created, order } = await inFlight({ deadline_seconds: 2 });
    const expired = await waitFor(
      () => getExecution(stack, created.id),
      (e) => e.status === 'expired',
      20_000,
      100,
    );
    expect(Object.fromEntries(expired.operations.map((o) => [o.key, o.status]))).toEqual({
      order: 'SENT',
      after: 'CANCELLED',
    });
    party.answer(order.id);
    const execution = await settle(stack, created.id);
    expect(execution.status).toBe('expired');
    expect(execution.failure).toMatchObject({ code: 'deadline_exceeded', retryable: false });
    expect(execution.operations.find((o) => o.key === 'order')!.status).toBe('VERIFIED');
    const log = await events(stack, created.id);
    expectEndedOnce(log, 'expired');
    expect(log.filter((e) => e.operation_id === order.id && e.to_status === 'SENT')).toHaveLength(1);
    expect(party.posts).toEqual([order.id]);
  });
});
