/**
 * After the storm: wait until everything accepted has settled, then compare what Verity claims (the database) with
 * what happened (the sandbox's GET /__effects, which reads the provider's primary), and check the event log itself.
 */
import type { Pool } from 'pg';
import {
  ExecutionStatus,
  OperationStatus,
  canMoveExecution,
  isSettledOperation,
  isTerminalExecution,
  operationTransitionRule,
  type VerificationMethodValue,
} from '@verity/status-model';
import type { SandboxEffects } from './cluster';
import { sleep } from './cluster';
import type { PlannedExecution } from './workload';

export interface ChaosActions {
  workerKills: number;
  workerRestarts: number;
  pauses: { app: string; ms: number }[];
  redisRestarts: number;
  postgresRestarts: number;
  unexpectedExits: string[];
  submitRetries: number;
  approvals: number;
  /** Restarts the app itself refused (it exits at boot while Postgres or Redis is down); the harness tried again. */
  refusedStarts: number;
  /** Concurrent reviewers (I13): races run, refusals by problem code, and races where more than one caller won. */
  reviewers: {
    approvalRaces: number;
    resolutionRaces: number;
    refusals: Record<string, number>;
    wonTwice: string[];
  };
}

const SETTLED_SQL = `(o.status IN ('VERIFIED','FAILED','CANCELLED','MANUAL_REVIEW')
  OR (o.status = 'ACKNOWLEDGED' AND o.verification_method <> 'read_after_write'))`;
const TERMINAL_SQL = `('completed','failed','cancelled','expired')`;

/** True once every accepted execution is terminal and each of its operations settled; false at the bound. */
export async function drain(
  pool: Pool,
  executionIds: string[],
  timeoutMs: number,
  note: (line: string) => void,
  stallMs = 120_000,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  let lastNote = 0;
  // Nothing settling for this long (longer than any timer in the system: lock, stall check, backoff) means stuck.
  let lastOpen = -1;
  let lastChange = Date.now();
  for (;;) {
    try {
      const { rows } = await pool.query<{ present: string; open: string }>(
        `SELECT count(*) AS present,
                count(*) FILTER (WHERE e.status NOT IN ${TERMINAL_SQL}
                  OR EXISTS (SELECT 1 FROM operations o WHERE o.execution_id = e.id AND NOT ${SETTLED_SQL})) AS open
           FROM executions e WHERE e.id = ANY($1)`,
        [executionIds],
      );
      const open = Number(rows[0].open) + (executionIds.length - Number(rows[0].present));
      if (open === 0) return true;
      if (open !== lastOpen) {
        lastOpen = open;
        lastChange = Date.now();
      } else if (Date.now() - lastChange > stallMs) {
        note(`no progress for ${stallMs / 1000} s with ${open} executions open: stuck`);
        return false;
      }
      if (Date.now() - lastNote > 5_000) {
        lastNote = Date.now();
        const { rows: byStatus } = await pool.query<{ status: string; n: string }>(
          `SELECT status, count(*) AS n FROM operations o WHERE NOT ${SETTLED_SQL} GROUP BY status ORDER BY status`,
        );
        note(
          `draining: ${open} executions open; unsettled operations: ${byStatus.map((r) => `${r.status} ${r.n}`).join(', ') || 'none'}`,
        );
      }
    } catch {
      // The database may still be recovering: keep waiting within the bound.
    }
    if (Date.now() > deadline) return false;
    await sleep(500);
  }
}

interface ExecutionRow {
  id: string;
  status: ExecutionStatus;
  event_seq: number;
  created_at: Date;
}

interface OperationRow {
  id: string;
  execution_id: string;
  connector: string;
  status: OperationStatus;
  terminal_reason: string | null;
  verification_method: string;
  attempt: number;
  evidence: Record<string, unknown> | null;
  obligation: Record<string, unknown> | null;
  reference: string | null;
  client_ref: string | null;
}

interface EventRow {
  execution_id: string;
  seq: number;
  operation_id: string | null;
  type: string;
  from_status: string | null;
  to_status: string | null;
  actor: string | null;
  /** approval.decided: approve | deny; operation.resolved: the status chosen. */
  decision: string | null;
  created_at: Date;
}

export interface InvariantRow {
  label: string;
  value: string;
  /** Rows that are promises: their count must be 0. */
  violations?: number;
  examples?: string[];
}

export interface InvariantReport {
  rows: InvariantRow[];
  violations: number;
  table: string;
  settleMs: { p50: number; p99: number; max: number };
  counts: Record<string, number>;
}

export async function checkInvariants(input: {
  pool: Pool;
  effects: SandboxEffects;
  planned: PlannedExecution[];
  accepted: { executionId: string; planned: PlannedExecution }[];
  notAccepted: { planned: PlannedExecution; error: string }[];
  actions: ChaosActions;
  options: { operations: number; faultProbability: number; seed: number };
}): Promise<InvariantReport> {
  const { pool, effects, accepted, actions } = input;
  const executions = (
    await pool.query<ExecutionRow>(`SELECT id, status, event_seq::int AS event_seq, created_at FROM executions`)
  ).rows;
  const operations = (
    await pool.query<OperationRow>(
      `SELECT id, execution_id, connector, status, terminal_reason, verification_method, attempt, evidence, obligation,
              params->>'reference' AS reference, params->>'client_ref' AS client_ref
         FROM operations`,
    )
  ).rows;
  const events = (
    await pool.query<EventRow>(
      `SELECT execution_id, seq::int AS seq, operation_id, type, from_status, to_status, data->>'actor' AS actor,
              coalesce(data->>'decision', data->>'status') AS decision, created_at
         FROM events ORDER BY execution_id, seq`,
    )
  ).rows;

  const executionById = new Map(executions.map((e) => [e.id, e]));
  const opsByExecution = group(operations, (o) => o.execution_id);
  const eventsByExecution = group(events, (e) => e.execution_id);
  const eventsByOperation = group(
    events.filter((e) => e.operation_id),
    (e) => e.operation_id as string,
  );
  const statusChanges = (opId: string) =>
    (eventsByOperation.get(opId) ?? []).filter((e) => e.type === 'operation.status_changed');

  // lost: accepted (a 201 was received) but missing, or not settled once the drain ended.
  const lost: string[] = [];
  const settleMs: number[] = [];
  for (const { executionId } of accepted) {
    const execution = executionById.get(executionId);
    if (!execution) {
      lost.push(`${executionId} missing`);
      continue;
    }
    const ops = opsByExecution.get(executionId) ?? [];
    const open = ops.filter((o) => !isSettledOperation(o.status, o.verification_method as VerificationMethodValue));
    if (!isTerminalExecution(execution.status) || open.length > 0 || ops.length === 0) {
      lost.push(`${executionId} ${execution.status} [${ops.map((o) => o.status).join(',')}]`);
      continue;
    }
    const history = eventsByExecution.get(executionId) ?? [];
    const last = history[history.length - 1];
    if (last) settleMs.push(last.created_at.getTime() - execution.created_at.getTime());
  }

  // Ground truth, keyed the way the provider keys it: charge reference and SMS client_ref.
  const chargeCount = (ref: string | null) => (ref ? (effects.charges[ref]?.count ?? 0) : 0);
  const messageCount = (ref: string | null) => (ref ? (effects.messages[ref]?.count ?? 0) : 0);
  const effectOf = (o: OperationRow) =>
    o.connector === 'sandbox.payments' ? chargeCount(o.reference) : messageCount(o.client_ref);
  const opByEffectKey = new Map<string, OperationRow>();
  for (const o of operations) {
    if (o.connector === 'sandbox.payments' && o.reference) opByEffectKey.set(`charge:${o.reference}`, o);
    if (o.connector === 'sandbox.sms' && o.client_ref) opByEffectKey.set(`message:${o.client_ref}`, o);
  }

  const duplicates = effects.duplicates.map((d) => `${d.kind} ${d.key} ×${d.count}`);
  const verifiedWithoutEffect = operations.filter((o) => o.status === 'VERIFIED' && effectOf(o) === 0);
  const failedWithEffect = operations.filter((o) => o.status === 'FAILED' && effectOf(o) > 0);
  const cancelledWithEffect = operations.filter((o) => o.status === 'CANCELLED' && effectOf(o) > 0);
  const acknowledgedWithoutEffect = operations.filter((o) => o.status === 'ACKNOWLEDGED' && effectOf(o) === 0);
  const orphanEffects: string[] = [];
  for (const [kind, table] of [
    ['charge', effects.charges],
    ['message', effects.messages],
  ] as const) {
    for (const key of Object.keys(table)) {
      const op = opByEffectKey.get(`${kind}:${key}`);
      if (!op) orphanEffects.push(`${kind} ${key}: no operation asked for it`);
      else if (!statusChanges(op.id).some((e) => e.to_status === 'SENT')) {
        orphanEffects.push(`${kind} ${key}: ${op.id} was never SENT (${op.status})`);
      }
    }
  }
  const sentTwice = operations.filter((o) => statusChanges(o.id).filter((e) => e.to_status === 'SENT').length > 1);
  // I6: read-after-write evidence, or a human resolution with evidence (the chaos reviewers resolve held SMS).
  const verifiedWithoutEvidence = operations.filter(
    (o) => o.status === 'VERIFIED' && o.evidence?.method !== 'read_after_write' && !o.evidence?.resolution,
  );
  const heldWithoutObligation = operations.filter((o) => o.status === 'MANUAL_REVIEW' && !o.obligation);

  // I13 in the log: between two approval requests at most one approval.decided; between two holds at most one
  // operation.resolved; and an operation whose approval was denied is never SENT afterwards.
  const decidedTwice: string[] = [];
  const sentAfterDeny: string[] = [];
  for (const [opId, log] of eventsByOperation) {
    let decisions = 0;
    let resolutions = 0;
    let denied = false;
    for (const e of log) {
      if (e.type === 'approval.requested') decisions = 0;
      if (e.type === 'operation.status_changed' && e.to_status === 'MANUAL_REVIEW') resolutions = 0;
      if (e.type === 'approval.decided' && (decisions += 1) > 1) decidedTwice.push(`${opId}: approval decided twice`);
      if (e.type === 'operation.resolved' && (resolutions += 1) > 1) decidedTwice.push(`${opId}: resolved twice`);
      if (e.type === 'approval.decided') denied = e.decision === 'deny';
      if (denied && e.type === 'operation.status_changed' && e.to_status === 'SENT') {
        sentAfterDeny.push(`${opId}: SENT after its approval was denied`);
      }
    }
  }

  // I2: the row's status is the destination of its last status event; seq runs 1..n per execution.
  const statusWithoutEvent: string[] = [];
  for (const o of operations) {
    const changes = statusChanges(o.id);
    const lastTo = changes.length ? changes[changes.length - 1].to_status : 'PREPARED';
    if (lastTo !== o.status) statusWithoutEvent.push(`${o.id}: row ${o.status}, last event → ${lastTo}`);
  }
  const seqGaps: string[] = [];
  for (const execution of executions) {
    const history = eventsByExecution.get(execution.id) ?? [];
    const contiguous = history.every((e, i) => e.seq === i + 1);
    if (!contiguous || history.length !== execution.event_seq) {
      seqGaps.push(`${execution.id}: ${history.length} events, event_seq ${execution.event_seq}`);
    }
    const changes = history.filter((e) => e.type === 'execution.status_changed');
    const lastTo = changes.length ? changes[changes.length - 1].to_status : 'created';
    if (lastTo !== execution.status) {
      statusWithoutEvent.push(`${execution.id}: row ${execution.status}, last event → ${lastTo}`);
    }
  }

  // I1: every move in the log is one the status model allows.
  const illegal: string[] = [];
  for (const e of events) {
    if (e.type === 'operation.status_changed') {
      if (!operationTransitionRule(e.from_status as OperationStatus, e.to_status as OperationStatus)) {
        illegal.push(`${e.operation_id}: ${e.from_status} → ${e.to_status}`);
      }
    } else if (e.type === 'execution.status_changed') {
      if (!canMoveExecution(e.from_status as ExecutionStatus, e.to_status as ExecutionStatus)) {
        illegal.push(`${e.execution_id}: ${e.from_status} → ${e.to_status}`);
      }
    }
  }

  const passedUnknown = operations.filter((o) => statusChanges(o.id).some((e) => e.to_status === 'UNKNOWN'));
  const resolvedAutomatically = passedUnknown.filter(
    (o) => (o.status === 'VERIFIED' || o.status === 'FAILED') && statusChanges(o.id).every((e) => e.actor !== 'human'),
  );
  const held = operations.filter((o) => o.status === 'MANUAL_REVIEW');
  const heldBy = countBy(held, (o) => `${o.connector === 'sandbox.sms' ? 'sms' : 'payment'} ${o.terminal_reason}`);
  const finalStatuses = countBy(operations, (o) => o.status);
  const executionStatuses = countBy(executions, (e) => e.status);
  const acceptedOps = accepted.reduce((n, a) => n + a.planned.operations, 0);
  const submittedOps = input.planned.reduce((n, p) => n + p.operations, 0);
  settleMs.sort((a, b) => a - b);
  const settle = {
    p50: percentile(settleMs, 50),
    p99: percentile(settleMs, 99),
    max: settleMs[settleMs.length - 1] ?? 0,
  };

  const rows: InvariantRow[] = [
    { label: 'submitted (executions / operations)', value: `${input.planned.length} / ${submittedOps}` },
    { label: 'accepted (201)', value: `${accepted.length} / ${acceptedOps}` },
    ...(input.notAccepted.length
      ? [
          {
            label: 'not accepted (gave up)',
            value: `${input.notAccepted.length}: ${input.notAccepted[0].error.slice(0, 80)}`,
          },
        ]
      : []),
    promise('lost (accepted, then missing or unsettled)', lost),
    promise('duplicate effects (GET /__effects)', duplicates),
    promise('VERIFIED without an effect', verifiedWithoutEffect.map(describe)),
    promise('FAILED with an effect', failedWithEffect.map(describe)),
    promise('CANCELLED with an effect', cancelledWithEffect.map(describe)),
    promise('ACKNOWLEDGED (no read-back) without an effect', acknowledgedWithoutEffect.map(describe)),
    promise('effects never SENT by Verity', orphanEffects),
    promise('I3 sent more than once', sentTwice.map(describe)),
    promise('I6 VERIFIED without read-after-write evidence', verifiedWithoutEvidence.map(describe)),
    promise('MANUAL_REVIEW without a recovery obligation', heldWithoutObligation.map(describe)),
    promise('I13 a decision won by more than one reviewer (API answers)', actions.reviewers.wonTwice),
    promise('I13 more than one decision event per request or hold', decidedTwice),
    promise('sent after its approval was denied', sentAfterDeny),
    promise('I2 status without its event', statusWithoutEvent),
    promise('I2 event seq not contiguous 1..n', seqGaps),
    promise('I1 illegal transitions in the event log', illegal),
    {
      label: 'UNKNOWN resolved automatically',
      value: `${resolvedAutomatically.length} of ${passedUnknown.length} that passed through UNKNOWN`,
    },
    { label: 'held in MANUAL_REVIEW', value: `${held.length}${held.length ? ` (${format(heldBy)})` : ''}` },
    { label: 'operations by final status', value: format(finalStatuses) },
    { label: 'executions by final status', value: format(executionStatuses) },
    {
      label: 'time to settle p50 / p99 (max)',
      value: `${seconds(settle.p50)} / ${seconds(settle.p99)} (${seconds(settle.max)})`,
    },
    {
      label: 'worker SIGKILLs / restarts',
      value:
        `${actions.workerKills} / ${actions.workerRestarts}` +
        (actions.refusedStarts ? ` (${actions.refusedStarts} start(s) refused while a server was down, retried)` : ''),
    },
    {
      label: 'SIGSTOP past the dispatch lock',
      value: actions.pauses.length ? actions.pauses.map((p) => `${p.app} ${seconds(p.ms)}`).join(', ') : '0',
    },
    { label: 'Redis crashes+restarts / Postgres', value: `${actions.redisRestarts} / ${actions.postgresRestarts}` },
    promise('processes that died unasked', actions.unexpectedExits),
    { label: 'approvals decided / submit retries', value: `${actions.approvals} / ${actions.submitRetries}` },
    {
      label: 'reviewer races (approvals / resolutions)',
      value:
        `${actions.reviewers.approvalRaces} / ${actions.reviewers.resolutionRaces}; refused: ` +
        (format(actions.reviewers.refusals) || 'none'),
    },
  ];
  const violations = rows.reduce((n, r) => n + (r.violations ?? 0), 0);
  const title =
    `Verity chaos run: seed ${input.options.seed}, ${input.options.operations} operations, ` +
    `fault probability ${input.options.faultProbability}`;
  return {
    rows,
    violations,
    table: render(title, rows, violations),
    settleMs: settle,
    counts: {
      executions: executions.length,
      operations: operations.length,
      events: events.length,
      passedUnknown: passedUnknown.length,
      resolvedAutomatically: resolvedAutomatically.length,
      held: held.length,
    },
  };
}

function promise(label: string, found: string[]): InvariantRow {
  return { label, value: String(found.length), violations: found.length, examples: found.slice(0, 5) };
}

function describe(o: OperationRow): string {
  return `${o.id} (${o.connector} ${o.reference ?? o.client_ref}, ${o.status} ${o.terminal_reason ?? ''})`.trim();
}

function render(title: string, rows: InvariantRow[], violations: number): string {
  const width = Math.max(...rows.map((r) => r.label.length)) + 2;
  const lines = [title, '-'.repeat(Math.min(120, title.length))];
  for (const row of rows) {
    const verdict = row.violations === undefined ? '' : row.violations === 0 ? '   ok (must be 0)' : '   BROKEN';
    lines.push(`${row.label.padEnd(width)}${row.value}${verdict}`);
    for (const example of row.examples ?? []) lines.push(`${' '.repeat(width)}  e.g. ${example}`);
  }
  lines.push(violations === 0 ? 'every invariant held' : `${violations} invariant violation(s)`);
  return lines.join('\n');
}

function group<T>(items: T[], key: (item: T) => string): Map<string, T[]> {
  const map = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const list = map.get(k);
    if (list) list.push(item);
    else map.set(k, [item]);
  }
  return map;
}

function countBy<T>(items: T[], key: (item: T) => string): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const item of items) counts[key(item)] = (counts[key(item)] ?? 0) + 1;
  return counts;
}

function format(counts: Record<string, number>): string {
  return Object.entries(counts)
    .sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}
