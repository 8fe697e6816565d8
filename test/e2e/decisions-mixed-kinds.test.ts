import type { ProblemDetails as Problem } from '@verity/sdk';
import { createApiKey } from '@verity/persistence';
import { writeDuringRevocation } from '../support/lock-waits';
import { DEMO, Stack } from '../support/stack';
import { charge, http, sms, unique } from '../support/http';
import { Event, Op, events, submit, waitForOp, waitForResolutionPermitted } from './dispatcher-helpers';

/** A decision's answer body: the operation (2xx) or a problem (4xx); only what these tests read. */
type Reply = Pick<Problem, 'type' | 'detail'> & { decision?: string; current_status?: string };
type Detail = Op & { permitted_resolutions: string[] };

/** Evidence a hostile or careless reviewer may write: bidi overrides, markup, a secret's placeholder, a NUL-free emoji. */
const hostile = (i: number, status: string) =>
  `racer ${i}: \u202Eevil\u202C <script>alert(1)</script> {{secret:API_KEY}} 🧾 ${status}`;

/**
 * Decisions by people of different kinds on one operation at once (I13): a release, a cancel and a "still unknown" of
 * a never-sent hold; a VERIFIED, a FAILED and a "still unknown" of a sent one — each made on the version its author
 * was shown (If-Match). Exactly one answers 2xx, every other is 409 already-decided naming the winner's decision, the
 * history holds one event of it, and nothing more is offered afterwards than is accepted. Besides: keys of the wrong
 * role or tenant, a key revoked as the decision is written, and an execution's cancel racing its expiry.
 */
describe('decisions of different kinds on one operation at once', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'mixeddecisions' });
  });
  afterAll(async () => stack?.stop());

  const count = (log: Event[], ...types: string[]) => log.filter((e) => types.includes(e.type)).length;
  const show = (opId: string) => http<Detail>(stack.apiUrl, 'GET', `/v1/operations/${opId}`, { key: DEMO.reviewer });
  const resolve = (
    opId: string,
    status: string,
    evidence: string,
    headers: Record<string, string> = {},
    key = DEMO.reviewer,
  ) =>
    http<Reply>(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
      key,
      headers,
      body: { status, evidence },
    });

  /** Every status of `statuses` asked for at once on the version shown; returns the winner's status. */
  async function raceOn(opId: string, executionId: string, statuses: string[]): Promise<string> {
    const etag = (await show(opId)).headers.get('etag')!;
    const answers = await Promise.all(
      statuses.map(async (status, i) => ({
        status,
        answer: await resolve(opId, status, hostile(i, status), { 'if-match': etag }),
      })),
    );
    const summary = answers.map((a) => `${a.status}: ${a.answer.status} ${a.answer.body.type ?? ''}`);
    const won = answers.filter((a) => a.answer.status === 200);
    expect({ summary, won: won.length }).toEqual({ summary, won: 1 });
    const winner = won[0].status;
    for (const lost of answers.filter((a) => a.answer.status !== 200)) {
      expect({ summary, status: lost.answer.status, body: lost.answer.body }).toMatchObject({
        summary,
        status: 409,
        body: { type: 'https://verity.dev/problems/already-decided', decision: winner },
      });
    }
    const log = await events(stack, executionId);
    expect(count(log, 'operation.resolved', 'operation.still_unknown')).toBe(1);
    const recorded = log.find((e) => ['operation.resolved', 'operation.still_unknown'].includes(e.type))!;
    // The evidence is kept as written, hostile characters and all.
    expect(String(recorded.data.evidence)).toMatch(/^racer \d+: \u202Eevil\u202C <script>/);
    // Offered afterwards is what is accepted: a resolution ends the hold (nothing more offered); "still unknown" keeps it
    // open, and each resolution still offered is accepted (one is taken below, without If-Match, and answers 200).
    const after = await show(opId);
    if (winner !== 'MANUAL_REVIEW') {
      expect(after.body.permitted_resolutions).toEqual([]);
    } else {
      expect(after.body.status).toBe('MANUAL_REVIEW');
      expect(after.body.permitted_resolutions.length).toBeGreaterThan(0);
      const next = after.body.permitted_resolutions[0];
      expect((await resolve(opId, next, 'decided after the investigation')).status).toBe(200);
    }
    return winner;
  }

  it('a never-sent hold: a release, a cancel and a "still unknown" at once', async () => {
    for (let trial = 0; trial < 6; trial += 1) {
      const execution = await submit(stack, [
        charge(unique('mixed-never'), { expected_state: { charged: true } }),
        sms(unique('mixed-never-sms'), { requires_approval: true }),
      ]);
      const op = await waitForOp(stack, execution.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
      const kinds = ['SENT', 'CANCELLED', 'MANUAL_REVIEW'];
      const rotated = [...kinds.slice(trial % 3), ...kinds.slice(0, trial % 3)];
      await raceOn(op.id, execution.id, [...rotated, ...rotated]);
    }
  });

  it('a sent hold: a VERIFIED, a FAILED and a "still unknown" at once', async () => {
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/messages', fault: 'timeout_after_commit', probability: 1 }],
    });
    const held: { executionId: string; opId: string }[] = [];
    try {
      for (let trial = 0; trial < 6; trial += 1) {
        const execution = await submit(stack, [sms(unique('mixed-sent'))]);
        const key = execution.operations[0].key;
        const op = await waitForOp(stack, execution.id, key, (o) => o.status === 'MANUAL_REVIEW');
        held.push({ executionId: execution.id, opId: op.id });
      }
    } finally {
      await stack.setFaults({ rules: [] });
    }
    for (const [trial, { executionId, opId }] of held.entries()) {
      await waitForResolutionPermitted(stack, opId, 'FAILED');
      const kinds = ['VERIFIED', 'FAILED', 'MANUAL_REVIEW'];
      const rotated = [...kinds.slice(trial % 3), ...kinds.slice(0, trial % 3)];
      await raceOn(opId, executionId, [...rotated, ...rotated]);
    }
  });

  it('keys of the wrong role or tenant decide nothing: 403 or 404, nothing written', async () => {
    const execution = await submit(stack, [
      charge(unique('mixed-role'), { expected_state: { charged: true } }),
      sms(unique('mixed-role-sms'), { requires_approval: true }),
    ]);
    const op = await waitForOp(stack, execution.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    const sibling = execution.operations[1].id;
    const before = await events(stack, execution.id);
    const asked = async (key: string) =>
      (
        await Promise.all([
          resolve(op.id, 'SENT', 'x', {}, key),
          resolve(op.id, 'MANUAL_REVIEW', 'x', {}, key),
          http(stack.apiUrl, 'POST', `/v1/operations/${sibling}/approval`, { key, body: { decision: 'deny' } }),
        ])
      ).map((a) => a.status);
    // A reviewer's decisions are a reviewer's alone: an admin may do much in its tenant, but not these.
    expect({
      agent: await asked(DEMO.agent),
      admin: await asked(DEMO.admin),
      operator: await asked(DEMO.operator),
      otherTenant: await asked(DEMO.otherAgent),
    }).toEqual({
      agent: [403, 403, 403],
      admin: [403, 403, 403],
      operator: [403, 403, 403],
      otherTenant: [403, 403, 403],
    });
    // Another tenant's cancel finds no such execution.
    const foreign = await http(stack.apiUrl, 'POST', `/v1/executions/${execution.id}/cancel`, {
      key: DEMO.otherAgent,
      body: {},
    });
    expect(foreign.status).toBe(404);
    expect(await events(stack, execution.id)).toEqual(before);
  });

  it('a release and a "still unknown" made as their key’s revocation commits are not written: 401', async () => {
    const execution = await submit(stack, [
      charge(unique('mixed-revoked'), { expected_state: { charged: true } }),
      sms(unique('mixed-revoked-sms'), { requires_approval: true }),
    ]);
    const op = await waitForOp(stack, execution.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    const before = await events(stack, execution.id);
    for (const status of ['SENT', 'MANUAL_REVIEW']) {
      const reviewer = await createApiKey(stack.db.dataSource.manager, {
        tenantId: 'demo',
        role: 'reviewer',
        label: unique('mixed-revoked'),
      });
      // Known to the API (cached), as for any reviewer who has the operation open.
      expect((await http(stack.apiUrl, 'GET', `/v1/operations/${op.id}`, { key: reviewer.key })).status).toBe(200);
      const answer = await writeDuringRevocation(stack.db.dataSource, reviewer.id, () =>
        resolve(op.id, status, 'decided by a key on its way out', {}, reviewer.key),
      );
      expect({ status, answer: answer.status, type: answer.body.type, detail: answer.body.detail }).toEqual({
        status,
        answer: 401,
        type: 'https://verity.dev/problems/unauthorized',
        detail: expect.stringMatching(/revoked while this request was under way; nothing was written/),
      });
    }
    expect(await events(stack, execution.id)).toEqual(before);
  });

  it('an execution’s cancel racing its expiry: one end, and the answer says which', async () => {
    for (let trial = 0; trial < 8; trial += 1) {
      const execution = await submit(
        stack,
        [
          charge(unique('mixed-expiry'), { expected_state: { charged: true } }),
          sms(unique('mixed-expiry-sms'), { requires_approval: true }),
        ],
        { deadline_seconds: 2 },
      );
      await waitForOp(stack, execution.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
      const [{ deadline_at: deadlineAt }] = (await stack.db.dataSource.query(
        'SELECT deadline_at FROM executions WHERE id = $1',
        [execution.id],
      )) as { deadline_at: Date }[];
      // Asked from the deadline on (by the database's clock), a little later each trial: before the expiry, at it, after.
      const askAt = new Date(deadlineAt).getTime() + trial * 60;
      while ((await stack.databaseNow()) < askAt) await new Promise((next) => setImmediate(next));
      const cancelled = await http<Reply>(stack.apiUrl, 'POST', `/v1/executions/${execution.id}/cancel`, {
        key: DEMO.agent,
        body: {},
      });
      const log = await events(stack, execution.id);
      const ends = log.filter(
        (e) => e.type === 'execution.status_changed' && ['cancelled', 'expired'].includes(e.to_status ?? ''),
      );
      expect(ends).toHaveLength(1);
      if (cancelled.status === 200) {
        expect(ends[0].to_status).toBe('cancelled');
      } else {
        expect({ status: cancelled.status, type: cancelled.body.type, now: cancelled.body.current_status }).toEqual({
          status: 409,
          type: 'https://verity.dev/problems/execution-terminal',
          now: 'expired',
        });
        expect(ends[0].to_status).toBe('expired');
      }
      // Either end ends the never-sent hold and the operation awaiting approval with it, once each.
      expect(log.filter((e) => e.type === 'operation.status_changed' && e.to_status === 'CANCELLED')).toHaveLength(2);
    }
  });
});
