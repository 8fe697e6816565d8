import { createApiKey } from '@verity/persistence/api-keys';
import { lockWaiters, waitForLockWaiter } from '../support/lock-waits';
import { withSessions } from '../support/sessions';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { events, expectLegalHistory, getOperation, submit, waitForOp } from './dispatcher-helpers';
import type { ProblemDetails as Problem } from '@verity/sdk';

/**
 * Whoever decides first, every decision that loses is told who won and when (I13): `409 already-decided` with the
 * winner's `decision`, `decided_by` and `decided_at` — also when the winner is a cancel of the execution.
 */
describe('api: the winner of a decision is named', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'decision-winners' });
  });
  afterAll(async () => stack?.stop());

  const post = <T>(path: string, body: unknown, key = DEMO.reviewer) =>
    http<T>(stack.apiUrl, 'POST', path, { key, body });

  it('a cancel that won: a second cancel, an approval and a resolution are told who cancelled and when', async () => {
    // One charge waits for approval (it keeps the execution open), the other is held before it was ever sent.
    const created = await submit(stack, [
      charge(unique('win-approval'), { requires_approval: true }),
      charge(unique('win-held'), { key: 'held', expected_state: { charged: true } }),
    ]);
    const waiting = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    const held = await waitForOp(stack, created.id, 'held', (o) => o.status === 'MANUAL_REVIEW');
    const cancelled = await post(`/v1/executions/${created.id}/cancel`, { reason: 'not needed' }, DEMO.agent);
    expect(cancelled.status).toBe(200);
    const log = await events(stack, created.id);
    const cancel = log.find((e) => e.type === 'execution.status_changed' && e.to_status === 'cancelled')!;
    const winner = {
      type: 'https://verity.dev/problems/already-decided',
      decision: 'cancel',
      decided_by: (cancel.data as { by: string }).by,
      decided_at: cancel.created_at,
    };
    expect(winner.decided_by).toEqual(expect.any(String));

    const again = await post<Problem>(`/v1/executions/${created.id}/cancel`, {}, DEMO.reviewer);
    const approve = await post<Problem>(`/v1/operations/${waiting.id}/approval`, { decision: 'approve' });
    const deny = await post<Problem>(`/v1/operations/${waiting.id}/approval`, { decision: 'deny', reason: 'no' });
    const release = await post<Problem>(`/v1/operations/${held.id}/resolve`, { status: 'SENT', evidence: 'go' });
    const stillUnknown = await post<Problem>(`/v1/operations/${held.id}/resolve`, {
      status: 'MANUAL_REVIEW',
      evidence: 'asked the provider',
    });
    for (const lost of [again, approve, deny, release, stillUnknown]) {
      expect(lost.status).toBe(409);
      expect(lost.body).toMatchObject(winner);
      // The detail names the winner too: it is all the console's status line shows of a refusal.
      expect(lost.body.detail).toContain(`by ${winner.decided_by} at ${winner.decided_at}`);
    }
    // Nothing the losers sent was written.
    const after = await events(stack, created.id);
    expect(after).toHaveLength(log.length);
    expectLegalHistory(after);
  });

  it('an approval the system ended first, its execution cancelled later: the system is named, not the cancel', async () => {
    // The declined charge fails; the charge that depends on it, its approval asked for, is ended by the system. The
    // third one's approval keeps the execution open, so the agent can cancel it afterwards.
    const created = await submit(stack, [
      charge(unique('decline-win'), { key: 'first' }),
      charge(unique('win-dep'), { key: 'dependant', depends_on: ['first'], requires_approval: true }),
      charge(unique('win-open'), { key: 'open', requires_approval: true }),
    ]);
    const dependant = await waitForOp(
      stack,
      created.id,
      'dependant',
      (o) => o.status === 'CANCELLED' && o.approval !== null,
    );
    await waitForOp(stack, created.id, 'open', (o) => o.approval?.state === 'requested');
    const cancelled = await post(`/v1/executions/${created.id}/cancel`, {}, DEMO.agent);
    expect(cancelled.status).toBe(200);
    const log = await events(stack, created.id);
    const end = log.find((e) => e.operation_id === dependant.id && e.to_status === 'CANCELLED')!;
    expect(end.data).toMatchObject({ actor: 'system' });
    expect(end.data).not.toMatchObject({ cause: 'execution_cancelled' });
    for (const decision of ['approve', 'deny']) {
      const lost = await post<Problem>(`/v1/operations/${dependant.id}/approval`, { decision, reason: 'late' });
      expect(lost.status).toBe(409);
      expect(lost.body).toMatchObject({
        type: 'https://verity.dev/problems/already-decided',
        decision: 'cancel',
        decided_by: 'system',
        decided_at: end.created_at,
        cause: (end.data as { cause: string }).cause,
      });
      expect(lost.body.detail).toContain(`by the system at ${end.created_at}`);
    }
    expect(await events(stack, created.id)).toHaveLength(log.length);
  });

  it('a decision repeated with its Idempotency-Key is not replayed: 409 already-decided names the caller’s own key', async () => {
    // Keys whose ids the test knows, as a client knows its own (keys create --json, keys list).
    const db = stack.db.dataSource.manager;
    const reviewer = await createApiKey(db, { tenantId: 'demo', role: 'reviewer', label: 'decision retry' });
    const agent = await createApiKey(db, { tenantId: 'demo', role: 'agent', label: 'decision retry' });
    const created = await submit(stack, [charge(unique('win-idem'), { requires_approval: true })]);
    const waiting = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    const send = (path: string, body: unknown, key: string) =>
      http<Problem>(stack.apiUrl, 'POST', path, { key, body, headers: { 'idempotency-key': 'decide-once-1' } });

    const approval = { decision: 'approve', reason: 'checked the order' };
    const first = await send(`/v1/operations/${waiting.id}/approval`, approval, reviewer.key);
    expect(first.status).toBe(200);
    // The same request again (its answer was lost, say): not a replay of the 200 but the decision that was written.
    const again = await send(`/v1/operations/${waiting.id}/approval`, approval, reviewer.key);
    expect(again.status).toBe(409);
    expect(again.headers.get('idempotent-replayed')).toBeNull();
    expect(again.body).toMatchObject({
      type: 'https://verity.dev/problems/already-decided',
      decision: 'approve',
      decided_by: reviewer.id,
    });
    // One decision written (the approved charge itself moves on meanwhile, so its other events are not counted).
    const decided = (await events(stack, created.id)).filter((e) => e.type === 'approval.decided');
    expect(decided).toHaveLength(1);

    // A cancel likewise, by an agent key (the approved charge may still be on its way: the execution is then running).
    const open = await submit(stack, [charge(unique('win-idem-cancel'), { requires_approval: true })]);
    await waitForOp(stack, open.id, 'charge', (o) => o.approval?.state === 'requested');
    expect((await send(`/v1/executions/${open.id}/cancel`, { reason: 'twice' }, agent.key)).status).toBe(200);
    const cancelAgain = await send(`/v1/executions/${open.id}/cancel`, { reason: 'twice' }, agent.key);
    expect(cancelAgain.status).toBe(409);
    expect(cancelAgain.body).toMatchObject({ decision: 'cancel', decided_by: agent.id });
  });

  it('an id of the wrong kind on a decision endpoint is 404 problem+json, and nothing is written', async () => {
    const created = await submit(stack, [charge(unique('win-kind'), { requires_approval: true })]);
    const op = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    const [evt] = await events(stack, created.id);
    const before = await events(stack, created.id);
    const tries: { path: string; key: string; body?: unknown }[] = [];
    for (const id of [created.id, evt.id]) {
      tries.push(
        { path: `/v1/operations/${id}/approval`, key: DEMO.reviewer, body: { decision: 'deny', reason: 'x' } },
        { path: `/v1/operations/${id}/resolve`, key: DEMO.reviewer, body: { status: 'FAILED', evidence: 'x' } },
        { path: `/v1/operations/${id}/recheck`, key: DEMO.reviewer },
        { path: `/v1/operations/${id}/retry`, key: DEMO.agent },
      );
    }
    for (const id of [op.id, evt.id]) tries.push({ path: `/v1/executions/${id}/cancel`, key: DEMO.agent });
    const wrong: string[] = [];
    for (const t of tries) {
      const res = await post<Problem>(t.path, t.body, t.key);
      if (res.status !== 404 || !res.headers.get('content-type')?.startsWith('application/problem+json')) {
        wrong.push(`${t.path} → ${res.status} ${res.text.slice(0, 120)}`);
      }
    }
    expect(wrong).toEqual([]);
    expect(await events(stack, created.id)).toEqual(before);
    expect((await getOperation(stack, op.id)).approval?.state).toBe('requested');
  });

  it('a release the execution’s cancel overtook: a later resolution is told the cancel decided, not the release', async () => {
    const created = await submit(stack, [
      charge(unique('win-rel-wait'), { requires_approval: true }),
      charge(unique('win-rel-held'), { key: 'held', expected_state: { charged: true } }),
    ]);
    await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    const held = await waitForOp(stack, created.id, 'held', (o) => o.status === 'MANUAL_REVIEW');
    // No dispatcher carries the release out before the cancel comes.
    for (const app of stack.running('dispatcher')) await stack.kill(app, 'SIGTERM');
    try {
      const released = await post(`/v1/operations/${held.id}/resolve`, { status: 'SENT', evidence: 'release it' });
      expect(released.status).toBe(200);
      const cancelled = await post(`/v1/executions/${created.id}/cancel`, {}, DEMO.agent);
      expect(cancelled.status).toBe(200);
      const log = await events(stack, created.id);
      const cancel = log.find((e) => e.type === 'execution.status_changed' && e.to_status === 'cancelled')!;
      const ended = log.find((e) => e.operation_id === held.id && e.to_status === 'CANCELLED')!;
      expect(ended.data).toMatchObject({ cause: 'execution_cancelled' });

      // Never sent: the release was not carried out, the cancel ended the hold. That is the decision a reviewer
      // who comes later is told of, not "already resolved as SENT".
      for (const body of [
        { status: 'VERIFIED', evidence: 'seen at the provider' },
        { status: 'SENT', evidence: 'release it again' },
        { status: 'MANUAL_REVIEW', evidence: 'asked the provider' },
      ]) {
        const lost = await post<Problem>(`/v1/operations/${held.id}/resolve`, body);
        expect(lost.status).toBe(409);
        expect(lost.body).toMatchObject({
          type: 'https://verity.dev/problems/already-decided',
          decision: 'cancel',
          decided_by: (cancel.data as { by: string }).by,
          decided_at: cancel.created_at,
          current_status: 'CANCELLED',
        });
      }
      expect(await events(stack, created.id)).toHaveLength(log.length);
      expect((await stack.effects()).charges).not.toHaveProperty(held.params.reference as string);
    } finally {
      await stack.startApp('dispatcher');
    }
  });

  it('an approve that waited for the row a cancel holds is told the cancel decided, and writes nothing', async () => {
    // The cancel takes the operation's row, then waits for the execution's (held here); the approve, judged on the
    // operation as it read it (still asked for), then waits for the cancel's hold on the operation. The holder lets
    // go: the cancel commits first. An approval written on what it had read would have granted a cancelled operation.
    const created = await submit(stack, [charge(unique('win-waited'), { requires_approval: true })]);
    const op = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    const db = stack.db.dataSource;
    const { cancelled, approve } = await withSessions(db, ['holder'], async ({ holder }) => {
      await holder.startTransaction();
      const [{ pid }] = (await holder.query(`SELECT pg_backend_pid() AS pid`)) as { pid: number }[];
      await holder.query(`SELECT 1 FROM executions WHERE id = $1 FOR UPDATE`, [created.id]);
      let cancelAnswered = false;
      const cancelling = post<Problem>(`/v1/executions/${created.id}/cancel`, {}, DEMO.agent).finally(
        () => (cancelAnswered = true),
      );
      await waitForLockWaiter(db, { blockedBy: pid, unless: () => cancelAnswered });
      expect(cancelAnswered).toBe(false);
      let approveAnswered = false;
      const approving = post<Problem>(`/v1/operations/${op.id}/approval`, { decision: 'approve' }).finally(
        () => (approveAnswered = true),
      );
      await waitFor(
        async () => approveAnswered || (await lockWaiters(db)) >= 2,
        (done) => done,
      );
      expect(approveAnswered).toBe(false);
      await holder.commitTransaction();
      return { cancelled: await cancelling, approve: await approving };
    });
    expect(cancelled.status).toBe(200);
    const log = await events(stack, created.id);
    const cancel = log.find((e) => e.type === 'execution.status_changed' && e.to_status === 'cancelled')!;
    expect({ status: approve.status, body: approve.body }).toMatchObject({
      status: 409,
      body: {
        type: 'https://verity.dev/problems/already-decided',
        decision: 'cancel',
        decided_by: (cancel.data as { by: string }).by,
        decided_at: cancel.created_at,
        current_status: 'CANCELLED',
      },
    });
    expect(log.filter((e) => e.type === 'approval.decided')).toEqual([]);
    expect(await getOperation(stack, op.id)).toMatchObject({ status: 'CANCELLED' });
    expect(
      (await stack.db.dataSource.query(`SELECT approval->>'state' AS state FROM operations WHERE id = $1`, [op.id]))[0],
    ).toEqual({ state: 'requested' });
    expectLegalHistory(log);
  });
});
