import {
  Actor,
  ExecutionStatus,
  OperationStatus,
  RELEASABLE_EXECUTION_STATUSES,
  SENDABLE_EXECUTION_STATUSES,
  TerminalReason,
  VerificationMethodValue,
  assertExecutionTransition,
  assertOperationTransition,
  everSent,
  heldNeverSent,
  isSettledOperation,
  keepsTerminalReason,
  MAX_INVESTIGATION_BYTES_PER_HOLD,
  requiresUnacknowledged,
  requiresUnrejected,
} from '@verity/status-model';
import { trace } from '@opentelemetry/api';
import { intakeToSettled, intakeToVerified, newId, transitionsCounter } from '@verity/platform';
import { afterCommit, eventsWritten } from './event-signal';
import { operationVersionOf } from './operation-version';
import {
  SendGuard,
  clockAfterWaits,
  executionCarriesOutRelease,
  sendGuardConditions,
  sendGuardSql,
} from './send-guard';
import { Queryable, isoInstant, rows, sqlLiterals, withinTransaction } from './sql';

/** Columns a transition may set alongside the status. Anything else is not the transition's business. */
export interface OperationPatch {
  terminal_reason?: TerminalReason | null;
  evidence?: Record<string, unknown> | null;
  no_change_required?: boolean;
  approval?: Record<string, unknown> | null;
  obligation?: Record<string, unknown> | null;
  observation?: string | null;
  provider_ref?: Record<string, unknown> | null;
  check_count?: number;
  sent_at?: 'now' | null;
  acknowledged_at?: 'now' | null;
  /** A late rejection of the send (LATE_REJECTION_TRIES): when, and the provider's answer as classified. */
  rejected_at?: 'now' | null;
  rejection?: Record<string, unknown> | null;
  /**
   * When the operation is next owed a read, compared by the sweeper with the database's clock: `'now'` or
   * `DatabaseNowPlus` are stamped by that clock in the statement (a host whose clock is behind wrote reads due at once,
   * one ahead left them late); a Date only when the caller computed it on that clock already (its measured offset).
   * A hold's is also the due time its scheduled re-check job carries (milliseconds), and is compared with it at the
   * millisecond (whileNextCheckAt): a time stamped by the database, with microseconds, still names that job.
   */
  next_check_at?: 'now' | DatabaseNowPlus | Date | null;
}

/** The tenant's row share-locked before a decision on a version that covers its approval rules (`decide`). */
const TENANT_ROW_SHARE_LOCK = 'SELECT 1 FROM tenants WHERE id = $1 FOR SHARE';

/** A time the statement stamps by the database's clock: its now (`clock_timestamp()`), `ms` later. */
export class DatabaseNowPlus {
  constructor(readonly ms: number) {
    if (!Number.isInteger(ms) || ms < 0) throw new Error(`DatabaseNowPlus takes whole milliseconds >= 0, not ${ms}`);
  }
}

/**
 * When a VERIFIED effect is read again: OBSERVE_INTERVAL_MS after the database's now (the sweeper's clock); never when
 * observation is off (OBSERVE_BATCH 0).
 */
export interface ObservationTiming {
  OBSERVE_BATCH: number;
  OBSERVE_INTERVAL_MS: number;
}

/**
 * What a read-back that settles an operation writes, whoever made the read (the reconciler's verify job, or the
 * dispatcher's read right after the send): the evidence; the terminal reason (null for VERIFIED: a CONNECTOR_ERROR
 * left from an UNKNOWN on the way no longer explains the outcome); for a VERIFIED effect its first observation
 * (converged) and when it is read again.
 */
export function settledByReadBack(
  to: OperationStatus.VERIFIED | OperationStatus.FAILED,
  reason: TerminalReason | null,
  evidence: Record<string, unknown>,
  observation: ObservationTiming,
): OperationPatch {
  const verified = to === OperationStatus.VERIFIED;
  const observed = verified && observation.OBSERVE_BATCH > 0;
  return {
    terminal_reason: reason,
    evidence,
    observation: verified ? 'converged' : null,
    next_check_at: observed ? new DatabaseNowPlus(observation.OBSERVE_INTERVAL_MS) : null,
  };
}

const JSON_COLUMNS = new Set(['evidence', 'approval', 'obligation', 'provider_ref', 'rejection']);
const EXECUTION_JSON_COLUMNS = new Set(['failure', 'criteria_results', 'outcome']);

/** What the caller already knows of the operation: the model needs it to judge the move. */
export interface OperationSnapshot {
  id: string;
  status: OperationStatus;
  attempt: number;
  verificationMethod: VerificationMethodValue;
  /** Why it is held now, for rules that depend on it (a MANUAL_REVIEW for INTEGRITY_MISMATCH cannot end FAILED). */
  terminalReason?: TerminalReason | null;
  /** The provider acknowledged the send, for rules that depend on it (a person's FAILED is then refused). */
  acknowledged?: boolean;
  /** The provider's rejection of the send is on file, for rules that depend on it (a person's VERIFIED is refused). */
  rejected?: boolean;
}

export interface OperationTransitionInput {
  operation: OperationSnapshot;
  to: OperationStatus;
  reason?: TerminalReason | null;
  actor?: Actor;
  /** Bumps the fencing token; used exactly when SENT is committed. */
  bumpAttempt?: boolean;
  /**
   * Required for a move to SENT: what the same statement checks in the database before it commits the send (I15).
   * A refused move changes nothing and answers `won: false`, like a lost compare-and-set (see `sendRefusals`).
   */
  sendGuard?: SendGuard;
  /**
   * Only with a move to CANCELLED that refuses a send (a spending cap's): the send guard of the send it refuses. The
   * statement commits only while that send would otherwise be allowed — the settings it was judged by are still the
   * stored ones (a cap raised or removed meanwhile), the execution still running, the approval still granted — so an
   * operation is never cancelled for a cap that no longer applied when the cancel committed. A refused move changes
   * nothing and answers `won: false` (`sendRefusals` then says why).
   */
  refusedSendGuard?: SendGuard;
  /**
   * Only with a move to VERIFIED by a read-back — or by a context read finding the requested state present
   * (`no_change_required`) — that does not name its own effect (libs/connectors `readBackBindingProblems`): the
   * statement commits only while the tenant's `read_back_binding` for the connector is not `bound`. The read was made
   * under the settings as read before it; an admin who bound read-backs meanwhile must not see it end VERIFIED
   * afterwards. A refused move answers `won: false`, like a lost compare-and-set.
   */
  readBackUnbound?: boolean;
  /**
   * The move ends a held, never-sent operation because its execution has ended unreleasable (the model's
   * `systemWhenExecutionEnded`): the statement commits only while the execution is cancelled, expired or failed in the
   * database, so it is made after the execution's own move.
   */
  executionEnded?: boolean;
  /**
   * Only while `check_count` is still this: the count the move was decided on, for a move whose patch sets the next
   * one. A job redelivered while another ran (the sweeper re-enqueues a read that takes long) finds the status it read
   * again once the newer job is mid-read, and would write its older count over the newer one, stretching the budget.
   */
  whileCheckCount?: number;
  patch?: OperationPatch;
  eventData?: Record<string, unknown>;
  /**
   * The id of the move's event, chosen by the caller (`newId('evt')`) for a write it may have to make again: a retry
   * after a statement whose answer was lost names the same id, so it can never write a second event for the same move,
   * and whether the first try committed is asked by that id (`eventRecordedForWorker`). Otherwise a fresh one.
   */
  eventId?: string;
  /**
   * Moves of the operation's execution that follow this one (the last operation settling completes it), written in
   * the same statement, each checked by the model and with its own event after the operation's: only when this move
   * wins, the execution is still in `from` and its deadline has not passed by the database's clock (after it, the
   * execution expires instead).
   * Otherwise the operation's move is written alone and `executionMoved` is false, as if nothing had been asked.
   */
  thenExecution?: ExecutionMovesInput;
  /**
   * Moves of the operation's execution that come before this move, ending where a send may happen (a quiet
   * preparation, → running, written with its one send): only with a move to SENT whose guard names the same `from`
   * (`executionFrom`). Written in the same statement, each checked by the model, their events before the operation's,
   * only when this move wins and the execution is still in `from` (else the move is written alone, the execution having
   * been moved on to running by someone else), and `executionMoved` says whether they were.
   */
  executionFirst?: ExecutionMovesInput;
}

/** A tenant's settings for a connector as a caller read them: their version (null: none stored). */
export interface SettingsAsRead {
  connector: string;
  version: string | null;
}

/** Moves of one execution back to back, from the status it must still be in. */
export interface ExecutionMovesInput {
  from: ExecutionStatus;
  moves: { to: ExecutionStatus; eventData?: Record<string, unknown> }[];
}

export interface TransitionResult {
  won: boolean;
  eventId?: string;
  seq?: number;
  attempt?: number;
  /** With `thenExecution`: whether the execution's moves were written too. */
  executionMoved?: boolean;
}

/**
 * The tenant has not bound its read-backs for the operation's connector (`read_back_binding`, no row: `declared`), read
 * after the connector's spending-caps lock (shared) with a fresh snapshot (`verity_read_backs_bound_locked`): a bind
 * being written is waited for and then seen, and one made later waits for this statement's commit. From the
 * statement's own snapshot, a VERIFIED that waited for the operation's row committed after a bind made meanwhile.
 */
const DECLARED_READ_BACKS_COUNT = `NOT verity_read_backs_bound_locked(op.tenant_id, op.connector)`;

/** The operation's execution has ended so that nothing of it may be sent any more (cancelled, expired, failed). */
const EXECUTION_ENDED_UNRELEASABLE = `NOT EXISTS (SELECT 1 FROM executions xe
         WHERE xe.id = op.execution_id AND xe.status IN (${sqlLiterals(RELEASABLE_EXECUTION_STATUSES)}))`;

/**
 * The operation's compare-and-set (status and fencing attempt, plus the send guard's conditions), as the `moved` CTE
 * every operation move starts with; `stamped`: after the `stamp` its SET reads the clock from (STAMP_AFTER_LOCKS).
 */
function operationCompareAndSet(sets: string[], guard: string, stamped: boolean): string {
  return `${stamped ? `${STAMP_AFTER_LOCKS}, ` : ''}moved AS (
         UPDATE operations op SET ${sets.join(', ')}
         WHERE op.id = $1 AND op.status = $2 AND op.attempt = $4${guard}
         RETURNING op.id, op.execution_id, op.tenant_id, op.attempt, op.created_at, op.terminal_reason
       )`;
}

/** The status each move starts from, and where the last one ends; every move checked by the model. */
function checkedMoves(input: ExecutionMovesInput): { froms: ExecutionStatus[]; at: ExecutionStatus } {
  if (input.moves.length === 0) throw new Error('executionMoves needs at least one move');
  const froms: ExecutionStatus[] = [];
  let at = input.from;
  for (const move of input.moves) {
    assertExecutionTransition(at, move.to);
    froms.push(at);
    at = move.to;
  }
  return { froms, at };
}

/** What a decision by a person must find still open, checked in the statement that writes it (I13). */
export type OpenDecision = 'approval' | 'resolution';

/**
 * A decision by a person (an approval decision, a MANUAL_REVIEW resolution): its event, what it records on the
 * operation (merged into the JSON columns, so a concurrent writer's fields are kept), and the move it makes, if any.
 */
export interface DecisionInput {
  operation: OperationSnapshot;
  tenantId: string;
  /**
   * The API key of the person deciding: the decision is written only while that key (of this tenant) is unrevoked,
   * checked and share-locked in the statement. A revocation committed first refuses it — also one made while the
   * request was under way (admitted on the key, then reading the source for a resolution) — and one committed later
   * waits for it: no decision is recorded by a key after its revocation.
   */
  byKey: string;
  /** Written only while this is still undecided; of any number of concurrent decisions, one is written. */
  open: OpenDecision;
  event: { type: string; data: Record<string, unknown> };
  /** Events the same decision also makes, written after its own (a release that grants an approval: approval.decided). */
  alsoEvents?: { type: string; data: Record<string, unknown> }[];
  merge: OperationMerge;
  /** Columns set outright (e.g. when the next re-check is due). */
  patch?: Pick<OperationPatch, 'next_check_at'>;
  /**
   * Written only if the obligation still lists this many investigations: of concurrent "still unknown" records, one
   * is written (each re-dates the obligation; a second one would re-date what its author never saw).
   */
  investigationsSeen?: number;
  /**
   * A "still unknown" appending an investigation whose evidence is this many bytes (UTF-8): written only while the
   * evidence of the investigations the obligation lists, with it, stays within MAX_INVESTIGATION_BYTES_PER_HOLD —
   * judged on the row the statement writes, so no two records each within it when read can together pass it.
   */
  addsInvestigationBytes?: number;
  /**
   * An approval decision written only while the approval request on the row is this one (its `requested_at`, as the
   * API shows it): a reviewer's decision answers the request they were shown, not one asked for since — after the grant
   * of that request was withdrawn as stale (the source changed, it expired) and approval was asked for again.
   */
  whileRequestedAt?: string;
  /**
   * Written only while the execution's deadline has not passed, by the database's clock (the one the send guard reads):
   * a grant (or a release) made after it could never be carried out — nothing more is sent for the execution.
   */
  whileBeforeDeadline?: boolean;
  /**
   * A release (a resolution SENT of a never-sent hold): written only while its execution can still carry it out — the
   * send guard's own condition for a release (not cancelled, expired or failed; before its deadline unless completed),
   * judged by this statement, so an expiry or cancel committed after the caller's reads is seen.
   */
  whileExecutionCarriesOutRelease?: boolean;
  /**
   * Written only while the operation is at one of these versions (operationVersionOf, the ETag a person's page showed
   * and its If-Match names): a decision is never applied to a state its author did not see — a second hold of the same
   * operation, an approval asked for again. Compared on the row the statement locks.
   */
  whileVersionIn?: readonly string[];
  /**
   * Written only while the operation is at none of these versions (an If-None-Match naming entity tags), compared on
   * the row the statement locks as `whileVersionIn` is: a version the operation came back to after the caller's read (a
   * rule of the tenant's approval policy removed and added again) refuses the decision.
   */
  whileVersionNotIn?: readonly string[];
  move?: { to: OperationStatus; reason?: TerminalReason | null; eventData?: Record<string, unknown> };
  /**
   * The approval this decision merges is stamped by the database's clock — the one the send guard compares a grant's
   * expiry with — not by the writer's: `decided_at` now and, given `validForMs` (a grant), `expires_at` that much later.
   * Stamped by an API process whose clock ran an hour ahead, a 15-minute grant held for 75; an hour behind, it was
   * expired when written.
   */
  approvalStamp?: { validForMs?: number };
  /**
   * A resolution's `at` is the statement's reading of the database's clock, the time of the events it writes: in the
   * `resolution` it merges (obligation, evidence), the decision event's `at` (its data is the resolution) and the
   * `resolution` of the move's event. Computed before the statement (and before a read of the source), a resolution
   * was dated before the move whose time is the operation's `failure.at`.
   */
  resolutionStamp?: boolean;
}

/**
 * A decision's one reading of the database's clock (`stamp`: its `decided_at`, a grant's `expires_at`, a resolution's
 * `at`, the time of its events) — and a move's or an annotation's whose SET reads the clock (an approval request's
 * `requested_at`, a `sent_at`, an `acknowledged_at`, a `next_check_at`: OperationPatch's `'now'` and DatabaseNowPlus,
 * with its `updated_at`) — taken once the statement holds the rows it writes: the operation's (`$1`) and its
 * execution's, locked as the UPDATEs that follow lock them (operation first, then execution; FOR NO KEY UPDATE, what an
 * UPDATE of non-key columns takes). It is first read by the UPDATE of the operation for a row that matched its
 * snapshot, before that UPDATE would wait for the row: `clock_timestamp()` alone there was the time before any wait for
 * a writer holding the operation or the execution, which then committed events ahead of the decision's in seq but
 * dated after them, and a grant written after a wait of a minute held a minute less than its validity. The clock is
 * read ABOVE the locking (`locked`, a sub-select Postgres does not flatten, as it carries FOR NO KEY UPDATE): in the
 * target list of the SELECT that takes the locks it is computed below its LockRows, before the wait, and read again
 * only when the holder had changed the row (the re-check of the updated row) — after a holder that only locked it (FOR
 * UPDATE, FOR SHARE) and committed, the stamp was the time before the wait.
 */
const STAMP_AFTER_LOCKS = `stamp AS MATERIALIZED (
         SELECT clock_timestamp() AS at FROM (SELECT 1 FROM operations so JOIN executions se ON se.id = so.execution_id
         WHERE so.id = $1 FOR NO KEY UPDATE OF so, se) locked)`;

/** An execution move's reading of the clock (a failure's `at`, its events' time), once it holds the row (`$1`). */
const EXECUTION_MOVE_STAMP = `stamp AS MATERIALIZED (
         SELECT clock_timestamp() AS at FROM (SELECT 1 FROM executions WHERE id = $1 FOR NO KEY UPDATE) locked)`;

/** The SQL condition for "not decided yet". A release (SENT) is a resolution too: it is recorded before the send. */
const STILL_OPEN: Record<OpenDecision, string> = {
  approval: `coalesce(approval->>'state', '') NOT IN ('granted', 'denied')`,
  resolution: `obligation->'resolution' IS NULL`,
};

export interface ExecutionPatch {
  failure?: Record<string, unknown> | null;
  criteria_results?: unknown[] | null;
  outcome?: Record<string, unknown> | null;
}

/** Whether the patch sets a column by the database's clock (`'now'`, DatabaseNowPlus). */
function readsClock(patch: OperationPatch | ExecutionPatch): boolean {
  return Object.values(patch).some((value) => value === 'now' || value instanceof DatabaseNowPlus);
}

/** The SET's reading of the clock: the statement's `stamp` (STAMP_AFTER_LOCKS) where it has one. */
function clockOf(stamped: boolean): string {
  return stampOf(stamped) ?? 'clock_timestamp()';
}

/**
 * The statement's `stamp` (STAMP_AFTER_LOCKS), where it has one: also the reading of the clock its send guard judges a
 * deadline and a grant's expiry by (`sendGuardSql`), so a SENT's `sent_at` is never past either.
 */
function stampOf(stamped: boolean): string | undefined {
  return stamped ? '(SELECT at FROM stamp)' : undefined;
}

function patchAssignments(
  patch: OperationPatch | ExecutionPatch,
  params: unknown[],
  clock = 'clock_timestamp()',
): string[] {
  const sets: string[] = [];
  for (const [column, value] of Object.entries(patch)) {
    if (value === undefined) continue;
    if (value === 'now') {
      sets.push(`${column} = ${clock}`);
      continue;
    }
    if (value instanceof DatabaseNowPlus) {
      params.push(value.ms);
      sets.push(`${column} = ${clock} + $${params.length}::bigint * interval '1 millisecond'`);
      continue;
    }
    params.push(JSON_COLUMNS.has(column) || EXECUTION_JSON_COLUMNS.has(column) ? json(value) : value);
    sets.push(`${column} = $${params.length}`);
  }
  return sets;
}

/** JSON columns a writer may merge into (keys it names replace theirs; every other key, a concurrent writer's, stays). */
export interface OperationMerge {
  approval?: Record<string, unknown>;
  obligation?: Record<string, unknown>;
  evidence?: Record<string, unknown>;
}

/** Counters kept in the obligation that a writer adds one to in its statement (never a count it read before). */
export type ObligationCounter = 'rechecks';

function mergeAssignments(
  merge: OperationMerge,
  params: unknown[],
  counter?: ObligationCounter,
  approvalStamp?: DecisionInput['approvalStamp'],
  resolutionStamp?: boolean,
): string[] {
  const sets: string[] = [];
  const columns = { ...merge, ...(counter && !merge.obligation ? { obligation: {} } : {}) };
  for (const [column, value] of Object.entries(columns)) {
    if (value === undefined) continue;
    params.push(json(value));
    let merged = `coalesce(${column}, '{}'::jsonb) || $${params.length}::jsonb`;
    if (column === 'obligation' && counter) {
      // Added to the value the row holds when the statement gets it (a concurrent writer's count included).
      merged = `jsonb_set(${merged}, '{${counter}}', to_jsonb(coalesce((${column}->>'${counter}')::int, 0) + 1))`;
    }
    if (column === 'approval' && approvalStamp) merged += ` || ${approvalStampSql(approvalStamp, params)}`;
    if (resolutionStamp && (column === 'obligation' || column === 'evidence') && 'resolution' in value) {
      merged = `jsonb_set(${merged}, '{resolution,at}', to_jsonb(${isoInstant('(SELECT at FROM stamp)')}))`;
    }
    sets.push(`${column} = ${merged}`);
  }
  return sets;
}

/**
 * `decided_at` (and `expires_at`) from one reading of the database's clock (DecisionInput.approvalStamp): the statement's
 * `stamp`, which also dates the decision's events.
 */
function approvalStampSql(stamp: NonNullable<DecisionInput['approvalStamp']>, params: unknown[]): string {
  let expires = '';
  if (stamp.validForMs !== undefined) {
    params.push(stamp.validForMs);
    expires = `, 'expires_at', ${isoInstant(`stamp.at + $${params.length}::bigint * interval '1 millisecond'`)}`;
  }
  return `(SELECT jsonb_build_object('decided_at', ${isoInstant('stamp.at')}${expires}) FROM stamp)`;
}

/**
 * The data of an operation's status_changed event. Its `reason` is the move's terminal reason; a `reason` its writer
 * passes in the event data is a person's text (a cancel's or a deny's reason, as its request gave it) and is kept as
 * `caller_reason` — written under `reason`, the terminal reason replaced it (null for a cancel) and it was lost.
 */
function statusEventData(
  eventData: Record<string, unknown> | undefined,
  reason: TerminalReason | null,
  actor: Actor,
): Record<string, unknown> {
  const { reason: given, ...rest } = eventData ?? {};
  return { ...rest, ...(given !== undefined && given !== null && { caller_reason: given }), reason, actor };
}

/**
 * A status event's data (`data`, a jsonb expression) with its `reason` read from the row the same statement wrote
 * (`moved`, whose RETURNING names `terminal_reason`): what the event says of the move's terminal reason is the row's.
 */
function eventReasonFromRow(data: string, moved: string): string {
  return `${data} || jsonb_build_object('reason', ${moved}.terminal_reason)`;
}

function json(value: unknown): string | null {
  return value === null ? null : JSON.stringify(value);
}

/**
 * Each transition won is an event on the active span (the request or job that made it), so a trace shows the moves it
 * caused, in order. Added once committed, like the counters: a rolled-back move is no event, and a transaction retried
 * after a serialization failure shows its moves once, not once per attempt. Nothing happens with traces off (there is
 * no active span).
 */
function traceTransition(
  db: Queryable,
  kind: 'operation' | 'execution',
  id: string,
  from: string,
  to: string,
  eventId: string,
): void {
  const span = trace.getActiveSpan();
  if (!span) return;
  afterCommit(db, () =>
    span.addEvent('verity.transition', {
      'verity.kind': kind,
      [kind === 'operation' ? 'verity.operation_id' : 'verity.execution_id']: id,
      'verity.from': from,
      'verity.to': to,
      'verity.event_id': eventId,
    }),
  );
}

/**
 * Counts committed status changes for /metrics (verity_transitions_total), and an operation's intake latency when it
 * reaches VERIFIED or first settles (`ageSeconds`: since the operation was created, measured by the statement).
 * Process-local counters, summed by Prometheus: the scrape never counts the events table.
 */
function countTransition(
  db: Queryable,
  type: string,
  moves: { from: string; to: string }[],
  operation?: { verificationMethod: VerificationMethodValue; ageSeconds: number },
): void {
  afterCommit(db, () => {
    for (const move of moves) {
      transitionsCounter.inc({ type, to_status: move.to });
      if (!operation) continue;
      const from = move.from as OperationStatus;
      const to = move.to as OperationStatus;
      if (to === OperationStatus.VERIFIED) intakeToVerified.observe(operation.ageSeconds);
      if (
        isSettledOperation(to, operation.verificationMethod) &&
        !isSettledOperation(from, operation.verificationMethod)
      ) {
        intakeToSettled.observe({ status: to }, operation.ageSeconds);
      }
    }
  });
}

/**
 * `executionFirst` goes with a move to SENT whose guard accepts the execution where the moves start, and the moves
 * end where a send may happen: the guard then judges the execution as the statement leaves it.
 */
function assertExecutionFirst(input: OperationTransitionInput): void {
  const first = input.executionFirst;
  const from = input.sendGuard?.kind === 'dispatch' ? input.sendGuard.executionFrom : undefined;
  if (first === undefined && from === undefined) return;
  if (input.thenExecution) throw new Error('executionFirst and thenExecution are not written by one statement');
  if (first === undefined || first.from !== from) {
    throw new Error('executionFirst goes with a send guard whose executionFrom is the same status');
  }
  const { at } = checkedMoves(first);
  if (!SENDABLE_EXECUTION_STATUSES.includes(at))
    throw new Error(`executionFirst must end where a send may happen, not ${at}`);
}

/** What `annotate` writes and the conditions it is written under (see there). */
export interface AnnotationInput {
  executionId: string;
  operationId?: string;
  /** Several: while in any of them (one compare-and-set). */
  whileStatus?: OperationStatus | readonly OperationStatus[];
  /** Only while no approval has been requested or decided: of two racing requests, one writes its event. */
  whileApprovalOpen?: boolean;
  /** Only while the approval is still granted: of two senders that find one grant stale, one withdraws it. */
  whileApprovalGranted?: boolean;
  /**
   * With a patch of `approval` that asks for approval: its `requested_at` (the identifier a decision names, and when
   * the console says it was asked) is stamped by the database's clock, the one the decision's `decided_at` is on — a
   * dispatcher whose clock ran ahead showed a request made after the decision that answered it. Read once the
   * statement holds the operation's and the execution's rows (as a decision's stamp), and also the time of its event.
   */
  stampApprovalRequest?: boolean;
  /**
   * With whileApprovalGranted: only while it is still the grant decided at this time (null: none recorded) — a grant
   * withdrawn by another sender and given again by a reviewer since is not the stale one this caller judged.
   */
  whileGrantDecidedAt?: string | null;
  patch?: OperationPatch;
  /** Merged into the JSON columns instead of replacing them (what a stale read would otherwise erase). */
  merge?: OperationMerge;
  /**
   * One added to this counter of the obligation, in the statement: two writers that read the same count both count
   * (a count read before and written back would lose one of them).
   */
  countInObligation?: ObligationCounter;
  /**
   * Only while `check_count` is still this: the count the annotation's patch was decided on (see the transition's
   * whileCheckCount). A job that read the row before another job counted a read must not write its older count back.
   */
  whileCheckCount?: number;
  /**
   * Only while `updated_at` is still this: the row as the caller read it, before a read of the source it writes what
   * that read found from (an observation after VERIFIED). Every annotation and transition stamps `updated_at`, so a row
   * written since — by a newer read, or by one that wrote back the value this one read — is not the one it read: a read
   * that ended after another wrote writes nothing (not its older value back, not the same change twice). Compared at the
   * millisecond, a JS Date's precision (read through the driver, which drops what is finer).
   */
  whileUpdatedAt?: Date;
  /** Only while the obligation is still due when it was read: a re-dated one is not the one that was overdue. */
  whileObligationDueAt?: string;
  /**
   * Only while `next_check_at` is still this time: a scheduled re-check writes only while it is the one the operation
   * names, not one superseded by a later read that re-dated it (else each such read started another chain of reads).
   * Compared at the millisecond, a JS Date's precision (the time is the one its job carries, read from the row).
   */
  whileNextCheckAt?: Date;
  /**
   * Only while the obligation holds no such member: what a read showed of the effect is recorded once, by whichever of
   * two writers (a re-check job run twice at once) comes first, and never dropped for the other having written first.
   */
  whileObligationLacks?: 'effect_shown' | 'effect_shown_after_failed';
  /**
   * The event's `next_check_at` is the operation's as the statement leaves it (ISO, or null), not as the caller read it:
   * a write not guarded by the due time (a superseded re-check's) reports the next re-check in force, re-dated or not.
   */
  reportNextCheckAt?: boolean;
  /** Only while the obligation is not escalated yet: of two sweeps that find it overdue, one escalates it. */
  whileUnescalated?: boolean;
  /**
   * Only while no resolution is recorded on the obligation: a reviewer's decision (a release waiting for the dispatcher
   * included) committed after the caller's read met it, and nothing is owed any more.
   */
  whileUnresolved?: boolean;
  /**
   * Only while a reviewer's release (resolution SENT) of a never-sent operation is recorded, and it is removed:
   * the release can no longer be carried out, and the operation is a reviewer's to decide again.
   */
  withdrawRelease?: boolean;
  /**
   * With withdrawRelease: only while it is still the release recorded at this time (its resolution's `at`) — one
   * withdrawn by another sender and recorded again by a reviewer since is not the one this caller found refused.
   */
  whileReleaseAt?: string | null;
  /**
   * Only while the operation has no event of this type yet: a fact said once per operation however often its writer
   * tries (an event alone, without whileStatus). Concurrent writers see each other's when the caller took the
   * operation's row lock first in the same transaction: a read committed statement started after the lock sees what
   * the other committed.
   */
  oncePerOperation?: boolean;
  type: string;
  data?: Record<string, unknown>;
  /** The event's id, chosen by a caller that may write it again (see the transition's `eventId`). */
  eventId?: string;
}

/**
 * The one writer of statuses (I1, I2). Each move is checked by libs/status-model, then written as ONE statement:
 * a compare-and-set UPDATE of the row, a bump of the execution's event sequence, and the event INSERT.
 * No event without a change, no change without an event; the loser of a race changes nothing and learns it lost.
 * The execution row's lock orders events of one execution, so `seq` has no gaps in commit order (the SSE cursor).
 */
export class TransitionService {
  async operation(db: Queryable, input: OperationTransitionInput): Promise<TransitionResult> {
    const { operation, to } = input;
    const reason = input.reason ?? null;
    assertOperationTransition(operation.status, to, {
      actor: input.actor ?? 'system',
      terminalReason: reason,
      verificationMethod: operation.verificationMethod,
      everSent: everSent(operation),
      noChangeRequired: input.patch?.no_change_required,
      heldFor: operation.terminalReason ?? null,
      executionEnded: input.executionEnded,
    });
    if ((to === OperationStatus.SENT) !== (input.sendGuard !== undefined)) {
      throw new Error('a move to SENT, and only a move to SENT, carries a send guard');
    }
    if (input.refusedSendGuard && to !== OperationStatus.CANCELLED) {
      throw new Error('refusedSendGuard goes with a move to CANCELLED');
    }
    if (input.readBackUnbound && to !== OperationStatus.VERIFIED) {
      throw new Error('readBackUnbound goes with a move to VERIFIED');
    }
    if (input.executionEnded && to !== OperationStatus.CANCELLED) {
      throw new Error('executionEnded goes with a move to CANCELLED');
    }
    const params: unknown[] = [operation.id, operation.status, to, operation.attempt];
    const patch: OperationPatch = { ...input.patch };
    // A time the move writes by the database's clock is read once the statement holds the operation's row and its
    // execution's (STAMP_AFTER_LOCKS): read in the SET, it was taken before the statement waited for the execution's
    // row, dated before the events a writer holding it committed ahead of the move, and a send's sent_at shortened the
    // windows counted from it (the grace before its call, the settle window after) by the wait.
    const stamped = readsClock(patch);
    const sets = ['status = $3', `updated_at = ${clockOf(stamped)}`];
    if (input.bumpAttempt) sets.push('attempt = attempt + 1');
    // A move writes its own reason, null when it names none — into a settled status (terminal, held, an ACKNOWLEDGED
    // nothing reads back), out of a hold (a reviewer's release, sent), into any status no reason explains (SENT, an
    // ACKNOWLEDGED awaiting its read-back): the reason of a hold it ends, or one left on the row, no longer explains the
    // status. Only between UNKNOWN and RECONCILING does a move that names none leave the row's (keepsTerminalReason).
    const writesReason = reason !== null || input.patch?.terminal_reason !== undefined || !keepsTerminalReason(to);
    if (writesReason) patch.terminal_reason = reason;
    sets.push(...patchAssignments(patch, params, clockOf(stamped)));
    assertExecutionFirst(input);
    const sendGuard = input.sendGuard ?? input.refusedSendGuard;
    const guard =
      (sendGuard ? ` AND ${sendGuardSql(sendGuardConditions(sendGuard, params), stampOf(stamped))}` : '') +
      (requiresUnacknowledged(to, reason) ? ' AND acknowledged_at IS NULL' : '') +
      (input.readBackUnbound ? ` AND ${DECLARED_READ_BACKS_COUNT}` : '') +
      (input.executionEnded ? ` AND ${EXECUTION_ENDED_UNRELEASABLE}` : '') +
      (input.whileCheckCount !== undefined ? ` AND op.check_count = $${params.push(input.whileCheckCount)}` : '');
    const eventId = input.eventId ?? newId('evt');
    params.push(
      eventId,
      'operation.status_changed',
      json(statusEventData(input.eventData, reason, input.actor ?? 'system')),
    );
    const n = params.length;
    // The event's reason is read from the row as the statement leaves it (RETURNING), the reason it wrote or the one it
    // left standing: the two cannot differ.
    const data = eventReasonFromRow(`$${n}::jsonb`, 'moved');
    // Never both (assertExecutionFirst): the execution's moves follow the operation's, or come first in a send.
    const executionMoves = input.thenExecution ?? input.executionFirst;
    if (executionMoves) {
      const order = input.thenExecution ? 'operation-first' : 'execution-first';
      return this.withExecutionMoves(db, input, sets, guard, stamped, params, data, executionMoves, order);
    }
    const result = await rows<{ id: string; seq: string; attempt: number; execution_id: string; age_s: number }>(
      db,
      `WITH ${operationCompareAndSet(sets, guard, stamped)}, seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id
         RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
       SELECT $${n - 2}, seq.id, moved.tenant_id, seq.event_seq, moved.id, $${n - 1}, $2, $3, ${data}
       FROM moved JOIN seq ON seq.id = moved.execution_id
       RETURNING id, seq, execution_id, (SELECT attempt FROM moved) AS attempt,
                 (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM moved) AS age_s`,
      params,
    );
    if (result.length === 0) return { won: false };
    eventsWritten(db, result[0].execution_id);
    traceTransition(db, 'operation', operation.id, operation.status, to, result[0].id);
    countTransition(db, 'operation.status_changed', [{ from: operation.status, to }], {
      verificationMethod: operation.verificationMethod,
      ageSeconds: result[0].age_s,
    });
    return { won: true, eventId: result[0].id, seq: Number(result[0].seq), attempt: result[0].attempt };
  }

  /**
   * The operation's move and, when the execution is still where the caller left it, moves of the execution, as ONE
   * statement: after the operation's (`thenExecution`: the last operation settling completes it) or before it
   * (`executionFirst`: a quiet preparation and its one SENT). The execution row is locked (after the operation's, the
   * order every transition takes them; the lock the UPDATE takes anyway) before its status is judged, so the judgement
   * is of the row as committed now, not of the statement's snapshot. Its events come before or after the operation's,
   * consecutive in `seq`. Not still there, the operation's move is written alone: after it, the execution may still be
   * wherever the caller's next step takes it from; before it (a SENT), the send guard let the statement through only
   * with the execution there or running, and a writer that ends the execution takes the operation's row first.
   * `thenExecution` also needs the deadline not passed by the database's clock (after it, the execution expires instead).
   */
  private async withExecutionMoves(
    db: Queryable,
    input: OperationTransitionInput,
    sets: string[],
    guard: string,
    stamped: boolean,
    params: unknown[],
    data: string,
    execution: ExecutionMovesInput,
    order: 'execution-first' | 'operation-first',
  ): Promise<TransitionResult> {
    const { operation, to } = input;
    const { froms, at } = checkedMoves(execution);
    const first = order === 'execution-first';
    const n = params.length;
    params.push(
      execution.from,
      at,
      execution.moves.length,
      execution.moves.map(() => newId('evt')),
      froms,
      execution.moves.map((move) => move.to),
      execution.moves.map((move) => json(move.eventData ?? {})),
    );
    // The deadline by the database's clock, the one deadline_at is on (the lifecycle judges it there before each step).
    const still = first ? `e.status = $${n + 1}` : `(e.status = $${n + 1} AND e.deadline_at > clock_timestamp())`;
    const count = `$${n + 3}::int`;
    // seq.event_seq is the last number this statement takes: the operation's event is last (execution first), or the
    // execution's last move is (operation first).
    const operationSeq = first ? 'seq.event_seq' : `seq.event_seq - CASE WHEN seq.moves THEN ${count} ELSE 0 END`;
    const executionSeq = first ? `seq.event_seq - 1 - ${count} + m.ord` : `seq.event_seq - ${count} + m.ord`;
    const operationEvent = `SELECT $${n - 2}, seq.id, moved.tenant_id, ${operationSeq}, moved.id, $${n - 1}, $2::text,
              $3::text, (${data})::jsonb
       FROM moved JOIN seq ON seq.id = moved.execution_id`;
    const executionEvents = `SELECT m.event_id, seq.id, moved.tenant_id, ${executionSeq}, NULL, 'execution.status_changed',
              m.from_status, m.to_status, m.data
       FROM moved JOIN seq ON seq.id = moved.execution_id AND seq.moves,
            unnest($${n + 4}::text[], $${n + 5}::text[], $${n + 6}::text[], $${n + 7}::jsonb[])
            WITH ORDINALITY AS m(event_id, from_status, to_status, data, ord)`;
    const result = await rows<{
      id: string;
      seq: string;
      attempt: number;
      execution_id: string;
      operation_id: string | null;
      age_s: number;
    }>(
      db,
      `WITH ${operationCompareAndSet(sets, guard, stamped)}, follows AS (
         SELECT e.id, ${still} AS moves
         FROM executions e JOIN moved ON e.id = moved.execution_id
         FOR NO KEY UPDATE OF e
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1 + CASE WHEN follows.moves THEN ${count} ELSE 0 END,
                status = CASE WHEN follows.moves THEN $${n + 2} ELSE e.status END, updated_at = clock_timestamp()
         FROM follows WHERE e.id = follows.id
         RETURNING e.id, e.event_seq, follows.moves
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
       ${first ? executionEvents : operationEvent}
       UNION ALL
       ${first ? operationEvent : executionEvents}
       RETURNING id, seq, execution_id, operation_id, (SELECT attempt FROM moved) AS attempt,
                 (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM moved) AS age_s`,
      params,
    );
    const own = result.find((row) => row.operation_id !== null);
    if (!own) return { won: false };
    eventsWritten(db, own.execution_id);
    const executionMoves = result
      .filter((row) => row.operation_id === null)
      .sort((a, b) => Number(a.seq) - Number(b.seq));
    const traceOperation = () => {
      traceTransition(db, 'operation', operation.id, operation.status, to, own.id);
      countTransition(db, 'operation.status_changed', [{ from: operation.status, to }], {
        verificationMethod: operation.verificationMethod,
        ageSeconds: own.age_s,
      });
    };
    if (!first) traceOperation();
    executionMoves.forEach((event, i) =>
      traceTransition(db, 'execution', own.execution_id, froms[i], execution.moves[i].to, event.id),
    );
    if (executionMoves.length > 0) {
      countTransition(
        db,
        'execution.status_changed',
        execution.moves.map((move, i) => ({ from: froms[i], to: move.to })),
      );
    }
    if (first) traceOperation();
    return {
      won: true,
      eventId: own.id,
      seq: Number(own.seq),
      attempt: own.attempt,
      executionMoved: executionMoves.length > 0,
    };
  }

  /**
   * One decision by a person, as ONE statement: a compare-and-set on the status, the fencing attempt, the tenant and
   * "not decided yet", the decision's event and (for a deny or a resolution that moves the operation) the status
   * change with its own event, consecutive in `seq`. The loser of any race writes nothing and learns it lost.
   */
  async decide(db: Queryable, input: DecisionInput): Promise<TransitionResult> {
    if (input.whileVersionIn === undefined && input.whileVersionNotIn === undefined) return this.decideNow(db, input);
    // A decision on a version: that version covers the tenant's approval rules (operationVersionOf), so the tenant's row
    // is share-locked by a statement of its own before the decision's, in one transaction. Share-locked inside the
    // decision's statement, a policy write holding the row made it wait with the snapshot it had taken before, and a
    // cancel of the execution committed meanwhile went unseen: a release was recorded on an ended execution. Locked
    // first, the wait ends before the decision's statement takes its snapshot, and no rule changes until it commits.
    return withinTransaction(db, async (tx) => {
      await tx.query(TENANT_ROW_SHARE_LOCK, [input.tenantId]);
      return this.decideNow(tx, input);
    });
  }

  private async decideNow(db: Queryable, input: DecisionInput): Promise<TransitionResult> {
    const { operation, move } = input;
    // A release is recorded here; SENT itself is committed by the dispatcher, through the send guard (I15).
    if (move?.to === OperationStatus.SENT) throw new Error('a decision does not commit SENT; the dispatcher does');
    if (move) {
      assertOperationTransition(operation.status, move.to, {
        actor: 'human',
        terminalReason: move.reason ?? null,
        verificationMethod: operation.verificationMethod,
        everSent: everSent(operation),
        heldFor: operation.terminalReason ?? null,
        acknowledged: operation.acknowledged,
        rejected: operation.rejected,
      });
    }
    const params: unknown[] = [operation.id, input.tenantId, operation.status, operation.attempt];
    // A stamped approval's `decided_at` and the time of every event the decision writes (the decision's, the move's
    // that an operation's `failure.at` is read from) are one reading of the database's clock: one instant, one fact.
    // Read once the statement holds the operation's row and its execution's (STAMP_AFTER_LOCKS): read before the UPDATE
    // waited for a row another writer held, it dated the decision before the events that writer committed ahead of it
    // in seq, and a grant expired sooner than its validity by the wait. So is a time its patch sets by that clock (the
    // next re-check's), and its `updated_at`.
    const stamped =
      input.approvalStamp !== undefined || input.resolutionStamp === true || readsClock(input.patch ?? {});
    const sets = [
      `updated_at = ${clockOf(stamped)}`,
      ...mergeAssignments(input.merge, params, undefined, input.approvalStamp, input.resolutionStamp),
      ...patchAssignments(input.patch ?? {}, params, clockOf(stamped)),
    ];
    // A person's FAILED never stands for an effect the provider acknowledged or a re-check's read showed, also when that
    // was recorded after this decision's own read (a late 2xx, a re-check racing it): checked in the statement.
    let unchanged =
      move && requiresUnacknowledged(move.to, move.reason ?? null, 'human')
        ? ` AND acknowledged_at IS NULL AND NOT (coalesce(obligation, '{}'::jsonb) ? 'effect_shown')`
        : '';
    // Nor a person's VERIFIED for a send the provider rejected, also when its answer was recorded after this decision's
    // read (a late 4xx landing between the read and this write): checked in the statement.
    if (move && requiresUnrejected(move.to, 'human')) unchanged += ' AND rejected_at IS NULL';
    // Conditions that share-lock rows another writer may hold (`waits`), and those that read the clock (`clock`): the
    // clock is read only after every wait (clockAfterWaits), or a decision that waited past its deadline was written.
    // A stamped decision judges them at its stamp too (after the wait for the rows it writes), as a SENT's guard does:
    // judged only by the clock when the UPDATE matched the row, a grant or a release that then waited for a holder of
    // the execution's row was written with its decided_at, its resolution's at, past the deadline.
    const waits: string[] = [];
    const clock: ((reading: string) => string)[] = [];
    params.push(input.byKey);
    waits.push(
      `EXISTS (SELECT 1 FROM api_keys k WHERE k.id = $${params.length} AND k.tenant_id = $2 AND k.revoked_at IS NULL FOR SHARE)`,
    );
    if (input.whileBeforeDeadline) {
      clock.push(
        (reading) =>
          `EXISTS (SELECT 1 FROM executions de WHERE de.id = operations.execution_id AND de.deadline_at > ${reading})`,
      );
    }
    if (input.whileExecutionCarriesOutRelease) {
      clock.push((reading) => executionCarriesOutRelease('operations.execution_id', reading));
    }
    if (input.whileRequestedAt !== undefined) {
      params.push(input.whileRequestedAt);
      unchanged += ` AND approval->>'requested_at' = $${params.length}::text`;
    }
    if (input.whileVersionIn !== undefined) {
      params.push(input.whileVersionIn);
      waits.push(`${operationVersionOf('operations', undefined, 'locked')} = ANY($${params.length}::text[])`);
    }
    if (input.whileVersionNotIn !== undefined) {
      params.push(input.whileVersionNotIn);
      waits.push(`NOT ${operationVersionOf('operations', undefined, 'locked')} = ANY($${params.length}::text[])`);
    }
    unchanged += ` AND ${clockAfterWaits(waits, clock, stampOf(stamped))}`;
    if (input.investigationsSeen !== undefined) {
      params.push(input.investigationsSeen);
      unchanged += ` AND coalesce(jsonb_array_length(obligation->'investigations'), 0) = $${params.length}`;
    }
    if (input.addsInvestigationBytes !== undefined) {
      params.push(input.addsInvestigationBytes, MAX_INVESTIGATION_BYTES_PER_HOLD);
      unchanged +=
        ` AND coalesce((SELECT sum(octet_length(i->>'evidence')) FROM jsonb_array_elements(obligation->'investigations') i), 0)` +
        ` + $${params.length - 1}::int <= $${params.length}::int`;
    }
    if (move) {
      // Its own reason, null when it names none (a resolution): the hold's no longer explains the status it ends in.
      params.push(move.to, move.reason ?? null);
      sets.push(`status = $${params.length - 1}`, `terminal_reason = $${params.length}`);
    }
    // The decision's event first, then the move it makes (if any): the log reads "decided, therefore moved".
    const events: { type: string; from: string | null; to: string | null; data: Record<string, unknown> }[] = [
      { type: input.event.type, from: null, to: null, data: input.event.data },
      ...(input.alsoEvents ?? []).map((e) => ({ type: e.type, from: null, to: null, data: e.data })),
    ];
    if (move) {
      events.push({
        type: 'operation.status_changed',
        from: operation.status,
        to: move.to,
        data: statusEventData(move.eventData, move.reason ?? null, 'human'),
      });
    }
    const first = params.length + 1;
    params.push(
      events.map(() => newId('evt')),
      events.map((e) => e.type),
      events.map((e) => e.from),
      events.map((e) => e.to),
      events.map((e) => json(e.data)),
      events.length,
    );
    const count = `$${first + 5}::int`;
    const stamp = isoInstant('(SELECT at FROM stamp)');
    const data = input.resolutionStamp
      ? `CASE WHEN m.ord = 1 THEN jsonb_set(m.data, '{at}', to_jsonb(${stamp}))
              WHEN jsonb_typeof(m.data->'resolution') = 'object' THEN jsonb_set(m.data, '{resolution,at}', to_jsonb(${stamp}))
              ELSE m.data END`
      : 'm.data';
    // The move's event names the reason the statement wrote on the row (see `operation`).
    const eventData = move
      ? `CASE WHEN m.to_status IS NULL THEN ${data} ELSE ${eventReasonFromRow(`(${data})`, 'moved')} END`
      : data;
    const result = await rows<{ id: string; seq: string; execution_id: string; age_s: number }>(
      db,
      `WITH ${stamped ? `${STAMP_AFTER_LOCKS}, ` : ''}moved AS (
         UPDATE operations SET ${sets.join(', ')}
         WHERE id = $1 AND tenant_id = $2 AND status = $3 AND attempt = $4 AND ${STILL_OPEN[input.open]}${unchanged}
         RETURNING id, execution_id, tenant_id, created_at, terminal_reason
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + ${count}, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id
         RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data${stamped ? ', created_at' : ''})
       SELECT m.event_id, seq.id, moved.tenant_id, seq.event_seq - ${count} + m.ord, moved.id, m.type,
              m.from_status, m.to_status, ${eventData}${stamped ? ', (SELECT at FROM stamp)' : ''}
       FROM moved JOIN seq ON seq.id = moved.execution_id,
            unnest($${first}::text[], $${first + 1}::text[], $${first + 2}::text[], $${first + 3}::text[],
                   $${first + 4}::jsonb[]) WITH ORDINALITY AS m(event_id, type, from_status, to_status, data, ord)
       ORDER BY m.ord
       RETURNING id, seq, execution_id,
                 (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM moved) AS age_s`,
      params,
    );
    if (result.length === 0) return { won: false };
    eventsWritten(db, result[0].execution_id);
    if (move) {
      // The move's event is the later of the two.
      const moved = result.reduce((a, b) => (Number(b.seq) > Number(a.seq) ? b : a));
      traceTransition(db, 'operation', operation.id, operation.status, move.to, moved.id);
      countTransition(db, 'operation.status_changed', [{ from: operation.status, to: move.to }], {
        verificationMethod: operation.verificationMethod,
        ageSeconds: result[0].age_s,
      });
    }
    const decided = result.reduce((a, b) => (Number(b.seq) < Number(a.seq) ? b : a));
    return { won: true, eventId: decided.id, seq: Number(decided.seq) };
  }

  async execution(
    db: Queryable,
    input: {
      executionId: string;
      from: ExecutionStatus;
      to: ExecutionStatus;
      patch?: ExecutionPatch;
      eventData?: Record<string, unknown>;
    },
  ): Promise<TransitionResult> {
    return this.executionMoves(db, {
      executionId: input.executionId,
      from: input.from,
      moves: [{ to: input.to, eventData: input.eventData }],
      patch: input.patch,
    });
  }

  /**
   * Several moves of one execution back to back (created → validating → … → running) as ONE statement: each move is
   * checked by libs/status-model and gets its own event, in order, with consecutive `seq`; the row ends in the last
   * status and takes `patch`. All or nothing: if the row is no longer in `from`, nothing is written. The result is
   * the last event's.
   */
  async executionMoves(
    db: Queryable,
    input: {
      executionId: string;
      from: ExecutionStatus;
      moves: { to: ExecutionStatus; eventData?: Record<string, unknown> }[];
      patch?: ExecutionPatch;
      /**
       * Written only while the tenant's settings for each of these connectors are still at the version the caller read
       * (`ConnectorSettingsRecord.version`, null: none stored), compared as the send guard's `settings_changed` is:
       * moves judged on reads made under those settings (a preparation's context reads) are not committed once an admin
       * has changed them. Refused, nothing is written, like a lost compare-and-set.
       */
      whileSettingsAt?: SettingsAsRead[];
    },
  ): Promise<TransitionResult> {
    const { froms, at } = checkedMoves(input);
    const n = input.moves.length;
    const params: unknown[] = [input.executionId, input.from, at, n];
    const sets = ['status = $3', 'event_seq = event_seq + $4', 'updated_at = clock_timestamp()'];
    sets.push(...patchAssignments(input.patch ?? {}, params));
    let settingsUnchanged = '';
    if (input.whileSettingsAt?.length) {
      params.push(
        input.whileSettingsAt.map((read) => read.connector),
        input.whileSettingsAt.map((read) => read.version),
      );
      settingsUnchanged = ` AND NOT EXISTS (SELECT 1 FROM unnest($${params.length - 1}::text[], $${params.length}::text[])
           AS read(connector, version)
           WHERE verity_settings_version_locked(executions.tenant_id, read.connector) IS DISTINCT FROM read.version)`;
    }
    // A failure is dated by the move that ends the execution: its `at` (on the row and in the events' data) and the
    // events' time are one reading of the database's clock, taken by this statement — not a time its writer computed
    // before it (a cancel's 409 names the event's time as `decided_at`; the two must be one instant).
    // Read once the statement holds the execution's row (EXECUTION_MOVE_STAMP), as a decision's is.
    const stamped = input.patch?.failure != null;
    if (stamped) {
      const i = sets.findIndex((set) => set.startsWith('failure = $'));
      sets[i] += `::jsonb || jsonb_build_object('at', ${isoInstant('(SELECT at FROM stamp)')})`;
    }
    const first = params.length + 1;
    params.push(
      input.moves.map(() => newId('evt')),
      froms,
      input.moves.map((move) => move.to),
      input.moves.map((move) => json(move.eventData ?? {})),
    );
    const data = stamped
      ? `CASE WHEN jsonb_typeof(m.data->'failure') = 'object'
              THEN jsonb_set(m.data, '{failure,at}', to_jsonb(${isoInstant('(SELECT at FROM stamp)')}))
              ELSE m.data END`
      : 'm.data';
    const result = await rows<{ id: string; seq: string }>(
      db,
      `WITH ${stamped ? `${EXECUTION_MOVE_STAMP}, ` : ''}moved AS (
         UPDATE executions SET ${sets.join(', ')} WHERE id = $1 AND status = $2${settingsUnchanged}
         RETURNING id, tenant_id, event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data${stamped ? ', created_at' : ''})
       SELECT m.event_id, moved.id, moved.tenant_id, moved.event_seq - $4 + m.ord, NULL, 'execution.status_changed',
              m.from_status, m.to_status, ${data}${stamped ? ', (SELECT at FROM stamp)' : ''}
       FROM moved, unnest($${first}::text[], $${first + 1}::text[], $${first + 2}::text[], $${first + 3}::jsonb[])
            WITH ORDINALITY AS m(event_id, from_status, to_status, data, ord)
       ORDER BY m.ord
       RETURNING id, seq`,
      params,
    );
    if (result.length === 0) return { won: false };
    eventsWritten(db, input.executionId);
    const ordered = [...result].sort((a, b) => Number(a.seq) - Number(b.seq));
    ordered.forEach((event, i) =>
      traceTransition(db, 'execution', input.executionId, froms[i], input.moves[i].to, event.id),
    );
    countTransition(
      db,
      'execution.status_changed',
      input.moves.map((move, i) => ({ from: froms[i], to: move.to })),
    );
    const last = result.reduce((a, b) => (Number(b.seq) > Number(a.seq) ? b : a));
    return { won: true, eventId: last.id, seq: Number(last.seq) };
  }

  /**
   * An outcome evaluation that changed a verdict: the execution's criteria results and outcome plus the
   * `outcome.evaluated` event, as one statement. The compare-and-set is on the results it replaces, so of two
   * evaluators that read the same verdicts only one writes (the other's next look starts from the winner's).
   */
  async recordOutcome(
    db: Queryable,
    input: {
      executionId: string;
      previous: unknown[] | null;
      results: unknown[];
      outcome: Record<string, unknown>;
      data: Record<string, unknown>;
    },
  ): Promise<TransitionResult> {
    const eventId = newId('evt');
    const result = await rows<{ id: string; seq: string }>(
      db,
      `WITH moved AS (
         UPDATE executions SET criteria_results = $3, outcome = $4, event_seq = event_seq + 1,
                updated_at = clock_timestamp()
         WHERE id = $1 AND criteria_results IS NOT DISTINCT FROM $2::jsonb
         RETURNING id, tenant_id, event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, data)
       SELECT $5, id, tenant_id, event_seq, NULL, 'outcome.evaluated', $6 FROM moved RETURNING id, seq`,
      [input.executionId, json(input.previous), json(input.results), json(input.outcome), eventId, json(input.data)],
    );
    if (result.length === 0) return { won: false };
    eventsWritten(db, input.executionId);
    return { won: true, eventId: result[0].id, seq: Number(result[0].seq) };
  }

  /**
   * After the execution's move to an end from which nothing more is sent (cancelled, expired, failed): each of its
   * operations held before it was ever sent (the model's `heldNeverSent`) can no longer be released, and is cancelled —
   * by its own statement, which checks that end in the database. Held operations that were ever sent keep waiting for a
   * person (their effect may exist, I11). Returns how many were cancelled.
   */
  async cancelHeldOfEndedExecution(
    db: Queryable,
    operations: readonly OperationSnapshot[],
    eventData: Record<string, unknown>,
  ): Promise<number> {
    let cancelled = 0;
    for (const operation of operations) {
      if (!heldNeverSent(operation)) continue;
      const result = await this.operation(db, {
        operation,
        to: OperationStatus.CANCELLED,
        executionEnded: true,
        eventData,
      });
      if (result.won) cancelled += 1;
    }
    return cancelled;
  }

  /**
   * A fact that is not a status change (approval requested, knowledge conflict, observation...), optionally
   * updating operation fields while the operation is still in `whileStatus`: same atomicity as a transition.
   */
  async annotate(db: Queryable, input: AnnotationInput): Promise<TransitionResult> {
    assertAnnotationGuards(input);
    const eventId = input.eventId ?? newId('evt');
    if (!input.operationId || !input.whileStatus) {
      const once = input.oncePerOperation
        ? ` AND NOT EXISTS (SELECT 1 FROM events WHERE operation_id = $3 AND type = $4)`
        : '';
      const result = await rows<{ id: string; seq: string }>(
        db,
        `WITH seq AS (
           UPDATE executions SET event_seq = event_seq + 1, updated_at = clock_timestamp() WHERE id = $1${once}
           RETURNING id, tenant_id, event_seq
         )
         INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, data)
         SELECT $2, id, tenant_id, event_seq, $3, $4, $5 FROM seq RETURNING id, seq`,
        [input.executionId, eventId, input.operationId ?? null, input.type, json(input.data ?? {})],
      );
      if (result.length) eventsWritten(db, input.executionId);
      return result.length ? { won: true, eventId: result[0].id, seq: Number(result[0].seq) } : { won: false };
    }
    const params: unknown[] = [input.operationId, input.whileStatus];
    const inStatus = Array.isArray(input.whileStatus) ? 'status = ANY($2::text[])' : 'status = $2';
    // A stamped request's requested_at, a time the patch sets by the database's clock (a next re-check's), the row's
    // updated_at and the event's time are one reading of that clock, taken once the statement holds the operation's row
    // and its execution's (STAMP_AFTER_LOCKS, as a decision's): read in the SET, before a wait for a writer holding
    // either, they were dated before the events that writer committed ahead of this one in seq.
    const stamped = input.stampApprovalRequest === true || readsClock(input.patch ?? {});
    const sets = [
      `updated_at = ${clockOf(stamped)}`,
      ...patchAssignments(input.patch ?? {}, params, clockOf(stamped)),
      ...mergeAssignments(input.merge ?? {}, params, input.countInObligation),
      ...(input.withdrawRelease ? [`obligation = obligation - 'resolution'`] : []),
    ];
    if (input.stampApprovalRequest) {
      const at = sets.findIndex((set) => set.startsWith('approval = $'));
      if (at < 0) throw new Error('annotate: stampApprovalRequest goes with a patch of approval');
      sets[at] += `::jsonb || jsonb_build_object('requested_at', ${isoInstant('(SELECT at FROM stamp)')})`;
    }
    let obligationDue = '';
    if (input.whileObligationDueAt !== undefined) {
      params.push(input.whileObligationDueAt);
      obligationDue = ` AND obligation->>'due_at' = $${params.length}`;
    }
    if (input.whileNextCheckAt !== undefined) {
      params.push(input.whileNextCheckAt);
      // At the millisecond, as the caller has it (a JS Date, read through the driver, which drops what is finer): a
      // next_check_at written with microseconds (stamped by the database's clock, or by hand) still names its job.
      obligationDue += ` AND date_trunc('milliseconds', next_check_at) = $${params.length}::timestamptz`;
    }
    if (input.whileCheckCount !== undefined) {
      params.push(input.whileCheckCount);
      obligationDue += ` AND check_count = $${params.length}`;
    }
    if (input.whileUpdatedAt !== undefined) {
      params.push(input.whileUpdatedAt);
      obligationDue += ` AND date_trunc('milliseconds', updated_at) = $${params.length}::timestamptz`;
    }
    if (input.whileObligationLacks !== undefined) {
      params.push(input.whileObligationLacks);
      obligationDue += ` AND NOT (coalesce(obligation, '{}'::jsonb) ? $${params.length}::text)`;
    }
    if (input.whileUnescalated) obligationDue += ` AND obligation->>'escalated_at' IS NULL`;
    if (input.whileUnresolved) obligationDue += ` AND ${STILL_OPEN.resolution}`;
    if (input.whileGrantDecidedAt !== undefined) {
      params.push(input.whileGrantDecidedAt);
      obligationDue += ` AND approval->>'decided_at' IS NOT DISTINCT FROM $${params.length}::text`;
    }
    if (input.whileReleaseAt !== undefined) {
      params.push(input.whileReleaseAt);
      obligationDue += ` AND obligation->'resolution'->>'at' IS NOT DISTINCT FROM $${params.length}::text`;
    }
    params.push(eventId, input.type, json(input.data ?? {}));
    const n = params.length;
    const data = input.reportNextCheckAt
      ? `$${n}::jsonb || jsonb_build_object('next_check_at', ${isoInstant('moved.next_check_at')})`
      : `$${n}`;
    const approvalOpen =
      (input.whileApprovalOpen
        ? ` AND coalesce(approval->>'state', '') NOT IN ('requested', 'granted', 'denied')`
        : '') +
      (input.whileApprovalGranted ? ` AND approval->>'state' = 'granted'` : '') +
      (input.withdrawRelease ? ` AND attempt = 0 AND obligation->'resolution'->>'status' = 'SENT'` : '');
    const result = await rows<{ id: string; seq: string }>(
      db,
      `WITH ${stamped ? `${STAMP_AFTER_LOCKS}, ` : ''}moved AS (
         UPDATE operations SET ${sets.join(', ')} WHERE id = $1 AND ${inStatus}${approvalOpen}${obligationDue}
         RETURNING id, execution_id, tenant_id${input.reportNextCheckAt ? ', next_check_at' : ''}
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, data${stamped ? ', created_at' : ''})
       SELECT $${n - 2}, seq.id, moved.tenant_id, seq.event_seq, moved.id, $${n - 1}, ${data}${stamped ? ', (SELECT at FROM stamp)' : ''}
       FROM moved JOIN seq ON seq.id = moved.execution_id
       RETURNING id, seq`,
      params,
    );
    if (result.length) eventsWritten(db, input.executionId);
    return result.length ? { won: true, eventId: result[0].id, seq: Number(result[0].seq) } : { won: false };
  }
}

/**
 * An annotation's conditions and writes are made by the compare-and-set on the operation's status: without an operation
 * and a status to hold it to, there is none, and they would be dropped in silence (an event written, no guard checked,
 * no patch or merge made). Each "this very decision" condition also needs the condition it narrows. A caller that asks
 * for either is a bug, thrown before anything is written.
 */
function assertAnnotationGuards(input: AnnotationInput): void {
  const conditional =
    input.whileApprovalOpen ||
    input.whileApprovalGranted ||
    input.whileGrantDecidedAt !== undefined ||
    input.patch !== undefined ||
    input.merge !== undefined ||
    input.countInObligation !== undefined ||
    input.whileCheckCount !== undefined ||
    input.whileUpdatedAt !== undefined ||
    input.whileObligationDueAt !== undefined ||
    input.whileNextCheckAt !== undefined ||
    input.whileObligationLacks !== undefined ||
    input.reportNextCheckAt ||
    input.whileUnescalated ||
    input.whileUnresolved ||
    input.withdrawRelease ||
    input.whileReleaseAt !== undefined;
  if (conditional && (!input.operationId || !input.whileStatus)) {
    throw new Error('annotate: a condition, a patch or a merge needs operationId and whileStatus');
  }
  if (input.oncePerOperation && (!input.operationId || input.whileStatus)) {
    throw new Error('annotate: oncePerOperation needs operationId and goes with an event alone (no whileStatus)');
  }
  if (input.whileGrantDecidedAt !== undefined && !input.whileApprovalGranted) {
    throw new Error('annotate: whileGrantDecidedAt narrows whileApprovalGranted, which is missing');
  }
  if (input.whileReleaseAt !== undefined && !input.withdrawRelease) {
    throw new Error('annotate: whileReleaseAt narrows withdrawRelease, which is missing');
  }
  if (input.withdrawRelease && (input.merge?.obligation !== undefined || input.countInObligation !== undefined)) {
    throw new Error('annotate: withdrawRelease writes the obligation; it cannot be merged into or counted in as well');
  }
}
