import { CallTimings, OperationStatus, READS_SHOWING_THE_EFFECT, absenceEvidentAt } from '@verity/status-model';
import { Queryable, rows, sqlLiterals } from './sql';

const S = OperationStatus;

/**
 * The workers' small writes and reads of an operation's checks: the approval baseline, the re-check schedule, and
 * when the operation last became UNKNOWN after a send. Workers act across tenants on ids the system handed them.
 */
export const CHECKS_SQL = {
  // Merged into the approval, so a decision that arrived early is kept.
  // Only while still PREPARED: the read it records was made of an operation waiting to be sent; one sent or cancelled
  // since keeps the approval it was decided or sent with.
  mergeApprovalBaseline: `UPDATE operations SET approval = coalesce(approval, '{}'::jsonb) || $2
     WHERE id = $1 AND status = ${sqlLiterals([S.PREPARED])}`,
  // Compare-and-set on status and check_count: a check that raced this one (or a move) wins, this write does nothing.
  // Due $4 ms after the database's now: the sweeper compares it with that clock, not the writer's.
  scheduleNextCheck: `UPDATE operations SET check_count = $3,
         next_check_at = clock_timestamp() + $4::bigint * interval '1 millisecond'
     WHERE id = $1 AND status = $2 AND check_count = $5`,
  // A hold's scheduled re-check that could not read (its connector reads back no more, or the hold is decided): the
  // chain's due time moved $3 ms after the database's now, kept, not cleared — a deploy that can read again revives the
  // chain — and out of the sweep's batch until then. Compare-and-set: only while the hold is still held and still names
  // the due time the re-check ran for ($2, at the millisecond, as whileNextCheckAt compares it); a read or a "still
  // unknown" that re-dated it meanwhile wins. Not updated_at: the hold did not change (as for an observation's claim).
  postponeRecheck: `UPDATE operations
     SET next_check_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
     WHERE id = $1 AND status = ${sqlLiterals([S.MANUAL_REVIEW])}
       AND date_trunc('milliseconds', next_check_at) = $2::timestamptz
     RETURNING id`,
  lastUnknownAfterSend: `SELECT max(created_at) AS at, clock_timestamp() AS now FROM events
     WHERE operation_id = $1 AND tenant_id = $2 AND to_status = ${sqlLiterals([S.UNKNOWN])}
       AND from_status IN (${sqlLiterals([S.SENT, S.ACKNOWLEDGED])})`,
  // The same for several operations in one read: one row per id asked (at null when it never became UNKNOWN).
  lastUnknownsAfterSend: `SELECT ids.id AS operation_id, max(e.created_at) AS at, clock_timestamp() AS now
     FROM unnest($1::text[]) AS ids(id)
     LEFT JOIN events e ON e.operation_id = ids.id AND e.tenant_id = $2 AND e.to_status = ${sqlLiterals([S.UNKNOWN])}
       AND e.from_status IN (${sqlLiterals([S.SENT, S.ACKNOWLEDGED])})
     GROUP BY ids.id`,
  // The first read of the operation's source that showed a record of the effect and was still inconclusive (a record
  // without the field that tells its state): the operation went back to UNKNOWN with that read in its event.
  effectShownBefore: `SELECT data->'evidence'->>'inconclusive' AS result, (data->'evidence') - 'inconclusive' AS evidence,
            created_at FROM events
     WHERE operation_id = $1 AND tenant_id = $2 AND type = 'operation.status_changed'
       AND data->'evidence'->>'inconclusive' IN (${sqlLiterals(READS_SHOWING_THE_EFFECT)})
     ORDER BY seq LIMIT 1`,
} as const;

/**
 * Remembers what the source looked like when approval was asked for: an approval is stale if it changes. Written only
 * while the operation is still PREPARED (compared in the statement).
 */
export async function recordApprovalBaseline(
  db: Queryable,
  operationId: string,
  baseline: Record<string, unknown>,
): Promise<void> {
  await rows(db, CHECKS_SQL.mergeApprovalBaseline, [operationId, JSON.stringify({ baseline })]);
}

/**
 * Moves a hold's automatic re-check due at `dueAt` to `afterMs` after the database's now, while the hold is still held
 * and still names that due time (see CHECKS_SQL.postponeRecheck). Whether it was moved.
 */
export async function postponeRecheck(
  db: Queryable,
  operationId: string,
  dueAt: Date,
  afterMs: number,
): Promise<boolean> {
  return (await rows(db, CHECKS_SQL.postponeRecheck, [operationId, dueAt, Math.round(afterMs)])).length > 0;
}

/**
 * The next check of an operation: its count and when it is owed (`afterMs` after the database's now), while it is still
 * in `status` at `checkCount`.
 */
export async function scheduleNextCheck(
  db: Queryable,
  op: { id: string; status: OperationStatus; checkCount: number },
  afterMs: number,
): Promise<void> {
  await rows(db, CHECKS_SQL.scheduleNextCheck, [op.id, op.status, op.checkCount + 1, afterMs, op.checkCount]);
}

/**
 * From when "no effect exists" can be believed about a sent operation (`absenceEvidentAt` in the status model), with
 * the database's clock at that read: the bound is made of the database's times (sent_at, the last UNKNOWN after a
 * send, acknowledged_at), so a caller compares it with this, not with its own clock (a host whose clock runs ahead
 * would otherwise believe the bound passed early). Tenant-scoped: the API asks it (a reviewer's FAILED waits for it),
 * as does the reconciler (before it trusts an absent read).
 */
export async function absenceEvidenceOf(
  db: Queryable,
  op: { id: string; tenantId: string; sentAt: Date | null; updatedAt: Date; acknowledgedAt: Date | null },
  timings: CallTimings,
): Promise<{ evidentAt: Date; databaseNow: Date }> {
  const [row] = await rows<{ at: Date | null; now: Date }>(db, CHECKS_SQL.lastUnknownAfterSend, [op.id, op.tenantId]);
  const evidentAt = absenceEvidentAt(
    // A sent row without sent_at (written before the column, or by hand): its last change is the safe side.
    {
      sentAt: op.sentAt ?? op.updatedAt,
      lastUnknownAt: row.at ? new Date(row.at) : null,
      acknowledgedAt: op.acknowledgedAt,
    },
    timings,
  );
  return { evidentAt, databaseNow: new Date(row.now) };
}

/**
 * `absenceEvidenceOf` for several sent operations of one tenant in one read (a page of them): each one's bound by id,
 * and the database's clock at that read. With no operation, no read: `databaseNow` is then this process' clock.
 */
export async function absenceEvidenceOfMany(
  db: Queryable,
  tenantId: string,
  ops: readonly { id: string; sentAt: Date | null; updatedAt: Date; acknowledgedAt: Date | null }[],
  timings: CallTimings,
): Promise<{ evidentAt: Map<string, Date>; databaseNow: Date }> {
  if (ops.length === 0) return { evidentAt: new Map(), databaseNow: new Date() };
  const found = await rows<{ operation_id: string; at: Date | null; now: Date }>(db, CHECKS_SQL.lastUnknownsAfterSend, [
    ops.map((op) => op.id),
    tenantId,
  ]);
  const lastUnknown = new Map(found.map((r) => [r.operation_id, r.at ? new Date(r.at) : null]));
  const evidentAt = new Map(
    ops.map((op) => [
      op.id,
      absenceEvidentAt(
        {
          sentAt: op.sentAt ?? op.updatedAt,
          lastUnknownAt: lastUnknown.get(op.id) ?? null,
          acknowledgedAt: op.acknowledgedAt,
        },
        timings,
      ),
    ]),
  );
  return { evidentAt, databaseNow: new Date(found[0].now) };
}

/** A read of the source that showed a record of the effect: what it found (`result`), its evidence, and when. */
export interface EffectShown {
  result: string;
  evidence: Record<string, unknown>;
  at: string;
}

/**
 * The first read of a sent operation's source that showed a record of its effect without settling it (the status
 * model's `readShowsTheEffect`, read again as inconclusive), or null. The effect was seen: a later "not there" from the
 * same source proves nothing (it lost the record, or flaps), and a hold keeps this read as `effect_shown`.
 */
export async function findEffectShownBefore(
  db: Queryable,
  op: { id: string; tenantId: string },
): Promise<EffectShown | null> {
  const [row] = await rows<{ result: string; evidence: Record<string, unknown>; created_at: Date }>(
    db,
    CHECKS_SQL.effectShownBefore,
    [op.id, op.tenantId],
  );
  return row ? { result: row.result, evidence: row.evidence, at: new Date(row.created_at).toISOString() } : null;
}
