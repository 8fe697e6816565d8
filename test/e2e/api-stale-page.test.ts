import type { ProblemDetails as Problem } from '@verity/sdk';
import { createApiKey, operationVersionOf } from '@verity/persistence';
import { QueueName, type JobProducer } from '@verity/queues';
import { DEMO, Stack, waitFor } from '../support/stack';
import { HttpResult, charge, http, sms, unique } from '../support/http';
import { waitForLockWaiter } from '../support/lock-waits';
import { Event, events, heldUnsentCharge, resetSandbox, submit, waitForOp } from './dispatcher-helpers';

const OTHER_REVIEWER = 'stale-page-other-tenant-reviewer-key';

/** What may move a held charge while a reviewer decides on it (each a SET clause for the operation's row). */
const MOVES_OF_A_HELD_CHARGE: [change: string, set: string][] = [
  [
    'a re-check that showed the effect',
    `obligation = obligation || jsonb_build_object('effect_shown',
       jsonb_build_object('result', 'found', 'evidence', '{}'::jsonb, 'at',
         to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))`,
  ],
  ['the provider’s late acknowledgement', 'acknowledged_at = clock_timestamp()'],
];

type Stale = Problem & { current_etag?: string; errors?: { field: string; rule: string }[] };

/**
 * A person decides on the operation their page showed. One operation can be held more than once — held before it was
 * sent (a knowledge conflict), released by one reviewer, sent, its outcome lost, held again when reconciliation gave
 * up — and a decision from a page opened on the first hold was applied to the second, which its author never saw.
 * GET /v1/operations/{id} answers an ETag (the version a decision is taken on); a decision sent with it as If-Match is
 * written only while the operation is still that version (compared in the statement that writes it), else 412 and
 * nothing is written.
 */
describe('api: a decision from a stale page (ETag, If-Match)', () => {
  let stack: Stack;
  let producer: JobProducer;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'stalepage' });
    await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'reviewer', key: OTHER_REVIEWER });
    ({ producer } = await stack.queues());
  });
  afterAll(async () => {
    await stack?.stop();
  });
  afterEach(async () => resetSandbox(stack));

  /** The operation as a reviewer's page reads it, and its ETag. */
  async function read(opId: string, key = DEMO.reviewer): Promise<{ status: string; attempt: number; etag: string }> {
    const res = await http<{ status: string; attempt: number }>(stack.apiUrl, 'GET', `/v1/operations/${opId}`, { key });
    expect(res.status).toBe(200);
    return { ...res.body, etag: res.headers.get('etag') ?? '' };
  }

  const post = (opId: string, action: string, body: unknown, ifMatch?: string, key = DEMO.reviewer) =>
    http<Stale>(stack.apiUrl, 'POST', `/v1/operations/${opId}/${action}`, {
      key,
      body,
      headers: ifMatch === undefined ? {} : { 'if-match': ifMatch },
    });

  /** What a person's decision writes on the operation (automatic re-checks of a held one are left out). */
  const decisionsOf = async (executionId: string, opId: string): Promise<Event[]> =>
    (await events(stack, executionId)).filter(
      (e) => e.operation_id === opId && e.type !== 'operation.rechecked' && e.type !== 'obligation.escalated',
    );

  /** A refusal for a stale version: 412 precondition-failed naming the version the operation is at now. */
  function expectStale(res: HttpResult<Stale>, current: string): void {
    expect(res.status).toBe(412);
    expect(res.headers.get('content-type')).toContain('application/problem+json');
    expect(res.body).toMatchObject({ type: 'https://verity.dev/problems/precondition-failed', current_etag: current });
    expect(res.headers.get('etag')).toBe(current);
  }

  /** A charge held before it was ever sent (KNOWLEDGE_CONFLICT: the agent expected it charged). */
  async function heldBeforeSending(extra: Record<string, unknown> = {}) {
    const created = await submit(stack, [charge(unique('stale'), { expected_state: { charged: true }, ...extra })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    return { executionId: created.id, opId: held.id };
  }

  it('a decision made on the first hold is 412 on the second and writes nothing; on the current ETag it is taken', async () => {
    const { executionId, opId } = await heldBeforeSending();
    // Reviewer A opens the first hold; the ETag is strong and the same however often it is read.
    const first = await read(opId);
    expect(first).toMatchObject({ status: 'MANUAL_REVIEW', attempt: 0 });
    expect(first.etag).toMatch(/^"[0-9a-f]{32}"$/);
    expect((await read(opId)).etag).toBe(first.etag);
    // Reviewer B releases it; its send's answer is lost and the source cannot be read: held again, another hold.
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'reset_after_commit', count: 1 }],
      read_fault: 'unavailable',
    });
    const released = await post(opId, 'resolve', { status: 'SENT', evidence: 'B: the conflict is understood' });
    expect(released.status).toBe(200);
    expect(released.headers.get('etag')).not.toBe(first.etag);
    await waitForOp(stack, executionId, 'charge', (o) => o.status === 'MANUAL_REVIEW' && o.attempt === 1);
    const second = await read(opId);
    expect(second.etag).not.toBe(first.etag);
    const before = await decisionsOf(executionId, opId);

    // A's decisions from the page of the first hold: none is applied to the second, which A never saw.
    expectStale(
      await post(opId, 'resolve', { status: 'CANCELLED', evidence: 'A: never send it' }, first.etag),
      second.etag,
    );
    expectStale(await post(opId, 'resolve', { status: 'FAILED', evidence: 'A: not there' }, first.etag), second.etag);
    expectStale(
      await post(opId, 'resolve', { status: 'MANUAL_REVIEW', evidence: 'A: still asking' }, first.etag),
      second.etag,
    );
    expectStale(await post(opId, 'recheck', undefined, first.etag), second.etag);
    // A weak tag never matches (strong comparison), even of the current version.
    expectStale(await post(opId, 'resolve', { status: 'CANCELLED', evidence: 'A' }, `W/${second.etag}`), second.etag);
    expect(await decisionsOf(executionId, opId)).toEqual(before);
    expect(await read(opId)).toMatchObject({ status: 'MANUAL_REVIEW', attempt: 1, etag: second.etag });

    // On the page of the hold as it is now, the decision is taken, and its answer carries the next version.
    const taken = await post(
      opId,
      'resolve',
      { status: 'MANUAL_REVIEW', evidence: 'A: asked the provider, no answer yet' },
      `"an-older-one", ${second.etag}`,
    );
    expect(taken.status).toBe(200);
    const after = await read(opId);
    expect(taken.headers.get('etag')).toBe(after.etag);
    expect(after.etag).not.toBe(second.etag);
    expect((await decisionsOf(executionId, opId)).map((e) => e.type)).toEqual([
      ...before.map((e) => e.type),
      'operation.still_unknown',
    ]);
  });

  /**
   * A resolution sent with `etag` while another writer's `UPDATE operations SET <set>` of the operation is not yet
   * committed: its statement waits for that writer's row lock (proven on pg_stat_activity, not slept on), the writer
   * commits, and the answer is returned. The decision read the version its page showed and passed every check before
   * its statement; only the statement sees the change.
   */
  async function resolvedWhileWritten(opId: string, set: string, body: unknown, etag: string) {
    const writer = stack.db.dataSource.createQueryRunner();
    await writer.connect();
    try {
      await writer.startTransaction();
      await writer.query(`UPDATE operations SET ${set} WHERE id = $1`, [opId]);
      let answered = false;
      const deciding = post(opId, 'resolve', body, etag).finally(() => (answered = true));
      // The decision's statement (it share-locks the key's row), not a scheduled re-check waiting on the same row.
      await waitForLockWaiter(stack.db.dataSource, {
        statementLike: '%UPDATE operations SET%FROM api_keys k%',
        unless: () => answered,
      });
      await writer.commitTransaction();
      return await deciding;
    } finally {
      if (writer.isTransactionActive) await writer.rollbackTransaction();
      await writer.release();
    }
  }

  it('a change committed while the decision waits for the row is seen by its statement: 412, nothing written', async () => {
    const { executionId, opId } = await heldBeforeSending();
    const { etag } = await read(opId);
    const before = await decisionsOf(executionId, opId);
    const answer = await resolvedWhileWritten(
      opId,
      `evidence = coalesce(evidence, '{}'::jsonb) || '{"note": "written meanwhile"}'`,
      { status: 'CANCELLED', evidence: 'never send it' },
      etag,
    );
    const now = await read(opId);
    expectStale(answer, now.etag);
    expect(now).toMatchObject({ status: 'MANUAL_REVIEW' });
    expect(await decisionsOf(executionId, opId)).toEqual(before);
  });

  it('If-None-Match naming the version the operation reaches while the decision waits for its row: 412, nothing written', async () => {
    // Two callers at once: a writer moves the operation to a version, and a reviewer's resolution says "not at that
    // version". The early check read the version before (the writer had not committed); the statement that writes
    // compares the row it locks, after the writer's commit.
    const { executionId, opId } = await heldBeforeSending();
    const before = await decisionsOf(executionId, opId);
    const writer = stack.db.dataSource.createQueryRunner();
    await writer.connect();
    let answer: HttpResult<Stale>;
    let reached: string;
    try {
      await writer.startTransaction();
      await writer.query(
        `UPDATE operations SET evidence = coalesce(evidence, '{}'::jsonb) || '{"note": "written meanwhile"}' WHERE id = $1`,
        [opId],
      );
      [{ version: reached }] = (await writer.query(
        `SELECT ${operationVersionOf('t')} AS version FROM operations t WHERE t.id = $1`,
        [opId],
      )) as { version: string }[];
      let answered = false;
      const deciding = http<Stale>(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'CANCELLED', evidence: 'never send it' },
        headers: { 'if-none-match': `"${reached}"` },
      }).finally(() => (answered = true));
      await waitForLockWaiter(stack.db.dataSource, {
        statementLike: '%UPDATE operations SET%FROM api_keys k%',
        unless: () => answered,
      });
      await writer.commitTransaction();
      answer = await deciding;
    } finally {
      if (writer.isTransactionActive) await writer.rollbackTransaction();
      await writer.release();
    }
    expect([answer.status, answer.body.type]).toEqual([412, 'https://verity.dev/problems/precondition-failed']);
    const now = await read(opId);
    expect(now).toMatchObject({ status: 'MANUAL_REVIEW', etag: `"${reached}"` });
    expect(await decisionsOf(executionId, opId)).toEqual(before);
  });

  it.each(MOVES_OF_A_HELD_CHARGE)(
    'a FAILED whose operation moved by %s while its statement waited for the row: 412 as when it came first',
    async (_change, set) => {
      const { executionId, held } = await heldUnsentCharge(stack, unique('stale-failed'));
      const { etag } = await read(held.id);
      const before = await decisionsOf(executionId, held.id);
      const answer = await resolvedWhileWritten(held.id, set, { status: 'FAILED', evidence: 'not there' }, etag);
      // The version it named is gone: 412 naming the current one, as for the same change read before the decision —
      // not a 409 whose cause the If-Match already stands for (nor a 409 one way and a 412 the other, by timing).
      const now = await read(held.id);
      expect(now.etag).not.toBe(etag);
      expectStale(answer, now.etag);
      expectStale(await post(held.id, 'resolve', { status: 'FAILED', evidence: 'not there' }, etag), now.etag);
      expect(now).toMatchObject({ status: 'MANUAL_REVIEW' });
      expect(await decisionsOf(executionId, held.id)).toEqual(before);
    },
  );

  /** The re-checks reviewers asked for of one operation that are in the queue, in any state. */
  async function askedRechecks(opId: string): Promise<unknown[]> {
    const jobs = await producer
      .queue(QueueName.RECONCILE)
      .getJobs(['waiting', 'prioritized', 'delayed', 'active', 'completed', 'failed']);
    return jobs
      .filter((job) => {
        const data = job?.data as { operationId?: string; requestId?: string } | undefined;
        return data?.operationId === opId && data.requestId !== undefined;
      })
      .map((job) => job.id);
  }

  it.each(MOVES_OF_A_HELD_CHARGE)(
    'a re-check whose operation moved by %s after its early check, while it waited to lock the version: 412, nothing queued',
    async (_change, set) => {
      const { executionId, held } = await heldUnsentCharge(stack, unique('stale-recheck'));
      // The reconciler is stopped, so a re-check job that was queued stays in the queue to be seen.
      const reconcilers = stack.running('reconciler');
      for (const reconciler of reconcilers) await stack.kill(reconciler, 'SIGSTOP');
      try {
        const { etag } = await read(held.id);
        const before = await decisionsOf(executionId, held.id);
        const writer = stack.db.dataSource.createQueryRunner();
        await writer.connect();
        let answer: HttpResult<Stale>;
        try {
          await writer.startTransaction();
          await writer.query(`UPDATE operations SET ${set} WHERE id = $1`, [held.id]);
          let answered = false;
          const rechecking = post(held.id, 'recheck', undefined, etag).finally(() => (answered = true));
          // The early check read the version shown (a plain read: the uncommitted change is not seen, nor waited
          // for); the statement that share-locks the operation at that version waits for the writer's row lock. Told
          // by its head: pg_stat_activity keeps only its first kilobyte, which its closing FOR SHARE is past.
          await waitForLockWaiter(stack.db.dataSource, {
            statementLike: 'SELECT t.id FROM operations t%WHERE t.id = $1 AND t.tenant_id = $2%md5(%',
            unless: () => answered,
          });
          await writer.commitTransaction();
          answer = await rechecking;
        } finally {
          if (writer.isTransactionActive) await writer.rollbackTransaction();
          await writer.release();
        }
        const now = await read(held.id);
        expect(now.etag).not.toBe(etag);
        expectStale(answer, now.etag);
        expect(await askedRechecks(held.id)).toEqual([]);
        expect(await decisionsOf(executionId, held.id)).toEqual(before);
        // The same request on the version as it is now is queued: the look at the queue above would have seen one.
        expect((await post(held.id, 'recheck', undefined, now.etag)).status).toBe(202);
        expect(await askedRechecks(held.id)).toHaveLength(1);
      } finally {
        for (const reconciler of reconcilers) await stack.kill(reconciler, 'SIGCONT');
      }
    },
  );

  it('decisions racing on one ETag: exactly one is taken, the others are told who won or that it changed', async () => {
    const racers = 6;
    const held = await heldBeforeSending();
    const { etag } = await read(held.opId);
    const resolutions = await Promise.all(
      Array.from({ length: racers }, (_, i) =>
        post(held.opId, 'resolve', { status: i % 2 ? 'SENT' : 'CANCELLED', evidence: `reviewer ${i}` }, etag),
      ),
    );
    const created = await submit(stack, [charge(unique('stale-approval'), { requires_approval: true })]);
    const waiting = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    const shown = await read(waiting.id);
    const approvals = await Promise.all(
      Array.from({ length: racers }, (_, i) =>
        post(waiting.id, 'approval', i % 2 ? { decision: 'approve' } : { decision: 'deny', reason: 'no' }, shown.etag),
      ),
    );
    for (const [answers, executionId, opId, decided] of [
      [resolutions, held.executionId, held.opId, 'operation.resolved'],
      [approvals, created.id, waiting.id, 'approval.decided'],
    ] as const) {
      expect(answers.filter((a) => a.status === 200)).toHaveLength(1);
      for (const lost of answers.filter((a) => a.status !== 200)) {
        expect([409, 412]).toContain(lost.status);
        if (lost.status === 409) expect(lost.body.type).toBe('https://verity.dev/problems/already-decided');
      }
      const log = await decisionsOf(executionId, opId);
      expect(log.filter((e) => e.type === decided)).toHaveLength(1);
    }
  });

  it('a decision on the version another reviewer recorded "still unknown" on is told that decision, not 412', async () => {
    type Investigation = { by: string; at: string };
    type Held = { recovery_obligation: { investigations: Investigation[] } };
    const held = await heldBeforeSending();
    // Two reviewers open the same hold (one ETag); the first records "still unknown", a decision on that version.
    const { etag } = await read(held.opId);
    const first = await post(held.opId, 'resolve', { status: 'MANUAL_REVIEW', evidence: 'asked the provider' }, etag);
    expect(first.status).toBe(200);
    const winner = (first.body as unknown as Held).recovery_obligation.investigations[0];
    const before = await decisionsOf(held.executionId, held.opId);
    const lost = (res: HttpResult<Stale>, by: Investigation) => {
      expect(res.status).toBe(409);
      expect(res.body).toMatchObject({
        type: 'https://verity.dev/problems/already-decided',
        decision: 'MANUAL_REVIEW',
        decided_by: by.by,
        decided_at: by.at,
      });
    };
    // The second reviewer's decision on the page both saw lost to it, as it does without If-Match: told who won.
    for (const body of [
      { status: 'CANCELLED', evidence: 'not needed' },
      { status: 'SENT', evidence: 'send it' },
      { status: 'MANUAL_REVIEW', evidence: 'asked them too' },
    ]) {
      lost(await post(held.opId, 'resolve', body, etag), winner);
    }
    expect(await decisionsOf(held.executionId, held.opId)).toEqual(before);
    // Another "still unknown" on the version after the first: the first page's tag is still told a decision was made.
    const second = await post(
      held.opId,
      'resolve',
      { status: 'MANUAL_REVIEW', evidence: 'asked again' },
      first.headers.get('etag')!,
    );
    expect(second.status).toBe(200);
    const last = (second.body as unknown as Held).recovery_obligation.investigations[1];
    lost(await post(held.opId, 'resolve', { status: 'CANCELLED', evidence: 'not needed' }, etag), last);
    // A tag of a version the hold never had is still 412.
    const now = await read(held.opId);
    expectStale(await post(held.opId, 'resolve', { status: 'CANCELLED', evidence: 'x' }, '"never-shown"'), now.etag);
    expect(await decisionsOf(held.executionId, held.opId)).toHaveLength(before.length + 1);
  });

  it('a release from a page read before an admin added an approval rule is 412: it would also grant that approval', async () => {
    // Held before it was ever sent, no approval on record, none asked for by the agent: the page offers a plain release.
    const { executionId, opId } = await heldBeforeSending();
    const sentOption = async (etag?: string) => {
      const res = await http<{ resolution_options: { status: string; why: string }[] }>(
        stack.apiUrl,
        'GET',
        `/v1/operations/${opId}`,
        { key: DEMO.reviewer },
      );
      if (etag !== undefined) expect(res.headers.get('etag')).toBe(etag);
      return res.body.resolution_options.find((o) => o.status === 'SENT')?.why ?? '';
    };
    const shown = await read(opId);
    expect(await sentOption(shown.etag)).not.toMatch(/grants that approval/);
    const policy = (approval_rules: unknown[] | null) =>
      http(stack.apiUrl, 'PUT', '/v1/admin/policy', { key: DEMO.admin, body: { approval_rules } });
    try {
      // A policy change that is not about approval moves no operation's version.
      expect(
        (await http(stack.apiUrl, 'PUT', '/v1/admin/policy', { key: DEMO.admin, body: { obligation_owner: 'ops' } }))
          .status,
      ).toBe(200);
      expect((await read(opId)).etag).toBe(shown.etag);
      // An admin adds a rule that covers it: a release now also grants the approval the rule requires.
      expect((await policy([{ connector: 'sandbox.payments', amount_above: 0 }])).status).toBe(200);
      const now = await read(opId);
      expect(now.etag).not.toBe(shown.etag);
      expect(await sentOption(now.etag)).toMatch(/grants that approval/);
      const before = await decisionsOf(executionId, opId);
      // The release from the page read before the rule: it showed no approval, so none is granted — nothing is written.
      expectStale(
        await post(opId, 'resolve', { status: 'SENT', evidence: 'A: the conflict is understood' }, shown.etag),
        now.etag,
      );
      expect(await decisionsOf(executionId, opId)).toEqual(before);
      // From the page as it is now (which says the release grants the approval), it is taken, with the grant.
      const released = await post(opId, 'resolve', { status: 'SENT', evidence: 'A: approved too' }, now.etag);
      expect(released.status).toBe(200);
      // (The dispatcher may already have sent it: its moves follow.)
      expect((await decisionsOf(executionId, opId)).slice(before.length, before.length + 2).map((e) => e.type)).toEqual(
        ['operation.resolved', 'approval.decided'],
      );
    } finally {
      expect((await policy(null)).status).toBe(200);
      await http(stack.apiUrl, 'PUT', '/v1/admin/policy', { key: DEMO.admin, body: { obligation_owner: null } });
    }
  });

  it('an approval decision from a page read before an admin added an approval rule is 412: none was asked for then', async () => {
    // The second charge waits for the first (held before sending): PREPARED, nothing asks for its approval, so an
    // approve or a deny of it is refused (not-awaiting-approval). Once a rule covers it, a deny would cancel it.
    const created = await submit(stack, [
      charge(unique('stale-rule'), { expected_state: { charged: true } }),
      { ...charge(unique('stale-rule-2')), key: 'second', depends_on: ['charge'] },
    ]);
    await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    const waiting = await waitForOp(stack, created.id, 'second', (o) => o.status === 'PREPARED');
    expect(waiting.approval ?? null).toBeNull();
    const shown = await read(waiting.id);
    const policy = (approval_rules: unknown[] | null) =>
      http(stack.apiUrl, 'PUT', '/v1/admin/policy', { key: DEMO.admin, body: { approval_rules } });
    try {
      expect((await policy([{ connector: 'sandbox.payments', amount_above: 0 }])).status).toBe(200);
      const now = await read(waiting.id);
      expect(now.etag).not.toBe(shown.etag);
      const before = await decisionsOf(created.id, waiting.id);
      expectStale(await post(waiting.id, 'approval', { decision: 'deny', reason: 'A' }, shown.etag), now.etag);
      expectStale(await post(waiting.id, 'approval', { decision: 'approve' }, shown.etag), now.etag);
      expect(await decisionsOf(created.id, waiting.id)).toEqual(before);
      expect(await read(waiting.id)).toMatchObject({ status: 'PREPARED', etag: now.etag });
      // On the page as it is now, the decision is taken.
      const denied = await post(waiting.id, 'approval', { decision: 'deny', reason: 'A: not this one' }, now.etag);
      expect(denied.status).toBe(200);
      expect((await read(waiting.id)).status).toBe('CANCELLED');
    } finally {
      expect((await policy(null)).status).toBe(200);
    }
  });

  it('an approval decision and a re-check on a version that is not the current one: 412, nothing written', async () => {
    const created = await submit(stack, [charge(unique('stale-approve'), { requires_approval: true })]);
    const waiting = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    const shown = await read(waiting.id);
    const before = await decisionsOf(created.id, waiting.id);
    expectStale(await post(waiting.id, 'approval', { decision: 'approve' }, '"a-version-never-shown"'), shown.etag);
    expectStale(await post(waiting.id, 'recheck', undefined, '"a-version-never-shown"'), shown.etag);
    expect(await decisionsOf(created.id, waiting.id)).toEqual(before);
    const approved = await post(waiting.id, 'approval', { decision: 'approve' }, shown.etag);
    expect(approved.status).toBe(200);
    expect(approved.headers.get('etag')).not.toBe(shown.etag);
  });

  it('the ETag is no cache validator: a read naming it in If-None-Match is answered in full as time changes the options', async () => {
    // A dropped SMS, held: FAILED is offered only once no call made for it can still land — time alone changes what the
    // operation shows, while the version a person decides on stays the same.
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/messages', fault: 'drop_before_commit', probability: 1, count: 1 }],
    });
    const created = await submit(stack, [sms(unique('stale-sms'))]);
    const held = await waitForOp(stack, created.id, 'notify', (o) => o.status === 'MANUAL_REVIEW');
    const { etag } = await read(held.id);
    type Shown = { resolution_options: { status: string; permitted: boolean }[] };
    const revalidated = () =>
      http<Shown>(stack.apiUrl, 'GET', `/v1/operations/${held.id}`, {
        key: DEMO.reviewer,
        // As a browser revalidates what it cached (fetch would add `no-cache`, which no server answers 304 to).
        headers: { 'if-none-match': etag, 'cache-control': 'max-age=0' },
      });
    const failedOffered = await waitFor(revalidated, (res) =>
      Boolean(res.body?.resolution_options?.some((o) => o.status === 'FAILED' && o.permitted)),
    );
    expect(failedOffered.status).toBe(200);
    expect(failedOffered.headers.get('etag')).toBe(etag);
    expect(failedOffered.headers.get('cache-control')).toBe('no-store, no-transform');
  });

  it('another tenant’s reviewer is told 404 whatever If-Match it sends, never 412', async () => {
    const { executionId, opId } = await heldBeforeSending();
    const { etag } = await read(opId);
    for (const ifMatch of [etag, '"not-this-one"', '*', undefined]) {
      const res = await post(opId, 'resolve', { status: 'CANCELLED', evidence: 'x' }, ifMatch, OTHER_REVIEWER);
      expect(res.status).toBe(404);
      expect(res.body.type).toBe('https://verity.dev/problems/not-found');
    }
    expect((await http(stack.apiUrl, 'GET', `/v1/operations/${opId}`, { key: OTHER_REVIEWER })).status).toBe(404);
    expect(await decisionsOf(executionId, opId)).toEqual(
      (await events(stack, executionId)).filter((e) => e.operation_id === opId),
    );
    expect((await read(opId)).etag).toBe(etag);
  });

  it('a malformed If-Match is 400 naming the header, as on the admin settings; * and none decide as before', async () => {
    const { executionId, opId } = await heldBeforeSending({ requires_approval: true });
    const { etag } = await read(opId);
    const before = await decisionsOf(executionId, opId);
    for (const malformed of ['no-quotes', '"open', `${etag};`]) {
      for (const [action, body] of [
        ['resolve', { status: 'CANCELLED', evidence: 'x' }],
        ['recheck', undefined],
        ['approval', { decision: 'deny', reason: 'x' }],
      ] as const) {
        const res = await post(opId, action, body, malformed);
        expect(res.status).toBe(400);
        expect(res.body.type).toBe('https://verity.dev/problems/validation-error');
        expect(res.body.errors).toEqual([expect.objectContaining({ field: 'If-Match', rule: 'invalid_format' })]);
      }
    }
    // The admin routes answer a malformed one alike.
    const admin = await http<Stale>(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      body: { obligation_owner: 'x' },
      headers: { 'if-match': 'no-quotes' },
    });
    expect(admin.status).toBe(400);
    expect(admin.body.errors).toEqual([expect.objectContaining({ field: 'If-Match', rule: 'invalid_format' })]);
    expect(await decisionsOf(executionId, opId)).toEqual(before);
    expect((await read(opId)).etag).toBe(etag);
    // `*` asks only that the operation exist: the decision is taken on it as it is, as without the header.
    const cancelled = await post(opId, 'resolve', { status: 'CANCELLED', evidence: 'never send it' }, '*');
    expect(cancelled.status).toBe(200);
    expect(cancelled.body).toMatchObject({ status: 'CANCELLED' });
  });
});
