/**
 * After the storm: wait until everything accepted has settled, then compare what Verity claims (the database) with
 * what happened (the sandbox's GET /__effects, which reads the provider's primary), and check the event log itself.
 */
import type { Pool } from 'pg';
import {
  ExecutionStatus,
  OperationStatus,
  isSettledOperation,
  isTerminalExecution,
  type VerificationMethodValue,
} from '@verity/status-model';
import type { SandboxEffects, SandboxRequests, ServedStatusModel } from './cluster';
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
  /** Redis killed and started again with its data removed (no persistence): every job and schedule gone. */
  redisEmptied: number;
  /** Stray dispatch jobs the harness enqueued for operations it saw SENT (a duplicated or replayed job). */
  strayDispatches: number;
  /** Concurrent reviewers (I13): races run, refusals by problem code, and races where more than one caller won. */
  reviewers: {
    approvalRaces: number;
    resolutionRaces: number;
    refusals: Record<string, number>;
    wonTwice: string[];
  };
}

/** Nothing done yet: where a run (or a checker test) starts counting. */
export function noChaosActions(): ChaosActions {
  return {
    workerKills: 0,
    workerRestarts: 0,
    pauses: [],
    redisRestarts: 0,
    postgresRestarts: 0,
    unexpectedExits: [],
    submitRetries: 0,
    approvals: 0,
    refusedStarts: 0,
    redisEmptied: 0,
    strayDispatches: 0,
    reviewers: { approvalRaces: 0, resolutionRaces: 0, refusals: {}, wonTwice: [] },
  };
}

const SETTLED_SQL = `(o.status IN ('VERIFIED','FAILED','CANCELLED','MANUAL_REVIEW')
  OR (o.status = 'ACKNOWLEDGED' AND o.verification_method <> 'read_after_write'))`;
const TERMINAL_SQL = `('completed','failed','cancelled','expired')`;

/**
 * The operation moves of the contract (docs/contract.md §2), written out again here on purpose and never imported from
 * libs/status-model: I1 is checked against this table, and the model's served table is compared with it, so a wrong
 * row in the model cannot make the checker agree. Beyond the contract's text it holds what docs/decisions.md records:
 * the reasons each move needs ("Status model", "Two terminal reasons added") and the one system move out of
 * MANUAL_REVIEW (→ VERIFIED while held for SOURCE_UNREACHABLE or STALE_REPLICA, with read-after-write evidence).
 */
export interface ContractMove {
  from: string;
  to: string;
  /** Only a human resolution may take it (the system too while held for `systemWhenHeldFor`). */
  humanOnly?: boolean;
  systemWhenHeldFor?: string[];
  /** Refused while held for one of these reasons. */
  refusedWhenHeldFor?: string[];
  /** Refused once the provider acknowledged the send: a record of the effect is on file. */
  refusedWhenAcknowledged?: boolean;
  /** Refused once a read made while it was held showed the effect: a record of it is on file. */
  refusedWhenEffectShown?: boolean;
  /** Refused once the provider's rejection of the send is on file (a person's VERIFIED against its "rejected"). */
  refusedWhenRejected?: boolean;
  /** Only for an operation that was (`sent`) / was never (`never_sent`) handed to a connector. */
  only?: 'sent' | 'never_sent';
  /** The move must carry a terminal_reason; when listed, one of these. */
  reasonRequired?: boolean;
  reasons?: string[];
}

const INTO_REVIEW = { reasonRequired: true };
export const CONTRACT_OPERATION_MOVES: readonly ContractMove[] = [
  { from: 'PREPARED', to: 'SENT' },
  { from: 'PREPARED', to: 'MANUAL_REVIEW', ...INTO_REVIEW },
  { from: 'PREPARED', to: 'CANCELLED' },
  { from: 'PREPARED', to: 'VERIFIED' },
  { from: 'SENT', to: 'ACKNOWLEDGED' },
  { from: 'SENT', to: 'UNKNOWN', reasonRequired: true, reasons: ['CONNECTOR_ERROR'] },
  { from: 'SENT', to: 'FAILED', reasonRequired: true, reasons: ['CONNECTOR_REJECTED', 'SOURCE_UNREACHABLE'] },
  { from: 'ACKNOWLEDGED', to: 'VERIFIED' },
  { from: 'ACKNOWLEDGED', to: 'UNKNOWN' },
  { from: 'ACKNOWLEDGED', to: 'MANUAL_REVIEW', ...INTO_REVIEW },
  { from: 'UNKNOWN', to: 'RECONCILING' },
  { from: 'UNKNOWN', to: 'MANUAL_REVIEW', ...INTO_REVIEW },
  { from: 'RECONCILING', to: 'VERIFIED' },
  { from: 'RECONCILING', to: 'FAILED', reasonRequired: true, reasons: ['PROVEN_ABSENT'] },
  { from: 'RECONCILING', to: 'UNKNOWN' },
  { from: 'RECONCILING', to: 'MANUAL_REVIEW', ...INTO_REVIEW },
  {
    from: 'MANUAL_REVIEW',
    to: 'VERIFIED',
    humanOnly: true,
    only: 'sent',
    systemWhenHeldFor: ['SOURCE_UNREACHABLE', 'STALE_REPLICA'],
    refusedWhenRejected: true,
  },
  {
    from: 'MANUAL_REVIEW',
    to: 'FAILED',
    humanOnly: true,
    only: 'sent',
    refusedWhenHeldFor: ['INTEGRITY_MISMATCH', 'FIELD_MISSING'],
    refusedWhenAcknowledged: true,
    refusedWhenEffectShown: true,
  },
  { from: 'MANUAL_REVIEW', to: 'SENT', humanOnly: true, only: 'never_sent' },
  { from: 'MANUAL_REVIEW', to: 'CANCELLED', humanOnly: true, only: 'never_sent' },
];

/**
 * The execution moves of docs/contract.md §3, also written out here: the forward path, the three running states moving
 * freely among themselves and on to validating_output (its "running ⇄ waiting_for_tool ⇄ waiting_for_approval"), and
 * failed / cancelled / expired from every status that is not terminal.
 */
const EXECUTION_FORWARD: Record<string, string[]> = {
  created: ['validating'],
  validating: ['resolving_context'],
  resolving_context: ['planning'],
  planning: ['running'],
  running: ['waiting_for_tool', 'waiting_for_approval', 'validating_output'],
  waiting_for_tool: ['running', 'waiting_for_approval', 'validating_output'],
  waiting_for_approval: ['running', 'waiting_for_tool', 'validating_output'],
  validating_output: ['completed'],
};
export const CONTRACT_EXECUTION_MOVES: ReadonlySet<string> = new Set(
  Object.entries(EXECUTION_FORWARD).flatMap(([from, tos]) =>
    [...tos, 'failed', 'cancelled', 'expired'].map((to) => `${from}>${to}`),
  ),
);

const contractMove = new Map(CONTRACT_OPERATION_MOVES.map((m) => [`${m.from}>${m.to}`, m]));

/** Every way the served status model (GET /v1/status-model) differs from the contract's tables above. */
export function compareStatusModel(served: ServedStatusModel): string[] {
  const found: string[] = [];
  const sorted = (list: readonly string[] | undefined) => [...(list ?? [])].sort().join(',');
  const seen = new Set<string>();
  for (const row of served.operation.transitions) {
    const key = `${row.from}>${row.to}`;
    seen.add(key);
    const move = contractMove.get(key);
    if (!move) {
      found.push(`operation ${row.from} → ${row.to}: allowed by the model, not by the contract`);
      continue;
    }
    const differs: string[] = [];
    if (row.human_only !== (move.humanOnly ?? false)) differs.push(`human_only ${row.human_only}`);
    if (sorted(row.system_when_held_for) !== sorted(move.systemWhenHeldFor)) {
      differs.push(`system_when_held_for [${sorted(row.system_when_held_for)}]`);
    }
    if (sorted(row.refused_when_held_for) !== sorted(move.refusedWhenHeldFor)) {
      differs.push(`refused_when_held_for [${sorted(row.refused_when_held_for)}]`);
    }
    if (row.refused_when_acknowledged !== (move.refusedWhenAcknowledged ?? false)) {
      differs.push(`refused_when_acknowledged ${row.refused_when_acknowledged}`);
    }
    if (row.refused_when_effect_shown !== (move.refusedWhenEffectShown ?? false)) {
      differs.push(`refused_when_effect_shown ${row.refused_when_effect_shown}`);
    }
    if (row.refused_when_rejected !== (move.refusedWhenRejected ?? false)) {
      differs.push(`refused_when_rejected ${row.refused_when_rejected}`);
    }
    if (row.sent_only !== (move.only === 'sent')) differs.push(`sent_only ${row.sent_only}`);
    if (row.never_sent_only !== (move.only === 'never_sent')) differs.push(`never_sent_only ${row.never_sent_only}`);
    if (row.reason_required !== (move.reasonRequired ?? false)) differs.push(`reason_required ${row.reason_required}`);
    if (move.reasons && sorted(row.reasons) !== sorted(move.reasons)) differs.push(`reasons [${sorted(row.reasons)}]`);
    if (differs.length) found.push(`operation ${row.from} → ${row.to}: ${differs.join('; ')}`);
  }
  for (const move of CONTRACT_OPERATION_MOVES) {
    if (!seen.has(`${move.from}>${move.to}`)) found.push(`operation ${move.from} → ${move.to}: missing from the model`);
  }
  const servedExecution = new Set(served.execution.transitions.flatMap((t) => t.to.map((to) => `${t.from}>${to}`)));
  for (const key of servedExecution) {
    if (!CONTRACT_EXECUTION_MOVES.has(key)) found.push(`execution ${key.replace('>', ' → ')}: not in the contract`);
  }
  for (const key of CONTRACT_EXECUTION_MOVES) {
    if (!servedExecution.has(key)) found.push(`execution ${key.replace('>', ' → ')}: missing from the model`);
  }
  return found;
}

/**
 * I1 over one operation's status events, in order, against the contract's table: the move exists, carries the reason
 * it needs, was taken by a human where only a human may take it, and respects sent / never-sent and the hold's reason.
 */
function illegalOperationMoves(opId: string, log: EventRow[]): string[] {
  const found: string[] = [];
  let everSent = false;
  let acknowledged = false;
  let heldFor: string | null = null;
  for (const e of log) {
    if (e.type !== 'operation.status_changed') continue;
    const what = `${opId}: ${e.from_status} → ${e.to_status}`;
    const move = contractMove.get(`${e.from_status}>${e.to_status}`);
    if (!move) found.push(`${what} is not a move of the contract`);
    else {
      if (move.reasonRequired && !e.reason) found.push(`${what} without a terminal_reason`);
      if (move.reasons && e.reason && !move.reasons.includes(e.reason)) found.push(`${what} with reason ${e.reason}`);
      if (move.humanOnly && e.actor !== 'human' && !(heldFor && move.systemWhenHeldFor?.includes(heldFor))) {
        found.push(`${what} by ${e.actor ?? 'system'} (held for ${heldFor}): only a human may`);
      }
      if (heldFor && move.refusedWhenHeldFor?.includes(heldFor)) found.push(`${what} while held for ${heldFor}`);
      if (acknowledged && move.refusedWhenAcknowledged) found.push(`${what} after the provider acknowledged it`);
      if (move.only === 'sent' && !everSent) found.push(`${what} of an operation never sent`);
      if (move.only === 'never_sent' && everSent) found.push(`${what} of an operation already sent`);
    }
    if (e.to_status === 'SENT') everSent = true;
    if (e.to_status === 'ACKNOWLEDGED') acknowledged = true;
    heldFor = e.to_status === 'MANUAL_REVIEW' ? e.reason : null;
  }
  return found;
}

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
  tenant_id: string;
  connector: string;
  status: OperationStatus;
  terminal_reason: string | null;
  verification_method: string;
  attempt: number;
  evidence: Record<string, unknown> | null;
  obligation: Record<string, unknown> | null;
  reference: string | null;
  client_ref: string | null;
  amount: number | null;
  recipient: string | null;
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
  /** approval.decided: `release` when a reviewer's release of a hold granted it (a decision of that hold). */
  via: string | null;
  reason: string | null;
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
  /** Every request the provider received (GET /__requests). */
  requests: SandboxRequests;
  /** The status model as the API serves it (GET /v1/status-model). */
  statusModel: ServedStatusModel;
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
      `SELECT id, execution_id, tenant_id, connector, status, terminal_reason, verification_method, attempt, evidence,
              obligation, params->>'reference' AS reference, params->>'client_ref' AS client_ref,
              (params->>'amount')::bigint AS amount, params->>'to' AS recipient
         FROM operations`,
    )
  ).rows;
  const events = (
    await pool.query<EventRow>(
      `SELECT execution_id, seq::int AS seq, operation_id, type, from_status, to_status, data->>'actor' AS actor,
              coalesce(data->>'decision', data->>'status') AS decision, data->>'via' AS via, data->>'reason' AS reason, created_at
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
  // The provider's acknowledgement says the effect was accepted: only a person, on evidence, may call it FAILED.
  const failedAfterAcknowledgement = operations.filter(
    (o) =>
      o.status === 'FAILED' &&
      !o.evidence?.resolution &&
      statusChanges(o.id).some((e) => e.to_status === 'ACKNOWLEDGED'),
  );
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
  // operation.resolved (a release's own grant, via `release`, is part of that resolution); and an operation whose
  // approval was denied is never SENT afterwards.
  const decidedTwice: string[] = [];
  const sentAfterDeny: string[] = [];
  for (const [opId, log] of eventsByOperation) {
    let decisions = 0;
    let resolutions = 0;
    let denied = false;
    for (const e of log) {
      if (e.type === 'approval.requested') decisions = 0;
      if (e.type === 'operation.status_changed' && e.to_status === 'MANUAL_REVIEW') resolutions = 0;
      if (e.type === 'approval.decided' && e.via !== 'release' && (decisions += 1) > 1) {
        decidedTwice.push(`${opId}: approval decided twice`);
      }
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
  // I2 under concurrency: each status event starts where the one before it ended (a second writer's event written from
  // a status the row had already left would still end where the row is). And a person's decision is recorded only while
  // the operation was open to it, as its log tells: an approval while PREPARED (a release's own grant while held), a
  // resolution or a "still unknown" while MANUAL_REVIEW — never one shown on an operation that had already moved on.
  const notFromBefore: string[] = [];
  const decidedWhileClosed: string[] = [];
  for (const [opId, log] of eventsByOperation) {
    let at = 'PREPARED';
    for (const e of log) {
      if (e.type === 'operation.status_changed') {
        if (e.from_status !== at) notFromBefore.push(`${opId}: ${e.from_status} → ${e.to_status} while ${at}`);
        at = e.to_status ?? at;
        continue;
      }
      const openAt =
        e.type === 'approval.decided'
          ? e.via === 'release'
            ? 'MANUAL_REVIEW'
            : 'PREPARED'
          : e.type === 'operation.resolved' || e.type === 'operation.still_unknown'
            ? 'MANUAL_REVIEW'
            : null;
      if (openAt && at !== openAt) decidedWhileClosed.push(`${opId}: ${e.type} while ${at}`);
    }
  }
  for (const execution of executions) {
    let at = 'created';
    for (const e of eventsByExecution.get(execution.id) ?? []) {
      if (e.type !== 'execution.status_changed') continue;
      if (e.from_status !== at) notFromBefore.push(`${execution.id}: ${e.from_status} → ${e.to_status} while ${at}`);
      at = e.to_status ?? at;
    }
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

  // I1: every move in the log is one the contract allows (the checker's own table, not the model's).
  const illegal: string[] = [];
  for (const [opId, log] of eventsByOperation) illegal.push(...illegalOperationMoves(opId, log));
  for (const e of events) {
    if (e.type !== 'execution.status_changed') continue;
    if (!CONTRACT_EXECUTION_MOVES.has(`${e.from_status}>${e.to_status}`)) {
      illegal.push(`${e.execution_id}: ${e.from_status} → ${e.to_status}`);
    }
  }
  const modelDiffers = compareStatusModel(input.statusModel);

  // What the wire saw (GET /__requests): sends are POSTs, keyed as the provider keys them.
  const wire = input.requests;
  const sendsByKey = group(
    wire.requests.filter((r) => r.method === 'POST' && (r.path === '/v1/charges' || r.path === '/v1/messages')),
    (r) => (r.path === '/v1/charges' ? `charge:${r.reference}` : `message:${r.client_ref}`),
  );
  const effectKeyOf = (o: OperationRow) =>
    o.connector === 'sandbox.payments' ? `charge:${o.reference}` : `message:${o.client_ref}`;
  const wireIncomplete =
    wire.dropped > 0 ? [`the provider kept ${wire.requests.length} of ${wire.total} requests`] : [];
  // Effects the provider forgot cannot show a duplicate or vouch for an effect, whatever the other rows say.
  const effectsIncomplete =
    effects.dropped > 0 ? [`the provider kept ${effects.total - effects.dropped} of ${effects.total} effects`] : [];
  // I3 at the wire: a re-send counts even when the provider's Idempotency-Key turned it into a replay.
  const sentAtWireTwice: string[] = [];
  const keyNotOwn: string[] = [];
  for (const o of operations) {
    const sends = sendsByKey.get(effectKeyOf(o)) ?? [];
    if (sends.length > 1) {
      sentAtWireTwice.push(`${describe(o)}: ${sends.length} requests (${sends.map((r) => r.outcome).join(', ')})`);
    }
    if (o.connector !== 'sandbox.payments' || sends.length === 0) continue;
    // One key for every request of the operation, and the one the contract derives from it (docs/decisions.md:
    // verity-<tenant>-<reference>): a key that changes per attempt would let a re-send charge twice.
    const own = `verity-${o.tenant_id}-${o.reference}`;
    const keys = [...new Set(sends.map((r) => r.idempotency_key ?? '(none)'))];
    if (keys.length > 1 || keys[0] !== own) keyNotOwn.push(`${o.id}: key(s) ${keys.join(', ')}; expected ${own}`);
  }
  const sentOps = new Set(
    operations.filter((o) => statusChanges(o.id).some((e) => e.to_status === 'SENT')).map(effectKeyOf),
  );
  const requestsWithoutSent: string[] = [];
  for (const [key, sends] of sendsByKey) {
    if (!sentOps.has(key)) requestsWithoutSent.push(`${key}: ${sends.length} request(s), no operation SENT for it`);
  }

  // I6 against the provider: read-after-write evidence names the provider's own record of this operation's effect
  // (id, amount / recipient, reference), and a read at the wire returned that record before the VERIFIED was written
  // (a later read — observation re-reads verified effects — cannot have been its evidence). Made-up evidence fails.
  const firstReadOf = new Map<string, number>();
  for (const r of wire.requests) {
    if (r.method !== 'GET') continue;
    for (const id of r.returned_ids ?? []) {
      const at = Date.parse(r.at);
      if (!(firstReadOf.get(id)! <= at)) firstReadOf.set(id, at);
    }
  }
  const evidenceNotProviders: string[] = [];
  for (const o of operations) {
    if (o.status !== 'VERIFIED' || o.evidence?.resolution) continue;
    const record = (o.evidence?.record ?? null) as Record<string, unknown> | null;
    const id = typeof record?.id === 'string' ? record.id : null;
    const wrong: string[] = [];
    if (o.connector === 'sandbox.payments') {
      const provider = effects.charges[o.reference ?? ''];
      const at = id === null || !provider ? -1 : provider.ids.indexOf(id);
      if (at === -1) wrong.push(`id ${id} is not a charge of ${o.reference} at the provider`);
      else if (record?.amount !== provider.amounts[at] || record?.amount !== Number(o.amount)) {
        wrong.push(`amount ${String(record?.amount)}, provider ${provider.amounts[at]}, requested ${o.amount}`);
      }
      if (record?.reference !== o.reference) wrong.push(`reference ${String(record?.reference)}`);
    } else {
      const provider = effects.messages[o.client_ref ?? ''];
      const at = id === null || !provider ? -1 : provider.ids.indexOf(id);
      if (at === -1) wrong.push(`id ${id} is not a message of ${o.client_ref} at the provider`);
      else if (provider.to[at] !== o.recipient || (record?.to !== undefined && record.to !== o.recipient)) {
        wrong.push(`recipient ${String(record?.to)}, provider ${provider.to[at]}`);
      }
    }
    const verifiedAt = statusChanges(o.id)
      .filter((e) => e.to_status === 'VERIFIED')
      .map((e) => e.created_at.getTime())
      .pop();
    const readAt = id === null ? undefined : firstReadOf.get(id);
    if (id !== null && (readAt === undefined || (verifiedAt !== undefined && readAt > verifiedAt))) {
      wrong.push(`no read at the wire returned ${id} before it was VERIFIED`);
    }
    if (wrong.length) evidenceNotProviders.push(`${o.id}: ${wrong.join('; ')}`);
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
    promise('effects incomplete (GET /__effects)', effectsIncomplete),
    promise('duplicate effects (GET /__effects)', duplicates),
    promise('VERIFIED without an effect', verifiedWithoutEffect.map(describe)),
    promise('FAILED with an effect', failedWithEffect.map(describe)),
    promise('FAILED by the system after the provider acknowledged it', failedAfterAcknowledgement.map(describe)),
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
    promise('I2 a status event not from the status before it', notFromBefore),
    promise("a person's decision recorded while the operation was not open to it", decidedWhileClosed),
    promise("I1 illegal transitions (the contract's table)", illegal),
    promise("status model served ≠ the contract's table", modelDiffers),
    promise('wire log incomplete (GET /__requests)', wireIncomplete),
    promise('I3 more than one request at the wire', sentAtWireTwice),
    promise('requests at the wire with no SENT operation', requestsWithoutSent),
    promise("idempotency key not the operation's own", keyNotOwn),
    promise("VERIFIED evidence not the provider's record", evidenceNotProviders),
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
    {
      label: 'Redis crashes (kept / emptied) / Postgres',
      value: `${actions.redisRestarts} / ${actions.redisEmptied} / ${actions.postgresRestarts}`,
    },
    {
      label: 'requests at the wire / stray dispatch jobs',
      value: `${wire.total} / ${actions.strayDispatches}`,
    },
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
