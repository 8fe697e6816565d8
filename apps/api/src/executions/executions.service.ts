import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  ConnectorRegistry,
  TenantConnectors,
  type TenantConnectorSettings,
  operationCapabilities,
  readBackBindingProblems,
  resendReference,
  secretBindingProblems,
} from '@verity/connectors';
import {
  TransitionService,
  amountCapsOf,
  NewExecution,
  findExecution,
  findExecutionMove,
  findExecutionWithBytesWithSecretsHeld,
  type ExecutionEntity,
  Queryable,
  idempotencyHolder,
  type IdempotencyHolder,
  findOperations,
  findOperationsOf,
  insertExecution,
  listEventsWithinBytes,
  listExecutionsWithSecretsHeld,
  NewOperation,
  lockActiveKey,
  lockExecution,
  preparedOperation,
  snapshotOf,
  transaction,
} from '@verity/persistence';
import { VERITY_CONFIG, VerityConfig, currentTraceparent, inTraceOf, newId } from '@verity/platform';
import { JobName, JobProducer } from '@verity/queues';
import {
  CANCEL_CAUSE_OF_ENDED_EXECUTION,
  ExecutionStatus,
  OperationStatus,
  VerificationMethod,
  executionFailure,
  isTerminalExecution,
} from '@verity/status-model';
import { DataSource, EntityManager } from 'typeorm';
import type { Principal } from '../auth/principal';
import { submissions } from '../metrics/metrics';
import { FieldError, Problem } from '../problem/problem';
import { ResolutionOptionsService } from '../operations/resolution-options.service';
import { resolveEventCursor } from './event-cursor';
import { AnswerHold, withAnswerBytes } from '../answer-bytes';
import { findExecutionForAnswer, readForAnswer, readSnapshotForAnswer } from './execution-read';
import { ABSENT_MEANS, requestHash, sentBodyHash } from './idempotency';
import { ExecutionView, presentEvent, presentExecution } from './presenter';
import { Submission, capAmountErrors, referenceUnsettled, toCriterion, validateSubmission } from './submission';
import { PAGE_BYTES } from '../http/parse';
import { refuseSecretValuesIn, secretValueErrors } from '../http/secret-values';

export const DEFAULT_DEADLINE_SECONDS = 600;

@Injectable()
export class ExecutionsService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly transitions: TransitionService,
    private readonly producer: JobProducer,
    private readonly connectors: ConnectorRegistry,
    private readonly tenantConnectors: TenantConnectors,
    private readonly holds: ResolutionOptionsService,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
  ) {}

  async submit(
    principal: Principal,
    body: unknown,
    idempotencyKey: string | undefined,
  ): Promise<{ execution: ExecutionView; replayed: boolean }> {
    const idempotency =
      idempotencyKey === undefined
        ? null
        : {
            key: idempotencyKey,
            requestHash: requestHash(body),
            // What an earlier version recorded for this body, still the same request's (see sentBodyHash).
            sameAs: [sentBodyHash(body)],
            ttlMs: this.config.IDEMPOTENCY_TTL_MS,
            abandonAfterMs: 60_000,
          };
    let submission: Submission;
    try {
      const validated = validateSubmission(body, this.connectors);
      if ('errors' in validated) throw Problem.validation(validated.errors);
      submission = validated.ok;
      await this.refuseSecretValues(
        principal,
        submission,
        this.secretConnectors(connectorsOf(submission)),
        idempotencyKey,
      );
      await this.refuseUnboundReadBacks(principal, submission);
    } catch (error) {
      // These checks judge the request by the rules as they are now: the tenant's settings, and the schemas of this
      // version. A key that already holds an execution is answered first (the replay, 422 or 409), as it is for an
      // amount cap: a 400 says "nothing was written" about a request whose execution was written — and may have made
      // its effect — before the admin changed the settings (or an upgrade tightened a schema).
      const held = idempotency && error instanceof Problem ? await this.heldKeyAnswer(principal, idempotency) : null;
      if (held) return held;
      throw error;
    }
    if (idempotency === null)
      return { execution: (await this.create(principal, submission, null)) as ExecutionView, replayed: false };

    // The intake statement takes the key and writes the execution together; when it wrote nothing, another record
    // holds the key. A record that vanished meanwhile (expired and pruned) is simply tried again.
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const created = await this.create(principal, submission, idempotency);
      if (created === 'busy')
        throw inFlight('a request with this Idempotency-Key is still being processed; retry shortly');
      if (created) return { execution: created, replayed: false };
      const held = await this.heldKeyAnswer(principal, idempotency);
      if (held) return held;
    }
    throw inFlight('the record of this Idempotency-Key kept changing while this request ran; retry shortly');
  }

  /** The answer for the key when another request's record holds it (answerHeldKey); null when none does. */
  private async heldKeyAnswer(
    principal: Principal,
    idempotency: { key: string; requestHash: string; sameAs: readonly string[]; abandonAfterMs: number },
  ): Promise<{ execution: ExecutionView; replayed: boolean } | null> {
    const holder = await idempotencyHolder(
      this.db.manager,
      principal.tenantId,
      idempotency.key,
      [idempotency.requestHash, ...idempotency.sameAs],
      idempotency.abandonAfterMs,
    );
    return holder ? this.answerHeldKey(principal, holder) : null;
  }

  /** I8: the answer for a key another request's record holds: its execution (replayed), 422 or 409. */
  private async answerHeldKey(
    principal: Principal,
    holder: IdempotencyHolder,
  ): Promise<{ execution: ExecutionView; replayed: boolean }> {
    switch (holder.kind) {
      case 'mismatch':
        throw Problem.idempotencyKeyReused();
      case 'in_flight':
        throw inFlight('a request with this Idempotency-Key is still being processed; retry shortly');
      case 'replay':
        return { execution: await this.get(principal, holder.executionId), replayed: true };
    }
  }

  /**
   * 400 before anything is written when an operation's amount could not be charged against the tenant's cap. Asked
   * only when the intake statement found an amount cap on one of the connectors (most tenants have none, and then
   * intake costs no read of its own for it).
   */
  private async refuseUnchargeableAmounts(principal: Principal, submission: Submission): Promise<void> {
    const caps = await amountCapsOf(this.db.manager, principal.tenantId, connectorsOf(submission));
    if (caps.size === 0) return;
    const errors = capAmountErrors(submission, caps);
    if (errors.length > 0) throw Problem.validation(errors);
  }

  /** Of `among` (every connector when omitted), those that take tenant secrets (http). */
  private secretConnectors(among?: readonly string[]): string[] {
    const taking = this.tenantConnectors.secretsAccess().connectors;
    return among ? taking.filter((name) => among.includes(name)) : taking;
  }

  /**
   * 400 before anything is written when the submission misuses one of the tenant's secrets for `connectors`, read once
   * per connector for both rules:
   * - anything it would store holds a secret's value (an operation's params or expected_state, an SMS body, the
   *   intent, a criterion): secret values are never stored or returned. An http operation names it
   *   `{{secret:NAME}}` and the connector fills it in at the call. The answer names the field, never the secret nor
   *   where in the field it was found (a secret should be long and random; see docs/connectors.md).
   * - an operation names a secret in a header of a request whose host's allowlist entry does not bind it
   *   (`allow_hosts[].secrets`): the secret is meant for other hosts. The answer names the secret, the header and the
   *   host (never a value); the connector applies the same rule at the call, for an operation accepted before.
   * Called before intake for the secret-taking connectors the submission uses; for the others only when the intake
   * statement finds the tenant has secrets for them (most tenants have none, and then it costs no read of its own).
   */
  private async refuseSecretValues(
    principal: Principal,
    submission: Submission,
    connectors: string[],
    /** Stored with the execution too (and its record), so looked through as the body is. */
    idempotencyKey: string | undefined,
  ): Promise<void> {
    const errors: FieldError[] = [];
    for (const connector of connectors) {
      const settings = await this.tenantConnectors.settingsOf({ tenantId: principal.tenantId, connector });
      errors.push(...this.unboundSecretErrors(submission, connector, settings));
      for (const error of submissionSecretValueErrors(submission, idempotencyKey, settings.secrets)) {
        if (!errors.some((known) => known.field === error.field && known.rule === error.rule)) errors.push(error);
      }
    }
    if (errors.length > 0) throw Problem.validation(errors);
  }

  /**
   * The operations of this connector that name a secret its request's host may not be sent (see refuseSecretValues),
   * judged against the allowlist the connector's calls obey (the effective one).
   */
  private unboundSecretErrors(
    submission: Submission,
    connectorName: string,
    settings: TenantConnectorSettings,
  ): FieldError[] {
    const connector = this.connectors.require(connectorName);
    const allowHosts = this.tenantConnectors.callEnvironment({ allowHosts: settings.allowHosts }).tenant?.allowHosts;
    return submission.operations.flatMap((op, i) =>
      op.connector !== connectorName
        ? []
        : secretBindingProblems(connector, op.action, op.params, allowHosts).map((problem) => ({
            field: `operations[${i}].${problem.field}`,
            rule: 'secret_not_bound',
            message: problem.message,
          })),
    );
  }

  /**
   * 400 before anything is written when the tenant's admin bound read-backs (`read_back_binding: "bound"`) and an
   * operation declares one that does not ask its own origin about this effect: such a read could end VERIFIED from a
   * URL that shows nothing of it. The rule is judged from the params first, so the tenant's settings are read only
   * for an operation that would break it. An operation accepted before the switch is not verified by it either (the
   * connector does not make such a read under "bound").
   */
  private async refuseUnboundReadBacks(principal: Principal, submission: Submission): Promise<void> {
    const unbound = submission.operations.flatMap((op, i) => {
      const connector = this.connectors.get(op.connector);
      if (!connector?.settings?.readBackBinding) return [];
      return readBackBindingProblems(connector, op.action, op.params).map((problem) => ({ op, i, problem }));
    });
    if (unbound.length === 0) return;
    const bound = new Map<string, boolean>();
    for (const connector of new Set(unbound.map((u) => u.op.connector))) {
      const settings = await this.tenantConnectors.settingsOf({ tenantId: principal.tenantId, connector });
      bound.set(connector, settings.readBackBinding === 'bound');
    }
    const errors: FieldError[] = unbound
      .filter((u) => bound.get(u.op.connector))
      .map((u) => ({
        field: `operations[${u.i}].${u.problem.field}`,
        rule: 'read_back_unbound',
        message: u.problem.message,
      }));
    if (errors.length > 0) throw Problem.validation(errors);
  }

  private async create(
    principal: Principal,
    submission: Submission,
    idempotency: {
      key: string;
      requestHash: string;
      sameAs: readonly string[];
      ttlMs: number;
      abandonAfterMs: number;
    } | null,
  ): Promise<ExecutionView | 'busy' | null> {
    const executionId = newId('exe');
    const operations: NewOperation[] = submission.operations.map((op, position) => {
      const connector = this.connectors.require(op.connector);
      // Per operation: an http request without a read_back spec cannot be verified, so it defaults to "".
      const capabilities = operationCapabilities(connector, op.action, op.params);
      return {
        id: newId('op'),
        key: op.key,
        position,
        connector: op.connector,
        action: op.action,
        params: op.params,
        irreversible: op.irreversible ?? !capabilities.reversible,
        // What an absent member means is one definition, which the Idempotency-Key's comparison uses too.
        requires_approval: op.requires_approval ?? ABSENT_MEANS.operation.requires_approval,
        verification_method:
          op.verification_method ?? (capabilities.read_back ? VerificationMethod.READ_AFTER_WRITE : ''),
        expected_state: op.expected_state ?? ABSENT_MEANS.operation.expected_state,
        depends_on: op.depends_on ?? [...ABSENT_MEANS.operation.depends_on],
        approval: null,
        resend_ref: resendReference(connector, op.action, op.params)?.value ?? null,
      };
    });
    const deadlineSeconds = submission.deadline_seconds ?? DEFAULT_DEADLINE_SECONDS;
    // The intake request's span is the root of the execution's trace (null with traces off).
    const traceParent = currentTraceparent();
    // The statement asks about the caps of the connectors used, and about the secrets of those not used (the used
    // ones' secrets were looked for before: refuseSecretValues in submit).
    const used = connectorsOf(submission);
    const intake: NewExecution = {
      id: executionId,
      tenantId: principal.tenantId,
      agentId: submission.agent_id,
      intent: submission.intent,
      deadlineSeconds,
      criteria: (submission.criteria ?? ABSENT_MEANS.submission.criteria).map(toCriterion),
      idempotencyKey: idempotency?.key ?? null,
      idempotency: idempotency
        ? { requestHash: idempotency.requestHash, ttlMs: idempotency.ttlMs, abandonAfterMs: idempotency.abandonAfterMs }
        : undefined,
      operations,
      createdEventId: newId('evt'),
      traceParent,
      uncheckedCapsOf: used,
      uncheckedSecretsOf: orNone(this.secretConnectors().filter((name) => !used.includes(name))),
      // Written only while the key stands: one revoked since the request was admitted (a cached key, a revocation
      // committed meanwhile) submits nothing, and a revocation under way is waited for (the statement's share lock).
      submittedBy: principal.keyId,
      requestedBy: principal.keyId,
    };
    // Whether another request holds the submission's Idempotency-Key (then the caller asks who: null).
    const keyHeldElsewhere = async () =>
      idempotency !== null &&
      (await idempotencyHolder(
        this.db.manager,
        principal.tenantId,
        idempotency.key,
        [idempotency.requestHash, ...idempotency.sameAs],
        idempotency.abandonAfterMs,
      ));
    // Asked of every connector that takes secrets (none is used): the statement tells whether the tenant holds any.
    const secretsRead =
      intake.uncheckedSecretsOf && this.secretConnectors(used).length === 0
        ? this.tenantConnectors.secretsReadBegins()
        : undefined;
    let written = await insertExecution(this.db.manager, intake);
    if (written === 'revoked') throw Problem.keyRevokedMidRequest();
    if (secretsRead && written !== null && written !== 'busy' && !('unchecked' in written)) {
      // It found none, on a snapshot taken after this request arrived: its answer needs no redaction, nor the round
      // trip that confirms the values kept are current (and other answers of the tenant may use what it found).
      this.tenantConnectors.noSecretsFound(principal.tenantId, secretsRead);
    }
    if (written !== null && written !== 'busy' && 'unchecked' in written) {
      // A key another request already holds is answered first (the replay, 422 or 409), as it is without caps: the
      // caller asks who holds it.
      if (await keyHeldElsewhere()) return null;
      // Nothing was written: the submission is looked through for the tenant's secrets and its amounts are checked
      // against the caps (400 when one is found, or cannot be charged), then written.
      if (written.unchecked.secrets) {
        await this.refuseSecretValues(principal, submission, intake.uncheckedSecretsOf!, idempotency?.key);
      }
      if (written.unchecked.caps) await this.refuseUnchargeableAmounts(principal, submission);
      written = await insertExecution(this.db.manager, {
        ...intake,
        uncheckedCapsOf: undefined,
        uncheckedSecretsOf: undefined,
      });
      if (written === 'revoked') throw Problem.keyRevokedMidRequest();
    }
    if (written !== null && written !== 'busy' && 'unsettled' in written) {
      // The request under its own key is answered as its key's record says (a replay of the execution whose send is
      // the unsettled one, most often): only a request no record answers is refused as a re-send.
      if (await keyHeldElsewhere()) return null;
      const op = submission.operations[written.unsettled.position];
      throw referenceUnsettled(
        this.connectors.require(op.connector),
        { action: op.action, params: op.params, field: `operations[${written.unsettled.position}].params` },
        written.unsettled,
      );
    }
    // Nothing was written: another request with the Idempotency-Key is writing now (busy), or another record holds
    // it (null: the caller asks which).
    if (written === 'busy') return 'busy';
    if (!written || 'unchecked' in written || 'unsettled' in written) return null;
    // Committed: from here the 201 stands. If Redis is down the sweeper owes this enqueue (I7).
    submissions.inc();
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId });
    const at = written.createdAt;
    return presentExecution(
      {
        id: executionId,
        tenantId: principal.tenantId,
        agentId: submission.agent_id,
        intent: submission.intent,
        status: ExecutionStatus.CREATED,
        deadlineAt: written.deadlineAt,
        criteria: (submission.criteria ?? []).map(toCriterion),
        criteriaResults: null,
        outcome: null,
        failure: null,
        eventSeq: '1',
        idempotencyKey: idempotency?.key ?? null,
        createdAt: at,
        updatedAt: written.updatedAt,
        traceParent,
      },
      operations.map((op) => preparedOperation(op, { id: executionId, tenantId: principal.tenantId }, at)),
      new Map(),
    );
  }

  /**
   * The execution with its operations as of one moment: every read is made on one snapshot (readSnapshot). Read by
   * statements of their own, a cancel committed between the execution's read and its operations' showed the execution
   * still running beside operations that cancel had ended — a state no one ever committed.
   */
  async get(principal: Principal, id: string, hold?: AnswerHold): Promise<ExecutionView> {
    if (hold === undefined) return this.read(principal, id);
    // The execution's read tells the stored text it holds with its operations: the answer's bytes are held (the
    // answer budget) before its operations are read, waiting their turn outside the snapshot when they must.
    return withAnswerBytes<ExecutionView>(hold, () =>
      readSnapshotForAnswer<{ answer: ExecutionView } | { bytes: number }>(
        this.db,
        this.tenantConnectors,
        async (db, secretsRead) => {
          const found = await readForAnswer(
            this.tenantConnectors,
            principal.tenantId,
            (held) => findExecutionWithBytesWithSecretsHeld(db, id, principal.tenantId, held),
            secretsRead,
          );
          if (!found) throw Problem.notFound('Execution', id);
          if (!hold.tryHold(found.bytes)) return { bytes: found.bytes };
          return { answer: await this.present(db, principal, found.execution) };
        },
      ),
    );
  }

  /** The execution as `get` answers it, on a snapshot of its own, outside the answer budget (the answer of a write). */
  private read(principal: Principal, id: string): Promise<ExecutionView> {
    // The execution's read tells whether the tenant holds any secret (findExecutionForAnswer).
    return readSnapshotForAnswer(this.db, this.tenantConnectors, async (db, secretsRead) => {
      const execution = await findExecutionForAnswer(db, this.tenantConnectors, id, principal.tenantId, secretsRead);
      if (!execution) throw Problem.notFound('Execution', id);
      return this.present(db, principal, execution);
    });
  }

  /** The execution with its operations, read on `db`'s snapshot. */
  private async present(db: EntityManager, principal: Principal, execution: ExecutionEntity): Promise<ExecutionView> {
    const operations = await findOperations(db, execution.id, principal.tenantId);
    const { changes, judged, databaseNow, refuted, chains } = await this.holds.presentationInputs(
      principal.tenantId,
      operations,
      { executions: [execution], operations },
      db,
    );
    return presentExecution(execution, operations, changes, judged, databaseNow, refuted, chains);
  }

  /** A page of executions, each with its operations, as of one moment (one snapshot, as `get`). */
  async list(
    principal: Principal,
    query: { status?: ExecutionStatus; cursor?: string; limit: number },
    hold: AnswerHold,
  ) {
    // The page's read tells whether the tenant holds any secret (readForAnswer), and the stored text it holds with its
    // operations: the answer's bytes are held (the answer budget) before the operations are read.
    return withAnswerBytes(hold, () => this.listPage(principal, query, hold));
  }

  private listPage(
    principal: Principal,
    query: { status?: ExecutionStatus; cursor?: string; limit: number },
    hold: AnswerHold,
  ) {
    return readSnapshotForAnswer(this.db, this.tenantConnectors, async (db, secretsRead) => {
      let more = false;
      let bytes = 0;
      const page = await readForAnswer(
        this.tenantConnectors,
        principal.tenantId,
        async (held) => {
          const read = await listExecutionsWithSecretsHeld(
            db,
            principal.tenantId,
            { status: query.status, before: query.cursor, limit: query.limit, maxBytes: PAGE_BYTES },
            held,
          );
          more = read.more;
          bytes = read.bytes;
          return read;
        },
        secretsRead,
      );
      if (!hold.tryHold(bytes)) return { bytes };
      const nextCursor = more ? page[page.length - 1].id : null;
      const operations = await findOperationsOf(
        db,
        page.map((e) => e.id),
        principal.tenantId,
      );
      const byExecution = new Map<string, typeof operations>();
      for (const op of operations) byExecution.set(op.executionId, [...(byExecution.get(op.executionId) ?? []), op]);
      const { changes, judged, databaseNow, refuted, chains } = await this.holds.presentationInputs(
        principal.tenantId,
        operations,
        { executions: page, operations },
        db,
      );
      return {
        answer: {
          data: page.map((e) =>
            presentExecution(e, byExecution.get(e.id) ?? [], changes, judged, databaseNow, refuted, chains),
          ),
          next_cursor: nextCursor,
        },
      };
    });
  }

  async events(principal: Principal, id: string, after: string | undefined, limit: number) {
    const execution = await findExecutionForAnswer(this.db.manager, this.tenantConnectors, id, principal.tenantId);
    if (!execution) throw Problem.notFound('Execution', id);
    const afterSeq = await resolveEventCursor(this.db.manager, principal.tenantId, id, after);
    const { events, more } = await listEventsWithinBytes(
      this.db.manager,
      id,
      principal.tenantId,
      afterSeq,
      limit,
      PAGE_BYTES,
    );
    return {
      data: events.map(presentEvent),
      next_cursor: more || events.length === limit ? events[events.length - 1].id : null,
    };
  }

  /**
   * I11: cancel never claims an in-flight effect did not happen. PREPARED operations become CANCELLED, and so do
   * operations held before they were ever sent; anything already SENT keeps being reconciled. One transaction, so no
   * one sees (or advances) an execution whose operations are cancelled but which is itself still running — else the
   * dispatcher could complete it in between. The rows are locked first (lockExecution), so a racing sender or
   * dispatcher waits for us and then loses its compare-and-set.
   */
  async cancel(principal: Principal, id: string, reason: string | undefined): Promise<ExecutionView> {
    await refuseSecretValuesIn(this.tenantConnectors, principal.tenantId, [['reason', reason]]);
    let traceParent: string | null = null;
    await transaction(this.db, async (tx) => {
      // A cancel is a decision (I13): a key revoked since the request was admitted makes none, and a revocation made
      // later waits for this transaction (the key's row is share-locked until it ends).
      if (!(await lockActiveKey(tx, principal.keyId))) throw Problem.keyRevokedMidRequest();
      const execution = await findExecution(tx, id, principal.tenantId);
      if (!execution) throw Problem.notFound('Execution', id);
      traceParent = execution.traceParent;
      const locked = await lockExecution(tx, id, principal.tenantId);
      if (!locked) throw Problem.notFound('Execution', id);
      if (locked.status === ExecutionStatus.CANCELLED) {
        // I13: a cancel is a decision too; of concurrent cancels one is written, the others learn it was made.
        throw Problem.alreadyDecided('the execution was already cancelled', {
          decision: 'cancel',
          ...(await cancelledBy(tx, id, principal.tenantId)),
          current_status: locked.status,
        });
      }
      if (isTerminalExecution(locked.status)) {
        throw Problem.conflict('execution-terminal', `the execution is already ${locked.status}`, {
          current_status: locked.status,
        });
      }
      for (const op of locked.operations) {
        if (op.status !== OperationStatus.PREPARED) continue;
        await this.transitions.operation(tx, {
          operation: snapshotOf(op),
          to: OperationStatus.CANCELLED,
          eventData: { cause: CANCEL_CAUSE_OF_ENDED_EXECUTION[ExecutionStatus.CANCELLED], by: principal.keyId, reason },
        });
      }
      // Its `at` is replaced by the statement that writes the cancel: the instant it stamps the cancel's event with
      // (the `decided_at` a second cancel is answered with), on the database's clock.
      const failure = executionFailure('cancelled_by_caller', locked.status, new Date(), undefined, locked.operations);
      await this.transitions.execution(tx, {
        executionId: id,
        from: locked.status,
        to: ExecutionStatus.CANCELLED,
        patch: { failure: failure as unknown as Record<string, unknown> },
        eventData: { by: principal.keyId, reason, failure },
      });
      // A held operation that was never sent can no longer be released once the execution is cancelled: it ends with
      // it (after the execution's move, which its statement checks) rather than waiting in the review queue.
      await this.transitions.cancelHeldOfEndedExecution(tx, locked.operations.map(snapshotOf), {
        cause: CANCEL_CAUSE_OF_ENDED_EXECUTION[ExecutionStatus.CANCELLED],
        by: principal.keyId,
        reason,
      });
    });
    // The advance joins the execution's trace (with traces on), not the cancel request's.
    await inTraceOf(traceParent, () => this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: id }));
    return this.get(principal, id);
  }
}

/**
 * Who cancelled the execution and when, as an already-decided problem names a winner (`decided_by`, `decided_at`):
 * the key of the cancel's event.
 */
export async function cancelledBy(
  db: Queryable,
  executionId: string,
  tenantId: string,
): Promise<{ decided_by?: string; decided_at?: string }> {
  const move = await findExecutionMove(db, executionId, tenantId, ExecutionStatus.CANCELLED);
  if (!move) return {};
  return { ...(move.by && { decided_by: move.by }), decided_at: move.at.toISOString() };
}

/**
 * The fields of a submission that hold the value of one of `secrets` (see refuseSecretValues): every field it stores,
 * an operation's by name, a criterion whole, and its Idempotency-Key.
 */
function submissionSecretValueErrors(
  submission: Submission,
  idempotencyKey: string | undefined,
  secrets: Readonly<Record<string, string>> | undefined,
): FieldError[] {
  const fields: [string, unknown][] = Object.entries(submission).flatMap(([name, value]): [string, unknown][] => {
    if (name === 'operations') {
      return submission.operations.flatMap((op, i) =>
        Object.entries(op).map(([field, item]): [string, unknown] => [`operations[${i}].${field}`, item]),
      );
    }
    if (name === 'criteria') return (submission.criteria ?? []).map((criterion, i) => [`criteria[${i}]`, criterion]);
    return [[name, value]];
  });
  fields.push(['Idempotency-Key', idempotencyKey]);
  return secretValueErrors(fields, secrets, (field) =>
    /^operations\[\d+\]\.(params|expected_state)$/.test(field) ? 'name it {{secret:NAME}} instead' : undefined,
  );
}

/** A list the intake statement is asked about, or nothing to ask (an empty one would cost it a lookup for nothing). */
function orNone(names: string[]): string[] | undefined {
  return names.length > 0 ? names : undefined;
}

/** The connectors a submission's operations use, each once. */
function connectorsOf(submission: Submission): string[] {
  return [...new Set(submission.operations.map((op) => op.connector))];
}

/** 409 with Retry-After: the Idempotency-Key's outcome is not settled yet. */
function inFlight(detail: string): Problem {
  return Problem.idempotencyKeyInFlight(detail);
}
