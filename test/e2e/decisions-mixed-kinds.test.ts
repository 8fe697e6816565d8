import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ProblemDetails as Problem } from '@verity/sdk';
import { createApiKey } from '@verity/persistence/api-keys';
import { writeDuringRevocation } from '../support/lock-waits';
import { DEMO, Stack, waitFor } from '../support/stack';
import { orderAt } from '../support/fixtures';
import { charge, http, sms, unique } from '../support/http';
import { Event, Op, events, submit, waitForOp, waitForResolutionPermitted } from './dispatcher-helpers';
import { allowLoopbackPort } from './connectors-support';

/** A decision's answer body: the operation (2xx) or a problem (4xx); only what these tests read. */
type Reply = Pick<Problem, 'type' | 'detail'> & { decision?: string; current_status?: string };
type Detail = Op & { permitted_resolutions: string[] };

/**
 * Evidence a hostile or careless reviewer may write and the API takes: markup, a secret's placeholder, an emoji, a
 * right-to-left letter with its direction mark (bidi overrides are refused at the door: e2e shown-text-hidden).
 */
const hostile = (i: number, status: string) =>
  `racer ${i}: \u05E9\u200F <script>alert(1)</script> {{secret:API_KEY}} 🧾 ${status}`;

/**
 * Decisions by people of different kinds on one operation at once (I13): a release, a cancel and a "still unknown" of
 * a never-sent hold; a VERIFIED, a FAILED and a "still unknown" of a sent one — each made on the version its author
 * was shown (If-Match). Exactly one answers 2xx, every other is 409 already-decided naming the winner's decision, the
 * history holds one event of it, and nothing more is offered afterwards than is accepted. Besides: keys of the wrong
 * role or tenant, a key revoked as the decision is written, and an execution's cancel racing its expiry.
 */
describe('decisions of different kinds on one operation at once', () => {
  let stack: Stack;
  /**
   * An API that waits 10 s for a read of the source, where the stack's give up after CONNECTOR_TIMEOUT_MS (1 s in
   * tests): a FAILED whose read is held at the source while a re-check is asked for, run and recorded — which a loaded
   * machine can make outlast 1 s — is otherwise refused because its read went unanswered, not for the re-check's read.
   * It also bounds a call still in flight by it, so it offers FAILED that much later.
   */
  let patientApi: string;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'mixeddecisions' });
    patientApi = await stack.startApi({ CONNECTOR_TIMEOUT_MS: '10000' });
  });
  afterAll(async () => stack?.stop());

  const count = (log: Event[], ...types: string[]) => log.filter((e) => types.includes(e.type)).length;
  const show = (opId: string, apiUrl = stack.apiUrl) =>
    http<Detail>(apiUrl, 'GET', `/v1/operations/${opId}`, { key: DEMO.reviewer });
  const resolve = (
    opId: string,
    status: string,
    evidence: string,
    headers: Record<string, string> = {},
    key = DEMO.reviewer,
    apiUrl = stack.apiUrl,
  ) =>
    http<Reply>(apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
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
    expect(String(recorded.data.evidence)).toMatch(/^racer \d+: \u05E9\u200F <script>/);
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
    // At rest before the log is taken: the charge held and the SMS's approval asked for (the execution may still move
    // to waiting_for_approval after the hold, which would add an event no decision wrote).
    const before = await waitFor(
      () => events(stack, execution.id),
      (log) =>
        log.some((e) => e.type === 'approval.requested') &&
        log.some((e) => e.type === 'execution.status_changed' && e.to_status === 'waiting_for_approval'),
    );
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

  it('a FAILED whose read found nothing, while a re-check’s read showed the effect: 409 effect-exists with that read', async () => {
    // A third party whose writes answer 500 (the outcome is unknown), whose reads are down until the hold, then held
    // here one by one: the reviewer's FAILED reads first, and is answered "not found" only after the re-check's read
    // has shown the order (with another status: a record of it, which a person must judge) and been recorded.
    const mode = { readsDown: true };
    const heldReads: ServerResponse[] = [];
    let readsSeen = 0;
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      req.resume();
      req.on('end', () => {
        const answer = (status: number, value: unknown) => {
          res.writeHead(status, { 'content-type': 'application/json' });
          res.end(JSON.stringify(value));
        };
        if (req.method === 'POST') return answer(500, { error: { code: 'internal' } });
        if (mode.readsDown) return answer(503, { error: { code: 'maintenance' } });
        readsSeen += 1;
        if (readsSeen === 1) return void heldReads.push(res);
        return answer(200, { data: { status: 'pending' } });
      });
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    const port = (server.address() as AddressInfo).port;
    try {
      await allowLoopbackPort(stack, port);
      // Due at once: no scheduled re-check reads the source, only the reviewer's (the reads below are told apart so).
      const due = await http(stack.apiUrl, 'PUT', '/v1/admin/policy', {
        key: DEMO.admin,
        body: { obligation_due_seconds: { SOURCE_UNREACHABLE: 1 } },
      });
      expect(due.status).toBe(200);
      const key = unique('order');
      const created = await submit(stack, [orderAt(port, key)]);
      const held = await waitForOp(stack, created.id, key, (o) => o.status === 'MANUAL_REVIEW');
      expect(held.terminal_reason).toBe('SOURCE_UNREACHABLE');
      // Decided on the patient API (see above), once it offers FAILED.
      await waitFor(
        () => show(held.id, patientApi),
        (shown) => shown.body.permitted_resolutions?.includes('FAILED') === true,
        45_000,
        150,
      );
      mode.readsDown = false;
      let answered = false;
      const failing = resolve(
        held.id,
        'FAILED',
        'their dashboard shows no such order',
        {},
        DEMO.reviewer,
        patientApi,
      ).finally(() => (answered = true));
      await waitFor(
        async () => heldReads.length,
        (n) => n === 1,
      );
      expect(
        (await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/recheck`, { key: DEMO.reviewer })).status,
      ).toBe(202);
      await waitFor(
        () => events(stack, created.id),
        (log) => log.some((e) => e.type === 'operation.rechecked' && e.data.result === 'mismatch'),
      );
      // The read held is the FAILED's own (a scheduled re-check's would have let the FAILED read the order first), and
      // the FAILED still waits on it (an API that gave up on it would have refused the FAILED as the source unread).
      expect(answered).toBe(false);
      heldReads[0].writeHead(404, { 'content-type': 'application/json' });
      heldReads[0].end('{}');
      const failed = await failing;
      expect({ status: failed.status, body: failed.body }).toMatchObject({
        status: 409,
        body: { type: 'https://verity.dev/problems/effect-exists', read_back: { kind: 'mismatch' } },
      });
      const log = await events(stack, created.id);
      expect(count(log, 'operation.resolved')).toBe(0);
      const after = await show(held.id);
      expect(after.body.status).toBe('MANUAL_REVIEW');
      // Shown as accepted: FAILED is offered no more.
      expect(after.body.permitted_resolutions).not.toContain('FAILED');
    } finally {
      await http(stack.apiUrl, 'PUT', '/v1/admin/policy', { key: DEMO.admin, body: { obligation_due_seconds: null } });
      for (const res of heldReads) if (!res.writableEnded) res.destroy();
      server.closeAllConnections();
      await new Promise((done) => server.close(done));
    }
  });
});
