import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { Call, Execution, recordingClient, settled, submitOps } from './connectors-support';

/**
 * An agent trying to spend past a tenant's amount cap on sandbox.payments: a charge whose outcome is unknown (the
 * provider timed out after committing, and its record cannot be read) counts while unsettled — the money may have
 * moved; 64 executions submitted at once, and many charges in one execution, charge no more than the room the cap
 * leaves (by the provider's own record); and a reviewer's resolution cannot change an operation's amount, nor can an
 * agent's key make one.
 */
describe('amount caps an agent tries to game', () => {
  let stack: Stack;
  let call: Call;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'capgaming', dispatchers: 2 });
    ({ call } = recordingClient(stack));
  });
  afterAll(async () => {
    await stack?.stop();
  });

  /** Sets the cap to leave exactly `room` EUR beyond what the window has counted; answers what it had counted. */
  const leaveRoom = async (room: number): Promise<number> => {
    const put = async (max_amount: number) => {
      const res = await call<{ usage: { amount: number }[] }>('PUT', '/v1/admin/connector-settings/sandbox.payments', {
        key: DEMO.admin,
        body: { spending_caps: [{ period: 'day', max_amount, amount_field: 'amount', currency: 'EUR' }] },
      });
      expect(res.status).toBe(200);
      return res.body.usage[0].amount;
    };
    const used = await put(1e15);
    await put(used + room);
    return used;
  };
  const chargedAt = async (refs: string[]) => {
    const effects = await stack.effects();
    return refs.map((ref) => effects.charges[ref]?.amounts ?? []);
  };

  it('refuses at intake every charge spelled to slip past a EUR cap; an exponent is read as the number it is', async () => {
    const used = await leaveRoom(1500);
    /** Submits one charge whose amount and currency are raw JSON text, as an agent may spell them. */
    const raw = (amount: string, currency: string) => {
      const reference = unique('cap-spelled');
      const text = JSON.stringify(
        submission([charge(reference, { params: { amount: '@A@', currency: '@C@', reference } })]),
      )
        .replace('"@A@"', amount)
        .replace('"@C@"', currency);
      return {
        reference,
        answer: http<{ id: string; errors?: { field: string }[] }>(stack.apiUrl, 'POST', '/v1/executions', {
          key: DEMO.agent,
          rawBody: text,
          headers: { 'content-type': 'application/json' },
        }),
      };
    };
    const refused: [string, string][] = [
      ['"1000"', '"EUR"'],
      ['"1e3"', '"EUR"'],
      ['12.5', '"EUR"'],
      ['1000.001', '"EUR"'],
      ['-1000', '"EUR"'],
      ['0', '"EUR"'],
      ['-0', '"EUR"'],
      ['1000', '"eur"'],
      ['1000', '"ZZZ"'],
      ['1000', '"GBP"'],
      ['1000', 'null'],
    ];
    for (const [amount, currency] of refused) {
      const res = await raw(amount, currency).answer;
      expect([amount, currency, res.status]).toEqual([amount, currency, 400]);
    }
    // 1e3 as a JSON number is 1000: sent and counted as 1000, so a second one no longer fits the 1500 of room.
    const first = raw('1e3', '"EUR"');
    const sent = await settled(call, (await first.answer).body.id);
    const second = raw('1E3', '"EUR"');
    const over = await settled(call, (await second.answer).body.id);
    expect([sent.operations[0].status, over.operations[0].status]).toEqual(['VERIFIED', 'CANCELLED']);
    expect(await chargedAt([first.reference, second.reference])).toEqual([[1000], []]);
    const usage = await call<{ usage: { amount: number }[] }>('GET', '/v1/admin/connector-settings/sandbox.payments', {
      key: DEMO.admin,
    });
    expect(usage.body.usage[0].amount).toBe(used + 1000);
  });

  it('counts a charge whose outcome is unknown while it is unsettled: the next one beyond the room is never sent', async () => {
    const used = await leaveRoom(3000);
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', probability: 1 }],
      read_fault: 'unavailable',
    });
    const unknownRef = unique('cap-unknown');
    const first = await submitOps(call, [
      charge(unknownRef, { params: { amount: 2000, currency: 'EUR', reference: unknownRef } }),
    ]);
    const held = await waitFor(
      async () => (await call<Execution>('GET', `/v1/executions/${first.id}`)).body.operations[0],
      (op) => op.attempt > 0 && ['UNKNOWN', 'MANUAL_REVIEW'].includes(op.status),
      45_000,
    );
    expect(held.status).not.toBe('VERIFIED');
    // The provider did charge it, though nothing could read that back.
    expect(await chargedAt([unknownRef])).toEqual([[2000]]);
    await stack.setFaults({ rules: [], replica_lag_ms: 0, read_fault: 'unavailable' });

    const usage = await call<{ usage: { amount: number; operations: number }[] }>(
      'GET',
      '/v1/admin/connector-settings/sandbox.payments',
      { key: DEMO.admin },
    );
    expect(usage.body.usage[0].amount).toBe(used + 2000);
    const secondRef = unique('cap-after-unknown');
    const second = await settled(call, (await submitOps(call, [charge(secondRef)])).id);
    expect(second.operations[0]).toMatchObject({
      status: 'CANCELLED',
      attempt: 0,
      evidence: expect.objectContaining({ method: 'spending_cap', rule: 'max_amount', requested: 1250 }),
    });
    expect(await chargedAt([secondRef])).toEqual([[]]);
    await stack.setFaults({ rules: [], replica_lag_ms: 0, read_fault: null });
  });

  it('64 executions submitted at once charge exactly the room the cap leaves, by the provider’s record', async () => {
    await leaveRoom(10 * 1250);
    const refs = Array.from({ length: 64 }, () => unique('cap-burst'));
    const submitted = await Promise.all(refs.map((ref) => submitOps(call, [charge(ref)])));
    const done = await Promise.all(submitted.map((e) => settled(call, e.id, 120_000)));
    const ops = done.map((e) => e.operations[0]);
    const charged = (await chargedAt(refs)).flat();
    expect(charged.reduce((sum, amount) => sum + amount, 0)).toBe(10 * 1250);
    expect(charged).toHaveLength(10);
    const refused = ops.filter((op) => op.status === 'CANCELLED');
    expect(refused).toHaveLength(54);
    expect(refused.map((op) => [op.attempt, (op.evidence as { rule?: string }).rule])).toEqual(
      refused.map(() => [0, 'max_amount']),
    );
  });

  it('many small charges in one execution charge no more than the room', async () => {
    await leaveRoom(2000);
    const refs = Array.from({ length: 8 }, () => unique('cap-small'));
    const created = await submitOps(
      call,
      refs.map((ref, i) => ({
        ...charge(ref, { params: { amount: 500, currency: 'EUR', reference: ref } }),
        key: `c${i}`,
      })),
    );
    const done = await settled(call, created.id, 60_000);
    const charged = (await chargedAt(refs)).flat();
    expect(charged).toEqual([500, 500, 500, 500]);
    expect(done.operations.filter((op) => op.status === 'CANCELLED')).toHaveLength(4);
  });

  it('a declined charge and its declined retry count no money; the charge that follows still has the whole room', async () => {
    const used = await leaveRoom(2000);
    const of = (reference: string) => charge(reference, { params: { amount: 2000, currency: 'EUR', reference } });
    const declined = await settled(call, (await submitOps(call, [of(unique('decline-cap-retry'))])).id);
    expect(declined.operations[0]).toMatchObject({ status: 'FAILED', attempt: 1, commit: 'rejected' });
    const retried = await call<{ execution: { id: string } }>(
      'POST',
      `/v1/operations/${declined.operations[0].id}/retry`,
    );
    expect(retried.status).toBe(201);
    const again = await settled(call, retried.body.execution.id);
    expect(again.operations[0]).toMatchObject({ status: 'FAILED', commit: 'rejected' });
    const ref = unique('after-retries');
    const charged = await settled(call, (await submitOps(call, [of(ref)])).id);
    expect(charged.operations[0]).toMatchObject({ status: 'VERIFIED', attempt: 1 });
    const over = await settled(call, (await submitOps(call, [of(unique('past-room'))])).id);
    expect(over.operations[0]).toMatchObject({ status: 'CANCELLED', attempt: 0 });
    expect(await chargedAt([ref])).toEqual([[2000]]);
    const usage = await call<{ usage: { amount: number }[] }>('GET', '/v1/admin/connector-settings/sandbox.payments', {
      key: DEMO.admin,
    });
    expect(usage.body.usage[0].amount).toBe(used + 2000);
  });

  it('a charge the provider recorded above what was asked counts the record, also once a reviewer resolved it VERIFIED', async () => {
    const used = await leaveRoom(1e6);
    await stack.setFaults({ read_fault: 'amount_mismatch' });
    const ref = unique('cap-mismatch');
    const created = await submitOps(call, [charge(ref)]);
    const held = await waitFor(
      async () => (await call<Execution>('GET', `/v1/executions/${created.id}`)).body.operations[0],
      (op) => op.status === 'MANUAL_REVIEW',
      45_000,
    );
    expect(held.terminal_reason).toBe('INTEGRITY_MISMATCH');
    const usage = async () =>
      (
        await call<{ usage: { amount: number }[] }>('GET', '/v1/admin/connector-settings/sandbox.payments', {
          key: DEMO.admin,
        })
      ).body.usage[0].amount;
    // The provider's record says 1251 for the 1250 asked (read_fault amount_mismatch).
    expect(await usage()).toBe(used + 1251);
    await stack.setFaults({ rules: [], replica_lag_ms: 0, read_fault: null });
    const resolved = await call('POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: 'the provider charged 12.51; accepted' },
    });
    expect(resolved.status).toBe(200);
    expect(await usage()).toBe(used + 1251);
  });

  it('a resolution carries no amount, an agent’s key decides nothing, and a reviewer’s key asks for no charge', async () => {
    const created = await submitOps(call, [charge(unique('cap-held'), { requires_approval: true })]);
    const opId = created.operations[0].id;
    const withAmount = await call<{ errors?: { field: string }[] }>('POST', `/v1/operations/${opId}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'SENT', evidence: 'checked', amount: 1 },
    });
    expect(withAmount.status).toBe(400);
    for (const [path, body] of [
      ['approval', { decision: 'approve' }],
      ['approval', { decision: 'deny', reason: 'no' }],
      ['resolve', { status: 'CANCELLED', evidence: 'mine' }],
      ['recheck', {}],
    ] as const) {
      const res = await call<{ type: string }>('POST', `/v1/operations/${opId}/${path}`, { key: DEMO.agent, body });
      expect({ path, status: res.status, type: res.body.type }).toEqual({
        path,
        status: 403,
        type: 'https://verity.dev/problems/forbidden',
      });
    }
    const op = (await call<Execution>('GET', `/v1/executions/${created.id}`)).body.operations[0];
    expect(op).toMatchObject({ status: 'PREPARED', attempt: 0, params: expect.objectContaining({ amount: 1250 }) });
    // Nor does a reviewer ask for a charge it could then approve: its key neither submits nor retries.
    const cancelled = await call('POST', `/v1/executions/${created.id}/cancel`, { key: DEMO.reviewer, body: {} });
    expect(cancelled.status).toBe(200);
    const retried = await call<{ type: string }>('POST', `/v1/operations/${opId}/retry`, { key: DEMO.reviewer });
    expect([retried.status, retried.body.type]).toEqual([403, 'https://verity.dev/problems/forbidden']);
    const submitted = await call('POST', '/v1/executions', {
      key: DEMO.reviewer,
      body: { agent_id: 'a', intent: 'i', operations: [charge(unique('cap-reviewer'))] },
    });
    expect(submitted.status).toBe(403);
  });
});
