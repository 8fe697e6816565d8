import {
  DEPENDENCY_DONE_STATUSES,
  ExecutionStatus,
  DEPENDENCY_DONE_WITHOUT_READ_BACK_STATUSES,
  RELEASABLE_EXECUTION_STATUSES,
  RESEND_BLOCKING_STATUSES,
  SENDABLE_EXECUTION_STATUSES,
  TERMINAL_EXECUTION_STATUSES,
  VerificationMethod,
} from '@verity/status-model';
import { refutedUpTheChainLocked } from './retry-chain';
import { approvalPolicyOf } from './tenant-policy';
import { Queryable, rows, sqlLiterals } from './sql';

/**
 * What the statement that commits SENT checks in the database besides the status compare-and-set (I15), so a stray,
 * duplicated, replayed or hand-made dispatch job cannot send early or twice whatever the worker read before it.
 * - `dispatch`: the lifecycle's send of a PREPARED operation, while its execution runs and before its deadline.
 *   `approvalRequired` is the tenant's approval policy for this operation, decided by the caller from a fresh read (the
 *   agent's own `requires_approval` is checked here).
 * - `release`: a human released an operation held in MANUAL_REVIEW; the resolution must be on the row, the execution
 *   not ended by a cancel, its deadline or a failure, and every dependency done.
 */
export type SendGuard = (
  | {
      kind: 'dispatch';
      approvalRequired: boolean;
      /**
       * The tenant's approval policy `approvalRequired` was decided from, as the read found it stored (`approvalPolicyOf`;
       * null: no tenant row). An operation with no approval recorded and none asked for by the agent is sent only while
       * it is still the stored policy: a rule an admin added after the read holds the send. Undefined: not checked.
       */
      approvalPolicy?: string | null;
      /**
       * The execution's status when the same statement moves it on to running before the send (a quiet preparation
       * written with its one send: TransitionService `executionFirst`): the execution may still be there. Undefined:
       * it must already be running.
       */
      executionFrom?: ExecutionStatus;
    }
  | {
      kind: 'release';
      /**
       * The tenant's approval policy (or the agent) requires approval of this operation, decided by the caller from a
       * fresh read: the release is sent only with a granted, unexpired approval — the one a reviewer's release records
       * with it. Undefined: not checked (an approval already recorded must still be granted and unexpired).
       */
      approvalRequired?: boolean;
      /**
       * As a dispatch's: the stored policy `approvalRequired` was decided from. A release that needed no approval when
       * it was read is sent only while that is still the policy: a rule an admin added since withdraws it.
       */
      approvalPolicy?: string | null;
    }
) & {
  /**
   * The version of the tenant's settings for the connector (allowlist, caps) the send was prepared with, when they were
   * read before this statement (`ConnectorSettingsRecord.version`): the send commits only while they are still the
   * stored ones. Undefined: not checked.
   */
  settingsVersion?: string | null;
};

/** Why a guarded SENT commit was refused (stable names: they appear in logs, job results and the metric). */
export type SendRefusal =
  | 'execution_not_running'
  | 'precondition_unread'
  | 'dependency_not_done'
  | 'approval_not_granted'
  | 'approval_key_revoked'
  | 'approval_policy_changed'
  | 'release_not_resolved'
  | 'release_key_revoked'
  | 'reference_unsettled'
  | 'retry_refuted'
  | 'execution_ended'
  | 'settings_changed'
  | 'status_moved';

/**
 * One named condition of the guard (a `SendRefusal` when it does not hold). `evaluation`: `may-wait`, it share-locks
 * rows a writer may hold, so judging it can wait for that writer's commit; `reads-clock`, it reads the database's clock
 * (a deadline, an approval's expiry) and is judged only after every condition that may wait (`sendGuardSql`).
 */
export type SendCondition =
  | { name: SendRefusal; sql: string; evaluation?: 'may-wait' }
  | {
      name: SendRefusal;
      /** Judged by the database's clock now (`atClock('clock_timestamp()')`). */
      sql: string;
      evaluation: 'reads-clock';
      /** The condition judged at the instant the SQL expression `clock` names (a statement's `stamp`). */
      atClock: (clock: string) => string;
    };

/** The database's clock now. */
const NOW = 'clock_timestamp()';

/** A condition that reads the clock, judged now (`sql`) or at another reading of it (`atClock`). */
function readsClock(name: SendRefusal, atClock: (clock: string) => string): SendCondition {
  return { name, evaluation: 'reads-clock', sql: atClock(NOW), atClock };
}

/**
 * Every depends_on key: its latest generation in the same execution has reached what dependants need (a VERIFIED whose
 * send the provider's late rejection contradicted has not: status model `dependencySatisfied`).
 */
const DEPENDENCIES_DONE: SendCondition = {
  name: 'dependency_not_done',
  evaluation: 'may-wait',
  sql: `NOT EXISTS (
              SELECT 1 FROM unnest(op.depends_on) AS dep(key)
              WHERE NOT coalesce((
                SELECT (d.status IN (${sqlLiterals(DEPENDENCY_DONE_STATUSES)}) AND d.rejected_at IS NULL)
                       OR (d.status IN (${sqlLiterals(DEPENDENCY_DONE_WITHOUT_READ_BACK_STATUSES)})
                           AND d.verification_method <> '${VerificationMethod.READ_AFTER_WRITE}')
                FROM operations d WHERE d.execution_id = op.execution_id AND d.key = dep.key
                ORDER BY d.generation DESC LIMIT 1 FOR SHARE), false))`,
};

/**
 * Refusals after which a reviewer's release cannot be carried out as recorded: the execution ended, an operation it
 * depends on is not done, or it needs an approval it does not hold (required since the release was recorded, or its
 * grant expired). The release is withdrawn (the operation is the reviewer's to decide again: cancel it, or release it
 * once the dependency is done — a new release records a new grant) rather than left recorded and never sent.
 */
export function withdrawsRelease(refusals: readonly SendRefusal[]): boolean {
  return refusals.some(
    (r) =>
      r === 'execution_ended' ||
      r === 'dependency_not_done' ||
      r === 'approval_not_granted' ||
      r === 'approval_key_revoked' ||
      r === 'release_key_revoked' ||
      r === 'reference_unsettled' ||
      r === 'retry_refuted',
  );
}

/**
 * Refusals that say the tenant changed what the send was prepared from (the connector's settings, the approval policy):
 * the caller reads everything again and prepares the send anew.
 */
export function preparedFromStaleRead(refusals: readonly SendRefusal[] | undefined): boolean {
  return refusals?.some((r) => r === 'settings_changed' || r === 'approval_policy_changed') ?? false;
}

/**
 * Required (by the agent or the tenant's policy, `required`; undefined: only the agent's flag): granted and not
 * expired. Any recorded request or denial blocks even where no longer required: a decision is owed first.
 */
function approvalGranted(required: boolean | undefined, params: unknown[]): SendCondition {
  params.push(required ?? false);
  const n = params.length;
  return readsClock(
    'approval_not_granted',
    (clock) => `CASE WHEN op.approval->>'state' IS NULL THEN NOT ($${n}::boolean OR op.requires_approval)
               ELSE op.approval->>'state' = 'granted'
                    AND (op.approval->>'expires_at' IS NULL
                         OR (op.approval->>'expires_at')::timestamptz > ${clock}) END`,
  );
}

/**
 * A grant on the row carries authority only while the key that gave it (`decided_by`, of the operation's tenant) stands:
 * revoking a reviewer's key withdraws the approvals it gave that have not been used yet. The key's row is share-locked,
 * as a decision's statement does: a revocation under way is waited for and then refuses the send, and one that comes
 * later waits for the send to commit — the grant was used while its key stood. A grant that names no key (none is
 * written so) is judged by the other conditions alone.
 */
const APPROVAL_KEY_STANDS: SendCondition = {
  name: 'approval_key_revoked',
  evaluation: 'may-wait',
  sql: `op.approval->>'state' IS DISTINCT FROM 'granted' OR op.approval->>'decided_by' IS NULL
        OR EXISTS (SELECT 1 FROM api_keys gk WHERE gk.id = op.approval->>'decided_by' AND gk.tenant_id = op.tenant_id
                   AND gk.revoked_at IS NULL FOR SHARE)`,
};

/**
 * A reviewer's release is carried out only while the key that recorded it (`resolution.by`) stands, as a grant is: a
 * release by a key revoked before the send is withdrawn, for a reviewer to decide again. Share-locked the same way.
 */
const RELEASE_KEY_STANDS: SendCondition = {
  name: 'release_key_revoked',
  evaluation: 'may-wait',
  sql: `op.obligation->'resolution'->>'by' IS NULL
        OR EXISTS (SELECT 1 FROM api_keys rk WHERE rk.id = op.obligation->'resolution'->>'by'
                   AND rk.tenant_id = op.tenant_id AND rk.revoked_at IS NULL FOR SHARE)`,
};

/**
 * An operation naming a `resend_ref` (the caller's name for its effect at a provider that does not deduplicate: the SMS
 * `client_ref`) is not sent while another of the tenant's operations on its connector naming it was sent and is not
 * settled (`blocksResend`): it may have made the effect, and a second send would make it again — the blind re-send
 * intake refuses (`409 reference-unsettled`). Intake judged it before this one was sent; the other may have gone out,
 * and timed out, since (it waited for an approval, a dependency, or was submitted at the same moment). The sender
 * takes the reference's lock before this statement (commitWithinSpendingCaps `resendRef`), so of two sends of one
 * reference the second sees the first's SENT. One probe of the partial index operations_unsettled_resend_ref, made
 * only for an operation that names a reference.
 */
const RESEND_SETTLED: SendCondition = {
  name: 'reference_unsettled',
  sql: `op.resend_ref IS NULL OR NOT EXISTS (SELECT 1 FROM operations ro WHERE ro.tenant_id = op.tenant_id
          AND ro.connector = op.connector AND ro.resend_ref = op.resend_ref AND ro.resend_ref IS NOT NULL
          AND ro.id <> op.id AND ro.status IN (${sqlLiterals(RESEND_BLOCKING_STATUSES)}) AND ro.attempt > 0)`,
};

/**
 * The tenant's approval policy changed since the caller judged this operation against it (`policy`, as stored; undefined:
 * not checked): an approval already recorded, or asked for by the agent, stands either way; otherwise the send is judged
 * again from the new policy.
 */
function approvalPolicyUnchanged(policy: string | null | undefined, params: unknown[]): SendCondition[] {
  if (policy === undefined) return [];
  params.push(policy);
  return [
    {
      name: 'approval_policy_changed',
      evaluation: 'may-wait',
      sql: `op.approval->>'state' IS NOT NULL OR op.requires_approval
            OR (SELECT ${approvalPolicyOf('gt')} FROM tenants gt WHERE gt.id = op.tenant_id FOR SHARE)
               IS NOT DISTINCT FROM $${params.length}::text`,
    },
  ];
}

/**
 * A retry (`retry_of`) is made on the word of a FAILED: "no effect exists, a retry is safe". That word can be
 * contradicted after the retry was accepted and before it is sent — the provider's 2xx comes back late, or a read of the
 * source that raced the FAILED shows the effect (`failureRefuted` in the status model) — and then the retry would make
 * the effect twice, which the retry's intake now refuses (`409 effect-exists`). So the retry is not sent while any
 * operation up its chain of retries (a retry of a retry is made on the same word) is such a FAILED. One probe of the
 * primary key per link, made only for a retry.
 */
const RETRY_NOT_REFUTED: SendCondition = {
  name: 'retry_refuted',
  evaluation: 'may-wait',
  sql: `op.retry_of IS NULL OR NOT ${refutedUpTheChainLocked('op.retry_of', 'op.tenant_id')}`,
};

/**
 * Whether the execution `executionId` (an SQL expression) can still carry out a release of one of its operations: not
 * cancelled, expired or failed, nor past its deadline before the sweeper expired it (by the database's clock, the one
 * every process shares; `clock`, the reading of it judged by, is now unless given) — nothing more is sent for it,
 * whoever asked. A completed execution is not bound by its deadline any more. The send guard's condition for a
 * release, and the one the statement recording a release checks.
 */
export function executionCarriesOutRelease(executionId: string, clock = NOW): string {
  return `EXISTS (SELECT 1 FROM executions ge WHERE ge.id = ${executionId}
                    AND ge.status IN (${sqlLiterals(RELEASABLE_EXECUTION_STATUSES)})
                    AND (ge.status IN (${sqlLiterals(TERMINAL_EXECUTION_STATUSES)}) OR ge.deadline_at > ${clock}))`;
}

/**
 * The guard as named SQL conditions on the operation row aliased `op`; `params` receives their parameters. One
 * definition serves the SENT statement (all of them, `sendGuardSql`) and the diagnosis of a refusal (each one by name).
 */
export function sendGuardConditions(guard: SendGuard, params: unknown[]): SendCondition[] {
  const settings: SendCondition[] = [];
  if (guard.settingsVersion !== undefined) {
    params.push(guard.settingsVersion);
    settings.push({
      // The tenant changed the connector's settings since they were read: the send is prepared again from the new ones.
      // The version is read after the connector's spending-caps lock (shared) and by a query of its own, not from this
      // statement's snapshot: a change being written holds that lock, so this send waits for it and then sees it.
      name: 'settings_changed',
      evaluation: 'may-wait',
      sql: `verity_settings_version_locked(op.tenant_id, op.connector) IS NOT DISTINCT FROM $${params.length}::text`,
    });
  }
  if (guard.kind === 'release') {
    return [
      { name: 'release_not_resolved', sql: `(op.obligation->'resolution'->>'status') IS NOT DISTINCT FROM 'SENT'` },
      RELEASE_KEY_STANDS,
      readsClock('execution_ended', (clock) => executionCarriesOutRelease('op.execution_id', clock)),
      DEPENDENCIES_DONE,
      approvalGranted(guard.approvalRequired, params),
      APPROVAL_KEY_STANDS,
      RESEND_SETTLED,
      RETRY_NOT_REFUTED,
      ...approvalPolicyUnchanged(guard.approvalPolicy, params),
      ...settings,
    ];
  }
  const approvalPolicy = approvalPolicyUnchanged(guard.approvalPolicy, params);
  const sendable = [...SENDABLE_EXECUTION_STATUSES];
  if (guard.executionFrom !== undefined) sendable.push(guard.executionFrom);
  return [
    {
      name: 'execution_not_running',
      sql: `EXISTS (SELECT 1 FROM executions ge WHERE ge.id = op.execution_id
                    AND ge.status IN (${sqlLiterals(sendable)}))`,
    },
    // Not past the execution's deadline, by the database's clock (the one every process shares): the worker judged it
    // by its own clock before the context reads, and a worker paused or behind since must not send what the sweeper
    // is about to expire.
    readsClock(
      'execution_ended',
      (clock) => `EXISTS (SELECT 1 FROM executions ge WHERE ge.id = op.execution_id AND ge.deadline_at > ${clock})`,
    ),
    // A precondition read is owed (the source could not be read): nothing is sent until it has been read and agrees.
    { name: 'precondition_unread', sql: `op.next_check_at IS NULL` },
    DEPENDENCIES_DONE,
    approvalGranted(guard.approvalRequired, params),
    APPROVAL_KEY_STANDS,
    RESEND_SETTLED,
    RETRY_NOT_REFUTED,
    ...approvalPolicy,
    ...settings,
  ];
}

/** The SQL conditions ANDed, each in parentheses. */
const and = (sqls: readonly string[]) => sqls.map((sql) => `(${sql})`).join(' AND ');

/**
 * The conditions as one SQL boolean ANDed into the statement that commits SENT (or the move that refuses a send). Postgres
 * evaluates ANDed conditions in whatever order its planner puts them (by estimated cost), so a condition that reads the
 * clock could be judged before one that waits for a row lock: a send that waited for a writer past its execution's
 * deadline, or its grant's expiry, would commit SENT after it. A CASE evaluates its WHEN before its THEN, and only when
 * reached (clock_timestamp() is volatile, so nothing of it is folded at planning): the conditions that wait are judged
 * first, then the clock is read — after every wait, by the database's clock. The other conditions neither wait nor read
 * the clock, and stay ANDed around it where the planner likes them (its pulled-up join of the execution's status).
 *
 * `stamp` (an SQL expression: the statement's `stamp`, STAMP_AFTER_LOCKS in TransitionService): the reading of the clock
 * the statement writes its times from (a SENT's `sent_at`), taken once it holds the operation's and the execution's rows
 * — after the wait for a writer holding them, which the guard's own reading of the clock came before. The conditions
 * that read the clock are judged at the stamp too, so no row shows a send dated past its deadline or its grant's expiry:
 * a send whose stamp is past either writes nothing. They are judged by the clock now first, and the stamp read only
 * when every other condition holds — the stamp locks the rows, and a compare-and-set lost in the statement's snapshot
 * (the status moved, the execution not running, a deadline already passed) locks nothing. So everything is in the CASE:
 * its WHEN short-circuits, where conditions ANDed beside it (a pulled-up join of the execution's status) could be
 * judged after it.
 */
export function sendGuardSql(conditions: readonly SendCondition[], stamp?: string): string {
  const sqlOf = (evaluation: SendCondition['evaluation']) =>
    conditions.filter((c) => c.evaluation === evaluation).map((c) => c.sql);
  const [rest, waits] = [sqlOf(undefined), sqlOf('may-wait')];
  const clock = conditions.flatMap((c) => (c.evaluation === 'reads-clock' ? [c.atClock] : []));
  if (clock.length === 0) return and([...rest, ...waits]);
  if (stamp === undefined) return and([...rest, clockAfterWaits(waits, clock)]);
  return clockAfterWaits([...rest, ...waits], clock, stamp);
}

/**
 * SQL: every condition of `waits` (each may wait for a row lock) and of `clock` (each reads the database's clock: given
 * the SQL of a reading of it, its condition at that reading), the clock read only after every wait:
 * `CASE WHEN <waits> THEN <clock> ELSE false END` (sendGuardSql says why ANDed conditions give no such order). Also for
 * a person's decision that holds only before a deadline (TransitionService). Given `stamp` (the statement's stamp, the
 * reading its times are written from), the clock conditions are judged by the clock now and then at the stamp, as
 * sendGuardSql does: `CASE WHEN <waits> AND <clock, now> THEN <clock, at the stamp> ELSE false END` — the stamp, which
 * locks rows, is read only once everything else holds.
 */
export function clockAfterWaits(
  waits: readonly string[],
  clock: readonly ((reading: string) => string)[],
  stamp?: string,
): string {
  if (clock.length === 0) return waits.length === 0 ? 'true' : and(waits);
  const now = clock.map((at) => at(NOW));
  if (stamp === undefined)
    return `CASE WHEN ${waits.length === 0 ? 'true' : and(waits)} THEN ${and(now)} ELSE false END`;
  return `CASE WHEN ${and([...waits, ...now])} THEN ${and(clock.map((at) => at(stamp)))} ELSE false END`;
}

/**
 * After a guarded SENT commit changed nothing: which condition refused it, read now. An empty list means every
 * condition holds, so the status or attempt had moved on (a lost race, or a duplicate job after the send).
 */
export async function sendRefusals(db: Queryable, operationId: string, guard: SendGuard): Promise<SendRefusal[]> {
  const params: unknown[] = [operationId];
  const conditions = sendGuardConditions(guard, params);
  const [row] = await rows<Record<string, boolean>>(
    db,
    `SELECT ${conditions.map((c, i) => `coalesce((${c.sql}), false) AS c${i}`).join(', ')}
     FROM operations op WHERE op.id = $1`,
    params,
  );
  if (!row) return [];
  return conditions.filter((_, i) => row[`c${i}`] !== true).map((c) => c.name);
}
