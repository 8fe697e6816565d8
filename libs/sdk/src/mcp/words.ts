import { OperationStatus, RetryRule } from '@verity/status-model';
import { isExecutionSettled, isOperationSettled } from '../settled';
import type { ConnectorInfo, Execution, ExecutionEvent, Operation, OperationDetail } from '../types';

/**
 * What the MCP tools say, in words a language model will not blur. The execution status and each operation's
 * effect are always stated separately: `completed` is about the agent's work, `VERIFIED` about the world. Every
 * sentence about an operation that may have had an effect says so, and says whether it may be retried.
 */

/** The rules every tool description repeats, so an agent reads them wherever it starts. */
export const RULES =
  'Rules: the execution status says where the agent’s work stands (completed = finished), never whether an effect ' +
  'happened; read each operation’s status for that. UNKNOWN, SENT and RECONCILING mean the effect may have ' +
  'happened: never retry them and never submit the same action again — wait, Verity reconciles them against the ' +
  'source. ACKNOWLEDGED means the provider accepted the request; it is not proof that the effect happened. ' +
  'VERIFIED means confirmed by reading it back from the source. Only FAILED and CANCELLED operations may be ' +
  'retried, and a retry is a new operation.';

/** What a retry made on the word of a FAILED refuted since is told (retry `forbidden`, its own commit unchanged). */
const REFUTED_CHAIN =
  'it is a retry of a FAILED (or of one up its chain of retries) that was contradicted since — the provider then ' +
  'accepted that request, or its source showed the effect — so the effect may exist already. Do not submit it again; ' +
  'do not retry it (a retry is refused).';

/** One sentence on one operation's effect in the world, with what the agent may do about it. */
export function operationEffect(
  op: Pick<Operation, 'status' | 'verification_method' | 'no_change_required' | 'commit'> & {
    evidence?: Operation['evidence'];
    retry?: Operation['retry'];
  },
): string {
  const byHuman = !!op.evidence && typeof op.evidence === 'object' && 'resolution' in op.evidence;
  switch (op.status) {
    case OperationStatus.PREPARED:
      return 'PREPARED: recorded, not sent yet; no effect has happened so far.';
    case OperationStatus.SENT:
      return 'SENT: handed to the connector, no answer yet. It may have happened; do not retry it; wait.';
    case OperationStatus.ACKNOWLEDGED:
      return op.verification_method === ''
        ? 'ACKNOWLEDGED: the provider accepted the request, nothing confirms the effect, and nothing ever will ' +
            '(this connector cannot read it back). This is its final state; ACKNOWLEDGED is not proof. Do not retry it.'
        : 'ACKNOWLEDGED: the provider accepted the request, nothing confirms the effect yet; Verity is reading it ' +
            'back from the source. ACKNOWLEDGED is not proof. Do not retry it; wait.';
    case OperationStatus.VERIFIED:
      if (op.no_change_required) {
        return 'VERIFIED (no change required): the source already held the requested state, confirmed by reading it; Verity did not cause it and sent nothing.';
      }
      // A VERIFIED the provider's late rejection contradicts is shown with retry `forbidden` (and commit `unknown`);
      // the API counts it among the uncertain effects.
      if (op.retry === RetryRule.FORBIDDEN) {
        return (
          `VERIFIED (contradicted since): it was confirmed ${byHuman ? 'by a human reviewer’s resolution' : 'by reading the source'}, ` +
          'then the provider’s answer came back late and rejected this request. Whether this request made the effect ' +
          'is not known (what was confirmed may be another writer’s). Do not submit it again; do not retry it (a retry is refused).'
        );
      }
      return byHuman
        ? 'VERIFIED: confirmed by a human reviewer’s resolution, with evidence. The effect happened; do not repeat it.'
        : 'VERIFIED: confirmed by reading it back from the source. The effect happened; do not repeat it.';
    case OperationStatus.UNKNOWN:
      // Without read-back nothing reads the source: the reconciler holds it for a reviewer (decideReconcileStart).
      return op.verification_method === ''
        ? 'UNKNOWN: it may have happened; do not retry it. Nothing can read it back, so a human reviewer decides (MANUAL_REVIEW); wait.'
        : 'UNKNOWN: it may have happened; do not retry it. Verity is determining the outcome from the source; wait.';
    case OperationStatus.RECONCILING:
      return 'RECONCILING: Verity is reading the source to learn whether it happened. It may have happened; do not retry it; wait.';
    case OperationStatus.FAILED:
      // A retry made on the word of a FAILED refuted since (operationRetryRule's retryRefuted): its own "no effect"
      // stands (commit `rejected`), but a retry of it rests on the refuted word, and is refused.
      if (op.retry === RetryRule.FORBIDDEN && op.commit === 'rejected') {
        return `FAILED: no effect exists from this request, but ${REFUTED_CHAIN}`;
      }
      // A FAILED refuted since (a late 2xx, or a later read that showed the effect) is shown with retry `forbidden`.
      if (op.retry === RetryRule.FORBIDDEN) {
        return (
          'FAILED: recorded as failed, but contradicted since — the provider then accepted the request, or its source ' +
          'showed the effect. It may have happened; do not retry it (a retry is refused).'
        );
      }
      return byHuman
        ? 'FAILED: a human reviewer established, with evidence, that no effect exists. A retry is allowed and would be a new operation.'
        : 'FAILED: no effect exists (an explicit rejection, or proof that it never arrived). A retry is allowed and would be a new operation.';
    case OperationStatus.MANUAL_REVIEW:
      if (op.commit === 'not_dispatched') {
        return 'MANUAL_REVIEW: held for a human before it was ever sent; no effect from Verity so far. Do not submit it again; a reviewer decides.';
      }
      return op.commit === 'committed'
        ? 'MANUAL_REVIEW: the effect happened but needs a human (what was read back does not match what was requested). Do not retry it; a reviewer resolves it.'
        : 'MANUAL_REVIEW: held for a human; it may have happened. Do not retry it; a reviewer resolves it with evidence.';
    case OperationStatus.CANCELLED:
      // A retry cancelled (or made) on the word of a FAILED refuted since: retry `forbidden` (retryRefuted).
      if (op.retry === RetryRule.FORBIDDEN) {
        return `CANCELLED: cancelled before it was ever sent; Verity caused no effect through it, but ${REFUTED_CHAIN}`;
      }
      return 'CANCELLED: cancelled before it was ever sent; Verity caused no effect. A retry is allowed and would be a new operation.';
  }
}

/** The execution status in words, kept apart from the effects. */
export function executionStatusLine(execution: Pick<Execution, 'id' | 'status' | 'operations'>): string {
  const settled = isExecutionSettled(execution);
  return (
    `Execution ${execution.id} status: ${execution.status} (where the agent’s work stands; it does not say whether ` +
    `any effect happened — read each operation below). ` +
    (settled
      ? 'Settled: nothing will change it automatically any more.'
      : 'Not settled yet: operations may still change.')
  );
}

/** `charge` went PREPARED → SENT → UNKNOWN → RECONCILING → VERIFIED, from the event log. */
export function operationHistories(
  events: readonly ExecutionEvent[],
  paths: Map<string, string[]> = new Map(),
): Map<string, string[]> {
  for (const event of events) {
    if (event.type !== 'operation.status_changed' || !event.operation_id || !event.to_status) continue;
    const path = paths.get(event.operation_id) ?? (event.from_status ? [event.from_status] : []);
    path.push(event.to_status);
    paths.set(event.operation_id, path);
  }
  return paths;
}

/**
 * An operation's history as of the status it is shown with. The events are read after the execution or the operation
 * (there is no cursor to read them as of that moment): a change between the two reads was shown as its history while
 * its status, as the API answered it, was still the one before — "RECONCILING … wait" beside "→ VERIFIED". The path
 * ends at the last time it took that status; a path that never reached it (cut by the bound) is left as read.
 */
export function historyAsOf(status: string, history: string[] | undefined): string[] | undefined {
  if (!history) return history;
  const at = history.lastIndexOf(status);
  return at < 0 ? history : history.slice(0, at + 1);
}

export interface OperationVerdict {
  id: string;
  key: string;
  connector: string;
  action: string;
  status: OperationStatus;
  settled: boolean;
  retry: Operation['retry'];
  effect: string;
  history?: string[];
}

export interface ExecutionReport {
  execution_id: string;
  execution_status: Execution['status'];
  settled: boolean;
  effects_summary: Execution['effects']['summary'];
  operations: OperationVerdict[];
}

export function executionReport(execution: Execution, histories?: Map<string, string[]>): ExecutionReport {
  return {
    execution_id: execution.id,
    execution_status: execution.status,
    settled: isExecutionSettled(execution),
    effects_summary: execution.effects.summary,
    operations: execution.operations.map((op) => operationVerdict(op, histories?.get(op.id))),
  };
}

export function operationVerdict(op: Operation, read?: string[]): OperationVerdict {
  const history = historyAsOf(op.status, read);
  return {
    id: op.id,
    key: op.key,
    connector: op.connector,
    action: op.action,
    status: op.status,
    settled: isOperationSettled(op),
    retry: op.retry,
    effect: operationEffect(op),
    ...(history ? { history } : {}),
  };
}

/** The whole execution in words: status line, effects, one line per operation (with its history when known). */
export function describeExecution(execution: Execution, histories?: Map<string, string[]>): string {
  const lines = [executionStatusLine(execution)];
  lines.push(`Effects summary: ${execution.effects.summary}${countsText(execution)}.`);
  if (execution.failure) lines.push(`Failure: ${execution.failure.code}: ${execution.failure.message}`);
  if (execution.outcome) lines.push(`Criteria outcome: ${execution.outcome.result}.`);
  lines.push('Operations (each one’s effect in the world, stated separately):');
  for (const op of execution.operations) {
    lines.push(`- ${operationLine(op)}`);
    const history = historyAsOf(op.status, histories?.get(op.id));
    if (history && history.length > 1) lines.push(`  history: ${history.join(' → ')}`);
  }
  return lines.join('\n');
}

export function describeOperation(op: OperationDetail, read?: string[]): string {
  const history = historyAsOf(op.status, read);
  const lines = [operationLine(op)];
  if (history && history.length > 1) lines.push(`History: ${history.join(' → ')}`);
  if (op.terminal_reason) lines.push(`Terminal reason: ${op.terminal_reason}.`);
  lines.push(`Retry rule: ${op.retry}${op.retry === 'safe' ? ' (a retry would be a new operation)' : ''}.`);
  if (op.recovery_obligation) {
    const o = op.recovery_obligation;
    lines.push(
      `Recovery obligation: ${o.reason}; owner ${o.owner}; due ${o.due_at}; evidence required: ${o.evidence_required}.`,
    );
  }
  if (op.failure) lines.push(`Failure: ${op.failure.code}: ${op.failure.message}`);
  // An API from before `earlier_attempts` answers none: the stdio server may talk to one.
  const earlier = earlierAttemptsLine(op.earlier_attempts ?? []);
  if (earlier) lines.push(earlier);
  return lines.join('\n');
}

/** The earlier attempts of a retry's request, nearest first, with who denied each denied one, when and why; null for none. */
export function earlierAttemptsLine(attempts: Operation['earlier_attempts']): string | null {
  if (attempts.length === 0) return null;
  const each = attempts.map((a) => {
    const ended = `${a.operation_id} ${a.status}${a.terminal_reason ? ` (${a.terminal_reason})` : ''}`;
    if (a.denied_by === null) return ended;
    const why = a.reason ? `: ${JSON.stringify(a.reason)}` : ', no reason given';
    return `${ended}: denied by ${a.denied_by} at ${a.denied_at}${why}`;
  });
  return `Earlier attempts of this request (nearest first): ${each.join('; ')}.`;
}

function operationLine(op: Operation): string {
  return `Operation "${op.key}" (${op.connector} ${op.action}, ${op.id}) is ${operationEffect(op)}`;
}

function countsText(execution: Execution): string {
  const counts = Object.entries(execution.effects.counts)
    .filter(([, n]) => n > 0)
    .map(([status, n]) => `${n} ${status}`);
  return counts.length ? ` (${counts.join(', ')})` : '';
}

/** A connector's limitations, as the agent must read them before relying on a status. */
export function connectorLimitations(connector: ConnectorInfo): string[] {
  const limits: string[] = [];
  limits.push(
    connector.read_back
      ? 'can read back: its operations can reach VERIFIED'
      : 'cannot read back: its operations end ACKNOWLEDGED at best — the provider accepted, nothing confirms the effect',
  );
  limits.push(
    connector.provider_idempotency
      ? 'passes an Idempotency-Key the provider honours'
      : 'no provider idempotency: a repeated send would be a second effect (never resubmit one that may have happened)',
  );
  limits.push(connector.reversible ? 'reversible' : 'irreversible: an effect cannot be undone');
  if (connector.context_read)
    limits.push('can read the target’s current state before sending (expected_state is checked)');
  for (const action of connector.actions) {
    for (const [capability, when] of Object.entries(action.conditions)) {
      limits.push(`action ${action.name}: ${capability} ${when}`);
    }
  }
  return limits;
}
