import { ExecutionStatus, OperationStatus, TerminalReason, VerificationMethod } from '@verity/status-model';
import { existsSync, mkdirSync, readFileSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { NAMED_STATEMENTS } from './queries';
import { sendGuardConditions } from './send-guard';
import { Queryable } from './sql';
import { AnnotationInput, DatabaseNowPlus, TransitionService } from './transition.service';

/**
 * The statement snapshot: every statement libs/persistence sends, checked in under libs/persistence/queries, so a
 * change of SQL is reviewed as SQL. After a deliberate change: UPDATE_SQL_SNAPSHOTS=1 npx jest queries.spec
 */
const DIR = join(__dirname, '..', 'queries');
const UPDATE = process.env.UPDATE_SQL_SNAPSHOTS === '1';

function render(statements: Readonly<Record<string, string>>): string {
  return Object.entries(statements)
    .map(([name, sql]) => `-- ${name}\n${sql.trim()};\n`)
    .join('\n');
}

/** The statements a call sends, recorded instead of run: the recorder answers every statement with no rows. */
async function recorded(call: (db: Queryable) => Promise<unknown>): Promise<string> {
  const sent = await recordedInOrder(call);
  if (sent.length !== 1) throw new Error(`expected one statement, recorded ${sent.length}`);
  return sent[0];
}

/**
 * Every statement a call sends, in order, recorded instead of run; the recorder stands for a transaction under way, so
 * a call that runs its statements in one (withinTransaction) sends them to it.
 */
async function recordedInOrder(call: (db: Queryable) => Promise<unknown>): Promise<string[]> {
  const sent: string[] = [];
  const recorder = {
    queryRunner: { isTransactionActive: true },
    query: (sql: string) => {
      sent.push(sql);
      return Promise.resolve([]);
    },
  } as unknown as Queryable;
  await call(recorder);
  return sent;
}

/** The statements assembled per call, for representative calls (the shape of each kind of move). */
async function assembledStatements(): Promise<Record<string, Record<string, string>>> {
  const transitions = new TransitionService();
  const op = (status: OperationStatus, attempt: number) => ({
    id: 'op_1',
    status,
    attempt,
    verificationMethod: VerificationMethod.READ_AFTER_WRITE,
  });
  /** A reviewer's approval decision on a PREPARED operation; the two recorded below differ only in what they add. */
  const approvalDecision = (state: 'granted' | 'denied') => ({
    operation: op(OperationStatus.PREPARED, 0),
    tenantId: 'tenant',
    byKey: 'key_1',
    open: 'approval' as const,
    event: { type: 'approval.decided', data: {} },
    merge: { approval: { state } },
  });
  /** The statement of an annotation of operation op_1 (of exe_1) with `input`. */
  const annotation = (input: Omit<AnnotationInput, 'executionId' | 'operationId'>) =>
    recorded((db) => transitions.annotate(db, { executionId: 'exe_1', operationId: 'op_1', ...input }));
  const resolution = (attempt: number, terminalReason: TerminalReason) => ({
    operation: { ...op(OperationStatus.MANUAL_REVIEW, attempt), terminalReason },
    tenantId: 'tenant',
    byKey: 'key_1',
    open: 'resolution' as const,
    investigationsSeen: 0,
    event: { type: 'operation.resolved', data: {} },
  });
  return {
    transitions: {
      operationMove: await recorded((db) =>
        transitions.operation(db, {
          operation: op(OperationStatus.SENT, 1),
          to: OperationStatus.ACKNOWLEDGED,
          patch: { evidence: { status: 200 } },
        }),
      ),
      operationSendGuarded: await recorded((db) =>
        transitions.operation(db, {
          operation: op(OperationStatus.PREPARED, 0),
          to: OperationStatus.SENT,
          bumpAttempt: true,
          sendGuard: { kind: 'dispatch', approvalRequired: true, approvalPolicy: null, settingsVersion: null },
          // As the sender writes it: sent_at from the stamp, which the guard judges the clock by too.
          patch: { sent_at: 'now', check_count: 0, next_check_at: null },
        }),
      ),
      operationMoveThenExecution: await recorded((db) =>
        transitions.operation(db, {
          operation: op(OperationStatus.ACKNOWLEDGED, 1),
          to: OperationStatus.VERIFIED,
          patch: { evidence: { method: 'read_after_write' } },
          thenExecution: {
            from: ExecutionStatus.RUNNING,
            moves: [{ to: ExecutionStatus.VALIDATING_OUTPUT }, { to: ExecutionStatus.COMPLETED }],
          },
        }),
      ),
      executionMovesThenSend: await recorded((db) =>
        transitions.operation(db, {
          operation: op(OperationStatus.PREPARED, 0),
          to: OperationStatus.SENT,
          bumpAttempt: true,
          sendGuard: {
            kind: 'dispatch',
            approvalRequired: false,
            approvalPolicy: null,
            settingsVersion: null,
            executionFrom: ExecutionStatus.CREATED,
          },
          patch: { sent_at: 'now', check_count: 0, next_check_at: null },
          executionFirst: {
            from: ExecutionStatus.CREATED,
            moves: [
              ExecutionStatus.VALIDATING,
              ExecutionStatus.RESOLVING_CONTEXT,
              ExecutionStatus.PLANNING,
              ExecutionStatus.RUNNING,
            ].map((to) => ({ to })),
          },
        }),
      ),
      decisionWithMove: await recorded((db) =>
        transitions.decide(db, {
          ...approvalDecision('denied'),
          move: { to: OperationStatus.CANCELLED, reason: TerminalReason.DENIED },
        }),
      ),
      // A reviewer's VERIFIED of a sent hold (apps/api operations.service resolve): its statement also requires no
      // late rejection on file, nor a "still unknown" recorded since its read.
      resolutionVerified: await recorded((db) =>
        transitions.decide(db, {
          ...resolution(1, TerminalReason.CONNECTOR_ERROR),
          merge: { evidence: { resolution: {} }, obligation: { resolution: {} } },
          move: { to: OperationStatus.VERIFIED },
        }),
      ),
      // A reviewer's release (resolve SENT) of a never-sent hold: recorded only while its execution can still carry it
      // out, judged in the statement by the send guard's condition for a release.
      resolutionReleased: await recorded((db) =>
        transitions.decide(db, {
          ...resolution(0, TerminalReason.KNOWLEDGE_CONFLICT),
          whileExecutionCarriesOutRelease: true,
          merge: { obligation: { resolution: {} } },
          resolutionStamp: true,
        }),
      ),
      // A reviewer's "still unknown" (apps/api operations.service stillUnknown): written only while no other was recorded
      // since its read, and while the hold's investigations, with it, keep the evidence budget.
      stillUnknown: await recorded((db) =>
        transitions.decide(db, {
          ...resolution(1, TerminalReason.SOURCE_UNREACHABLE),
          addsInvestigationBytes: 120,
          event: { type: 'operation.still_unknown', data: {} },
          merge: { obligation: { investigations: [] } },
        }),
      ),
      // A reviewer's decision sent with If-Match (apps/api operations.service): written only at a version it names,
      // after the tenant's row is share-locked by a statement of its own (the version covers its approval rules).
      decisionAtVersion: (
        await recordedInOrder((db) =>
          transitions.decide(db, { ...approvalDecision('granted'), whileVersionIn: ['v1'] }),
        )
      ).join(';\n\n'),
      // The dispatcher's late rejection (sender.service recordLateRejection): on the row and in the history at once.
      lateRejection: await annotation({
        whileStatus: [OperationStatus.UNKNOWN, OperationStatus.RECONCILING],
        patch: { rejected_at: 'now', rejection: { reason: 'CONNECTOR_REJECTED' } },
        type: 'operation.rejected_late',
      }),
      annotate: await annotation({
        whileStatus: OperationStatus.MANUAL_REVIEW,
        merge: { obligation: { escalated_at: 'now' } },
        // The sweeper's escalation as it sends it (apps/reconciler sweeper.service.ts): every guard it names.
        whileObligationDueAt: '2026-01-01T00:00:00.000Z',
        whileUnescalated: true,
        whileUnresolved: true,
        type: 'obligation.escalated',
      }),
      // The dispatcher's note that a send's secrets do not open (store.ts recordSendSecretsUnopened): once per operation.
      annotateOncePerOperation: await annotation({
        oncePerOperation: true,
        type: 'send.secrets_unopened',
      }),
      // The reconciler's inconclusive read, written only over the count it was made at.
      operationMoveAtCheckCount: await recorded((db) =>
        transitions.operation(db, {
          operation: op(OperationStatus.RECONCILING, 1),
          to: OperationStatus.UNKNOWN,
          whileCheckCount: 2,
          // Due after the backoff by the database's clock, stamped by the statement.
          patch: { check_count: 3, next_check_at: new DatabaseNowPlus(600) },
        }),
      ),
      // The dispatcher's failed precondition read, counted only over the count it was made at.
      annotateAtCheckCount: await annotation({
        whileStatus: OperationStatus.PREPARED,
        whileCheckCount: 2,
        patch: { check_count: 3, next_check_at: new Date(0) },
        type: 'context.unavailable',
      }),
      // A scheduled re-check's record: its count added to in the statement, only while it is the re-check the row names.
      annotateCounted: await annotation({
        whileStatus: OperationStatus.MANUAL_REVIEW,
        whileObligationDueAt: '2026-01-01T00:00:00.000Z',
        whileNextCheckAt: new Date(0),
        patch: { next_check_at: null },
        merge: { obligation: {} },
        countInObligation: 'rechecks',
        type: 'operation.rechecked',
      }),
      // The reconciler's observation after VERIFIED, written only over the row its read was made against.
      annotateObserved: await annotation({
        whileStatus: OperationStatus.VERIFIED,
        whileUpdatedAt: new Date(0),
        patch: { observation: 'superseded' },
        type: 'operation.observed',
      }),
      // A re-check's record of the effect by a run whose request the other run of its job used: once, by either.
      annotateUnlessShown: await annotation({
        whileStatus: OperationStatus.MANUAL_REVIEW,
        whileObligationLacks: 'effect_shown',
        merge: { obligation: { effect_shown: { result: 'found' } } },
        reportNextCheckAt: true,
        type: 'operation.rechecked',
      }),
      // A superseded scheduled re-check's record of the effect: not counted, the next re-check in force reported.
      annotateSuperseded: await annotation({
        whileStatus: OperationStatus.MANUAL_REVIEW,
        merge: { obligation: { effect_shown: { result: 'found' } } },
        reportNextCheckAt: true,
        type: 'operation.rechecked',
      }),
      executionMove: await recorded((db) =>
        transitions.execution(db, {
          executionId: 'exe_1',
          from: ExecutionStatus.RUNNING,
          to: ExecutionStatus.VALIDATING_OUTPUT,
        }),
      ),
      executionMovesWhileSettingsAt: await recorded((db) =>
        transitions.executionMoves(db, {
          executionId: 'exe_1',
          from: ExecutionStatus.RESOLVING_CONTEXT,
          moves: [{ to: ExecutionStatus.PLANNING }, { to: ExecutionStatus.RUNNING }],
          whileSettingsAt: [{ connector: 'http', version: null }],
        }),
      ),
      recordOutcome: await recorded((db) =>
        transitions.recordOutcome(db, { executionId: 'exe_1', previous: null, results: [], outcome: {}, data: {} }),
      ),
    },
    'send-guard': Object.fromEntries(
      [
        ...sendGuardConditions(
          { kind: 'dispatch', approvalRequired: true, approvalPolicy: null, settingsVersion: null },
          [],
        ),
        ...sendGuardConditions({ kind: 'release' }, []),
      ].map((c) => [c.name, `SELECT ${c.sql.trim()}`]),
    ),
  };
}

describe('statement snapshots (libs/persistence/queries/*.sql)', () => {
  let files: Record<string, string>;

  beforeAll(async () => {
    const groups = { ...NAMED_STATEMENTS, ...(await assembledStatements()) };
    files = Object.fromEntries(
      Object.entries(groups).map(([group, statements]) => [`${group}.sql`, render(statements)]),
    );
    if (UPDATE) {
      mkdirSync(DIR, { recursive: true });
      for (const stale of readdirSync(DIR)) if (!(stale in files)) unlinkSync(join(DIR, stale));
      for (const [file, text] of Object.entries(files)) writeFileSync(join(DIR, file), text);
    }
  });

  it('has a checked-in file for every group of statements, and none for a group that is gone', () => {
    const present = existsSync(DIR) ? readdirSync(DIR).filter((f) => f.endsWith('.sql')) : [];
    expect(present.sort()).toEqual(Object.keys(files).sort());
  });

  it('matches every checked-in statement (UPDATE_SQL_SNAPSHOTS=1 rewrites them after a deliberate change)', () => {
    for (const [file, text] of Object.entries(files)) {
      const path = join(DIR, file);
      const stored = existsSync(path) ? readFileSync(path, 'utf8') : '';
      expect({ file, text: stored }).toEqual({ file, text });
    }
  });

  it('writes status lists from the status model, not by hand', () => {
    expect(files['sweep.sql']).toContain(`NOT IN ('completed', 'failed', 'cancelled', 'expired')`);
    expect(files['sweep.sql']).toContain(`status IN ('UNKNOWN', 'RECONCILING')`);
  });
});
