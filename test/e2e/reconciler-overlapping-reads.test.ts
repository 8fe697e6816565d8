import { ConnectorRegistry, SandboxPaymentsConnector, TenantConnectors, builtInConnectors } from '@verity/connectors';
import { EventEntity, SecretsCipher, TransitionService, recordRecheckRequest } from '@verity/persistence';
import { createLogger, loadConfig } from '@verity/platform';
import { insertChargeExecution } from '../support/fixtures';
import { heldSourceDuringDescribe } from '../support/held-source';
import { waitForLockWaiter } from '../support/lock-waits';
import { producerDuringDescribe } from '../support/producer';
import { TEST_REDIS_URL } from '../support/services';
import { useTestDatabase } from '../support/test-database';
import { VerificationService } from '../../apps/reconciler/src/verification.service';

/**
 * The reconciler's reads against real Postgres and Redis, the source a local sandbox provider whose reads of charges
 * are held until the test answers them (503: the source is unreachable, an inconclusive read), so two jobs' reads of
 * one operation can be made to overlap and end in a chosen order.
 */
describe('VerificationService: counts written by jobs whose reads overlap (real Postgres)', () => {
  const db = useTestDatabase('verification', ['acme']);
  const source = heldSourceDuringDescribe();
  const { held, readArrived, unreachable } = source;
  const queues = producerDuringDescribe('verification');
  let service: VerificationService;

  /** The service as a reconciler deployed with `registry`'s connectors runs it. */
  const serviceWith = (registry: ConnectorRegistry) => {
    const config = loadConfig({ SANDBOX_URL: source.url, REDIS_URL: TEST_REDIS_URL, QUEUE_PREFIX: queues.prefix });
    return new VerificationService(
      db.dataSource,
      new TransitionService(),
      queues.producer,
      new TenantConnectors(registry, db.dataSource, new SecretsCipher(undefined), config),
      config,
      createLogger('verification-spec', 'silent'),
    );
  };

  beforeAll(() => {
    service = serviceWith(new ConnectorRegistry());
  });

  /** Answers the `i`-th read held with the charge of `reference`, of `amount` (100 is the amount asked for: found). */
  const charged = (i: number, reference: string, amount = 100) =>
    held[i].writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        data: [{ id: `ch_${reference}`, reference, amount, currency: 'EUR', status: 'succeeded', version: 1 }],
        as_of_version: 1,
      }),
    );

  /**
   * A sent charge held for `reason` (the source was unreachable: the system may release it), its obligation due in an
   * hour and read `rechecks` times, its next automatic re-check due at `nextCheckAt`; its id and charge reference.
   */
  async function heldCharge(
    options: { reason?: string; rechecks?: number; nextCheckAt?: Date | null } = {},
  ): Promise<{ operationId: string; reference: string; dueAt: string }> {
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    const dueAt = new Date(Date.now() + 3_600_000).toISOString();
    const reason = options.reason ?? 'SOURCE_UNREACHABLE';
    await db.dataSource.query(
      `UPDATE operations SET status = 'MANUAL_REVIEW', terminal_reason = $3, attempt = 1, sent_at = now(),
              obligation = $2, next_check_at = $4 WHERE id = $1`,
      [
        operationId,
        JSON.stringify({ reason, due_at: dueAt, rechecks: options.rechecks ?? 0 }),
        reason,
        options.nextCheckAt ?? null,
      ],
    );
    const [{ reference }] = (await db.dataSource.query(
      `SELECT params->>'reference' AS reference FROM operations WHERE id = $1`,
      [operationId],
    )) as { reference: string }[];
    return { operationId, reference, dueAt };
  }

  const rechecked = async (operationId: string) =>
    (await db.dataSource.getRepository(EventEntity).findBy({ operationId, type: 'operation.rechecked' })).map(
      (e) => e.data as Record<string, unknown>,
    );

  const reviewerRequest = (operationId: string) =>
    recordRecheckRequest(db.dataSource.manager, { tenantId: 'acme', operationId, requestedBy: 'key_reviewer' });

  /**
   * A held charge (`heldCharge`) and `runs` runs at once of one reviewer's re-check of it, each one's read arrived and
   * held: the reads are `first`, `first + 1`…, in the order of `running`.
   */
  async function runsOfOneRequest(runs: number) {
    const { operationId, reference } = await heldCharge();
    const requestId = await reviewerRequest(operationId);
    const first = held.length;
    const running: Promise<string>[] = [];
    for (let i = 0; i < runs; i += 1) {
      running.push((await readArrived(() => service.recheck(operationId, requestId))).running);
    }
    return { operationId, reference, requestId, first, running };
  }

  /** A reviewer's decision of the hold (`status`), written straight into its row. */
  const reviewerDecided = (operationId: string, status: 'FAILED' | 'VERIFIED') =>
    db.dataSource.query(`UPDATE operations SET status = $2, terminal_reason = $3 WHERE id = $1`, [
      operationId,
      status,
      status === 'FAILED' ? 'MANUAL_RESOLUTION' : null,
    ]);

  const row = async (id: string) =>
    (
      (await db.dataSource.query(`SELECT status, check_count, obligation FROM operations WHERE id = $1`, [id])) as {
        status: string;
        check_count: number;
        obligation: { rechecks?: number } | null;
      }[]
    )[0];

  /** Whether the recorded request has been used. */
  const requestUsed = async (requestId: string) =>
    (
      (await db.dataSource.query(`SELECT used_at IS NOT NULL AS used FROM recheck_requests WHERE id = $1`, [
        requestId,
      ])) as { used: boolean }[]
    )[0].used;

  /** The whole row of the operation but its `updated_at` (which every annotation stamps). */
  const rowButItsTime = async (id: string) => {
    const [{ updated_at: _stamped, ...rest }] = (await db.dataSource.query(`SELECT * FROM operations WHERE id = $1`, [
      id,
    ])) as Record<string, unknown>[];
    return rest;
  };

  /**
   * The one event a reviewer's job writes in their name on a hold held for an unreachable source, whole: `rest` says
   * what its read found (`result`, `evidence`) and why nothing else was written.
   */
  const reviewerEvent = (rest: Record<string, unknown>) => ({
    trigger: 'reviewer',
    requested_by: 'key_reviewer',
    requested_at: expect.any(String),
    held_for: 'SOURCE_UNREACHABLE',
    ...rest,
  });

  /** Only `event` was written, in the reviewer's name: their request used, nothing on the row but its `updated_at`. */
  async function expectOnlyRecorded(
    ids: { operationId: string; requestId: string },
    before: Record<string, unknown>,
    event: Record<string, unknown>,
  ) {
    expect(await rechecked(ids.operationId)).toEqual([event]);
    expect(await requestUsed(ids.requestId)).toBe(true);
    expect(await rowButItsTime(ids.operationId)).toEqual(before);
  }

  /**
   * Two runs at once of the reviewer's job `requestId` by `deployed`, then a replay of it: each answers `outcome`
   * without reading; one event in the reviewer's name saying no read was made (`result: null`) and `why`, and nothing
   * else written.
   */
  async function twoRunsAndAReplayReadNothing(
    deployed: VerificationService,
    { operationId, requestId }: { operationId: string; requestId: string },
    outcome: string,
    why: Record<string, string>,
  ) {
    const before = await rowButItsTime(operationId);
    const reads = held.length;
    const runs = await Promise.all([
      deployed.recheck(operationId, requestId),
      deployed.recheck(operationId, requestId),
    ]);
    expect(runs).toEqual([outcome, outcome]);
    // A replay after both: the request is used, nothing more is written.
    expect(await deployed.recheck(operationId, requestId)).toBe(outcome);
    expect(held.length).toBe(reads);
    await expectOnlyRecorded(
      { operationId, requestId },
      before,
      reviewerEvent({ result: null, evidence: null, ...why }),
    );
  }

  /**
   * What `act` answers when what it starts writes on the operation while `sql` (`params`) is written in another session
   * and not yet committed: once it waits for that session's row lock (or has answered without waiting), the other
   * session commits.
   */
  async function whileUncommitted<T>(sql: string, params: unknown[], act: () => Promise<T>): Promise<T> {
    const other = db.dataSource.createQueryRunner();
    await other.connect();
    try {
      await other.startTransaction();
      await other.query(sql, params);
      let answered = false;
      const outcome = act().finally(() => (answered = true));
      await waitForLockWaiter(db.dataSource, { statementLike: '%operations%', unless: () => answered });
      await other.commitTransaction();
      return await outcome;
    } finally {
      if (other.isTransactionActive) await other.rollbackTransaction();
      await other.release();
    }
  }

  it('a job whose read ends after newer ones never writes its older check_count back (the retry budget holds)', async () => {
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    // Sent, its answer lost, reconciled twice already: RECONCILING with two inconclusive reads counted.
    await db.dataSource.query(
      `UPDATE operations SET status = 'RECONCILING', attempt = 1, sent_at = now(), check_count = 2 WHERE id = $1`,
      [operationId],
    );
    const first = held.length;
    // The job whose read hangs (a slow source); the sweeper hands the operation, still RECONCILING, to another job.
    const { running: stale } = await readArrived(() => service.reconcile(operationId));
    const { running: second } = await readArrived(() => service.reconcile(operationId));
    unreachable(first + 1);
    expect(await second).toBe('rescheduled');
    expect(await row(operationId)).toMatchObject({ status: 'UNKNOWN', check_count: 3 });
    // The next job reads again: inconclusive, counted; and the one after it is mid-read when the slow one ends.
    const { running: third } = await readArrived(() => service.reconcile(operationId));
    unreachable(first + 2);
    expect(await third).toBe('rescheduled');
    const { running: fourth } = await readArrived(() => service.reconcile(operationId));
    expect(await row(operationId)).toMatchObject({ status: 'RECONCILING', check_count: 4 });

    unreachable(first);
    expect(await stale).toBe('skipped: lost race');
    expect(await row(operationId)).toMatchObject({ status: 'RECONCILING', check_count: 4 });
    unreachable(first + 3);
    expect(await fourth).toBe('rescheduled');
    expect(await row(operationId)).toMatchObject({ status: 'UNKNOWN', check_count: 5 });
  });

  /**
   * A charge RECONCILING at check 2, sent at `sentAt` (SQL), whose reconcile job's read hangs (`stale`, answered through
   * `held[first]`) while the sweeper hands the operation to another job (inconclusive: back to UNKNOWN, check 3) and a
   * third job moves it back to RECONCILING — the status the stale job read — and is mid-read (`third`, `held[first + 2]`).
   */
  async function staleReadBehindNewerOnes(sentAt: string) {
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    const [{ reference }] = (await db.dataSource.query(
      `SELECT params->>'reference' AS reference FROM operations WHERE id = $1`,
      [operationId],
    )) as { reference: string }[];
    await db.dataSource.query(
      `UPDATE operations SET status = 'RECONCILING', attempt = 1, sent_at = ${sentAt}, check_count = 2 WHERE id = $1`,
      [operationId],
    );
    const first = held.length;
    const { running: stale } = await readArrived(() => service.reconcile(operationId));
    const { running: second } = await readArrived(() => service.reconcile(operationId));
    unreachable(first + 1);
    expect(await second).toBe('rescheduled');
    const { running: third } = await readArrived(() => service.reconcile(operationId));
    expect(await row(operationId)).toMatchObject({ status: 'RECONCILING', check_count: 3 });
    return { operationId, reference, first, stale, third };
  }

  it('a job whose read ends after newer ones never settles the operation on its older read: its stale FAILED writes nothing', async () => {
    // Sent a minute ago (past when an absence is proof, before the deadline), its answer lost, reconciled twice.
    const { operationId, reference, first, stale, third } =
      await staleReadBehindNewerOnes("now() - interval '1 minute'");

    // The stale read finds nothing: a proof of absence made at check 2, which the operation has moved past.
    held[first]
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ data: [], as_of_version: 1 }));
    expect(await stale).toBe('skipped: lost race');
    expect(await row(operationId)).toMatchObject({ status: 'RECONCILING', check_count: 3 });
    const moves = await db.dataSource
      .getRepository(EventEntity)
      .findBy({ operationId, type: 'operation.status_changed' });
    expect(moves.filter((e) => e.toStatus === 'FAILED')).toEqual([]);
    // The newer read, which sees the charge, settles it.
    charged(first + 2, reference);
    expect(await third).toBe('verified');
    expect(await row(operationId)).toMatchObject({ status: 'VERIFIED' });
  });

  it('a job whose read ends after newer ones never holds the operation on its older read: its stale hold writes nothing', async () => {
    // Sent, its answer lost, reconciled twice already.
    const { operationId, reference, first, stale, third } = await staleReadBehindNewerOnes('now()');

    // The stale read finds the charge of another amount: a mismatch, a hold decided at check 2, which it moved past.
    charged(first, reference, 999);
    expect(await stale).toBe('skipped: lost race');
    expect(await row(operationId)).toMatchObject({ status: 'RECONCILING', check_count: 3 });
    const moves = await db.dataSource
      .getRepository(EventEntity)
      .findBy({ operationId, type: 'operation.status_changed' });
    expect(moves.filter((e) => e.toStatus === 'MANUAL_REVIEW')).toEqual([]);
    // The newer read, which sees the charge asked for, settles it.
    charged(first + 2, reference);
    expect(await third).toBe('verified');
    expect(await row(operationId)).toMatchObject({ status: 'VERIFIED' });
  });

  it('two re-checks of one hold whose reads overlap (a reviewer’s and a scheduled one) are both counted', async () => {
    const { operationId, dueAt } = await heldCharge({ rechecks: 3 });
    const first = held.length;
    const { running: scheduled } = await readArrived(() => service.recheck(operationId));
    const requestId = await reviewerRequest(operationId);
    const { running: reviewers } = await readArrived(() => service.recheck(operationId, requestId));
    unreachable(first);
    unreachable(first + 1);
    expect(await Promise.all([scheduled, reviewers])).toEqual(['still held: unreachable', 'still held: unreachable']);
    const op = await row(operationId);
    expect(op.status).toBe('MANUAL_REVIEW');
    expect(op.obligation).toMatchObject({ rechecks: 5, due_at: dueAt });
    const rechecked = await db.dataSource
      .getRepository(EventEntity)
      .countBy({ operationId, type: 'operation.rechecked' });
    expect(rechecked).toBe(2);
  });

  /**
   * BullMQ may run one job twice at once (its stalled-job recovery while the first run still reads, or two reconcilers).
   * Both runs of a reviewer's re-check find its request unused before they read; the first to write uses it. A run
   * whose read showed the effect must still record it when the other run wrote first — before, its write was refused
   * for the request used, and the effect the source had just shown was dropped.
   */
  describe('one reviewer re-check job run twice at once', () => {
    it('a run that found the effect VERIFIES the hold after the other run recorded an inconclusive read', async () => {
      const {
        operationId,
        reference,
        first,
        running: [a, b],
      } = await runsOfOneRequest(2);
      unreachable(first);
      expect(await a).toBe('still held: unreachable');
      charged(first + 1, reference);
      expect(await b).toBe('verified');
      const op = await row(operationId);
      expect(op.status).toBe('VERIFIED');
      const [{ evidence }] = (await db.dataSource.query(`SELECT evidence FROM operations WHERE id = $1`, [
        operationId,
      ])) as { evidence: { recheck: Record<string, unknown> } }[];
      expect(evidence.recheck).toMatchObject({
        trigger: 'reviewer',
        requested_by: 'key_reviewer',
        duplicate_run: true,
      });
    });

    it('written at the same moment, the run that found the effect is never the one dropped', async () => {
      for (let round = 0; round < 4; round += 1) {
        const {
          operationId,
          reference,
          first,
          running: [a, b],
        } = await runsOfOneRequest(2);
        // Both answers at once: the two runs claim the request and write concurrently, in either order.
        if (round % 2 === 0) {
          unreachable(first);
          charged(first + 1, reference);
        } else {
          charged(first + 1, reference);
          unreachable(first);
        }
        const [outA, outB] = await Promise.all([a, b]);
        expect(outB).toBe('verified');
        expect([
          'still held: unreachable',
          'skipped: no recorded request',
          'skipped: not held',
          'skipped: lost race',
        ]).toContain(outA);
        expect((await row(operationId)).status).toBe('VERIFIED');
      }
    });

    it('a run whose read showed a record with another amount keeps it on the hold, once', async () => {
      const {
        operationId,
        reference,
        first,
        running: [a, b, c],
      } = await runsOfOneRequest(3);
      unreachable(first);
      expect(await a).toBe('still held: unreachable');
      charged(first + 1, reference, 999);
      expect(await b).toBe('still held: mismatch');
      // A third run showing it too: the hold has it already, nothing more is written.
      charged(first + 2, reference, 999);
      expect(await c).toBe('skipped: no recorded request');
      const op = await row(operationId);
      expect(op.status).toBe('MANUAL_REVIEW');
      expect(op.obligation).toMatchObject({ effect_shown: { result: 'mismatch' }, rechecks: 1 });
      const events = await rechecked(operationId);
      expect(events).toHaveLength(2);
      expect(events.find((e) => e.result === 'mismatch')).toMatchObject({
        trigger: 'reviewer',
        requested_by: 'key_reviewer',
        duplicate_run: true,
      });
    });

    it('a run that found the effect after a reviewer’s FAILED records it, though the other run used the request', async () => {
      const {
        operationId,
        reference,
        first,
        running: [a, b],
      } = await runsOfOneRequest(2);
      unreachable(first);
      expect(await a).toBe('still held: unreachable');
      // A reviewer's FAILED meanwhile (their read could not see the charge).
      await reviewerDecided(operationId, 'FAILED');
      charged(first + 1, reference);
      expect(await b).toBe('skipped: lost race');
      expect((await row(operationId)).obligation).toMatchObject({ effect_shown_after_failed: { result: 'found' } });
      expect((await rechecked(operationId)).filter((e) => e.after === 'FAILED')).toHaveLength(1);
    });

    it('a run whose read showed another amount after a reviewer’s FAILED records it, though the other run used the request', async () => {
      // No VERIFIED is tried for another amount: the run goes straight to the hold's record, which the FAILED refuses.
      // Before, it tried only to keep the effect on a hold (refused too) and ended "no recorded request": nothing of
      // what its read showed was written, no event, no warning.
      const {
        operationId,
        reference,
        first,
        running: [a, b],
      } = await runsOfOneRequest(2);
      unreachable(first);
      expect(await a).toBe('still held: unreachable');
      await reviewerDecided(operationId, 'FAILED');
      charged(first + 1, reference, 999);
      expect(await b).toBe('skipped: lost race');
      expect((await row(operationId)).obligation).toMatchObject({ effect_shown_after_failed: { result: 'mismatch' } });
      const afterFailed = (await rechecked(operationId)).filter((e) => e.after === 'FAILED');
      expect(afterFailed).toEqual([
        expect.objectContaining({ result: 'mismatch', trigger: 'reviewer', duplicate_run: true }),
      ]);
    });
  });

  /**
   * A scheduled re-check and a reviewer's of one hold read at once, and a reviewer's FAILED is written meanwhile: both
   * reads show the effect. That the FAILED is refuted is one fact, written once (one event, the one webhooks announce),
   * whichever of the two writes first — before, the scheduled one wrote it unguarded beside the reviewer's.
   */
  describe('a scheduled and a reviewer’s re-check that both found the effect after a FAILED', () => {
    /** A hold whose scheduled and reviewer's re-checks have both sent their reads, then a reviewer's FAILED written. */
    const readsRacingAFailed = async () => {
      const due = new Date(Date.now() + 60_000);
      const { operationId, reference } = await heldCharge({ nextCheckAt: due });
      const requestId = await reviewerRequest(operationId);
      const at = held.length;
      const { running: scheduled } = await readArrived(() =>
        service.recheck(operationId, undefined, due.toISOString()),
      );
      const { running: reviewers } = await readArrived(() => service.recheck(operationId, requestId));
      await reviewerDecided(operationId, 'FAILED');
      return { operationId, reference, requestId, at, scheduled, reviewers };
    };

    for (const first of ['scheduled', 'reviewer'] as const) {
      it(`write its refutation once (the ${first} one answered first)`, async () => {
        const { operationId, reference, at, scheduled, reviewers } = await readsRacingAFailed();
        const [a, b] = first === 'scheduled' ? [scheduled, reviewers] : [reviewers, scheduled];
        charged(first === 'scheduled' ? at : at + 1, reference);
        expect(await a).toBe('skipped: lost race');
        charged(first === 'scheduled' ? at + 1 : at, reference);
        expect(await b).toBe('skipped: lost race');
        expect((await row(operationId)).obligation).toMatchObject({ effect_shown_after_failed: { result: 'found' } });
        const afterFailed = (await rechecked(operationId)).filter((e) => e.after === 'FAILED');
        expect(afterFailed).toEqual([expect.objectContaining({ result: 'found', trigger: first })]);
      });
    }

    it('a reviewer’s read that came second is still recorded in their name (its request used), not as a second refutation', async () => {
      // The reviewer was answered 202 and promised the result as an event: the refutation is the scheduled read's (one
      // event announced), and the reviewer's read is recorded beside it, without `after` (not announced again).
      const { operationId, reference, requestId, at, scheduled, reviewers } = await readsRacingAFailed();
      charged(at, reference);
      expect(await scheduled).toBe('skipped: lost race');
      charged(at + 1, reference, 999);
      expect(await reviewers).toBe('skipped: lost race');
      const events = await rechecked(operationId);
      expect(events.filter((e) => e.after === 'FAILED')).toEqual([
        expect.objectContaining({ result: 'found', trigger: 'scheduled' }),
      ]);
      const reviewer = events.filter((e) => e.trigger === 'reviewer');
      expect(reviewer).toEqual([
        expect.objectContaining({ result: 'mismatch', requested_by: 'key_reviewer', refutation_on_record: true }),
      ]);
      expect(reviewer[0]).not.toHaveProperty('after');
      expect(await requestUsed(requestId)).toBe(true);
      // What the first read showed stays the FAILED's refutation on the row.
      expect((await row(operationId)).obligation).toMatchObject({ effect_shown_after_failed: { result: 'found' } });
    });
  });

  /**
   * A scheduled re-check superseded while it read (a "still unknown" or another read re-dated the hold's next re-check)
   * whose read showed the effect writes it; but it is no read of the chain the row now names, so it is not counted in
   * the chain's re-checks (their backoff), and its event names the next re-check the row holds as it is written.
   */
  describe('a scheduled re-check superseded while it read', () => {
    it('is not counted as a re-check of the chain', async () => {
      const due = new Date(Date.now() + 60_000);
      const { operationId, reference } = await heldCharge({ rechecks: 3, nextCheckAt: due });
      const first = held.length;
      const { running } = await readArrived(() => service.recheck(operationId, undefined, due.toISOString()));
      // A "still unknown" meanwhile: the count restarts, and the chain with it.
      const restarted = new Date(due.getTime() + 5_000);
      await db.dataSource.query(
        `UPDATE operations SET next_check_at = $2, obligation = obligation || '{"rechecks": 0}' WHERE id = $1`,
        [operationId, restarted],
      );
      charged(first, reference, 999);
      expect(await running).toBe('still held: mismatch');
      const op = await row(operationId);
      expect(op.obligation).toMatchObject({ rechecks: 0, effect_shown: { result: 'mismatch' } });
      const [event] = await rechecked(operationId);
      expect(event).toMatchObject({ superseded: true, next_check_at: restarted.toISOString() });
    });

    it('names in its event the next re-check in force when it is written, also one re-dated after its look', async () => {
      const due = new Date(Date.now() + 60_000);
      const { operationId, reference } = await heldCharge({ rechecks: 3, nextCheckAt: due });
      const first = held.length;
      const { running } = await readArrived(() => service.recheck(operationId, undefined, due.toISOString()));
      const redated = new Date(due.getTime() + 5_000);
      await db.dataSource.query(`UPDATE operations SET next_check_at = $2 WHERE id = $1`, [operationId, redated]);
      // Another re-dating, written and not yet committed: the run's look at the row (a plain read) sees the one before,
      // and its write waits for this one's row lock, then is made over it.
      const later = new Date(due.getTime() + 9_000);
      const outcome = await whileUncommitted(
        `UPDATE operations SET next_check_at = $2 WHERE id = $1`,
        [operationId, later],
        () => {
          charged(first, reference, 999);
          return running;
        },
      );
      expect(outcome).toBe('still held: mismatch');
      const [event] = await rechecked(operationId);
      const [{ next_check_at }] = (await db.dataSource.query(`SELECT next_check_at FROM operations WHERE id = $1`, [
        operationId,
      ])) as { next_check_at: Date }[];
      expect(next_check_at.toISOString()).toBe(later.toISOString());
      expect(event).toMatchObject({ superseded: true, next_check_at: later.toISOString() });
    });
  });

  /**
   * A reviewer's read under way when the hold is decided by someone else (a reviewer's FAILED or VERIFIED, written
   * straight into the row): the reviewer was answered 202 and promised their read's result as an event. Before, a read
   * that could not be written on the hold — and was no refutation of a FAILED — wrote nothing, and the request stayed
   * unused with no trace until it was pruned.
   */
  describe('a reviewer’s read under way when the hold is decided by someone else', () => {
    /** A held charge, a reviewer's re-check of it whose read has arrived and is held, then `status` written. */
    const readThenDecided = async (status: 'FAILED' | 'VERIFIED') => {
      const { operationId, reference } = await heldCharge();
      const requestId = await reviewerRequest(operationId);
      const at = held.length;
      const { running } = await readArrived(() => service.recheck(operationId, requestId));
      await reviewerDecided(operationId, status);
      const before = await row(operationId);
      return { operationId, reference, requestId, at, running, before };
    };

    /** The one event a reviewer's unreachable read under way when the hold was decided (`status`) writes, whole. */
    const oneUnreachableRead = (status: 'FAILED' | 'VERIFIED') =>
      reviewerEvent({ result: 'unreachable', evidence: expect.anything(), decided_meanwhile: status });

    /** Two runs of one reviewer's job, their reads arrived and held, then a reviewer's FAILED; the row as it was then. */
    const twoRunsThenFailed = async () => {
      const runs = await runsOfOneRequest(2);
      await reviewerDecided(runs.operationId, 'FAILED');
      return { ...runs, before: await rowButItsTime(runs.operationId) };
    };

    const cases: { status: 'FAILED' | 'VERIFIED'; answer: 'unreachable' | 'found' }[] = [
      { status: 'FAILED', answer: 'unreachable' },
      { status: 'VERIFIED', answer: 'unreachable' },
      { status: 'VERIFIED', answer: 'found' },
    ];
    for (const { status, answer } of cases) {
      it(`is recorded in their name, changing nothing (${status} meanwhile, the read ${answer})`, async () => {
        const { operationId, reference, requestId, at, running, before } = await readThenDecided(status);
        if (answer === 'found') charged(at, reference);
        else unreachable(at);
        expect(await running).toBe('skipped: lost race');
        const events = await rechecked(operationId);
        expect(events).toEqual([
          expect.objectContaining({
            trigger: 'reviewer',
            requested_by: 'key_reviewer',
            result: answer,
            decided_meanwhile: status,
          }),
        ]);
        expect(events[0]).not.toHaveProperty('after');
        expect(events[0]).not.toHaveProperty('next_check_at');
        expect(await requestUsed(requestId)).toBe(true);
        // Nothing on the row: the decision stands as written, no refutation, no count.
        expect(await row(operationId)).toEqual(before);
      });
    }

    /**
     * Two runs of one reviewer's job whose reads both show nothing, FAILED written meanwhile: one event in the reviewer's
     * name (what a read found, `decided_meanwhile`), the request used once, nothing on the row but the `updated_at` the
     * annotation stamps. The run that writes it ends `lost race` (its write on the hold was refused by the FAILED). The
     * other meets the first's record at whichever of its own writes comes after that record committed: at its write on
     * the hold (the request is claimed before the status is looked at: used, `no recorded request`), or, having tried
     * that first, at its write beside the decision (`lost race`). Both are that run writing nothing; which one depends
     * only on how the two runs interleave (see the next case for the first order, made certain).
     */
    it('two runs of the job at once (FAILED meanwhile, both reads unreachable) write one event in the reviewer’s name', async () => {
      const runs = await twoRunsThenFailed();
      const [a, b] = runs.running;
      unreachable(runs.first);
      unreachable(runs.first + 1);
      const outcomes = (await Promise.all([a, b])).sort();
      expect([
        ['skipped: lost race', 'skipped: lost race'],
        ['skipped: lost race', 'skipped: no recorded request'],
      ]).toContainEqual(outcomes);
      await expectOnlyRecorded(runs, runs.before, oneUnreachableRead('FAILED'));
    });

    it('two runs of the job at once (FAILED meanwhile): the second answered after the first wrote finds the request used and writes nothing', async () => {
      const runs = await twoRunsThenFailed();
      const [a, b] = runs.running;
      unreachable(runs.first);
      expect(await a).toBe('skipped: lost race');
      unreachable(runs.first + 1);
      expect(await b).toBe('skipped: no recorded request');
      await expectOnlyRecorded(runs, runs.before, oneUnreachableRead('FAILED'));
    });

    it('two runs of the job at once (FAILED meanwhile): one that found the effect after the other recorded its unreachable read still refutes the FAILED', async () => {
      const {
        operationId,
        reference,
        first,
        running: [a, b],
      } = await runsOfOneRequest(2);
      await reviewerDecided(operationId, 'FAILED');
      unreachable(first);
      expect(await a).toBe('skipped: lost race');
      charged(first + 1, reference);
      expect(await b).toBe('skipped: lost race');
      expect((await row(operationId)).obligation).toMatchObject({ effect_shown_after_failed: { result: 'found' } });
      const events = await rechecked(operationId);
      expect(events).toEqual([
        expect.objectContaining({ result: 'unreachable', decided_meanwhile: 'FAILED' }),
        expect.objectContaining({ result: 'found', after: 'FAILED', duplicate_run: true }),
      ]);
    });

    /**
     * A reviewer's job that starts after the hold was decided (between the API's 202 and the job's start) reads nothing
     * (`skipped: not held`). Before, it wrote nothing either: the request stayed unused and the event the 202 promised
     * never came. Its answer is an event in their name saying no read was made (`result: null`) because the hold was
     * decided meanwhile, written with the request's claim; two runs of the job at once write it once.
     */
    for (const status of ['FAILED', 'VERIFIED'] as const) {
      it(`a job that starts after the hold was decided (${status}) reads nothing and says so in their name, once`, async () => {
        const { operationId } = await heldCharge();
        const requestId = await reviewerRequest(operationId);
        await reviewerDecided(operationId, status);
        // Nothing on the row but what an annotation writes (its updated_at): the decision stands as written.
        await twoRunsAndAReplayReadNothing(service, { operationId, requestId }, 'skipped: not held', {
          decided_meanwhile: status,
        });
      });
    }
  });

  /**
   * The API refuses a re-check up front when the operation's connector cannot read it back (409 `cannot-read-back`):
   * the job meets that case only when the connector changed between the 202 and the job — a reconciler deployed
   * without it, or with a declaration that reads this operation no more. Before, such a job wrote nothing, and the
   * request stayed unused while the hold lasted, though the 202 promised an event. Its answer is an event in the
   * reviewer's name saying no read was made and why (`result: null`, `cannot_read_back`), written with the request's
   * claim (two runs at once and a replay: one event); nothing else on the row changes.
   */
  describe('a reviewer’s job whose hold is still open but whose connector can no longer read it back', () => {
    /** sandbox.payments declaring no read of its charges (a version of it whose declaration lacks one). */
    class PaymentsWithoutRead extends SandboxPaymentsConnector {
      override readonly capabilities = {
        read_back: false,
        context_read: true,
        provider_idempotency: true,
        reversible: false,
      };
    }
    const deployments = [
      {
        why: 'connector_unavailable',
        registry: () => new ConnectorRegistry(builtInConnectors().filter((c) => c.name !== 'sandbox.payments')),
      },
      {
        why: 'no_read_back',
        registry: () =>
          new ConnectorRegistry(
            builtInConnectors().map((c) => (c.name === 'sandbox.payments' ? new PaymentsWithoutRead() : c)),
          ),
      },
    ];

    for (const { why, registry } of deployments) {
      it(`reads nothing and says so in the reviewer’s name, once (${why})`, async () => {
        const deployed = serviceWith(registry());
        // A hold with a scheduled re-check and two reads counted: none of it is touched.
        const { operationId } = await heldCharge({ rechecks: 2, nextCheckAt: new Date(Date.now() + 60_000) });
        const requestId = await reviewerRequest(operationId);
        // Still held as it was: status, obligation (no count), next re-check; only updated_at is the annotation's.
        await twoRunsAndAReplayReadNothing(deployed, { operationId, requestId }, 'skipped: cannot read back', {
          cannot_read_back: why,
        });
      });
    }

    it('decided between its look and its write, it answers as a job that started after the decision', async () => {
      const deployed = serviceWith(deployments[0].registry());
      const { operationId } = await heldCharge();
      const requestId = await reviewerRequest(operationId);
      // A reviewer's FAILED, written and not yet committed: the job's look (a plain read) sees the hold open, and its
      // write in the reviewer's name waits for this one's row lock, then finds the operation FAILED.
      const outcome = await whileUncommitted(
        `UPDATE operations SET status = 'FAILED', terminal_reason = 'MANUAL_RESOLUTION' WHERE id = $1`,
        [operationId],
        () => deployed.recheck(operationId, requestId),
      );
      expect(outcome).toBe('skipped: cannot read back');
      expect(await rechecked(operationId)).toEqual([
        reviewerEvent({ result: null, evidence: null, decided_meanwhile: 'FAILED' }),
      ]);
      expect(await requestUsed(requestId)).toBe(true);
    });
  });

  /**
   * Observation after VERIFIED: each job reads the operation's `observation`, reads the source, and writes what it
   * observed when that differs. A slow read overlapping a newer one must not write its older observation back over the
   * newer one's, nor say the same change twice.
   */
  describe('observations whose reads overlap', () => {
    /** A charge VERIFIED on its read-back of `ch_<reference>` (version 1), its observation `observation`. */
    async function verifiedCharge(observation: string | null = null) {
      const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
      const [{ reference }] = (await db.dataSource.query(
        `SELECT params->>'reference' AS reference FROM operations WHERE id = $1`,
        [operationId],
      )) as { reference: string }[];
      const record = {
        id: `ch_${reference}`,
        reference,
        amount: 100,
        currency: 'EUR',
        status: 'succeeded',
        version: 1,
      };
      await db.dataSource.query(
        `UPDATE operations SET status = 'VERIFIED', attempt = 1, sent_at = now(), provider_ref = $2, evidence = $3,
                observation = $4 WHERE id = $1`,
        [operationId, JSON.stringify({ id: record.id, version: 1 }), JSON.stringify({ record }), observation],
      );
      return { operationId, record };
    }

    /** Answers the `i`-th read with the verified charge and, `superseded`, another charge of its reference after it. */
    const listed = (i: number, record: Record<string, unknown>, superseded: boolean) =>
      held[i].writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          data: [record, ...(superseded ? [{ ...record, id: `${String(record.id)}_2`, version: 2 }] : [])],
          as_of_version: superseded ? 2 : 1,
        }),
      );

    const observedEvents = async (operationId: string) =>
      (
        await db.dataSource
          .getRepository(EventEntity)
          .find({ where: { operationId, type: 'operation.observed' }, order: { seq: 'ASC' } })
      ).map((e) => {
        const { observation, previous } = e.data as Record<string, unknown>;
        return { observation, previous };
      });

    const observationOf = async (operationId: string) =>
      (
        (await db.dataSource.query(`SELECT observation FROM operations WHERE id = $1`, [operationId])) as {
          observation: string | null;
        }[]
      )[0].observation;

    it('a read that ends after a newer one wrote never writes its older observation back', async () => {
      const { operationId, record } = await verifiedCharge();
      const first = held.length;
      // A slow read (made before the newer charge), then the next observation's read, which sees the newer charge.
      const { running: stale } = await readArrived(() => service.observe(operationId));
      const { running: newer } = await readArrived(() => service.observe(operationId));
      listed(first + 1, record, true);
      expect(await newer).toBe('observed: superseded');
      listed(first, record, false);
      expect(await stale).toBe('skipped: lost race');
      expect(await observationOf(operationId)).toBe('superseded');
      expect(await observedEvents(operationId)).toEqual([{ observation: 'superseded', previous: null }]);
    });

    it('two reads made against the same observation that find the same change say it once', async () => {
      const { operationId, record } = await verifiedCharge('converged');
      const first = held.length;
      const { running: a } = await readArrived(() => service.observe(operationId));
      const { running: b } = await readArrived(() => service.observe(operationId));
      listed(first, record, true);
      expect(await a).toBe('observed: superseded');
      listed(first + 1, record, true);
      expect(await b).toBe('skipped: lost race');
      expect(await observationOf(operationId)).toBe('superseded');
      expect(await observedEvents(operationId)).toEqual([{ observation: 'superseded', previous: 'converged' }]);
    });

    it('a read that ends after the observation it was made against went and came back writes nothing', async () => {
      const { operationId, record } = await verifiedCharge('converged');
      const first = held.length;
      // A slow read; meanwhile the source is down (unavailable written), then up again (converged written back).
      const { running: stale } = await readArrived(() => service.observe(operationId));
      const { running: down } = await readArrived(() => service.observe(operationId));
      unreachable(first + 1);
      expect(await down).toBe('observed: unavailable');
      const { running: up } = await readArrived(() => service.observe(operationId));
      listed(first + 2, record, false);
      expect(await up).toBe('observed: converged');
      // The slow read ends unreachable: its older "unavailable" is not written over the newer "converged".
      unreachable(first);
      expect(await stale).toBe('skipped: lost race');
      expect(await observationOf(operationId)).toBe('converged');
      expect(await observedEvents(operationId)).toEqual([
        { observation: 'unavailable', previous: 'converged' },
        { observation: 'converged', previous: 'unavailable' },
      ]);
    });
  });
});
