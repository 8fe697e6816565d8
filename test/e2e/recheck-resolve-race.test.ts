import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http } from '../support/http';
import { closedAfterEachTest, listenLocally } from '../support/local-server';
import { events, expectLegalHistory, getOperation, logLines, settle, submit, waitForOp } from './dispatcher-helpers';
import type { ProblemDetails as Problem } from '@verity/sdk';
import { orderAt } from '../support/fixtures';
import { allowLoopbackPort } from './connectors-support';

/**
 * A reviewer's resolution and the reconciler's own read-back claiming the same move (MANUAL_REVIEW → VERIFIED) of one
 * hold: the reviewer asks for a re-check, the re-check's read is held at the source while the reviewer resolves, then
 * the read answers "found". Exactly one of the two writes the move and its event; the other changes nothing (a re-check
 * that lost is recorded only as the answer to its request, an `operation.rechecked` event saying the hold was decided).
 * Held deterministically at the third party (a local server), in both orders. The chaos run's reviewers never ask for
 * re-checks; reconciler-recheck covers a re-check losing to a FAILED, not two VERIFIED claims.
 */
describe('a re-check read and a reviewer deciding the same hold', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'recheck-race', reconcilers: 0 });
    // The re-check's read waits at the source while the reviewer resolves. The reconciler gives up on a read after
    // CONNECTOR_TIMEOUT_MS (1 s in tests), which a loaded machine's resolution can outlast: the re-check would then end
    // `still held: unreachable`, not in the race these tests are about.
    await stack.startApp('reconciler', { CONNECTOR_TIMEOUT_MS: '10000' });
  });
  afterAll(async () => stack?.stop());
  const closeAfter = closedAfterEachTest();

  /**
   * A third party whose writes are committed and answered 500 (outcome unknown), and whose reads are down (503), or held
   * one at a time until released, or up.
   */
  async function thirdParty() {
    const orders = new Set<string>();
    const state = { reads: 'down' as 'down' | 'hold' | 'up', held: [] as ServerResponse[] };
    const found = (res: ServerResponse, id: string) => {
      res.writeHead(orders.has(id) ? 200 : 404, { 'content-type': 'application/json' });
      res.end(JSON.stringify(orders.has(id) ? { data: { id, status: 'created' } } : {}));
    };
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        if (req.method === 'POST') {
          orders.add((JSON.parse(body) as { id: string }).id);
          res.writeHead(500, { 'content-type': 'application/json' });
          return res.end(JSON.stringify({ error: { code: 'internal' } }));
        }
        const id = decodeURIComponent((req.url ?? '').slice('/orders/'.length));
        if (state.reads === 'down') {
          res.writeHead(503, { 'content-type': 'application/json' });
          return res.end(JSON.stringify({ error: { code: 'maintenance' } }));
        }
        if (state.reads === 'hold') {
          // One read held; the next ones answer.
          state.held.push(res);
          state.reads = 'up';
          (res as ServerResponse & { orderId?: string }).orderId = id;
          return;
        }
        found(res, id);
      });
    });
    const local = closeAfter(await listenLocally(server));
    await allowLoopbackPort(stack, local.port);
    return {
      port: local.port,
      state,
      /** Answers the held read (the order is there). */
      release: () => {
        const res = state.held.shift()!;
        found(res, (res as ServerResponse & { orderId?: string }).orderId!);
      },
    };
  }

  /** An order sent, its outcome unknown, its source unreadable: held SOURCE_UNREACHABLE. The re-check's read then held. */
  async function heldWithARecheckReading() {
    const party = await thirdParty();
    const created = await submit(stack, [orderAt(party.port, 'order')]);
    const held = await waitForOp(stack, created.id, 'order', (o) => o.status === 'MANUAL_REVIEW');
    expect(held.terminal_reason).toBe('SOURCE_UNREACHABLE');
    party.state.reads = 'hold';
    const asked = await http<unknown>(stack.apiUrl, 'POST', `/v1/operations/${held.id}/recheck`, {
      key: DEMO.reviewer,
    });
    expect(asked.status).toBe(202);
    await waitFor(
      async () => party.state.held.length,
      (n) => n === 1,
    );
    return { party, executionId: created.id, opId: held.id };
  }

  /** The re-check job's outcome, once a reconciler has logged it. */
  async function recheckOutcome(opId: string): Promise<string> {
    const line = await waitFor(
      async () =>
        stack
          .running('reconciler')
          .flatMap(logLines)
          .find((l) => l.job === 'recheck-operation' && l.operationId === opId && typeof l.outcome === 'string'),
      (found) => found !== undefined,
    );
    return line!.outcome as string;
  }

  const resolveVerified = (opId: string) =>
    http<Problem & { status: string }>(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: 'the order is in their dashboard' },
    });

  it('the reviewer first: the re-check’s read then finds the effect and changes nothing, recorded in the asker’s name', async () => {
    const { party, executionId, opId } = await heldWithARecheckReading();
    const resolved = await resolveVerified(opId);
    expect(resolved.status).toBe(200);
    expect(resolved.body.status).toBe('VERIFIED');
    party.release();
    expect(await recheckOutcome(opId)).toBe('skipped: lost race');
    await settle(stack, executionId);
    const log = await events(stack, executionId);
    expectLegalHistory(log);
    const verified = log.filter((e) => e.operation_id === opId && e.to_status === 'VERIFIED');
    expect(verified).toHaveLength(1);
    expect(verified[0].data).toMatchObject({ actor: 'human' });
    expect(log.filter((e) => e.type === 'operation.resolved')).toHaveLength(1);
    // The lost read moved nothing after the reviewer's move: it is recorded only as the answer to the reviewer's
    // re-check request (202, the result promised as an event), saying the hold was decided meanwhile, with no `after`.
    const afterMove = log.filter((e) => e.operation_id === opId && e.seq > verified[0].seq);
    expect(afterMove).toEqual([
      expect.objectContaining({
        type: 'operation.rechecked',
        data: expect.objectContaining({ trigger: 'reviewer', result: 'found', decided_meanwhile: 'VERIFIED' }),
      }),
    ]);
    expect(afterMove[0].data).not.toHaveProperty('after');
    const op = await getOperation(stack, opId);
    expect(op.evidence).toMatchObject({ resolution: { status: 'VERIFIED' } });
  });

  it('the re-check first: its read-back VERIFIES; the reviewer’s VERIFIED is told the system decided, and writes nothing', async () => {
    const { party, executionId, opId } = await heldWithARecheckReading();
    party.release();
    expect(await recheckOutcome(opId)).toBe('verified');
    const resolved = await resolveVerified(opId);
    const stillUnknown = await http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'MANUAL_REVIEW', evidence: 'still looking' },
    });
    await settle(stack, executionId);
    const log = await events(stack, executionId);
    expectLegalHistory(log);
    const verified = log.filter((e) => e.operation_id === opId && e.to_status === 'VERIFIED');
    expect(verified).toHaveLength(1);
    expect(verified[0].data).toMatchObject({ actor: 'system' });
    // I13: the system's move is the decision that won, named as a person's would be (until 2026-12-03 this was
    // `resolution-not-permitted`, or `operation-moved` when the read-back landed during the resolution).
    for (const lost of [resolved, stillUnknown]) {
      expect(lost.status).toBe(409);
      expect(lost.body).toMatchObject({
        type: 'https://verity.dev/problems/already-decided',
        decision: 'VERIFIED',
        decided_by: 'system',
        decided_at: verified[0].created_at,
        current_status: 'VERIFIED',
      });
    }
    expect(log.filter((e) => e.type === 'operation.resolved')).toEqual([]);
    expect((await getOperation(stack, opId)).evidence).toMatchObject({
      method: 'read_after_write',
      recheck: { trigger: 'reviewer', held_for: 'SOURCE_UNREACHABLE' },
    });
  });
});
