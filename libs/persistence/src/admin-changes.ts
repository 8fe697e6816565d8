import { cutAtBytes, keptPage } from './page-bytes';
import { Queryable, rows } from './sql';

/**
 * The history of a tenant's admin changes (table `admin_changes`, append-only): one row per write of its policy, of
 * one connector's settings, or of one webhook endpoint (create, delete, enable), with who, when (the database's clock)
 * and the thing before and after.
 *
 * The rows are written where the changes are, in the same statement or transaction (see `updateTenantPolicy` in
 * tenant-policy.ts, `changeConnectorSettings` in connector-settings.repository.ts and the endpoint statements in
 * webhooks.ts); this file reads them.
 */
export const ADMIN_CHANGE_KINDS = ['policy', 'connector_settings', 'webhook_endpoint'] as const;
export type AdminChangeKind = (typeof ADMIN_CHANGE_KINDS)[number];

/**
 * The conditions a write of versioned admin settings (the policy, a connector's settings) is made under, from its
 * request's If-Match and If-None-Match (RFC 9110 §13.1.1–2): `ifMatch`, the versions it may be made on; `ifNoneMatch`,
 * those it may not (`*`: any — the settings always have a version). Undefined members ask nothing.
 */
export interface VersionCondition {
  ifMatch?: readonly string[];
  ifNoneMatch?: readonly string[] | '*';
}

/** Whether a write under `condition` may be made on the settings at `version` (compared where the write is made). */
export function versionConditionHolds(version: string, condition: VersionCondition): boolean {
  if (condition.ifMatch !== undefined && !condition.ifMatch.includes(version)) return false;
  if (condition.ifNoneMatch === '*') return false;
  return !condition.ifNoneMatch?.includes(version);
}

/** The columns an INSERT of a history row names, in this order. */
export const ADMIN_CHANGE_INSERT_COLUMNS = 'id, tenant_id, kind, connector, changed_by, before, after';

export const ADMIN_CHANGES_SQL = {
  // Newest first, in the order the rows were written (`seq`, drawn at the insert: after the lock a change waits for,
  // where an id is minted before it); a cursor is the last id of the previous page (an id of no entry of this tenant:
  // an empty page).
  list: `SELECT id, kind, connector, changed_by, changed_at, before, after FROM admin_changes
     WHERE tenant_id = $1
       AND ($2::text IS NULL OR seq < (SELECT seq FROM admin_changes WHERE tenant_id = $1 AND id = $2))
       AND ($3::text IS NULL OR kind = $3) AND ($4::text IS NULL OR connector = $4)
     ORDER BY seq DESC LIMIT $5`,
  // The same page, at most $5 - 1 entries and fewer once their stored text (their before and after, uncompressed)
  // would pass $6 (cutAtBytes): read, sized and cut in one statement, the entries sized after the limit.
  page: cutAtBytes(
    `SELECT id, kind, connector, changed_by, changed_at, before, after, seq AS page_order,
            (octet_length(coalesce(before::text, '')) + octet_length(coalesce(after::text, '')))::float8 AS page_row_bytes
     FROM admin_changes
     WHERE tenant_id = $1
       AND ($2::text IS NULL OR seq < (SELECT seq FROM admin_changes WHERE tenant_id = $1 AND id = $2))
       AND ($3::text IS NULL OR kind = $3) AND ($4::text IS NULL OR connector = $4)
     ORDER BY seq DESC LIMIT $5`,
    'page_order DESC',
    5,
    6,
  ),
} as const;

export interface AdminChangeRow {
  id: string;
  kind: AdminChangeKind;
  /** Set for connector settings only. */
  connector: string | null;
  /** The id of the key that made the change. */
  changed_by: string;
  changed_at: Date;
  /** Null only for a webhook endpoint that did not exist before (a create) or after (a delete) the change. */
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
}

/** One tenant's changes, newest first, older than `before` (an id) when given. */
export async function listAdminChanges(
  db: Queryable,
  query: { tenantId: string; before?: string; kind?: AdminChangeKind; connector?: string; limit: number },
): Promise<AdminChangeRow[]> {
  return rows<AdminChangeRow>(db, ADMIN_CHANGES_SQL.list, [
    query.tenantId,
    query.before ?? null,
    query.kind ?? null,
    query.connector ?? null,
    query.limit,
  ]);
}

/**
 * A page of one tenant's changes, newest first, older than `before` (an id) when given: at most `limit` entries, and
 * fewer once their stored text would pass `maxBytes` (one at least). `more`: another page follows.
 */
export async function listAdminChangesPage(
  db: Queryable,
  query: { tenantId: string; before?: string; kind?: AdminChangeKind; connector?: string; limit: number },
  maxBytes: number,
): Promise<{ rows: AdminChangeRow[]; more: boolean }> {
  const found = await rows<Record<string, unknown>>(db, ADMIN_CHANGES_SQL.page, [
    query.tenantId,
    query.before ?? null,
    query.kind ?? null,
    query.connector ?? null,
    query.limit + 1,
    maxBytes,
  ]);
  return keptPage<AdminChangeRow>(found);
}
