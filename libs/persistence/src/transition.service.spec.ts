import {
  ExecutionStatus,
  IllegalTransitionError,
  MAX_INVESTIGATION_BYTES_PER_HOLD,
  OperationStatus,
  TerminalReason,
} from '@verity/status-model';
import { chargeOperation, insertChargeExecution, insertTestExecution } from '../../../test/support/fixtures';
import { lockWaiters, waitForLockWaiter, writeDuringRevocation } from '../../../test/support/lock-waits';
import { waitFor } from '../../../test/support/stack';
import { withSessions } from '../../../test/support/sessions';
import { useTestDatabase } from '../../../test/support/test-database';
import { preparedSnapshot } from '../../../test/support/sends';
import { FindOptionsWhere, QueryRunner } from 'typeorm';
import { createApiKey, revokeApiKey } from './api-keys';
import { sendRefusals } from './send-guard';
import { EventEntity, OperationEntity } from './entities';
import { findOperationWithVersion, lockExecution, lockOperationAtVersion } from './store';
import { operationVersionOf } from './operation-version';
import {
  DatabaseNowPlus,
  DecisionInput,
  OperationSnapshot,
  TransitionResult,
  TransitionService,
} from './transition.service';

describe('TransitionService (real Postgres)', () => {
  const db = useTestDatabase('transition', ['acme']);
  const transitions = new TransitionService();
  /** The reviewer whose decisions these are: a decision is written only while its key is unrevoked. */
  let reviewerKey: string;
  beforeAll(async () => {
    reviewerKey = (await createApiKey(db.dataSource.manager, { tenantId: 'acme', role: 'reviewer' })).id;
  });

  /** Waits until the database's clock has moved 20 ms past now: a time read before is a different millisecond after. */
  async function databaseClockMovesOn(): Promise<void> {
    const [{ now }] = (await db.dataSource.query(`SELECT clock_timestamp() AS now`)) as { now: Date }[];
    await waitFor(
      async () =>
        (
          (await db.dataSource.query(`SELECT clock_timestamp() > $1::timestamptz + interval '20 milliseconds' AS on`, [
            now,
          ])) as { on: boolean }[]
        )[0].on,
      (on) => on,
    );
  }

  async function newExecutionWithOneOperation() {
    return insertChargeExecution(db.dataSource.manager, 'acme', {
      operation: { params: { amount: 100, currency: 'EUR', reference: 'r-1' } },
    });
  }
  /**
   * A FAILED operation and a retry of it (each the one operation of an execution of its own), with the version of the
   * retry as a page shows it before anything contradicts that FAILED.
   */
  async function retryOfFailed() {
    const original = await newExecutionWithOneOperation();
    const retry = await newExecutionWithOneOperation();
    await db.dataSource.query(`UPDATE operations SET status = 'FAILED', attempt = 1 WHERE id = $1`, [
      original.operationId,
    ]);
    await db.dataSource.query(`UPDATE operations SET retry_of = $2 WHERE id = $1`, [
      retry.operationId,
      original.operationId,
    ]);
    const shown = (await findOperationWithVersion(db.dataSource.manager, retry.operationId, 'acme'))!.version;
    return { original, retry, shown };
  }

  const snapshot = preparedSnapshot;

  /** A send is committed only while the execution runs (the send guard): set it there as the lifecycle would. */
  async function running(executionId: string) {
    await db.dataSource.query(`UPDATE executions SET status = 'running' WHERE id = $1`, [executionId]);
  }
  const dispatchGuard = { kind: 'dispatch', approvalRequired: false } as const;

  /** A reviewer's approval decision on one operation, as the API makes it (`extra`: another key, the page's guards). */
  const decideApproval = (operationId: string, decision: 'approve' | 'deny', extra: Partial<DecisionInput> = {}) => {
    const byKey = extra.byKey ?? reviewerKey;
    return transitions.decide(db.dataSource.manager, {
      operation: snapshot(operationId),
      tenantId: 'acme',
      byKey,
      open: 'approval',
      event: { type: 'approval.decided', data: { decision } },
      merge: { approval: { state: decision === 'approve' ? 'granted' : 'denied', decided_by: byKey } },
      ...extra,
    });
  };

  /** The dispatcher's SENT of a PREPARED operation (its sent_at the statement's time). */
  const dispatchSent = (operationId: string) =>
    transitions.operation(db.dataSource.manager, {
      operation: snapshot(operationId),
      to: OperationStatus.SENT,
      bumpAttempt: true,
      sendGuard: dispatchGuard,
      patch: { sent_at: 'now' },
    });

  /** The sender's ACKNOWLEDGED of a SENT operation (attempt 1; its acknowledged_at the statement's time). */
  const acknowledgeSent = (operationId: string) =>
    transitions.operation(db.dataSource.manager, {
      operation: { ...snapshot(operationId), status: OperationStatus.SENT, attempt: 1 },
      to: OperationStatus.ACKNOWLEDGED,
      patch: { acknowledged_at: 'now' },
    });

  /** A caller's cancel of a CREATED execution (by key_1): VALIDATING, then FAILED with `failure`. */
  const cancelWhileCreated = (executionId: string, failure: Record<string, string>) =>
    transitions.executionMoves(db.dataSource.manager, {
      executionId,
      from: E.CREATED,
      moves: [{ to: E.VALIDATING }, { to: E.FAILED, eventData: { by: 'key_1', failure } }],
      patch: { failure },
    });

  /** A reviewer's release (resolution SENT, stamped) of an operation held KNOWLEDGE_CONFLICT, as the API makes it. */
  const releaseHeld = (operationId: string, extra: Partial<DecisionInput> = {}) =>
    transitions.decide(db.dataSource.manager, {
      operation: {
        ...snapshot(operationId),
        status: OperationStatus.MANUAL_REVIEW,
        terminalReason: TerminalReason.KNOWLEDGE_CONFLICT,
      },
      tenantId: 'acme',
      byKey: reviewerKey,
      open: 'resolution',
      whileExecutionCarriesOutRelease: true,
      event: { type: 'operation.resolved', data: { status: 'SENT' } },
      merge: { obligation: { resolution: { status: 'SENT' } } },
      resolutionStamp: true,
      ...extra,
    });

  /** The event rows that match `where`, in the order they were numbered. */
  const eventsWhere = (where: FindOptionsWhere<EventEntity>) =>
    db.dataSource.getRepository(EventEntity).find({ where, order: { seq: 'ASC' } });

  /** The execution row's status and event counter. */
  const executionRow = async (executionId: string) =>
    (
      (await db.dataSource.query(`SELECT status, event_seq FROM executions WHERE id = $1`, [executionId])) as {
        status: string;
        event_seq: string;
      }[]
    )[0];

  /** The statement wrote nothing: the execution's created event alone, its counter still 1, its status `status`. */
  async function expectNothingWritten(executionId: string, status: string) {
    expect(await eventsWhere({ executionId })).toHaveLength(1);
    expect(await executionRow(executionId)).toEqual({ status, event_seq: '1' });
  }

  const E = ExecutionStatus;
  const moveChain = (executionId: string, from: ExecutionStatus, ...moves: ExecutionStatus[]) =>
    transitions.executionMoves(db.dataSource.manager, { executionId, from, moves: moves.map((to) => ({ to })) });

  it('lets exactly one of 20 concurrent PREPARED->SENT moves win, with exactly one event row', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    await running(executionId);
    const results = await Promise.all(Array.from({ length: 20 }, () => dispatchSent(operationId)));
    expect(results.filter((r) => r.won)).toHaveLength(1);
    const events = await eventsWhere({ operationId });
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ fromStatus: 'PREPARED', toStatus: 'SENT', type: 'operation.status_changed' });
    const op = await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id: operationId });
    expect(op.status).toBe(OperationStatus.SENT);
    expect(op.attempt).toBe(1);
    expect(op.sentAt).toBeInstanceOf(Date);
  });

  it('writes a proof of absence (RECONCILING → FAILED, PROVEN_ABSENT) only while the provider’s acknowledgement is not on record', async () => {
    const reconciling = async (acknowledged: boolean) => {
      const { operationId } = await newExecutionWithOneOperation();
      await db.dataSource.query(
        `UPDATE operations SET status = 'RECONCILING', attempt = 1, sent_at = now(),
                acknowledged_at = CASE WHEN $2 THEN now() END WHERE id = $1`,
        [operationId, acknowledged],
      );
      return operationId;
    };
    const proveAbsent = (id: string) =>
      transitions.operation(db.dataSource.manager, {
        operation: { ...snapshot(id), status: OperationStatus.RECONCILING, attempt: 1 },
        to: OperationStatus.FAILED,
        reason: TerminalReason.PROVEN_ABSENT,
      });
    // Acknowledged after the reconciler read the row (a late 2xx recorded meanwhile): the statement refuses, no event.
    const acknowledged = await reconciling(true);
    expect((await proveAbsent(acknowledged)).won).toBe(false);
    const row = await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id: acknowledged });
    expect(row.status).toBe(OperationStatus.RECONCILING);
    expect(await eventsWhere({ operationId: acknowledged })).toHaveLength(0);
    expect((await proveAbsent(await reconciling(false))).won).toBe(true);
  });

  it('cancels a held, never-sent operation only once its execution has ended so in the database', async () => {
    const held = async (attempt: number) => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      await db.dataSource.query(
        `UPDATE operations SET status = 'MANUAL_REVIEW', attempt = $2, terminal_reason = 'KNOWLEDGE_CONFLICT' WHERE id = $1`,
        [operationId, attempt],
      );
      await running(executionId);
      const operation = {
        ...snapshot(operationId),
        status: OperationStatus.MANUAL_REVIEW,
        attempt,
        terminalReason: TerminalReason.KNOWLEDGE_CONFLICT,
      };
      return { executionId, operationId, operation };
    };
    const cancelHeld = (operation: OperationSnapshot) =>
      transitions.cancelHeldOfEndedExecution(db.dataSource.manager, [operation], { cause: 'execution_cancelled' });
    const statusOf = async (id: string) =>
      (await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id })).status;

    // The execution still runs (a caller that claims it ended is not believed): nothing written.
    const unsent = await held(0);
    expect(await cancelHeld(unsent.operation)).toBe(0);
    expect(await statusOf(unsent.operationId)).toBe(OperationStatus.MANUAL_REVIEW);
    expect(await eventsWhere({ operationId: unsent.operationId })).toHaveLength(0);
    // A completed execution may still carry out a release: not ended so either.
    await db.dataSource.query(`UPDATE executions SET status = 'completed' WHERE id = $1`, [unsent.executionId]);
    expect(await cancelHeld(unsent.operation)).toBe(0);

    for (const end of ['cancelled', 'expired', 'failed']) {
      const ofEnded = await held(0);
      await db.dataSource.query(`UPDATE executions SET status = $2 WHERE id = $1`, [ofEnded.executionId, end]);
      expect(await cancelHeld(ofEnded.operation)).toBe(1);
      expect(await statusOf(ofEnded.operationId)).toBe(OperationStatus.CANCELLED);
      const [event] = await eventsWhere({ operationId: ofEnded.operationId });
      expect(event).toMatchObject({ fromStatus: 'MANUAL_REVIEW', toStatus: 'CANCELLED' });
      expect(event.data).toMatchObject({ cause: 'execution_cancelled', actor: 'system' });
    }

    // Ever sent: its effect may exist; it keeps waiting for a person (not even tried).
    const sent = await held(1);
    await db.dataSource.query(`UPDATE executions SET status = 'cancelled' WHERE id = $1`, [sent.executionId]);
    expect(await cancelHeld(sent.operation)).toBe(0);
    expect(await statusOf(sent.operationId)).toBe(OperationStatus.MANUAL_REVIEW);
  });

  it('ends a hold with the terminal reason its move names, on the row and in the event alike (a resolution, a cancel)', async () => {
    /** An operation held for `reason`, sent `attempt` times, of a running execution. */
    const heldFor = async (reason: TerminalReason, attempt: number) => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      await db.dataSource.query(
        `UPDATE operations SET status = 'MANUAL_REVIEW', attempt = $2, terminal_reason = $3 WHERE id = $1`,
        [operationId, attempt, reason],
      );
      await running(executionId);
      const operation = {
        ...snapshot(operationId),
        status: OperationStatus.MANUAL_REVIEW,
        attempt,
        terminalReason: reason,
      };
      return { executionId, operationId, operation };
    };
    /** The row's terminal reason and its last status event's, which must be one. */
    const rowAndEvent = async (operationId: string) => {
      const row = await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id: operationId });
      const moves = (await eventsWhere({ operationId })).filter((e) => e.toStatus !== null);
      return { status: row.status, row: row.terminalReason, event: moves.at(-1)?.data.reason };
    };
    const resolve = (operation: OperationSnapshot, to: OperationStatus) =>
      transitions.decide(db.dataSource.manager, {
        operation,
        tenantId: 'acme',
        byKey: reviewerKey,
        open: 'resolution',
        event: { type: 'operation.resolved', data: { status: to, evidence: 'seen at the provider', by: reviewerKey } },
        merge: { obligation: { resolution: { status: to, evidence: 'seen at the provider', by: reviewerKey } } },
        move: { to, eventData: { cause: 'resolved' } },
      });

    // A person's VERIFIED and FAILED of a sent hold, and a person's cancel of a never-sent one: the move names no
    // reason (the model allows none), so the hold's reason no longer explains the status, on the row as in the event.
    for (const [reason, attempt, to] of [
      [TerminalReason.STALE_REPLICA, 1, OperationStatus.VERIFIED],
      [TerminalReason.STALE_REPLICA, 1, OperationStatus.FAILED],
      [TerminalReason.KNOWLEDGE_CONFLICT, 0, OperationStatus.CANCELLED],
    ] as const) {
      const held = await heldFor(reason, attempt);
      expect((await resolve(held.operation, to)).won).toBe(true);
      expect(await rowAndEvent(held.operationId)).toEqual({ status: to, row: null, event: null });
    }

    // The system's cancel of a never-sent hold whose execution ended.
    const ofEnded = await heldFor(TerminalReason.KNOWLEDGE_CONFLICT, 0);
    await db.dataSource.query(`UPDATE executions SET status = 'cancelled' WHERE id = $1`, [ofEnded.executionId]);
    expect(
      await transitions.cancelHeldOfEndedExecution(db.dataSource.manager, [ofEnded.operation], {
        cause: 'execution_cancelled',
      }),
    ).toBe(1);
    expect(await rowAndEvent(ofEnded.operationId)).toEqual({ status: 'CANCELLED', row: null, event: null });

    // A deny of a hold names its own reason: DENIED on both.
    const denied = await heldFor(TerminalReason.KNOWLEDGE_CONFLICT, 0);
    const deny = await transitions.decide(db.dataSource.manager, {
      operation: denied.operation,
      tenantId: 'acme',
      byKey: reviewerKey,
      open: 'resolution',
      event: { type: 'operation.resolved', data: { status: 'CANCELLED', by: reviewerKey } },
      merge: { obligation: { resolution: { status: 'CANCELLED', by: reviewerKey } } },
      move: { to: OperationStatus.CANCELLED, reason: TerminalReason.DENIED },
    });
    expect(deny.won).toBe(true);
    expect(await rowAndEvent(denied.operationId)).toEqual({ status: 'CANCELLED', row: 'DENIED', event: 'DENIED' });
  });

  it('leaves a hold’s reason behind with the hold when a reviewer’s release is sent: SENT shows none, row and event alike', async () => {
    // A never-sent hold released by a reviewer (resolution SENT): the dispatcher's MANUAL_REVIEW -> SENT names no
    // reason, so KNOWLEDGE_CONFLICT no longer explains the operation, which is on its way now, not held.
    const { executionId, operationId } = await newExecutionWithOneOperation();
    await db.dataSource.query(
      `UPDATE operations SET status = 'MANUAL_REVIEW', attempt = 0, terminal_reason = 'KNOWLEDGE_CONFLICT',
              obligation = '{"reason": "KNOWLEDGE_CONFLICT", "resolution": {"status": "SENT"}}'::jsonb
        WHERE id = $1`,
      [operationId],
    );
    await running(executionId);
    const sent = await transitions.operation(db.dataSource.manager, {
      operation: {
        ...snapshot(operationId),
        status: OperationStatus.MANUAL_REVIEW,
        attempt: 0,
        terminalReason: TerminalReason.KNOWLEDGE_CONFLICT,
      },
      to: OperationStatus.SENT,
      actor: 'human',
      bumpAttempt: true,
      sendGuard: { kind: 'release' },
      patch: { sent_at: 'now', check_count: 0, next_check_at: null },
    });
    expect(sent.won).toBe(true);
    const row = await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id: operationId });
    const moves = (await eventsWhere({ operationId })).filter((e) => e.toStatus !== null);
    expect({ status: row.status, row: row.terminalReason, event: moves.at(-1)?.data.reason }).toEqual({
      status: 'SENT',
      row: null,
      event: null,
    });
  });

  it('keeps a person’s reason on the operation’s status event beside the terminal reason (a cancel, a deny)', async () => {
    // A cancel of the execution: its PREPARED operation ends CANCELLED with no terminal reason, the caller's text kept.
    const cancelled = await newExecutionWithOneOperation();
    const moved = await transitions.operation(db.dataSource.manager, {
      operation: snapshot(cancelled.operationId),
      to: OperationStatus.CANCELLED,
      eventData: { cause: 'execution_cancelled', by: reviewerKey, reason: 'the customer called' },
    });
    expect(moved.won).toBe(true);
    const [cancel] = await eventsWhere({ operationId: cancelled.operationId });
    expect(cancel.data).toEqual({
      cause: 'execution_cancelled',
      by: reviewerKey,
      caller_reason: 'the customer called',
      reason: null,
      actor: 'system',
    });

    // A deny: the move's event carries the terminal reason DENIED and the reviewer's text.
    const denied = await newExecutionWithOneOperation();
    await transitions.annotate(db.dataSource.manager, {
      executionId: denied.executionId,
      operationId: denied.operationId,
      whileStatus: OperationStatus.PREPARED,
      patch: { approval: { state: 'requested' } },
      type: 'approval.requested',
    });
    const decided = await decideApproval(denied.operationId, 'deny', {
      move: {
        to: OperationStatus.CANCELLED,
        reason: TerminalReason.DENIED,
        eventData: { cause: 'approval_denied', by: reviewerKey, reason: 'not this customer' },
      },
    });
    expect(decided.won).toBe(true);
    const move = (await eventsWhere({ operationId: denied.operationId })).find((e) => e.toStatus === 'CANCELLED');
    expect(move?.data).toMatchObject({ caller_reason: 'not this customer', reason: 'DENIED', actor: 'human' });

    // No reason given: no caller_reason member.
    const plain = await newExecutionWithOneOperation();
    await transitions.operation(db.dataSource.manager, {
      operation: snapshot(plain.operationId),
      to: OperationStatus.CANCELLED,
      eventData: { cause: 'execution_cancelled', reason: undefined },
    });
    const [quiet] = await eventsWhere({ operationId: plain.operationId });
    expect(quiet.data).not.toHaveProperty('caller_reason');
  });

  it('refuses an illegal move before touching the database (I1)', async () => {
    const { operationId } = await newExecutionWithOneOperation();
    await expect(
      transitions.operation(db.dataSource.manager, {
        operation: snapshot(operationId),
        to: OperationStatus.ACKNOWLEDGED,
      }),
    ).rejects.toBeInstanceOf(IllegalTransitionError);
    const events = await eventsWhere({ operationId });
    expect(events).toHaveLength(0);
  });

  it('fences a late write that carries an old attempt', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    await running(executionId);
    const sent = await transitions.operation(db.dataSource.manager, {
      operation: snapshot(operationId),
      to: OperationStatus.SENT,
      bumpAttempt: true,
      sendGuard: dispatchGuard,
    });
    expect(sent).toMatchObject({ won: true, attempt: 1 });
    const stale = await transitions.operation(db.dataSource.manager, {
      operation: { ...snapshot(operationId), status: OperationStatus.SENT, attempt: 0 },
      to: OperationStatus.ACKNOWLEDGED,
    });
    expect(stale.won).toBe(false);
    const fresh = await transitions.operation(db.dataSource.manager, {
      operation: { ...snapshot(operationId), status: OperationStatus.SENT, attempt: 1 },
      to: OperationStatus.UNKNOWN,
      reason: TerminalReason.CONNECTOR_ERROR,
    });
    expect(fresh.won).toBe(true);
  });

  it('says one terminal reason on the row and in the event of every move that is neither settled nor out of a hold', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    await running(executionId);
    /** The row's status and terminal reason, and the reason of its last status event: the two reasons must be one. */
    const rowAndEvent = async () => {
      const row = await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id: operationId });
      const moves = (await eventsWhere({ operationId })).filter((e) => e.toStatus !== null);
      return { status: row.status, row: row.terminalReason, event: moves.at(-1)?.data.reason };
    };
    const move = async (from: OperationStatus, to: OperationStatus, reason?: TerminalReason) => {
      const row = await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id: operationId });
      const moved = await transitions.operation(db.dataSource.manager, {
        operation: { ...snapshot(operationId), status: from, attempt: row.attempt, terminalReason: row.terminalReason },
        to,
        reason,
        ...(to === OperationStatus.SENT && { bumpAttempt: true, sendGuard: dispatchGuard }),
      });
      expect(moved.won).toBe(true);
      return rowAndEvent();
    };
    const S = OperationStatus;
    await move(S.PREPARED, S.SENT);
    // A timeout: UNKNOWN for CONNECTOR_ERROR, on both.
    expect(await move(S.SENT, S.UNKNOWN, TerminalReason.CONNECTOR_ERROR)).toEqual({
      status: 'UNKNOWN',
      row: 'CONNECTOR_ERROR',
      event: 'CONNECTOR_ERROR',
    });
    // The reconciler reads the source, and its read is inconclusive: the outcome the connector error left uncertain is
    // still uncertain, and its reason still stands, on the row and in the event alike (before, the row kept it and the
    // events of both moves said null).
    expect(await move(S.UNKNOWN, S.RECONCILING)).toEqual({
      status: 'RECONCILING',
      row: 'CONNECTOR_ERROR',
      event: 'CONNECTOR_ERROR',
    });
    expect(await move(S.RECONCILING, S.UNKNOWN)).toEqual({
      status: 'UNKNOWN',
      row: 'CONNECTOR_ERROR',
      event: 'CONNECTOR_ERROR',
    });

    // A row an older version left with a reason its status no longer justifies (a released hold's, kept through SENT):
    // a move into a status no reason explains (ACKNOWLEDGED, awaiting its read-back) that names none writes null, on
    // the row as in its event (before, the row kept KNOWLEDGE_CONFLICT).
    await db.dataSource.query(
      `UPDATE operations SET status = 'SENT', terminal_reason = 'KNOWLEDGE_CONFLICT' WHERE id = $1`,
      [operationId],
    );
    expect(await move(S.SENT, S.ACKNOWLEDGED)).toEqual({ status: 'ACKNOWLEDGED', row: null, event: null });
  });

  it('writes a next check count only over the count it was decided on (whileCheckCount)', async () => {
    const { operationId } = await newExecutionWithOneOperation();
    await db.dataSource.query(
      `UPDATE operations SET status = 'RECONCILING', attempt = 1, check_count = 4 WHERE id = $1`,
      [operationId],
    );
    const inconclusive = (at: number) =>
      transitions.operation(db.dataSource.manager, {
        operation: { ...snapshot(operationId), status: OperationStatus.RECONCILING, attempt: 1 },
        to: OperationStatus.UNKNOWN,
        whileCheckCount: at,
        patch: { check_count: at + 1 },
      });
    expect((await inconclusive(2)).won).toBe(false);
    expect(await eventsWhere({ operationId })).toHaveLength(0);
    expect((await inconclusive(4)).won).toBe(true);
    const op = await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id: operationId });
    expect([op.status, op.checkCount]).toEqual([OperationStatus.UNKNOWN, 5]);
  });

  it('annotates with a next check count only over the count it was decided on (whileCheckCount)', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    await db.dataSource.query(`UPDATE operations SET check_count = 3 WHERE id = $1`, [operationId]);
    const failedRead = (at: number) =>
      transitions.annotate(db.dataSource.manager, {
        executionId,
        operationId,
        whileStatus: OperationStatus.PREPARED,
        whileCheckCount: at,
        patch: { check_count: at + 1 },
        type: 'context.unavailable',
      });
    // A job that read the row at 2 (before another job counted a third failed read) writes nothing.
    expect((await failedRead(2)).won).toBe(false);
    expect(await eventsWhere({ operationId, type: 'context.unavailable' })).toHaveLength(0);
    expect((await failedRead(3)).won).toBe(true);
    const op = await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id: operationId });
    expect([op.status, op.checkCount]).toEqual([OperationStatus.PREPARED, 4]);
    expect(await eventsWhere({ operationId, type: 'context.unavailable' })).toHaveLength(1);
  });

  it('counts every one of 20 concurrent annotations that count in the obligation, each merge kept', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    await db.dataSource.query(
      `UPDATE operations SET status = 'MANUAL_REVIEW', obligation = '{"rechecks": 2, "due_at": "x"}' WHERE id = $1`,
      [operationId],
    );
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        transitions.annotate(db.dataSource.manager, {
          executionId,
          operationId,
          whileStatus: OperationStatus.MANUAL_REVIEW,
          merge: { obligation: { [`seen${i}`]: true } },
          countInObligation: 'rechecks',
          type: 'operation.rechecked',
        }),
      ),
    );
    expect(results.every((r) => r.won)).toBe(true);
    const op = await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id: operationId });
    expect(op.obligation).toMatchObject({ rechecks: 22, due_at: 'x', seen0: true, seen19: true });
    // Without a merge of its own, the count alone is written.
    await transitions.annotate(db.dataSource.manager, {
      executionId,
      operationId,
      whileStatus: OperationStatus.MANUAL_REVIEW,
      countInObligation: 'rechecks',
      type: 'operation.rechecked',
    });
    const after = await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id: operationId });
    expect(after.obligation).toMatchObject({ rechecks: 23, due_at: 'x' });
  });

  it('numbers the events of one execution without gaps, in commit order, under concurrency', async () => {
    const { executionId } = await newExecutionWithOneOperation();
    await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        transitions.annotate(db.dataSource.manager, { executionId, type: 'test.note', data: { i } }),
      ),
    );
    const events = await eventsWhere({ executionId });
    expect(events.map((e) => Number(e.seq))).toEqual(Array.from({ length: 31 }, (_, i) => i + 1));
  });

  it('writes a chain of execution moves as one statement, one event per move, with consecutive seqs', async () => {
    const { executionId } = await newExecutionWithOneOperation();
    const result = await transitions.executionMoves(db.dataSource.manager, {
      executionId,
      from: E.CREATED,
      moves: [
        { to: E.VALIDATING },
        { to: E.RESOLVING_CONTEXT, eventData: { note: 'second' } },
        { to: E.PLANNING },
        { to: E.RUNNING },
      ],
    });
    expect(result).toMatchObject({ won: true, seq: 5 });
    const events = await eventsWhere({ executionId });
    expect(events.map((e) => [Number(e.seq), e.fromStatus, e.toStatus])).toEqual([
      [1, null, 'created'],
      [2, 'created', 'validating'],
      [3, 'validating', 'resolving_context'],
      [4, 'resolving_context', 'planning'],
      [5, 'planning', 'running'],
    ]);
    expect(events[2].data).toEqual({ note: 'second' });
    expect(events[4].id).toBe(result.eventId);
    expect(await executionRow(executionId)).toEqual({ status: 'running', event_seq: '5' });
  });

  it('writes nothing of a chain whose starting status is gone, and refuses an illegal chain before any SQL', async () => {
    const { executionId } = await newExecutionWithOneOperation();
    const lost = await moveChain(executionId, E.VALIDATING, E.RESOLVING_CONTEXT, E.PLANNING);
    expect(lost).toEqual({ won: false });
    await expect(moveChain(executionId, E.CREATED, E.VALIDATING, E.RUNNING)).rejects.toBeInstanceOf(
      IllegalTransitionError,
    );
    const events = await eventsWhere({ executionId });
    expect(events).toHaveLength(1);
  });

  describe('an operation move followed by execution moves (thenExecution), one statement', () => {
    const completion = {
      from: E.RUNNING,
      moves: [{ to: E.VALIDATING_OUTPUT }, { to: E.COMPLETED, eventData: { outcome: null } }],
    };
    /** An execution running with its one operation ACKNOWLEDGED (attempt 1), as the sender leaves it. */
    async function acknowledged() {
      const ids = await newExecutionWithOneOperation();
      await running(ids.executionId);
      await db.dataSource.query(`UPDATE operations SET status = 'ACKNOWLEDGED', attempt = 1 WHERE id = $1`, [
        ids.operationId,
      ]);
      return ids;
    }
    const verify = (operationId: string, then = completion, manager = db.dataSource.manager) =>
      transitions.operation(manager, {
        operation: { ...snapshot(operationId), status: OperationStatus.ACKNOWLEDGED, attempt: 1 },
        to: OperationStatus.VERIFIED,
        patch: { evidence: { method: 'read_after_write' } },
        thenExecution: then,
      });

    it('writes the operation’s event, then one per execution move, with consecutive seqs', async () => {
      const { executionId, operationId } = await acknowledged();
      const result = await verify(operationId);
      expect(result).toMatchObject({ won: true, seq: 2, attempt: 1, executionMoved: true });
      const events = await eventsWhere({ executionId });
      expect(events.map((e) => [Number(e.seq), e.operationId, e.type, e.fromStatus, e.toStatus])).toEqual([
        [1, null, 'execution.created', null, 'created'],
        [2, operationId, 'operation.status_changed', 'ACKNOWLEDGED', 'VERIFIED'],
        [3, null, 'execution.status_changed', 'running', 'validating_output'],
        [4, null, 'execution.status_changed', 'validating_output', 'completed'],
      ]);
      expect(events[1].id).toBe(result.eventId);
      expect(events[3].data).toEqual({ outcome: null });
      expect(await executionRow(executionId)).toEqual({ status: 'completed', event_seq: '4' });
    });

    it('writes the operation’s move alone when the execution is no longer where the caller left it', async () => {
      const { executionId, operationId } = await acknowledged();
      await db.dataSource.query(`UPDATE executions SET status = 'cancelled' WHERE id = $1`, [executionId]);
      const result = await verify(operationId);
      expect(result).toMatchObject({ won: true, seq: 2, executionMoved: false });
      expect((await eventsWhere({ executionId })).map((e) => e.toStatus)).toEqual(['created', 'VERIFIED']);
      expect(await executionRow(executionId)).toEqual({ status: 'cancelled', event_seq: '2' });
    });

    it('writes the operation’s move alone once the deadline has passed (the execution expires instead)', async () => {
      const { executionId, operationId } = await acknowledged();
      await db.dataSource.query(`UPDATE executions SET deadline_at = now() - interval '1 second' WHERE id = $1`, [
        executionId,
      ]);
      const result = await verify(operationId);
      expect(result).toMatchObject({ won: true, executionMoved: false });
      expect(await executionRow(executionId)).toEqual({ status: 'running', event_seq: '2' });
    });

    it('writes nothing when the operation’s compare-and-set loses', async () => {
      const { executionId, operationId } = await acknowledged();
      await db.dataSource.query(`UPDATE operations SET status = 'UNKNOWN' WHERE id = $1`, [operationId]);
      expect(await verify(operationId)).toEqual({ won: false });
      await expectNothingWritten(executionId, 'running');
    });

    it('judges the execution as committed when it gets the row, not as its snapshot saw it (a cancel that commits first wins)', async () => {
      const { executionId, operationId } = await acknowledged();
      // A caller's cancel holds the execution row, uncommitted, while the statement starts: the statement's snapshot
      // still says running; the row it gets after the cancel commits says cancelled.
      await withSessions(db.dataSource, ['cancel'], async ({ cancel }) => {
        await cancel.startTransaction();
        await cancel.query(`UPDATE executions SET status = 'cancelled', event_seq = event_seq + 1 WHERE id = $1`, [
          executionId,
        ]);
        const verifying = verify(operationId);
        // Proven waiting on the cancel's row lock (not slept on): its backend shows a lock wait.
        await waitForLockWaiter(db.dataSource, { statementLike: 'WITH moved AS%' });
        await cancel.commitTransaction();
        const result = await verifying;
        expect(result).toMatchObject({ won: true, executionMoved: false });
      });
      expect(await executionRow(executionId)).toEqual({ status: 'cancelled', event_seq: '3' });
      const events = await eventsWhere({ executionId });
      expect(events.map((e) => [Number(e.seq), e.toStatus])).toEqual([
        [1, 'created'],
        [3, 'VERIFIED'],
      ]);
    });

    it('checks every execution move with the model before any SQL', async () => {
      const { executionId, operationId } = await acknowledged();
      await expect(verify(operationId, { from: E.RUNNING, moves: [{ to: E.CREATED }] })).rejects.toBeInstanceOf(
        IllegalTransitionError,
      );
      expect(await eventsWhere({ executionId })).toHaveLength(1);
    });
  });

  describe('a quiet preparation’s execution moves, then the operation’s SENT (executionFirst), one statement', () => {
    const preparation = {
      from: E.CREATED,
      moves: [E.VALIDATING, E.RESOLVING_CONTEXT, E.PLANNING, E.RUNNING].map((to) => ({ to })),
    };
    /** The statuses of the execution's events once prepared and sent: each move, then the SENT, written once. */
    const preparedThenSent = ['created', 'validating', 'resolving_context', 'planning', 'running', 'SENT'];
    const send = (operationId: string, first = preparation, from: ExecutionStatus | undefined = first.from) =>
      transitions.operation(db.dataSource.manager, {
        operation: snapshot(operationId),
        to: OperationStatus.SENT,
        bumpAttempt: true,
        sendGuard: { ...dispatchGuard, executionFrom: from },
        patch: { sent_at: 'now' },
        executionFirst: first,
      });

    it('writes one event per execution move, then the operation’s, with consecutive seqs', async () => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      const result = await send(operationId);
      expect(result).toMatchObject({ won: true, seq: 6, attempt: 1, executionMoved: true });
      const events = await eventsWhere({ executionId });
      expect(events.map((e) => [Number(e.seq), e.operationId, e.fromStatus, e.toStatus])).toEqual([
        [1, null, null, 'created'],
        [2, null, 'created', 'validating'],
        [3, null, 'validating', 'resolving_context'],
        [4, null, 'resolving_context', 'planning'],
        [5, null, 'planning', 'running'],
        [6, operationId, 'PREPARED', 'SENT'],
      ]);
      expect(events[5].id).toBe(result.eventId);
      expect(await executionRow(executionId)).toEqual({ status: 'running', event_seq: '6' });
    });

    it('lets one of 20 concurrent ones win: one SENT, the moves written once', async () => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      const results = await Promise.all(Array.from({ length: 20 }, () => send(operationId)));
      expect(results.filter((r) => r.won)).toHaveLength(1);
      const events = await eventsWhere({ executionId });
      expect(events.map((e) => e.toStatus)).toEqual(preparedThenSent);
    });

    it('writes the SENT alone when another job moved the execution to running first', async () => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      await moveChain(executionId, E.CREATED, E.VALIDATING, E.RESOLVING_CONTEXT, E.PLANNING, E.RUNNING);
      const result = await send(operationId);
      expect(result).toMatchObject({ won: true, seq: 6, executionMoved: false });
      expect((await eventsWhere({ executionId })).map((e) => e.toStatus)).toEqual(preparedThenSent);
      expect(await executionRow(executionId)).toEqual({ status: 'running', event_seq: '6' });
    });

    it('sends nothing and moves nothing when the execution is neither where the moves start nor running', async () => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      await moveChain(executionId, E.CREATED, E.CANCELLED);
      expect(await send(operationId)).toEqual({ won: false });
      expect((await eventsWhere({ executionId })).map((e) => e.toStatus)).toEqual(['created', 'cancelled']);
      expect(await executionRow(executionId)).toEqual({ status: 'cancelled', event_seq: '2' });
    });

    it('writes nothing when the operation’s compare-and-set loses, or its guard refuses', async () => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      await db.dataSource.query(`UPDATE operations SET next_check_at = now() WHERE id = $1`, [operationId]);
      expect(await send(operationId)).toEqual({ won: false });
      await db.dataSource.query(`UPDATE operations SET next_check_at = NULL, status = 'CANCELLED' WHERE id = $1`, [
        operationId,
      ]);
      expect(await send(operationId)).toEqual({ won: false });
      await expectNothingWritten(executionId, 'created');
    });

    it('refuses moves that do not end running, or a guard that does not name where they start', async () => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      await expect(send(operationId, { from: E.CREATED, moves: [{ to: E.VALIDATING }] })).rejects.toThrow(
        'executionFirst must end where a send may happen',
      );
      await expect(send(operationId, preparation, E.VALIDATING)).rejects.toThrow('executionFirst goes with');
      await expect(send(operationId, { from: E.CREATED, moves: [{ to: E.RUNNING }] })).rejects.toBeInstanceOf(
        IllegalTransitionError,
      );
      expect(await eventsWhere({ executionId })).toHaveLength(1);
    });
  });

  /** Sets the operation's approval to granted, as a reviewer's decision would. */
  async function granted(operationId: string) {
    await db.dataSource.query(`UPDATE operations SET approval = '{"state":"granted"}' WHERE id = $1`, [operationId]);
  }
  /** Writes `approval: requested` on the PREPARED operation, with an event of `type`, under the given approval guard. */
  const approvalRequested = (
    ids: { executionId: string; operationId: string },
    type: string,
    guard: { whileApprovalOpen: true } | { whileApprovalGranted: true; whileGrantDecidedAt?: string | null },
  ) =>
    transitions.annotate(db.dataSource.manager, {
      ...ids,
      whileStatus: OperationStatus.PREPARED,
      ...guard,
      patch: { approval: { state: 'requested' } },
      type,
    });

  it('writes one approval request of many racing ones, and none once a decision is recorded', async () => {
    const ids = await newExecutionWithOneOperation();
    const { executionId, operationId } = ids;
    const request = () => approvalRequested(ids, 'approval.requested', { whileApprovalOpen: true });
    const results = await Promise.all(Array.from({ length: 10 }, request));
    expect(results.filter((r) => r.won)).toHaveLength(1);
    await granted(operationId);
    expect((await request()).won).toBe(false);
    const requested = await eventsWhere({ executionId, type: 'approval.requested' });
    expect(requested).toHaveLength(1);
  });

  it('withdraws a stale grant once of many racing senders, and never from an operation sent meanwhile', async () => {
    const ids = await newExecutionWithOneOperation();
    const { executionId, operationId } = ids;
    await granted(operationId);
    const withdraw = () => approvalRequested(ids, 'approval.stale_baseline', { whileApprovalGranted: true });
    const results = await Promise.all(Array.from({ length: 10 }, withdraw));
    expect(results.filter((r) => r.won)).toHaveLength(1);
    expect(await eventsWhere({ executionId, type: 'approval.stale_baseline' })).toHaveLength(1);

    // Granted again, then sent: a sender that still holds the PREPARED row withdraws nothing.
    await granted(operationId);
    await running(executionId);
    const sent = await transitions.operation(db.dataSource.manager, {
      operation: snapshot(operationId),
      to: OperationStatus.SENT,
      bumpAttempt: true,
      sendGuard: { kind: 'dispatch', approvalRequired: true },
    });
    expect(sent.won).toBe(true);
    expect((await withdraw()).won).toBe(false);
    expect(await eventsWhere({ executionId, type: 'approval.stale_baseline' })).toHaveLength(1);
  });

  it('withdraws only the grant it judged stale: one given again since (withdrawn by another, re-granted) stands', async () => {
    const ids = await newExecutionWithOneOperation();
    const { executionId, operationId } = ids;
    const grantAt = (at: string) =>
      db.dataSource.query(
        `UPDATE operations SET approval = jsonb_build_object('state', 'granted', 'decided_at', $2::text) WHERE id = $1`,
        [operationId, at],
      );
    await grantAt('2026-01-01T00:00:00.000Z');
    // A sender judged that grant stale; meanwhile another withdrew it and a reviewer granted it again.
    await grantAt('2026-01-01T00:05:00.000Z');
    const late = await approvalRequested(ids, 'approval.stale_baseline', {
      whileApprovalGranted: true,
      whileGrantDecidedAt: '2026-01-01T00:00:00.000Z',
    });
    expect(late.won).toBe(false);
    expect(await eventsWhere({ executionId, type: 'approval.stale_baseline' })).toHaveLength(0);
    const [row] = (await db.dataSource.query(`SELECT approval FROM operations WHERE id = $1`, [operationId])) as {
      approval: { state: string; decided_at: string };
    }[];
    expect(row.approval).toEqual({ state: 'granted', decided_at: '2026-01-01T00:05:00.000Z' });
    // The grant it judged: withdrawn.
    const current = await approvalRequested(ids, 'approval.stale_baseline', {
      whileApprovalGranted: true,
      whileGrantDecidedAt: '2026-01-01T00:05:00.000Z',
    });
    expect(current.won).toBe(true);
  });

  it('withdraws only the release it found refused: one recorded again since (withdrawn by another) stands', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const releasedAt = (at: string) =>
      db.dataSource.query(
        `UPDATE operations SET status = 'MANUAL_REVIEW',
                obligation = jsonb_build_object('resolution', jsonb_build_object('status', 'SENT', 'at', $2::text))
          WHERE id = $1`,
        [operationId, at],
      );
    const withdraw = (at: string) =>
      transitions.annotate(db.dataSource.manager, {
        executionId,
        operationId,
        whileStatus: OperationStatus.MANUAL_REVIEW,
        withdrawRelease: true,
        whileReleaseAt: at,
        type: 'operation.release_withdrawn',
        data: { reasons: ['approval_not_granted'], resolution: { status: 'SENT', at } },
      });
    await releasedAt('2026-01-01T00:00:00.000Z');
    // A sender found that release refused; meanwhile another withdrew it and a reviewer released it again.
    await releasedAt('2026-01-01T00:05:00.000Z');
    const late = await withdraw('2026-01-01T00:00:00.000Z');
    expect(late.won).toBe(false);
    expect(await eventsWhere({ executionId, type: 'operation.release_withdrawn' })).toHaveLength(0);
    const [row] = (await db.dataSource.query(`SELECT obligation FROM operations WHERE id = $1`, [operationId])) as {
      obligation: { resolution?: { at: string } };
    }[];
    expect(row.obligation.resolution?.at).toBe('2026-01-01T00:05:00.000Z');
    // The release it found refused: withdrawn.
    expect((await withdraw('2026-01-01T00:05:00.000Z')).won).toBe(true);
    expect(await eventsWhere({ executionId, type: 'operation.release_withdrawn' })).toHaveLength(1);
  });

  it('decide: an approval stamped by the database’s clock, whatever the writer’s clock says', async () => {
    const { operationId } = await newExecutionWithOneOperation();
    const databaseNow = async () =>
      ((await db.dataSource.query(`SELECT clock_timestamp() AS now`)) as { now: Date }[])[0].now.getTime();
    const before = await databaseNow();
    const decided = await transitions.decide(db.dataSource.manager, {
      operation: snapshot(operationId),
      tenantId: 'acme',
      byKey: reviewerKey,
      open: 'approval',
      event: { type: 'approval.decided', data: { decision: 'approve' } },
      // What a writer whose clock is a day off would have put there: replaced by the statement's own reading.
      merge: { approval: { state: 'granted', decided_by: 'key_1', decided_at: '2000-01-01T00:00:00.000Z' } },
      approvalStamp: { validForMs: 900_000 },
    });
    const after = await databaseNow();
    expect(decided.won).toBe(true);
    const [row] = (await db.dataSource.query(`SELECT approval FROM operations WHERE id = $1`, [operationId])) as {
      approval: { state: string; decided_by: string; decided_at: string; expires_at: string };
    }[];
    expect(row.approval).toEqual({
      state: 'granted',
      decided_by: 'key_1',
      decided_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      expires_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
    });
    const decidedAt = Date.parse(row.approval.decided_at);
    // Milliseconds as toISOString writes them (cut, not rounded), within the statement's moment.
    expect(decidedAt).toBeGreaterThanOrEqual(before - 1);
    expect(decidedAt).toBeLessThanOrEqual(after);
    expect(Date.parse(row.approval.expires_at) - decidedAt).toBe(900_000);
  });

  /** Each event's time as the API shows it (toISOString) and to the microsecond, by seq. */
  const eventTimes = async (where: string, id: string) =>
    (await db.dataSource.query(
      `SELECT type, to_status, data, created_at::text AS exact,
              to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at
       FROM events WHERE ${where} = $1 ORDER BY seq`,
      [id],
    )) as { type: string; to_status: string | null; data: Record<string, unknown>; exact: string; at: string }[];

  /** Whether the time `later` is at or after `earlier`, compared in Postgres (to the microsecond). */
  const notBefore = async (later: string, earlier: string) =>
    (
      (await db.dataSource.query(`SELECT $1::timestamptz >= $2::timestamptz AS "inOrder"`, [later, earlier])) as {
        inOrder: boolean;
      }[]
    )[0].inOrder;

  /**
   * Runs `statement` while a holder (a session of its own) has the row `lock` names locked FOR UPDATE: once the
   * statement waits for that row and `meanwhile` has come about (by default the database's clock moving on: observed,
   * not slept), the statement still unanswered, the holder does `whileHeld` in its transaction and commits. Returns
   * what the statement answered, and what `whileHeld` returned.
   */
  async function waitingForHolder<T, H = undefined>(
    lock: { table: string; id: string },
    statement: () => Promise<T>,
    {
      whileHeld,
      meanwhile = databaseClockMovesOn,
    }: { whileHeld?: (holder: QueryRunner) => Promise<H>; meanwhile?: () => Promise<unknown> } = {},
  ): Promise<{ answer: T; held: H | undefined }> {
    return withSessions(db.dataSource, ['holder'], async ({ holder }) => {
      await holder.startTransaction();
      await holder.query(`SELECT 1 FROM ${lock.table} WHERE id = $1 FOR UPDATE`, [lock.id]);
      let answered = false;
      const answering = statement().finally(() => (answered = true));
      await waitForLockWaiter(db.dataSource, { unless: () => answered });
      await meanwhile();
      expect(answered).toBe(false);
      const held = await whileHeld?.(holder);
      await holder.commitTransaction();
      return { answer: await answering, held };
    });
  }

  /**
   * Runs `statement` while a holder (a session of its own) has the execution's row locked FOR UPDATE, until the
   * statement answers or waits for that row; then the holder commits. Returns what the statement answered, and whether
   * it had answered while the row was held (without waiting for it).
   */
  async function answerWhileExecutionHeld<T>(executionId: string, statement: () => Promise<T>) {
    return withSessions(db.dataSource, ['holder'], async ({ holder }) => {
      await holder.startTransaction();
      await holder.query(`SELECT 1 FROM executions WHERE id = $1 FOR UPDATE`, [executionId]);
      let answered = false;
      const answering = statement().finally(() => (answered = true));
      answering.catch(() => undefined);
      await waitForLockWaiter(db.dataSource, { unless: () => answered });
      const answeredWhileHeld = answered;
      await holder.commitTransaction();
      return { answer: await answering, answeredWhileHeld };
    });
  }

  /** What the holder of an operation's row (an annotation) or of its execution's (a move) writes ahead of a waiter. */
  const holderWrites =
    (hold: 'operation' | 'execution', executionId: string, operationId: string) => (holder: QueryRunner) =>
      hold === 'operation'
        ? transitions.annotate(holder.manager, {
            executionId,
            operationId,
            whileStatus: OperationStatus.PREPARED,
            type: 'operation.observed',
          })
        : transitions.executionMoves(holder.manager, { executionId, from: E.CREATED, moves: [{ to: E.VALIDATING }] });

  /** Waits until the database's clock is past the deadline of the execution. */
  const deadlinePasses = (executionId: string) => () =>
    waitFor(
      async () =>
        (
          (await db.dataSource.query(`SELECT clock_timestamp() > deadline_at AS past FROM executions WHERE id = $1`, [
            executionId,
          ])) as { past: boolean }[]
        )[0].past,
      (past) => past,
    );

  it('an execution’s failure is dated by the move that ends it: its at, in the row and the event, is the event’s time', async () => {
    const { executionId } = await newExecutionWithOneOperation();
    // What a writer computed before the statement (its clock, or the database's read earlier): replaced.
    const failure = { code: 'cancelled_by_caller', phase: 'created', at: '2000-01-01T00:00:00.000Z' };
    const moved = await cancelWhileCreated(executionId, failure);
    expect(moved.won).toBe(true);
    const [row] = (await db.dataSource.query(`SELECT failure FROM executions WHERE id = $1`, [executionId])) as {
      failure: { at: string; code: string };
    }[];
    const [, validating, failed] = await eventTimes('execution_id', executionId);
    expect(row.failure).toEqual({ ...failure, at: failed.at });
    expect(failed.data).toEqual({ by: 'key_1', failure: { ...failure, at: failed.at } });
    // One reading of the clock for the statement: its events are one instant too.
    expect(validating.exact).toBe(failed.exact);
    expect(validating.data).toEqual({});
  });

  it('an execution move that waited for the row is dated after the wait: a cancel’s failure is not dated before what the holder wrote', async () => {
    const { executionId } = await newExecutionWithOneOperation();
    const failure = { code: 'cancelled_by_caller', phase: 'created' };
    // The database's clock moves on while the move waits (observed, not slept).
    const { answer: moved } = await waitingForHolder(
      { table: 'executions', id: executionId },
      () => cancelWhileCreated(executionId, failure),
      { whileHeld: (holder) => transitions.annotate(holder.manager, { executionId, type: 'execution.observed' }) },
    );
    expect(moved.won).toBe(true);
    const [held, validating, failed] = (await eventTimes('execution_id', executionId)).slice(-3);
    expect([held.type, validating.to_status, failed.to_status]).toEqual(['execution.observed', E.VALIDATING, E.FAILED]);
    const inOrder = await notBefore(validating.exact, held.exact);
    const [row] = (await db.dataSource.query(`SELECT failure FROM executions WHERE id = $1`, [executionId])) as {
      failure: { at: string };
    }[];
    expect({ inOrder, failedAfterHeld: row.failure.at >= held.at }).toEqual({ inOrder: true, failedAfterHeld: true });
    expect(row.failure.at).toBe(failed.at);
  });

  it('decide: a deny’s decided_at and the time of each event it writes (the decision’s, the move’s) are one instant', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    await transitions.annotate(db.dataSource.manager, {
      executionId,
      operationId,
      whileStatus: OperationStatus.PREPARED,
      patch: { approval: { state: 'requested' } },
      type: 'approval.requested',
    });
    const decided = await decideApproval(operationId, 'deny', {
      approvalStamp: {},
      move: { to: OperationStatus.CANCELLED, reason: TerminalReason.DENIED, eventData: { cause: 'approval_denied' } },
    });
    expect(decided.won).toBe(true);
    const [row] = (await db.dataSource.query(`SELECT approval FROM operations WHERE id = $1`, [operationId])) as {
      approval: { decided_at: string };
    }[];
    const events = (await eventTimes('operation_id', operationId)).filter((e) => e.type !== 'approval.requested');
    expect(events.map((e) => [e.type, e.to_status])).toEqual([
      ['approval.decided', null],
      ['operation.status_changed', 'CANCELLED'],
    ]);
    expect(events.map((e) => e.at)).toEqual([row.approval.decided_at, row.approval.decided_at]);
    expect(events[1].exact).toBe(events[0].exact);
  });

  it('decide: a decision that waited for its operation’s or execution’s row is dated after the wait, after what the holder wrote', async () => {
    // A holder of the row writes an event while the decision waits for it. Dated by a reading of the clock taken before
    // the wait, the decision's events (later in seq) were dated before the holder's, and its grant expired that much
    // sooner than its validity.
    const decidedWhileHeld = async (hold: 'operation' | 'execution') => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      // The database's clock moves on while the decision waits (observed, not slept): a time it read before the
      // wait is then a different millisecond from one read after.
      const { answer: decided } = await waitingForHolder(
        hold === 'operation' ? { table: 'operations', id: operationId } : { table: 'executions', id: executionId },
        () => decideApproval(operationId, 'approve', { approvalStamp: { validForMs: 900_000 } }),
        { whileHeld: holderWrites(hold, executionId, operationId) },
      );
      expect(decided.won).toBe(true);
      const log = await eventTimes('execution_id', executionId);
      const [row] = (await db.dataSource.query(`SELECT approval FROM operations WHERE id = $1`, [operationId])) as {
        approval: { decided_at: string; expires_at: string };
      }[];
      return { log, approval: row.approval };
    };
    for (const hold of ['operation', 'execution'] as const) {
      const { log, approval } = await decidedWhileHeld(hold);
      const [held, decision] = log.slice(-2);
      expect({ hold, types: [held.type, decision.type] }).toEqual({
        hold,
        types: [hold === 'operation' ? 'operation.observed' : 'execution.status_changed', 'approval.decided'],
      });
      // In seq order, in time order: the decision is not dated before the event committed ahead of it.
      const inOrder = await notBefore(decision.exact, held.exact);
      expect({ hold, inOrder, decidedAfterHeld: approval.decided_at >= held.at }).toEqual({
        hold,
        inOrder: true,
        decidedAfterHeld: true,
      });
      expect(approval.decided_at).toBe(decision.at);
      expect(Date.parse(approval.expires_at) - Date.parse(approval.decided_at)).toBe(900_000);
    }
  });

  it('an approval request that waited for its operation’s or execution’s row is stamped after the wait: its requested_at and its event’s time are one instant, after what the holder wrote', async () => {
    // Read before the wait, requested_at (the identifier a decision names) and the approval.requested event (later in
    // seq than the holder's) were dated before the event the holder committed ahead of them.
    const requestedWhileHeld = async (hold: 'operation' | 'execution') => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      const { answer: requesting } = await waitingForHolder(
        hold === 'operation' ? { table: 'operations', id: operationId } : { table: 'executions', id: executionId },
        () =>
          transitions.annotate(db.dataSource.manager, {
            executionId,
            operationId,
            whileStatus: OperationStatus.PREPARED,
            whileApprovalOpen: true,
            patch: { approval: { state: 'requested' } },
            stampApprovalRequest: true,
            type: 'approval.requested',
          }),
        { whileHeld: holderWrites(hold, executionId, operationId) },
      );
      expect(requesting.won).toBe(true);
      const [held, requested] = (await eventTimes('execution_id', executionId)).slice(-2);
      const [row] = (await db.dataSource.query(`SELECT approval FROM operations WHERE id = $1`, [operationId])) as {
        approval: { requested_at: string };
      }[];
      const inOrder = await notBefore(requested.exact, held.exact);
      return {
        hold,
        type: requested.type,
        inOrder,
        requestedAfterHeld: row.approval.requested_at >= held.at,
        oneInstant: row.approval.requested_at === requested.at,
      };
    };
    for (const hold of ['operation', 'execution'] as const) {
      expect(await requestedWhileHeld(hold)).toEqual({
        hold,
        type: 'approval.requested',
        inOrder: true,
        requestedAfterHeld: true,
        oneInstant: true,
      });
    }
  });

  it('a move that waited for its execution’s row reads the clock it writes (sent_at, acknowledged_at, next_check_at) after the wait, after what the holder wrote', async () => {
    // Read in the SET before the statement waited for the execution's row, a send's sent_at was dated before the event
    // the holder committed ahead of the SENT in seq, and the window counted from it (the grace before a call, the
    // settle window after it) was shorter by the wait.
    const movedWhileHeld = async (
      move: (operationId: string) => Promise<TransitionResult>,
      prepare: (executionId: string, operationId: string) => Promise<unknown>,
      column: 'sent_at' | 'acknowledged_at' | 'next_check_at',
    ) => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      await prepare(executionId, operationId);
      const { answer: moving } = await waitingForHolder(
        { table: 'executions', id: executionId },
        () => move(operationId),
        { whileHeld: (holder) => transitions.annotate(holder.manager, { executionId, type: 'execution.observed' }) },
      );
      expect(moving.won).toBe(true);
      const held = (await eventTimes('execution_id', executionId)).find((e) => e.type === 'execution.observed')!;
      const [{ after }] = (await db.dataSource.query(
        `SELECT ${column} >= $2::timestamptz AS after FROM operations WHERE id = $1`,
        [operationId, held.exact],
      )) as { after: boolean }[];
      return { column, after };
    };
    const inStatus = (status: string) => (executionId: string, operationId: string) =>
      db.dataSource.query(
        `WITH e AS (UPDATE executions SET status = 'running' WHERE id = $2)
         UPDATE operations SET status = $3, attempt = 1 WHERE id = $1`,
        [operationId, executionId, status],
      );
    const inconclusive = (operationId: string) =>
      transitions.operation(db.dataSource.manager, {
        operation: { ...snapshot(operationId), status: OperationStatus.RECONCILING, attempt: 1 },
        to: OperationStatus.UNKNOWN,
        patch: { check_count: 1, next_check_at: new DatabaseNowPlus(0) },
      });
    for (const [move, prepare, column] of [
      [dispatchSent, (executionId: string) => running(executionId), 'sent_at'],
      [acknowledgeSent, inStatus('SENT'), 'acknowledged_at'],
      [inconclusive, inStatus('RECONCILING'), 'next_check_at'],
    ] as const) {
      expect(await movedWhileHeld(move, prepare, column)).toEqual({ column, after: true });
    }
  });

  it('a statement that waited for a holder that only locked its rows (wrote nothing) reads its clock after the holder let go: a SENT’s sent_at, a decision’s, an execution move’s time', async () => {
    // Read in the target list of the SELECT that takes the locks, the clock was read below the locking, before the wait:
    // re-read only when the holder had changed the row (a re-check of the updated row), so after a holder that only
    // locked it (FOR UPDATE, FOR SHARE) and committed, the statement was dated before that commit.
    const afterLockOnlyHolder = async (
      lock: { table: 'operations' | 'executions'; id: string },
      write: () => Promise<TransitionResult>,
      written: string,
      params: unknown[],
    ) => {
      const { answer: writing, held: letGo } = await waitingForHolder(lock, write, {
        // The holder's last reading of the clock before it lets go: the statement's own is after it.
        whileHeld: async (holder) =>
          ((await holder.query(`SELECT clock_timestamp()::text AS at`)) as { at: string }[])[0].at,
      });
      expect(writing.won).toBe(true);
      const [{ after }] = (await db.dataSource.query(`SELECT (${written}) >= $1::timestamptz AS after`, [
        letGo,
        ...params,
      ])) as { after: boolean }[];
      return after;
    };

    const after: Record<string, boolean> = {};
    // A SENT (its sent_at) waiting for a holder of its execution's row.
    {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      await running(executionId);
      const sent = await afterLockOnlyHolder(
        { table: 'executions', id: executionId },
        () => dispatchSent(operationId),
        `SELECT sent_at FROM operations WHERE id = $2`,
        [operationId],
      );
      after.sent = sent;
    }
    // A decision (its event's time, its decided_at) waiting for a holder of its operation's or execution's row.
    for (const table of ['operations', 'executions'] as const) {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      const decided = await afterLockOnlyHolder(
        { table, id: table === 'operations' ? operationId : executionId },
        () => decideApproval(operationId, 'approve', { approvalStamp: { validForMs: 900_000 } }),
        `SELECT created_at FROM events WHERE operation_id = $2 AND type = 'approval.decided'`,
        [operationId],
      );
      after[`decided, ${table} held`] = decided;
    }
    // An execution move (its event's time, its failure's at) waiting for a holder of the execution's row.
    {
      const { executionId } = await newExecutionWithOneOperation();
      const failure = { code: 'cancelled_by_caller', phase: 'created' };
      const moved = await afterLockOnlyHolder(
        { table: 'executions', id: executionId },
        () => cancelWhileCreated(executionId, failure),
        `SELECT created_at FROM events WHERE execution_id = $2 AND to_status = $3`,
        [executionId, E.VALIDATING],
      );
      after.executionMove = moved;
    }
    expect(after).toEqual({
      sent: true,
      'decided, operations held': true,
      'decided, executions held': true,
      executionMove: true,
    });
  });

  it('a SENT that waited for its execution’s row past its grant’s expiry or its deadline writes nothing: its guard judges the clock its sent_at is written from', async () => {
    // The guard read the clock before the statement waited for the execution's row, sent_at after it: a SENT judged
    // before the expiry (or deadline) and let through after it committed with sent_at past it — a record of a send
    // after its approval expired, or after its deadline.
    const sentWhileHeldPast = async (past: 'grant' | 'deadline' | 'release deadline') => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      const release = past === 'release deadline';
      await db.dataSource.query(
        `WITH e AS (UPDATE executions SET status = 'running',
                      deadline_at = clock_timestamp() + CASE WHEN $2 THEN interval '3 seconds' ELSE interval '1 hour' END
                     WHERE id = $3)
         UPDATE operations SET approval = CASE WHEN $1 THEN jsonb_build_object('state', 'granted', 'expires_at',
                  clock_timestamp() + interval '3 seconds') END,
                status = CASE WHEN $4 THEN 'MANUAL_REVIEW' ELSE status END,
                terminal_reason = CASE WHEN $4 THEN 'KNOWLEDGE_CONFLICT' ELSE terminal_reason END,
                obligation = CASE WHEN $4 THEN '{"resolution": {"status": "SENT"}}'::jsonb ELSE obligation END
          WHERE id = $5`,
        [past === 'grant', past !== 'grant', executionId, release, operationId],
      );
      const expiry = `(SELECT CASE WHEN $2 THEN (o.approval->>'expires_at')::timestamptz ELSE e.deadline_at END
                         FROM operations o JOIN executions e ON e.id = o.execution_id WHERE o.id = $1)`;
      return withSessions(db.dataSource, ['holder'], async ({ holder }) => {
        await holder.startTransaction();
        await holder.query(`SELECT 1 FROM executions WHERE id = $1 FOR UPDATE`, [executionId]);
        let answered = false;
        const sending = transitions
          .operation(db.dataSource.manager, {
            operation: { ...snapshot(operationId), ...(release && { status: OperationStatus.MANUAL_REVIEW }) },
            to: OperationStatus.SENT,
            actor: release ? 'human' : 'system',
            bumpAttempt: true,
            sendGuard: release ? { kind: 'release' } : dispatchGuard,
            patch: { sent_at: 'now' },
          })
          .finally(() => (answered = true));
        await waitForLockWaiter(db.dataSource, { unless: () => answered });
        // Waiting, so its guard let it through before the expiry (a SENT judged after it answers lost at once).
        expect({ past, answered }).toEqual({ past, answered: false });
        // The database's clock passes the expiry while the SENT waits (observed, not slept).
        await waitFor(
          async () =>
            (
              (await db.dataSource.query(`SELECT clock_timestamp() > ${expiry} AS passed`, [
                operationId,
                past === 'grant',
              ])) as { passed: boolean }[]
            )[0].passed,
          (passed) => passed,
        );
        // The holder writes to the execution (an event), as a writer holding it does.
        await transitions.annotate(holder.manager, { executionId, type: 'execution.observed' });
        await holder.commitTransaction();
        const sent = await sending;
        const [row] = (await db.dataSource.query(
          `SELECT status, sent_at IS NOT NULL AND sent_at >= ${expiry} AS "sentPast" FROM operations WHERE id = $1`,
          [operationId, past === 'grant'],
        )) as { status: string; sentPast: boolean | null }[];
        const sentEvents = await eventsWhere({ executionId, type: 'operation.status_changed', toStatus: 'SENT' });
        // What the sender then reads as the refusal, as for a grant expired or a deadline passed before the SENT.
        const refusals = await sendRefusals(
          db.dataSource.manager,
          operationId,
          release ? { kind: 'release' } : dispatchGuard,
        );
        return {
          past,
          won: sent.won,
          status: row.status,
          sentPast: row.sentPast,
          sentEvents: sentEvents.length,
          refusals,
        };
      });
    };
    for (const past of ['grant', 'deadline', 'release deadline'] as const) {
      expect(await sentWhileHeldPast(past)).toEqual({
        past,
        won: false,
        status: past === 'release deadline' ? 'MANUAL_REVIEW' : 'PREPARED',
        sentPast: false,
        sentEvents: 0,
        refusals: [past === 'grant' ? 'approval_not_granted' : 'execution_ended'],
      });
    }
  });

  it('a move that reads the clock and whose compare-and-set is already lost takes no row lock: it answers lost without waiting for a holder of the execution', async () => {
    // The stamp taken after the locks locked the operation's and the execution's rows by id alone: a SENT whose
    // status no longer matched (a cancel, another worker's send) waited for a writer holding the execution, and held
    // both rows to its transaction's end, though it wrote nothing.
    const { executionId, operationId } = await newExecutionWithOneOperation();
    await db.dataSource.query(
      `WITH e AS (UPDATE executions SET status = 'running' WHERE id = $2)
       UPDATE operations SET status = 'ACKNOWLEDGED', attempt = 1 WHERE id = $1`,
      [operationId, executionId],
    );
    const lostMoves = [() => dispatchSent(operationId), () => acknowledgeSent(operationId)];
    for (const lost of lostMoves) {
      const { answer: moving, answeredWhileHeld } = await answerWhileExecutionHeld(executionId, lost);
      expect(moving.won).toBe(false);
      expect(answeredWhileHeld).toBe(true);
    }
  });

  it('a SENT its guard refuses in its snapshot (execution not running, deadline or grant passed) takes no row lock: it answers lost without waiting for a holder of the execution', async () => {
    // The guard judges the clock at the stamp (taken with the rows' locks) only once every other condition, and the
    // clock now, hold: judged at the stamp first, or beside a condition the planner puts after it, a SENT refused
    // anyway waited for the holder and held both rows to its transaction's end.
    const refusedBy: Record<string, string> = {
      'execution not running': `UPDATE executions SET status = 'planning' WHERE id = $1`,
      'deadline passed': `UPDATE executions SET status = 'running', deadline_at = clock_timestamp() - interval '1 second'
                           WHERE id = $1`,
      'grant expired': `WITH e AS (UPDATE executions SET status = 'running' WHERE id = $1)
                        UPDATE operations SET approval = jsonb_build_object('state', 'granted', 'expires_at',
                                 clock_timestamp() - interval '1 second')
                         WHERE execution_id = $1`,
    };
    for (const [refused, sql] of Object.entries(refusedBy)) {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      await db.dataSource.query(sql, [executionId]);
      const { answer: sending, answeredWhileHeld } = await answerWhileExecutionHeld(executionId, () =>
        dispatchSent(operationId),
      );
      expect({ refused, won: sending.won, answeredWhileHeld }).toEqual({
        refused,
        won: false,
        answeredWhileHeld: true,
      });
    }
  });

  it('decide: an approval naming the request it answers is written only while that request is the one on the row', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const requested = (at: string) =>
      db.dataSource.query(
        `UPDATE operations SET approval = jsonb_build_object('state', 'requested', 'requested_at', $2::text)
          WHERE id = $1`,
        [operationId, at],
      );
    const approve = (requestedAt: string) => decideApproval(operationId, 'approve', { whileRequestedAt: requestedAt });
    // The page showed the first request; the dispatcher has since withdrawn a grant of it and asked again.
    await requested('2026-01-01T00:00:00.000Z');
    await requested('2026-01-01T00:05:00.000Z');
    expect((await approve('2026-01-01T00:00:00.000Z')).won).toBe(false);
    expect(await eventsWhere({ executionId, type: 'approval.decided' })).toHaveLength(0);
    const [row] = (await db.dataSource.query(`SELECT approval FROM operations WHERE id = $1`, [operationId])) as {
      approval: { state: string };
    }[];
    expect(row.approval.state).toBe('requested');
    // The request as it stands: written.
    expect((await approve('2026-01-01T00:05:00.000Z')).won).toBe(true);
    expect(await eventsWhere({ executionId, type: 'approval.decided' })).toHaveLength(1);
  });

  it('decide: a release is written only while its execution can still carry it out, judged by the statement', async () => {
    // The send guard's own condition for a release: not cancelled, expired or failed; before its deadline unless it
    // completed. Each case is set on the rows just before the statement, as a change committed after a caller's read.
    const cases: { status: string; deadlinePassed: boolean; written: boolean }[] = [
      { status: 'running', deadlinePassed: false, written: true },
      { status: 'running', deadlinePassed: true, written: false },
      { status: 'completed', deadlinePassed: true, written: true },
      { status: 'cancelled', deadlinePassed: false, written: false },
      { status: 'expired', deadlinePassed: true, written: false },
      { status: 'failed', deadlinePassed: false, written: false },
    ];
    const outcomes = [];
    for (const { status, deadlinePassed } of cases) {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      await db.dataSource.query(
        `UPDATE operations SET status = 'MANUAL_REVIEW', terminal_reason = 'KNOWLEDGE_CONFLICT' WHERE id = $1`,
        [operationId],
      );
      await db.dataSource.query(
        `UPDATE executions SET status = $2,
                deadline_at = clock_timestamp() + CASE WHEN $3 THEN interval '-1 minute' ELSE interval '1 hour' END
          WHERE id = $1`,
        [executionId, status, deadlinePassed],
      );
      const released = await releaseHeld(operationId);
      const resolved = await eventsWhere({ executionId, type: 'operation.resolved' });
      outcomes.push({ status, deadlinePassed, written: released.won && resolved.length === 1 });
      if (!released.won) expect(resolved).toHaveLength(0);
    }
    expect(outcomes).toEqual(cases);
  });

  it('decide: a decision naming the versions it was made on is written only while the operation is at one of them', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const versionNow = async () =>
      (await findOperationWithVersion(db.dataSource.manager, operationId, 'acme'))!.version;
    const shown = await versionNow();
    // Neither an automatic re-check that found nothing new nor an escalation changes what a person decides on.
    await db.dataSource.query(
      `UPDATE operations SET obligation = '{"reason": "X", "rechecks": 3, "escalated_at": "2026-01-01"}' WHERE id = $1`,
      [operationId],
    );
    const unchanged = await versionNow();
    await db.dataSource.query(`UPDATE operations SET obligation = '{"reason": "X"}' WHERE id = $1`, [operationId]);
    expect(await versionNow()).toBe(unchanged);
    // Approval asked for since the page was read: another version.
    await db.dataSource.query(`UPDATE operations SET approval = '{"state": "requested"}' WHERE id = $1`, [operationId]);
    const current = await versionNow();
    expect(current).not.toBe(shown);
    const decideOn = (versions: string[]) => decideApproval(operationId, 'deny', { whileVersionIn: versions });
    expect((await decideOn([shown])).won).toBe(false);
    expect(await eventsWhere({ executionId, type: 'approval.decided' })).toHaveLength(0);
    expect(await versionNow()).toBe(current);
    expect((await decideOn([shown, current])).won).toBe(true);
    expect(await eventsWhere({ executionId, type: 'approval.decided' })).toHaveLength(1);
    expect(await versionNow()).not.toBe(current);
  });

  it('decide: an approve that waits for a row it share-locks while its execution\u2019s deadline passes is not written', async () => {
    // The clock is read after every wait (clockAfterWaits): judged first by the planner's order, the deadline was still
    // ahead when the statement started, and the approval was written after it had passed.
    const deadlinePassedWhileWaiting = async (
      executionId: string,
      lock: { table: string; id: string },
      decide: () => Promise<{ won: boolean }>,
    ) => {
      await db.dataSource.query(
        `UPDATE executions SET deadline_at = clock_timestamp() + interval '1500 milliseconds' WHERE id = $1`,
        [executionId],
      );
      return (await waitingForHolder(lock, decide, { meanwhile: deadlinePasses(executionId) })).answer;
    };
    // On a version: a link of its chain of retries held by a writer that changes nothing the version covers.
    const { original, retry, shown } = await retryOfFailed();
    const onVersion = await deadlinePassedWhileWaiting(
      retry.executionId,
      { table: 'operations', id: original.operationId },
      () => decideApproval(retry.operationId, 'approve', { whileBeforeDeadline: true, whileVersionIn: [shown] }),
    );
    expect(onVersion.won).toBe(false);
    expect(await eventsWhere({ executionId: retry.executionId, type: 'approval.decided' })).toHaveLength(0);
    // Without one: the reviewer's key row, held by a writer that leaves it unrevoked.
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const plain = await deadlinePassedWhileWaiting(executionId, { table: 'api_keys', id: reviewerKey }, () =>
      decideApproval(operationId, 'approve', { whileBeforeDeadline: true }),
    );
    expect(plain.won).toBe(false);
    expect(await eventsWhere({ executionId, type: 'approval.decided' })).toHaveLength(0);
  });

  it('decide: a grant or a release that waited for its execution’s row while the deadline passed is not written: the deadline is judged at the stamp its times are written from', async () => {
    // The deadline was judged by the clock when the UPDATE matched the row, before the stamp waited for the execution's
    // row; a holder that only locked it (changed nothing, so nothing re-checked the condition) let a grant or a release
    // through with its decided_at, its resolution's at, past the deadline.
    const writtenAfterDeadline = async (
      decide: (executionId: string, operationId: string) => Promise<TransitionResult>,
    ) => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      await db.dataSource.query(
        `WITH e AS (UPDATE executions SET status = 'running', deadline_at = clock_timestamp() + interval '1500 milliseconds'
                     WHERE id = $2)
         UPDATE operations SET status = 'MANUAL_REVIEW', terminal_reason = 'KNOWLEDGE_CONFLICT' WHERE id = $1`,
        [operationId, executionId],
      );
      const { answer: decided } = await waitingForHolder(
        { table: 'executions', id: executionId },
        () => decide(executionId, operationId),
        { meanwhile: deadlinePasses(executionId) },
      );
      const events = await db.dataSource.query(`SELECT 1 FROM events WHERE operation_id = $1`, [operationId]);
      return { won: decided.won, events: (events as unknown[]).length };
    };
    const grant = await writtenAfterDeadline(async (_executionId, operationId) => {
      await db.dataSource.query(
        `UPDATE operations SET status = 'PREPARED', terminal_reason = NULL, approval = '{"state": "requested"}'
          WHERE id = $1`,
        [operationId],
      );
      return decideApproval(operationId, 'approve', {
        approvalStamp: { validForMs: 900_000 },
        whileBeforeDeadline: true,
      });
    });
    const release = await writtenAfterDeadline((_executionId, operationId) => releaseHeld(operationId));
    expect({ grant, release }).toEqual({ grant: { won: false, events: 0 }, release: { won: false, events: 0 } });
  });

  it('decide: a decision with versions it may not be made on (If-None-Match) is refused at one, also one reached while it waited', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const versionNow = async () =>
      (await findOperationWithVersion(db.dataSource.manager, operationId, 'acme'))!.version;
    const first = await versionNow();
    const decideUnless = (versions: string[]) => decideApproval(operationId, 'deny', { whileVersionNotIn: versions });
    expect((await decideUnless([first])).won).toBe(false);
    expect(await eventsWhere({ executionId, type: 'approval.decided' })).toHaveLength(0);
    // The operation reaches the version named while the decision waits for its row (held, as another writer holds it):
    // a read before the statement saw another version; the statement judges the row it locks.
    await withSessions(db.dataSource, ['holder'], async ({ holder }) => {
      await holder.startTransaction();
      await holder.query(`UPDATE operations SET approval = '{"state": "requested"}' WHERE id = $1`, [operationId]);
      const [{ version: reached }] = (await holder.query(
        `SELECT ${operationVersionOf('t')} AS version FROM operations t WHERE t.id = $1`,
        [operationId],
      )) as { version: string }[];
      expect(reached).not.toBe(first);
      expect(await versionNow()).toBe(first);
      let answered = false;
      const deciding = decideUnless([reached]).finally(() => (answered = true));
      await waitForLockWaiter(db.dataSource, { unless: () => answered });
      await holder.commitTransaction();
      expect((await deciding).won).toBe(false);
      expect(await eventsWhere({ executionId, type: 'approval.decided' })).toHaveLength(0);
      // A re-check asked for on the same condition is not locked at that version either; at another one it is.
      expect(await lockOperationAtVersion(db.dataSource.manager, 'acme', operationId, undefined, [reached])).toBe(
        false,
      );
      expect(await lockOperationAtVersion(db.dataSource.manager, 'acme', operationId, undefined, [first])).toBe(true);
    });
    expect((await decideUnless([first])).won).toBe(true);
    expect(await eventsWhere({ executionId, type: 'approval.decided' })).toHaveLength(1);
  });

  it('decide: a decision naming a version is not written once the tenant’s approval policy changed what it does', async () => {
    // Where the operation needs approval only if the tenant's policy says so (none on record, the agent asked for none),
    // the policy decides what a decision does: whether an approve or a deny is taken at all, whether a release also
    // grants the approval. A page read before an admin added a rule showed none of that.
    const setApprovalPolicy = (settings: Record<string, unknown>) =>
      db.dataSource.query(`UPDATE tenants SET settings = coalesce(settings, '{}'::jsonb) || $2::jsonb WHERE id = $1`, [
        'acme',
        JSON.stringify(settings),
      ]);
    const versionOf = async (operationId: string) =>
      (await findOperationWithVersion(db.dataSource.manager, operationId, 'acme'))!.version;
    const { executionId, operationId } = await newExecutionWithOneOperation();
    // Asked for on record, or by the agent, or sent already: the policy changes nothing its decisions do.
    const requested = await newExecutionWithOneOperation();
    await db.dataSource.query(`UPDATE operations SET approval = '{"state": "requested"}' WHERE id = $1`, [
      requested.operationId,
    ]);
    const byAgent = await newExecutionWithOneOperation();
    await db.dataSource.query(`UPDATE operations SET requires_approval = true WHERE id = $1`, [byAgent.operationId]);
    const sentHold = await newExecutionWithOneOperation();
    await db.dataSource.query(`UPDATE operations SET status = 'MANUAL_REVIEW', attempt = 1 WHERE id = $1`, [
      sentHold.operationId,
    ]);
    const unaffected = [requested.operationId, byAgent.operationId, sentHold.operationId];
    try {
      const shown = await versionOf(operationId);
      const shownUnaffected = await Promise.all(unaffected.map(versionOf));
      // A change of the policy that is not about approval (who owns obligations) changes no version.
      await setApprovalPolicy({ obligationOwner: 'someone-else' });
      expect(await versionOf(operationId)).toBe(shown);
      await setApprovalPolicy({ approvalRules: [{ connector: 'sandbox.payments', amount_above: 10 }] });
      const current = await versionOf(operationId);
      expect(current).not.toBe(shown);
      expect(await Promise.all(unaffected.map(versionOf))).toEqual(shownUnaffected);
      const decideOn = (versions: string[]) => decideApproval(operationId, 'deny', { whileVersionIn: versions });
      expect((await decideOn([shown])).won).toBe(false);
      expect(await eventsWhere({ executionId, type: 'approval.decided' })).toHaveLength(0);
      expect((await decideOn([current])).won).toBe(true);
      expect(await eventsWhere({ executionId, type: 'approval.decided' })).toHaveLength(1);
    } finally {
      await db.dataSource.query(
        `UPDATE tenants SET settings = settings - 'approvalRules' - 'obligationOwner' WHERE id = $1`,
        ['acme'],
      );
    }
  });

  it('decide: a decision on a version the operation came back to (its approval policy changed and changed back) is written', async () => {
    // The version is a digest of what the decision is taken on as it is now, not of its history: once the policy is
    // what the page showed again, the decision means what its author saw, and it is written.
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const versionOf = async () => (await findOperationWithVersion(db.dataSource.manager, operationId, 'acme'))!.version;
    const shown = await versionOf();
    try {
      await db.dataSource.query(
        `UPDATE tenants SET settings = coalesce(settings, '{}'::jsonb) || '{"approvalRules": [{"connector": "sandbox.payments"}]}' WHERE id = 'acme'`,
      );
      expect(await versionOf()).not.toBe(shown);
    } finally {
      await db.dataSource.query(`UPDATE tenants SET settings = settings - 'approvalRules' WHERE id = 'acme'`);
    }
    expect(await versionOf()).toBe(shown);
    expect((await decideApproval(operationId, 'deny', { whileVersionIn: [shown] })).won).toBe(true);
    expect(await eventsWhere({ executionId, type: 'approval.decided' })).toHaveLength(1);
  });

  /**
   * The late 2xx of `originalId` (its acknowledged_at), written by `other` in a transaction of its own (`seen` runs in it
   * before it commits) while a statement waits for a held row. Returns once the refutation has answered or waits on a
   * lock too (two sessions then wait on locks), with its promise and whether it has answered.
   */
  async function refutedMeanwhile(other: QueryRunner, originalId: string, seen?: () => Promise<void>) {
    let refuted = false;
    const refuting = (async () => {
      await other.startTransaction();
      await other.query(`UPDATE operations SET acknowledged_at = now() WHERE id = $1`, [originalId]);
      await seen?.();
      await other.commitTransaction();
    })().finally(() => (refuted = true));
    await waitFor(
      async () => refuted || (await lockWaiters(db.dataSource)) >= 2,
      (done) => done,
    );
    return { refuting, refuted: () => refuted };
  }

  it('decide: a decision naming a version is not written after the FAILED its operation retries was refuted meanwhile', async () => {
    // The version a person decides on includes "the FAILED this retries was contradicted since" (retry_refuted), read
    // from another row. The decision's statement judges its conditions, then waits for its own row (held here, as a
    // sweep or another reviewer holds it); meanwhile the original's late 2xx is written and committed in a session of
    // its own. The chain is share-locked as the decision's conditions are judged, before it waits for its row: the
    // refutation waits for the decision, which is written, and the refutation is written after it.
    const { original, retry, shown } = await retryOfFailed();
    await withSessions(db.dataSource, ['holder', 'other'], async ({ holder, other }) => {
      await holder.startTransaction();
      await holder.query(`SELECT 1 FROM operations WHERE id = $1 FOR UPDATE`, [retry.operationId]);
      let answered = false;
      const deciding = decideApproval(retry.operationId, 'deny', { whileVersionIn: [shown] }).finally(
        () => (answered = true),
      );
      await waitForLockWaiter(db.dataSource, { unless: () => answered });
      let refutationSawDecision: boolean | null = null;
      // The refutation is answered at once, or waits for the decision's statement.
      const { refuting } = await refutedMeanwhile(other, original.operationId, async () => {
        // Whether the decision had committed when the refutation was written, as the refutation's transaction sees it.
        const [{ state }] = (await other.query(`SELECT approval->>'state' AS state FROM operations WHERE id = $1`, [
          retry.operationId,
        ])) as { state: string | null }[];
        refutationSawDecision = state === 'denied';
      });
      await holder.commitTransaction();
      const result = await deciding;
      await refuting;
      // The decision's statement share-locked the chain before it waited for its row: the refutation waited for it.
      expect(result.won).toBe(true);
      expect(refutationSawDecision).toBe(true);
    });
  });

  it('decide: a decision naming the version before a refutation committed is refused, nothing written', async () => {
    const { original, retry, shown } = await retryOfFailed();
    await db.dataSource.query(`UPDATE operations SET acknowledged_at = now() WHERE id = $1`, [original.operationId]);
    const result = await decideApproval(retry.operationId, 'deny', { whileVersionIn: [shown] });
    expect(result.won).toBe(false);
    expect(await eventsWhere({ executionId: retry.executionId, type: 'approval.decided' })).toHaveLength(0);
  });

  it('re-check request: the version it is made on is judged on the chain under lock, so a refutation waits for it', async () => {
    // lockOperationAtVersion (a re-check asked for under If-Match) share-locks the operation while it is at the
    // version named. Its row is held (FOR UPDATE, as a sweep holds it) while it waits; the original's late 2xx is
    // written meanwhile in a session of its own. Judged from its snapshot, the request passed after that refutation
    // committed; on the chain under lock, the refutation waits for the request's transaction.
    const { original, retry, shown } = await retryOfFailed();
    await withSessions(db.dataSource, ['holder', 'request', 'other'], async ({ holder, request, other }) => {
      await holder.startTransaction();
      await holder.query(`SELECT 1 FROM operations WHERE id = $1 FOR UPDATE`, [retry.operationId]);
      await request.startTransaction();
      let answered = false;
      const locking = lockOperationAtVersion(request.manager, 'acme', retry.operationId, [shown]).finally(
        () => (answered = true),
      );
      await waitForLockWaiter(db.dataSource, { unless: () => answered });
      // The refutation is answered at once, or waits for the request's statement.
      const { refuting, refuted } = await refutedMeanwhile(other, original.operationId);
      await holder.commitTransaction();
      expect(await locking).toBe(true);
      // Locked at the version named: the refutation has not committed, and waits until the request's transaction ends.
      expect(refuted()).toBe(false);
      await waitForLockWaiter(db.dataSource, { statementLike: '%acknowledged_at%', unless: refuted });
      expect(refuted()).toBe(false);
      await request.commitTransaction();
      await refuting;
    });
  });

  it('re-check request: with whileHeld, locked only while held for a reviewer with no resolution recorded', async () => {
    const { operationId } = await newExecutionWithOneOperation();
    const lockHeld = () =>
      lockOperationAtVersion(db.dataSource.manager, 'acme', operationId, undefined, undefined, true);
    const set = (assignments: string) =>
      db.dataSource.query(`UPDATE operations SET ${assignments} WHERE id = $1`, [operationId]);
    // PREPARED: not held.
    expect(await lockHeld()).toBe(false);
    await set(`status = 'MANUAL_REVIEW', attempt = 1, terminal_reason = 'SOURCE_UNREACHABLE'`);
    expect(await lockHeld()).toBe(true);
    // A resolution recorded on the hold (a release waiting for the dispatcher stays MANUAL_REVIEW): decided.
    await set(`obligation = '{"resolution": {"status": "SENT", "by": "key_x"}}'::jsonb`);
    expect(await lockHeld()).toBe(false);
    await set(`obligation = NULL, status = 'VERIFIED', terminal_reason = NULL`);
    expect(await lockHeld()).toBe(false);
    // Without it, as before: the version conditions alone.
    expect(await lockOperationAtVersion(db.dataSource.manager, 'acme', operationId, undefined)).toBe(true);
  });

  it('decide: of many racing decisions one is written, with its event and the move it makes, in one statement', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const decide = (i: number) =>
      transitions.decide(db.dataSource.manager, {
        operation: snapshot(operationId),
        tenantId: 'acme',
        byKey: reviewerKey,
        open: 'approval',
        event: { type: 'approval.decided', data: { decision: i % 2 ? 'deny' : 'approve' } },
        merge: { approval: { state: i % 2 ? 'denied' : 'granted', decided_by: `key_${i}` } },
        move: i % 2 ? { to: OperationStatus.CANCELLED, reason: TerminalReason.DENIED } : undefined,
      });
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => decide(i)));
    expect(results.filter((r) => r.won)).toHaveLength(1);
    const events = await eventsWhere({ executionId });
    const decided = events.filter((e) => e.type === 'approval.decided');
    expect(decided).toHaveLength(1);
    const [row] = (await db.dataSource.query(`SELECT status, approval FROM operations WHERE id = $1`, [
      operationId,
    ])) as { status: string; approval: { state: string } }[];
    // The row agrees with the one decision written: a deny moved it to CANCELLED (its event right after), a grant not.
    const denied = (decided[0].data as { decision: string }).decision === 'deny';
    expect(row.approval.state).toBe(denied ? 'denied' : 'granted');
    expect(row.status).toBe(denied ? 'CANCELLED' : 'PREPARED');
    const moves = events.filter((e) => e.type === 'operation.status_changed');
    expect(moves).toHaveLength(denied ? 1 : 0);
    if (denied) expect(Number(moves[0].seq)).toBe(Number(decided[0].seq) + 1);
    // Another tenant's decision never lands, even with the right id.
    expect(
      (
        await transitions.decide(db.dataSource.manager, {
          operation: snapshot(operationId),
          tenantId: 'other',
          byKey: reviewerKey,
          open: 'resolution',
          event: { type: 'operation.resolved', data: {} },
          merge: { obligation: { resolution: { status: 'SENT' } } },
        })
      ).won,
    ).toBe(false);
  });

  it('decide: a stamped decision that loses on the row as it stands locks nothing: it answers while another holds the operation’s and the execution’s rows', async () => {
    // The stamp (which locks both rows) is read only for a row that matched the decision's compare-and-set: one already
    // decided, or on another tenant, neither waits for a holder nor holds the rows after.
    const { executionId, operationId } = await newExecutionWithOneOperation();
    expect((await decideApproval(operationId, 'approve', { approvalStamp: { validForMs: 900_000 } })).won).toBe(true);
    const late = await newExecutionWithOneOperation();
    await db.dataSource.query(
      `WITH e AS (UPDATE executions SET status = 'running', deadline_at = clock_timestamp() - interval '1 second'
                   WHERE id = $2)
       UPDATE operations SET approval = '{"state": "requested"}' WHERE id = $1`,
      [late.operationId, late.executionId],
    );
    const held = await newExecutionWithOneOperation();
    await db.dataSource.query(
      `WITH e AS (UPDATE executions SET status = 'running' WHERE id = $2)
       UPDATE operations SET status = 'MANUAL_REVIEW', terminal_reason = 'KNOWLEDGE_CONFLICT' WHERE id = $1`,
      [held.operationId, held.executionId],
    );
    const lost = await withSessions(db.dataSource, ['holder'], async ({ holder }) => {
      await holder.startTransaction();
      for (const { operationId: op, executionId: ex } of [{ operationId, executionId }, late, held]) {
        await holder.query(`SELECT 1 FROM operations WHERE id = $1 FOR UPDATE`, [op]);
        await holder.query(`SELECT 1 FROM executions WHERE id = $1 FOR UPDATE`, [ex]);
      }
      const again = await decideApproval(operationId, 'deny', {
        approvalStamp: {},
        move: { to: OperationStatus.CANCELLED, reason: TerminalReason.DENIED },
      });
      const elsewhere = await transitions.decide(db.dataSource.manager, {
        operation: snapshot(operationId),
        tenantId: 'globex',
        byKey: reviewerKey,
        open: 'resolution',
        event: { type: 'operation.resolved', data: {} },
        merge: {},
        resolutionStamp: true,
      });
      // A grant judged at its stamp against the deadline: already decided, or its deadline already passed in its
      // snapshot, it reads no stamp either.
      const againGranted = await decideApproval(operationId, 'approve', {
        approvalStamp: { validForMs: 900_000 },
        whileBeforeDeadline: true,
      });
      const pastDeadline = await decideApproval(late.operationId, 'approve', {
        approvalStamp: { validForMs: 900_000 },
        whileBeforeDeadline: true,
      });
      // A release judged at its stamp, whose count of investigations seen is not the row's.
      const releaseOnOld = await releaseHeld(held.operationId, { investigationsSeen: 1 });
      await holder.commitTransaction();
      return [again.won, elsewhere.won, againGranted.won, pastDeadline.won, releaseOnOld.won];
    });
    expect(lost).toEqual([false, false, false, false, false]);
  });

  it('decide: a stamped decision waiting for its operation’s row holds nothing of its execution’s (operation first)', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const probed = await withSessions(db.dataSource, ['holder', 'probe'], async ({ holder, probe }) => {
      await holder.startTransaction();
      await holder.query(`SELECT 1 FROM operations WHERE id = $1 FOR UPDATE`, [operationId]);
      let answered = false;
      const deciding = decideApproval(operationId, 'approve', { approvalStamp: { validForMs: 900_000 } }).finally(
        () => (answered = true),
      );
      await waitForLockWaiter(db.dataSource, { unless: () => answered });
      expect(answered).toBe(false);
      await probe.startTransaction();
      const free = await probe.query(`SELECT 1 FROM executions WHERE id = $1 FOR UPDATE NOWAIT`, [executionId]).then(
        () => 'free',
        (error: { code?: string }) => error.code,
      );
      await probe.rollbackTransaction();
      await holder.commitTransaction();
      expect((await deciding).won).toBe(true);
      return free;
    });
    expect(probed).toBe('free');
  });

  it('decide: a stamped decision waiting for its execution’s row holds its operation’s row, and a cancel (operations, then execution) run beside it in either order deadlocks with neither', async () => {
    // The stamp locks the operation's row, then the execution's (FOR NO KEY UPDATE OF so, se): with only the execution's
    // row held elsewhere (a writer of the execution alone, not yet committed), the decision waits holding the
    // operation's. The cancel takes the rows in the order every writer that ends an execution does (lockExecution), then
    // rewrites the operation and ends the execution (whose failure is stamped too). Each side runs in a transaction of
    // its own, where a deadlock is an error.
    const failure = { code: 'cancelled_by_caller', phase: 'created' };
    for (const first of ['decision', 'cancel'] as const) {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      const outcome = await withSessions(
        db.dataSource,
        ['holder', 'decider', 'canceller', 'probe'],
        async ({ holder, decider, canceller, probe }) => {
          await holder.startTransaction();
          await holder.query(`SELECT 1 FROM executions WHERE id = $1 FOR UPDATE`, [executionId]);
          const decide = async () => {
            await decider.startTransaction();
            const result = await transitions.decide(decider.manager, {
              operation: snapshot(operationId),
              tenantId: 'acme',
              byKey: reviewerKey,
              open: 'approval',
              event: { type: 'approval.decided', data: { decision: 'approve' } },
              merge: { approval: { state: 'granted', decided_by: reviewerKey } },
              approvalStamp: { validForMs: 900_000 },
            });
            await decider.commitTransaction();
            return result;
          };
          const cancel = async () => {
            await canceller.startTransaction();
            const locked = await lockExecution(canceller.manager, executionId, 'acme');
            const operation = await transitions.operation(canceller.manager, {
              operation: snapshot(operationId),
              to: OperationStatus.CANCELLED,
              eventData: { cause: 'execution_cancelled', by: reviewerKey },
            });
            const execution = await transitions.executionMoves(canceller.manager, {
              executionId,
              from: locked!.status,
              moves: [{ to: E.VALIDATING }, { to: E.FAILED, eventData: { by: reviewerKey, failure } }],
              patch: { failure },
            });
            await canceller.commitTransaction();
            return { operation: operation.won, execution: execution.won };
          };
          const waiters = (n: number) =>
            waitFor(
              () => lockWaiters(db.dataSource),
              (count) => count >= n,
            );
          let deciding: Promise<TransitionResult>;
          let cancelling: Promise<{ operation: boolean; execution: boolean }>;
          if (first === 'decision') {
            deciding = decide();
            await waiters(1);
            // Waiting for the execution's row, the decision holds its operation's: taken first, as the order says.
            await probe.startTransaction();
            const probed = await probe
              .query(`SELECT 1 FROM operations WHERE id = $1 FOR UPDATE NOWAIT`, [operationId])
              .then(
                () => 'free',
                (error: { code?: string }) => error.code,
              );
            await probe.rollbackTransaction();
            expect(probed).toBe('55P03');
            cancelling = cancel();
            await waiters(2);
          } else {
            cancelling = cancel();
            await waiters(1);
            deciding = decide();
            await waiters(2);
          }
          deciding.catch(() => undefined);
          cancelling.catch(() => undefined);
          await holder.commitTransaction();
          return { decided: await deciding, cancelled: await cancelling };
        },
      );
      // Whichever took the operation's row first wins it; the other finds it moved (the cancel rewrites an approved
      // PREPARED operation; a decision finds it CANCELLED and writes nothing).
      expect({ first, decided: outcome.decided.won, cancelled: outcome.cancelled }).toEqual({
        first,
        decided: first === 'decision',
        cancelled: { operation: true, execution: true },
      });
      const [row] = (await db.dataSource.query(`SELECT status FROM operations WHERE id = $1`, [operationId])) as {
        status: string;
      }[];
      expect(row.status).toBe(OperationStatus.CANCELLED);
    }
  });

  it('decide: stamped decisions queued behind a writer that changed the row: one is written, none deadlocks', async () => {
    // Each decision locks the operation's row, then its execution's, before it reads the clock (its stamp), then updates
    // the row it read on an older snapshot: the writer's update lies between. Each runs in a transaction of its own,
    // where a deadlock is an error (a statement of its own is retried silently).
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const names = Array.from({ length: 8 }, (_, i) => `d${i}`);
    const results = await withSessions(db.dataSource, ['holder', ...names], async (sessions) => {
      await sessions.holder.startTransaction();
      await transitions.annotate(sessions.holder.manager, {
        executionId,
        operationId,
        whileStatus: OperationStatus.PREPARED,
        type: 'operation.observed',
      });
      const deciding = names.map(async (name, i) => {
        const session = sessions[name];
        await session.startTransaction();
        const deny = i % 2 === 1;
        const result = await transitions.decide(session.manager, {
          operation: snapshot(operationId),
          tenantId: 'acme',
          byKey: reviewerKey,
          open: 'approval',
          event: { type: 'approval.decided', data: { decision: deny ? 'deny' : 'approve' } },
          merge: { approval: { state: deny ? 'denied' : 'granted', decided_by: `key_${i}` } },
          approvalStamp: deny ? {} : { validForMs: 900_000 },
          move: deny ? { to: OperationStatus.CANCELLED, reason: TerminalReason.DENIED } : undefined,
        });
        await session.commitTransaction();
        return result;
      });
      await waitFor(
        () => lockWaiters(db.dataSource),
        (n) => n >= names.length,
      );
      await sessions.holder.commitTransaction();
      return Promise.all(deciding);
    });
    expect(results.filter((r) => r.won)).toHaveLength(1);
    const log = await eventsWhere({ executionId });
    expect(log.filter((e) => e.type === 'approval.decided')).toHaveLength(1);
  });

  it('decide: a decision by a key revoked before its statement commits is not written, also a revocation still under way', async () => {
    const approve = (operationId: string, byKey: string) => decideApproval(operationId, 'approve', { byKey });
    // Revoked (and committed) after the request was admitted on it: nothing written.
    const revoked = await newExecutionWithOneOperation();
    const gone = await createApiKey(db.dataSource.manager, { tenantId: 'acme', role: 'reviewer' });
    expect(await revokeApiKey(db.dataSource.manager, gone.id)).toBe(true);
    expect((await approve(revoked.operationId, gone.id)).won).toBe(false);
    await expectNothingWritten(revoked.executionId, 'created');
    // Another tenant's key decides nothing here either.
    const other = await createApiKey(db.dataSource.manager, { tenantId: 'acme', role: 'reviewer' });
    await db.dataSource.query(`INSERT INTO tenants (id, name) VALUES ('other', 'other') ON CONFLICT DO NOTHING`);
    await db.dataSource.query(`UPDATE api_keys SET tenant_id = 'other' WHERE id = $1`, [other.id]);
    expect((await approve(revoked.operationId, other.id)).won).toBe(false);
    await expectNothingWritten(revoked.executionId, 'created');

    // A revocation written but not yet committed when the decision's statement runs: the statement waits for it (it
    // share-locks the key's row) and then finds the key revoked. Read without the lock, the key still looked active.
    const racing = await newExecutionWithOneOperation();
    const key = await createApiKey(db.dataSource.manager, { tenantId: 'acme', role: 'reviewer' });
    // Proven waiting on the revocation's row lock (not slept on): its backend shows a lock wait.
    expect((await writeDuringRevocation(db.dataSource, key.id, () => approve(racing.operationId, key.id))).won).toBe(
      false,
    );
    await expectNothingWritten(racing.executionId, 'created');
    // The same decision by an unrevoked key is written.
    expect((await approve(racing.operationId, reviewerKey)).won).toBe(true);
  });

  /** A sent operation held in MANUAL_REVIEW for `reason`, its obligation not showing the effect. */
  const heldOperation = async (reason: TerminalReason) => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    await db.dataSource.query(
      `UPDATE operations SET status = 'MANUAL_REVIEW', attempt = 1, terminal_reason = $2,
              obligation = '{"rechecks": 0}'::jsonb WHERE id = $1`,
      [operationId, reason],
    );
    return { executionId, operationId };
  };
  /** A person's FAILED of it, decided from a read that saw no acknowledgement (unless `acknowledged`) and no shown effect. */
  const personFailed = (operationId: string, reason: TerminalReason, acknowledged = false) =>
    transitions.decide(db.dataSource.manager, {
      operation: {
        ...snapshot(operationId),
        status: OperationStatus.MANUAL_REVIEW,
        attempt: 1,
        terminalReason: reason,
        acknowledged,
      },
      tenantId: 'acme',
      byKey: reviewerKey,
      open: 'resolution',
      event: { type: 'operation.resolved', data: { status: 'FAILED' } },
      merge: { obligation: { resolution: { status: 'FAILED' } } },
      move: { to: OperationStatus.FAILED },
    });

  it('decide: a "still unknown" is written only while its hold’s investigations, with it, keep the evidence budget', async () => {
    const { executionId, operationId } = await heldOperation(TerminalReason.STALE_REPLICA);
    // Two investigations on the row, 30,000 bytes of evidence each (a € is three bytes).
    const kept = [1, 2].map((n) => ({ evidence: '€'.repeat(10_000), by: reviewerKey, n }));
    await db.dataSource.query(
      `UPDATE operations SET obligation = obligation || jsonb_build_object('investigations', $2::jsonb) WHERE id = $1`,
      [operationId, JSON.stringify(kept)],
    );
    const room = MAX_INVESTIGATION_BYTES_PER_HOLD - 60_000;
    // Written from a read that saw the row as it is (its count matches): only the statement's budget can refuse it.
    const stillUnknown = (bytes: number) =>
      transitions.decide(db.dataSource.manager, {
        operation: {
          ...snapshot(operationId),
          status: OperationStatus.MANUAL_REVIEW,
          attempt: 1,
          terminalReason: TerminalReason.STALE_REPLICA,
        },
        tenantId: 'acme',
        byKey: reviewerKey,
        open: 'resolution',
        investigationsSeen: 2,
        addsInvestigationBytes: bytes,
        event: { type: 'operation.still_unknown', data: {} },
        merge: { obligation: { investigations: [...kept, { evidence: 'x'.repeat(bytes) }] } },
      });
    expect((await stillUnknown(room + 1)).won).toBe(false);
    await expectNothingWritten(executionId, 'created');
    expect((await stillUnknown(room)).won).toBe(true);
    const [row] = (await db.dataSource.query(
      `SELECT (SELECT sum(octet_length(i->>'evidence')) FROM jsonb_array_elements(obligation->'investigations') i)::int AS bytes
       FROM operations WHERE id = $1`,
      [operationId],
    )) as { bytes: number }[];
    expect(row.bytes).toBe(MAX_INVESTIGATION_BYTES_PER_HOLD);
  });

  it('decide: a resolution’s at, wherever it is written, is the time of its events (the move’s: the failure’s at)', async () => {
    const { executionId, operationId } = await heldOperation(TerminalReason.STALE_REPLICA);
    // As computed before the statement (and before a read of the source): replaced by the statement's instant.
    const resolution = { status: 'FAILED', by: reviewerKey, at: '2000-01-01T00:00:00.000Z' };
    const decided = await transitions.decide(db.dataSource.manager, {
      operation: {
        ...snapshot(operationId),
        status: OperationStatus.MANUAL_REVIEW,
        attempt: 1,
        terminalReason: TerminalReason.STALE_REPLICA,
      },
      tenantId: 'acme',
      byKey: reviewerKey,
      open: 'resolution',
      event: { type: 'operation.resolved', data: resolution },
      merge: { evidence: { resolution }, obligation: { resolution } },
      resolutionStamp: true,
      move: { to: OperationStatus.FAILED, eventData: { resolution } },
    });
    expect(decided.won).toBe(true);
    const [resolved, moved] = await eventTimes('execution_id', executionId).then((all) => all.slice(1));
    expect([resolved.type, moved.to_status]).toEqual(['operation.resolved', 'FAILED']);
    expect(moved.exact).toBe(resolved.exact);
    const stamped = { ...resolution, at: moved.at };
    expect(resolved.data).toEqual(stamped);
    expect(moved.data).toMatchObject({ resolution: stamped });
    const [row] = (await db.dataSource.query(`SELECT evidence, obligation FROM operations WHERE id = $1`, [
      operationId,
    ])) as { evidence: { resolution: unknown }; obligation: { resolution: unknown } }[];
    expect(row.evidence.resolution).toEqual(stamped);
    expect(row.obligation.resolution).toEqual(stamped);
  });

  it('decide: a person’s FAILED is not written once the provider’s acknowledgement is on record, even one the decision did not read', async () => {
    const late = await heldOperation(TerminalReason.STALE_REPLICA);
    await db.dataSource.query(`UPDATE operations SET acknowledged_at = now() WHERE id = $1`, [late.operationId]);
    // As read before a late 2xx was recorded: not acknowledged.
    expect((await personFailed(late.operationId, TerminalReason.STALE_REPLICA)).won).toBe(false);
    expect(await eventsWhere({ executionId: late.executionId, type: 'operation.resolved' })).toHaveLength(0);
    // Without the acknowledgement the same decision is written.
    const unacknowledged = await heldOperation(TerminalReason.STALE_REPLICA);
    expect((await personFailed(unacknowledged.operationId, TerminalReason.STALE_REPLICA)).won).toBe(true);
    // And one that read the acknowledgement is refused by the status model before any statement.
    await expect(personFailed(late.operationId, TerminalReason.STALE_REPLICA, true)).rejects.toMatchObject({
      code: 'EFFECT_EXISTS',
    });
  });

  it('decide: a person’s FAILED is not written once a re-check’s read showed the effect, even one the decision did not read', async () => {
    const shown = await heldOperation(TerminalReason.CONNECTOR_ERROR);
    await db.dataSource.query(
      `UPDATE operations SET obligation = obligation || '{"rechecks": 1, "effect_shown": {"result": "mismatch"}}'::jsonb
       WHERE id = $1`,
      [shown.operationId],
    );
    // As read before the re-check recorded what it read: nothing shown.
    expect((await personFailed(shown.operationId, TerminalReason.CONNECTOR_ERROR)).won).toBe(false);
    expect(await eventsWhere({ executionId: shown.executionId, type: 'operation.resolved' })).toHaveLength(0);
    const [row] = (await db.dataSource.query(`SELECT status FROM operations WHERE id = $1`, [shown.operationId])) as {
      status: string;
    }[];
    expect(row.status).toBe('MANUAL_REVIEW');
    // A re-check that showed nothing leaves the same decision free to be written.
    const nothingShown = await heldOperation(TerminalReason.CONNECTOR_ERROR);
    await db.dataSource.query(
      `UPDATE operations SET obligation = obligation || '{"rechecks": 1}'::jsonb WHERE id = $1`,
      [nothingShown.operationId],
    );
    expect((await personFailed(nothingShown.operationId, TerminalReason.CONNECTOR_ERROR)).won).toBe(true);
  });

  it('annotate refuses a condition or a write it could not make (no operation or status to hold it to), writing nothing', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const bad = [
      { executionId, operationId, whileUnescalated: true },
      { executionId, operationId, merge: { obligation: { rechecks: 1 } } },
      { executionId, whileStatus: OperationStatus.PREPARED, patch: { next_check_at: null } },
      { executionId, operationId, whileStatus: OperationStatus.PREPARED, whileGrantDecidedAt: null },
      { executionId, operationId, whileStatus: OperationStatus.PREPARED, whileReleaseAt: null },
    ];
    for (const input of bad) {
      await expect(transitions.annotate(db.dataSource.manager, { ...input, type: 'test.noted' })).rejects.toThrow(
        /^annotate: /,
      );
    }
    expect(await eventsWhere({ executionId, type: 'test.noted' })).toHaveLength(0);
    // An event alone needs neither.
    expect((await transitions.annotate(db.dataSource.manager, { executionId, type: 'test.noted' })).won).toBe(true);
  });

  it('annotate with oncePerOperation writes an event of a type once per operation, and refuses it without an operation or with a status', async () => {
    const [first, second] = [chargeOperation(), chargeOperation({ key: 'second', position: 1 })];
    const executionId = await insertTestExecution(db.dataSource.manager, 'acme', { operations: [first, second] });
    const operationId = first.id;
    const once = { executionId, operationId, oncePerOperation: true, type: 'test.said_once' };
    expect((await transitions.annotate(db.dataSource.manager, { ...once, data: { n: 1 } })).won).toBe(true);
    expect((await transitions.annotate(db.dataSource.manager, { ...once, data: { n: 2 } })).won).toBe(false);
    // Another operation of the same execution says it once too.
    expect((await transitions.annotate(db.dataSource.manager, { ...once, operationId: second.id })).won).toBe(true);
    for (const input of [
      { executionId, oncePerOperation: true },
      { executionId, operationId, whileStatus: OperationStatus.PREPARED, oncePerOperation: true },
    ]) {
      await expect(transitions.annotate(db.dataSource.manager, { ...input, type: 'test.said_once' })).rejects.toThrow(
        /^annotate: oncePerOperation/,
      );
    }
    expect((await eventsWhere({ executionId, type: 'test.said_once' })).map((e) => [e.operationId, e.data])).toEqual([
      [operationId, { n: 1 }],
      [second.id, {}],
    ]);
  });

  it('decide: a person’s VERIFIED is not written once the provider’s rejection is on file, even one recorded after the decision’s read', async () => {
    const held = async () => {
      const { executionId, operationId } = await newExecutionWithOneOperation();
      await db.dataSource.query(
        `UPDATE operations SET status = 'MANUAL_REVIEW', attempt = 1, terminal_reason = 'CONNECTOR_ERROR',
                obligation = '{"rechecks": 0}'::jsonb WHERE id = $1`,
        [operationId],
      );
      return { executionId, operationId };
    };
    const verified = (operationId: string) =>
      transitions.decide(db.dataSource.manager, {
        // As read before the late rejection was recorded: nothing on file.
        operation: {
          ...snapshot(operationId),
          status: OperationStatus.MANUAL_REVIEW,
          attempt: 1,
          terminalReason: TerminalReason.CONNECTOR_ERROR,
          rejected: false,
        },
        tenantId: 'acme',
        byKey: reviewerKey,
        open: 'resolution',
        event: { type: 'operation.resolved', data: { status: 'VERIFIED' } },
        merge: { evidence: { resolution: { status: 'VERIFIED' } }, obligation: { resolution: { status: 'VERIFIED' } } },
        move: { to: OperationStatus.VERIFIED },
      });
    // The dispatcher's late rejection, as it records it (LATE_REJECTION_TRIES): on the row and in the history at once.
    const rejectLate = (op: { executionId: string; operationId: string }) =>
      transitions.annotate(db.dataSource.manager, {
        executionId: op.executionId,
        operationId: op.operationId,
        whileStatus: [OperationStatus.MANUAL_REVIEW],
        patch: {
          rejected_at: 'now',
          rejection: { reason: 'CONNECTOR_REJECTED', detail: 'provider rejected the request (402)' },
        },
        type: 'operation.rejected_late',
        data: { reason: 'CONNECTOR_REJECTED', detail: 'provider rejected the request (402)' },
      });
    const rejected = await held();
    expect((await rejectLate(rejected)).won).toBe(true);
    const [onFile] = (await db.dataSource.query(`SELECT rejected_at, rejection FROM operations WHERE id = $1`, [
      rejected.operationId,
    ])) as { rejected_at: Date | null; rejection: unknown }[];
    expect(onFile.rejected_at).toBeInstanceOf(Date);
    expect(onFile.rejection).toEqual({ reason: 'CONNECTOR_REJECTED', detail: 'provider rejected the request (402)' });
    expect((await verified(rejected.operationId)).won).toBe(false);
    expect(await eventsWhere({ executionId: rejected.executionId, type: 'operation.resolved' })).toHaveLength(0);
    const [row] = (await db.dataSource.query(`SELECT status, obligation FROM operations WHERE id = $1`, [
      rejected.operationId,
    ])) as { status: string; obligation: Record<string, unknown> }[];
    expect(row.status).toBe('MANUAL_REVIEW');
    expect(row.obligation).not.toHaveProperty('resolution');
    // Without a rejection on file the same decision is written.
    const notRejected = await held();
    expect((await verified(notRejected.operationId)).won).toBe(true);
    // And the status model refuses it outright when the decision's own read saw the rejection.
    await expect(
      transitions.decide(db.dataSource.manager, {
        operation: {
          ...snapshot(rejected.operationId),
          status: OperationStatus.MANUAL_REVIEW,
          attempt: 1,
          terminalReason: TerminalReason.CONNECTOR_ERROR,
          rejected: true,
        },
        tenantId: 'acme',
        byKey: reviewerKey,
        open: 'resolution',
        event: { type: 'operation.resolved', data: { status: 'VERIFIED' } },
        merge: {},
        move: { to: OperationStatus.VERIFIED },
      }),
    ).rejects.toMatchObject({ code: 'PROVIDER_REJECTED' });
  });

  it('annotate with whileObligationDueAt: an obligation re-dated since it was read is not escalated', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    await db.dataSource.query(`UPDATE operations SET obligation = $2 WHERE id = $1`, [
      operationId,
      JSON.stringify({ due_at: '2026-01-02T00:00:00.000Z', resolution: null }),
    ]);
    const escalate = (dueAt: string) =>
      transitions.annotate(db.dataSource.manager, {
        executionId,
        operationId,
        whileStatus: OperationStatus.PREPARED,
        merge: { obligation: { escalated_at: 'now' } },
        whileObligationDueAt: dueAt,
        type: 'obligation.escalated',
      });
    expect((await escalate('2026-01-01T00:00:00.000Z')).won).toBe(false);
    expect((await escalate('2026-01-02T00:00:00.000Z')).won).toBe(true);
    const [row] = (await db.dataSource.query(`SELECT obligation FROM operations WHERE id = $1`, [operationId])) as {
      obligation: Record<string, unknown>;
    }[];
    // Merged: the keys it did not name are kept.
    expect(row.obligation).toEqual({ due_at: '2026-01-02T00:00:00.000Z', resolution: null, escalated_at: 'now' });
  });

  it('annotate with whileNextCheckAt: of re-checks scheduled for one due time, one writes, and none once it is re-dated', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const due = new Date('2026-01-02T00:00:00.123Z');
    await db.dataSource.query(`UPDATE operations SET next_check_at = $2 WHERE id = $1`, [operationId, due]);
    const recheck = (scheduledFor: Date, next: Date) =>
      transitions.annotate(db.dataSource.manager, {
        executionId,
        operationId,
        whileStatus: OperationStatus.PREPARED,
        whileNextCheckAt: scheduledFor,
        patch: { next_check_at: next },
        countInObligation: 'rechecks',
        type: 'operation.rechecked',
      });
    // One scheduled for a time the row no longer names (a later read re-dated it): nothing written.
    expect((await recheck(new Date(due.getTime() - 1), new Date('2026-01-03T00:00:00.000Z'))).won).toBe(false);
    // Several runs for the one it names, each re-dating it: the first written moves it on, the others are superseded.
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) => recheck(due, new Date(Date.UTC(2026, 0, 3, 0, 0, i)))),
    );
    expect(results.filter((r) => r.won)).toHaveLength(1);
    expect(await eventsWhere({ executionId, type: 'operation.rechecked' })).toHaveLength(1);
    const [row] = (await db.dataSource.query(`SELECT obligation FROM operations WHERE id = $1`, [operationId])) as {
      obligation: { rechecks: number };
    }[];
    expect(row.obligation.rechecks).toBe(1);
  });

  it('annotate with whileObligationLacks: of writers racing to record what a read showed, one writes, and none once it is there', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const next = new Date('2026-01-02T00:00:00.123Z');
    await db.dataSource.query(`UPDATE operations SET next_check_at = $2, obligation = $3 WHERE id = $1`, [
      operationId,
      next,
      JSON.stringify({ due_at: '2026-01-03T00:00:00.000Z' }),
    ]);
    const keep = (i: number) =>
      transitions.annotate(db.dataSource.manager, {
        executionId,
        operationId,
        whileStatus: OperationStatus.PREPARED,
        whileObligationLacks: 'effect_shown',
        merge: { obligation: { effect_shown: { result: 'found', run: i } } },
        reportNextCheckAt: true,
        type: 'operation.rechecked',
        data: { result: 'found', next_check_at: 'as the caller read it' },
      });
    // Each on its own session, at once (two runs of one job, and more).
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => keep(i)));
    expect(results.filter((r) => r.won)).toHaveLength(1);
    expect((await keep(9)).won).toBe(false);
    const events = await eventsWhere({ executionId, type: 'operation.rechecked' });
    expect(events).toHaveLength(1);
    // The due time the row holds as written, not one the caller passed.
    expect(events[0].data).toEqual({ result: 'found', next_check_at: next.toISOString() });
    const [row] = (await db.dataSource.query(`SELECT obligation FROM operations WHERE id = $1`, [operationId])) as {
      obligation: { due_at: string; effect_shown: { run: number } };
    }[];
    expect(row.obligation.due_at).toBe('2026-01-03T00:00:00.000Z');
    expect(row.obligation.effect_shown.run).toBe(results.findIndex((r) => r.won));
  });

  it('annotate with whileUnescalated: of many sweeps that find an obligation overdue at once, one escalates it', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    await db.dataSource.query(`UPDATE operations SET obligation = $2 WHERE id = $1`, [
      operationId,
      JSON.stringify({ due_at: '2026-01-02T00:00:00.000Z', escalated_at: null }),
    ]);
    const escalate = () =>
      transitions.annotate(db.dataSource.manager, {
        executionId,
        operationId,
        whileStatus: OperationStatus.PREPARED,
        merge: { obligation: { escalated_at: new Date().toISOString() } },
        whileObligationDueAt: '2026-01-02T00:00:00.000Z',
        whileUnescalated: true,
        type: 'obligation.escalated',
      });
    const results = await Promise.all(Array.from({ length: 8 }, escalate));
    expect(results.filter((r) => r.won)).toHaveLength(1);
    expect((await escalate()).won).toBe(false);
    expect(await eventsWhere({ executionId, type: 'obligation.escalated' })).toHaveLength(1);
  });

  it('annotate with whileUnresolved: a sweep that found an obligation overdue does not escalate it once it is resolved', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const due = '2026-01-02T00:00:00.000Z';
    await db.dataSource.query(`UPDATE operations SET obligation = $2 WHERE id = $1`, [
      operationId,
      JSON.stringify({ due_at: due, escalated_at: null }),
    ]);
    // The sweep read it overdue; a reviewer's release (resolution SENT, the status still held) committed since.
    await db.dataSource.query(
      `UPDATE operations SET obligation = obligation || '{"resolution": {"status": "SENT"}}'::jsonb WHERE id = $1`,
      [operationId],
    );
    const escalated = await transitions.annotate(db.dataSource.manager, {
      executionId,
      operationId,
      whileStatus: OperationStatus.PREPARED,
      merge: { obligation: { escalated_at: new Date().toISOString() } },
      whileObligationDueAt: due,
      whileUnescalated: true,
      whileUnresolved: true,
      type: 'obligation.escalated',
    });
    expect(escalated.won).toBe(false);
    expect(await eventsWhere({ executionId, type: 'obligation.escalated' })).toHaveLength(0);
  });

  it('annotate with several statuses: one compare-and-set, written while the operation is in any of them', async () => {
    const { executionId, operationId } = await newExecutionWithOneOperation();
    const record = () =>
      transitions.annotate(db.dataSource.manager, {
        executionId,
        operationId,
        whileStatus: [OperationStatus.UNKNOWN, OperationStatus.RECONCILING],
        patch: { acknowledged_at: 'now' },
        type: 'operation.acknowledged_late',
      });
    // PREPARED: in neither.
    expect((await record()).won).toBe(false);
    await db.dataSource.query(`UPDATE operations SET status = 'RECONCILING', attempt = 1 WHERE id = $1`, [operationId]);
    expect((await record()).won).toBe(true);
    await db.dataSource.query(`UPDATE operations SET status = 'UNKNOWN' WHERE id = $1`, [operationId]);
    expect((await record()).won).toBe(true);
    expect(await eventsWhere({ executionId, type: 'operation.acknowledged_late' })).toHaveLength(2);
  });

  it('keeps events append-only', async () => {
    const { executionId } = await newExecutionWithOneOperation();
    await expect(
      db.dataSource.query(`UPDATE events SET type = 'x' WHERE execution_id = $1`, [executionId]),
    ).rejects.toThrow(/append-only/);
    await expect(db.dataSource.query(`DELETE FROM events WHERE execution_id = $1`, [executionId])).rejects.toThrow(
      /append-only/,
    );
  });
});
