import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { httpOp, startTarget } from './connectors-support';
import { createApiKey } from '@verity/persistence/api-keys';
import { events, resetSandbox, submit, waitForOp } from './dispatcher-helpers';

/**
 * An approval threshold is "strictly above": an amount at it goes out at once, one a hair above it waits for a
 * reviewer — however the agent spells that hair (a fraction a double keeps, an exponent) — and one in another currency
 * waits too; an amount finer than a double keeps cannot be compared as the target would read it, so it is refused.
 */
describe('approval threshold edges', () => {
  let stack: Stack;
  let target: Awaited<ReturnType<typeof startTarget>>;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'apredges' });
    target = await startTarget();
    const settings = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: '127.0.0.1', ports: [target.port], allow_private: true }] },
    });
    expect(settings.status).toBe(200);
    const policy = await http(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      body: {
        approval_rules: [
          { connector: 'sandbox.payments', amount_above: 5000, currency: 'EUR' },
          { connector: 'http', amount_above: 5000, amount_field: 'body.amount' },
        ],
      },
    });
    expect(policy.status).toBe(200);
  });
  afterAll(async () => {
    await target?.close();
    await stack?.stop();
  });
  afterEach(async () => resetSandbox(stack));

  const cancel = (id: string) =>
    http(stack.apiUrl, 'POST', `/v1/executions/${id}/cancel`, { key: DEMO.agent, body: {} });

  it('a charge at the threshold goes out; one minor unit above it, or at it in another currency, waits', async () => {
    const at = unique('thr-at');
    const above = unique('thr-above');
    const gbp = unique('thr-gbp');
    const created = await submit(stack, [
      charge(at, { key: 'at', params: { amount: 5000, currency: 'EUR', reference: at } }),
      charge(above, { key: 'above', params: { amount: 5001, currency: 'EUR', reference: above } }),
      charge(gbp, { key: 'gbp', params: { amount: 5000, currency: 'GBP', reference: gbp } }),
    ]);
    try {
      const sent = await waitForOp(stack, created.id, 'at', (o) => o.status === 'VERIFIED');
      expect(sent.approval).toBeNull();
      for (const key of ['above', 'gbp']) {
        const waiting = await waitForOp(stack, created.id, key, (o) => o.approval?.state === 'requested');
        expect([key, waiting.status, waiting.attempt]).toEqual([key, 'PREPARED', 0]);
      }
      const effects = await stack.effects();
      expect([at, above, gbp].map((ref) => effects.charges[ref]?.count ?? 0)).toEqual([1, 0, 0]);
    } finally {
      await cancel(created.id);
    }
  });

  it('an http amount a hair above the threshold waits however it is spelled; one finer than a double is refused', async () => {
    // Submitted as raw JSON text, so the spelling the agent chose reaches the API as it wrote it.
    const raw = (key: string, amount: string) => {
      const body = submission([
        httpOp(key, {
          method: 'POST',
          url: `${target.base}/orders`,
          body: { amount: '@AMOUNT@', reference: unique('thr-http') },
        }),
      ]);
      return http<{ id: string; errors?: { field: string; rule: string }[] }>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        rawBody: JSON.stringify(body).replace('"@AMOUNT@"', amount),
        headers: { 'content-type': 'application/json' },
      });
    };
    const at = await raw('at', '5000');
    const atExp = await raw('at', '5e3');
    const above = await raw('above', '5000.000000000001');
    const aboveExp = await raw('above', '5.000000000001E3');
    try {
      for (const res of [at, atExp, above, aboveExp]) expect(res.status).toBe(201);
      for (const res of [at, atExp]) {
        const sent = await waitForOp(stack, res.body.id, 'at', (o) => o.status === 'ACKNOWLEDGED');
        expect(sent.approval).toBeNull();
      }
      for (const res of [above, aboveExp]) {
        const waiting = await waitForOp(stack, res.body.id, 'above', (o) => o.approval?.state === 'requested');
        expect([waiting.status, waiting.attempt]).toEqual(['PREPARED', 0]);
      }
      const finer = await raw('finer', '5000.0000000000001');
      expect([finer.status, finer.body.errors]).toEqual([
        400,
        [expect.objectContaining({ field: 'operations[0].params.body.amount', rule: 'exact_number' })],
      ]);
    } finally {
      for (const res of [at, atExp, above, aboveExp]) if (res.status === 201) await cancel(res.body.id);
    }
  });

  it('two reviewers approving and denying at the same instant: one wins, the other is told who decided what', async () => {
    const [first, second] = await Promise.all(
      ['one', 'two'].map((label) =>
        createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role: 'reviewer', label: `reviewer ${label}` }),
      ),
    );
    const created = await Promise.all(
      Array.from({ length: 8 }, () => submit(stack, [charge(unique('thr-race'), { requires_approval: true })])),
    );
    for (const [trial, execution] of created.entries()) {
      const op = await waitForOp(stack, execution.id, 'charge', (o) => o.approval?.state === 'requested');
      const sides = [
        { key: first, decision: 'approve' },
        { key: second, decision: 'deny' },
      ];
      if (trial % 2) sides.reverse();
      const answers = await Promise.all(
        sides.map(({ key, decision }) =>
          http<{ type?: string; decision?: string; decided_by?: string }>(
            stack.apiUrl,
            'POST',
            `/v1/operations/${op.id}/approval`,
            { key: key.key, body: { decision, reason: 'looked at it' } },
          ),
        ),
      );
      const won = answers.findIndex((a) => a.status === 200);
      expect(answers.map((a) => a.status).sort()).toEqual([200, 409]);
      const winner = sides[won];
      expect(answers[1 - won].body).toMatchObject({
        type: 'https://verity.dev/problems/already-decided',
        decision: winner.decision,
        decided_by: winner.key.id,
      });
      const decided = (await events(stack, execution.id)).filter((e) => e.type === 'approval.decided');
      expect(decided.map((e) => [e.data.decision, e.data.by])).toEqual([[winner.decision, winner.key.id]]);
    }
    for (const execution of created) await cancel(execution.id);
  });
});
