import { Column, Entity, PrimaryColumn } from 'typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import { SecretUnreadableError, SecretsCipher, secretBinding } from '../secrets-cipher';
import { Queryable, rows, transaction } from '../sql';
import type { TransitionResult } from '../transition.service';
import { REJECTED_COMMIT_STATUSES, describeFoundCurrency } from '@verity/status-model';

/**
 * One entry of a tenant's outbound allowlist for the `http` connector (managed by its admin: PUT
 * /v1/admin/connector-settings/http), as stored and as the connector reads it (`AllowedHost` there).
 */
export interface AllowedHostRow {
  /** A host name (`api.example.com`), `*.example.com` for its subdomains, or an IP address. */
  host: string;
  /** Only these ports; every port when absent. */
  ports?: number[];
  /** The tenant explicitly allows this host to resolve to loopback, private or link-local addresses. */
  allow_private?: boolean;
  /**
   * The names of the tenant's secrets that may be sent to this host (in header values), or `["*"]` for any of them.
   * Absent: none. Without it an agent could send a secret meant for one host to any other allowlisted one (a webhook
   * receiver, an echo service) and read it back (`secretBindingProblems` in libs/connectors).
   */
  secrets?: string[];
}

/** Spending-cap windows are rolling: "day" is the last 24 hours, so no midnight reset can be gamed. */
export const SPENDING_PERIOD_SECONDS = {
  hour: 3_600,
  day: 86_400,
  week: 604_800,
  month: 2_592_000,
} as const satisfies Record<string, number>;
export type SpendingPeriod = keyof typeof SPENDING_PERIOD_SECONDS;

/** One spending cap of a tenant's connector, as stored and as the admin's PUT validates it (libs/connectors). */
export interface SpendingCapRow {
  period: SpendingPeriod;
  /** At most this many operations handed to the connector in the window (whatever their outcome). */
  max_operations?: number;
  /** At most this total of `amount_field` (a path into the operation's params) in the window. */
  max_amount?: number;
  amount_field?: string;
  /**
   * At most this many digits after the decimal point in an amount (the places the target charges in: 2 for cents of a
   * major unit, 0 for minor units); absent, any. A target that rounds 0.004 up to 0.01 charges more than the cap counts.
   */
  amount_decimals?: number;
  /**
   * The currency `max_amount` is in (ISO 4217). Set, only operations carrying exactly this code at `currency_field` are
   * sent under the cap; absent, amounts of every currency are summed as one unit.
   */
  currency?: string;
  /** Where the currency is in the operation's params (default `currency`); only with `currency`. */
  currency_field?: string;
}

/**
 * Which read-backs of the tenant's `http` operations count (`read_back_binding`): `declared`, every one the operation
 * declares; `bound`, only one that asks the operation's own origin about this effect. Mirrors `ReadBackBinding` in
 * libs/connectors.
 */
export type ReadBackBindingRow = 'declared' | 'bound';

@Entity('tenant_connector_settings')
export class TenantConnectorSettingsEntity {
  @PrimaryColumn('text', { name: 'tenant_id' }) tenantId!: string;
  @PrimaryColumn('text') connector!: string;
  @Column('jsonb', { name: 'allow_hosts' }) allowHosts!: AllowedHostRow[];
  @Column('jsonb', { name: 'spending_caps' }) spendingCaps!: SpendingCapRow[];
  @Column('text', { name: 'read_back_binding' }) readBackBinding!: ReadBackBindingRow;
  @Column('text', { name: 'updated_by', nullable: true }) updatedBy!: string | null;
  @Column('timestamptz', { name: 'created_at' }) createdAt!: Date;
  @Column('timestamptz', { name: 'updated_at' }) updatedAt!: Date;
}

/**
 * Write-only from the API's point of view: no answer holds `value`. Workers read it to put it in a request header (and
 * to redact what a target answers); the API reads it at intake only to refuse an operation that holds it literally.
 */
@Entity('tenant_connector_secrets')
export class TenantConnectorSecretEntity {
  @PrimaryColumn('text', { name: 'tenant_id' }) tenantId!: string;
  @PrimaryColumn('text') connector!: string;
  @PrimaryColumn('text') name!: string;
  @Column('text', { select: false }) value!: string;
  @Column('text', { name: 'updated_by', nullable: true }) updatedBy!: string | null;
  @Column('timestamptz', { name: 'updated_at' }) updatedAt!: Date;
}

@Entity('connector_spend')
export class ConnectorSpendEntity {
  @PrimaryColumn('text', { name: 'operation_id' }) operationId!: string;
  @Column('text', { name: 'tenant_id' }) tenantId!: string;
  @Column('text') connector!: string;
  @Column('timestamptz', { name: 'spent_at' }) spentAt!: Date;
}

/** The connector settings workers read, and the spending ledger (caps are counted from it). */
/**
 * Whether a sent operation `o`'s amount still counts toward a cap's max_amount: not when its status is one whose commit
 * is `rejected` (the parameter `statuses`: REJECTED_COMMIT_STATUSES) and nothing since refuted that (status model
 * `failureRefuted`: acknowledged, or the source showed the effect after the FAILED).
 */
const spentAmountStands = (statuses: string) =>
  `NOT (o.status = ANY(${statuses}::text[]) AND o.acknowledged_at IS NULL
                 AND NOT (coalesce(o.obligation, '{}'::jsonb) ? 'effect_shown_after_failed'))`;

/**
 * What a sent operation `o` (its ledger row `s`) counts toward a cap whose amount_field is at `path` (a text[]
 * parameter), its period `period` (a text parameter), as numeric, read by `verity_amount_of` (the amount a target
 * charged for a JSON value: a number, or text as JavaScript's `Number()` reads it): the greatest of what the send was
 * counted at when it was made under the cap's period (`s.amounts`; a cap whose amount_field changed since still counts
 * what its window's sends were sent with) or else what the operation carries at the path (a send made before the cap,
 * counted by its backfill), and what the provider reported (`evidence.record`, a read of the source, with a number at
 * the path). Nulls are skipped (`greatest`). The record only raises the count: an operation held INTEGRITY_MISMATCH
 * at a higher amount was charged that; a lower one (a target that lies or scales, or the earlier charge a
 * KNOWLEDGE_CONFLICT's context read found, kept when its hold is released) never lowers what was asked.
 */
const amountAt = (path: string, period: string) =>
  `greatest(CASE WHEN jsonb_typeof(o.evidence->'record' #> ${path}::text[]) = 'number'
                 THEN verity_amount_of(o.evidence->'record' #> ${path}::text[]) END,
            coalesce((s.amounts->>${period}::text)::numeric, verity_amount_of(o.params #> ${path}::text[])))`;

export const CONNECTOR_SPEND_SQL = {
  lockOperation: `SELECT 1 FROM operations WHERE id = $1 FOR UPDATE`,
  lockExecutionOfOperation: `SELECT 1 FROM executions
     WHERE id = (SELECT execution_id FROM operations WHERE id = $1) FOR NO KEY UPDATE`,
  settingsOf: `SELECT s.allow_hosts, s.spending_caps, s.read_back_binding,
            CASE WHEN $3 THEN (SELECT jsonb_object_agg(x.name, x.value) FROM tenant_connector_secrets x
                               WHERE x.tenant_id = $1 AND x.connector = $2) END AS secrets
     FROM (SELECT 1) one
     LEFT JOIN tenant_connector_settings s ON s.tenant_id = $1 AND s.connector = $2`,
  // The tenant's secrets alone, for what is looked through for their values (every answer given to the tenant): the
  // settings row is not read, nor locked against (a settings change under way does not hold an answer up).
  secretsOfTenant: `SELECT connector, name, value FROM tenant_connector_secrets
     WHERE tenant_id = $1 AND connector = ANY($2::text[])`,
  amountCaps: `SELECT connector, spending_caps FROM tenant_connector_settings
     WHERE tenant_id = $1 AND connector = ANY($2::text[]) AND spending_caps <> '[]'::jsonb`,
  // The amount leaves out an operation whose own request committed nothing (spentAmountStands); the count keeps every
  // send (max_operations bounds attempts, whatever became of them).
  usage: `SELECT count(*) AS operations,
            sum(CASE WHEN ${spentAmountStands('$5')} THEN greatest(${amountAt('$4', '$6')}, 0) END) AS amount,
            now() - make_interval(secs => $3) AS since
     FROM connector_spend s JOIN operations o ON o.id = s.operation_id
     WHERE s.tenant_id = $1 AND s.connector = $2 AND s.spent_at >= now() - make_interval(secs => $3)`,
  // Whether the window's amount plus this operation's would pass the cap, added and compared as numeric (exact): in
  // doubles, 1000 + 1e-14 is 1000, so at a used-up cap of 1000 every charge of 1e-14 went through, without end.
  amountBeyond: `SELECT coalesce(sum(CASE WHEN ${spentAmountStands('$7')} THEN greatest(${amountAt('$4', '$8')}, 0) END), 0)
            + $5::numeric > $6::numeric AS beyond
     FROM connector_spend s JOIN operations o ON o.id = s.operation_id
     WHERE s.tenant_id = $1 AND s.connector = $2 AND s.spent_at >= now() - make_interval(secs => $3)`,
  capLock: `SELECT pg_advisory_xact_lock(727002, hashtext($1))`,
  /**
   * The same lock, shared: what verity_read_backs_bound_locked and verity_settings_version_locked take (the key is
   * built the same way), and what an uncapped send takes before its rows.
   */
  readBackLock: `SELECT pg_advisory_xact_lock_shared(727002, hashtext($1))`,
  // Caps changes of one tenant's connector take turns: taken first in a change that writes a prefill's rows before the
  // caps' lock (writeSpendPrefill), held until it commits. Another key than the caps' lock: sends never take it.
  capsChangeLock: `SELECT pg_advisory_xact_lock(727003, hashtext($1))`,
  // One send at a time per tenant, connector and resend_ref (the send guard's reference_unsettled): taken before the
  // SENT statement, so its snapshot holds the SENT of another send of the reference that committed first.
  resendLock: `SELECT pg_advisory_xact_lock(hashtextextended('resend_ref' || chr(31) || $1 || chr(31) || $2 || chr(31) || $3, 0))`,
  // $4: what the send is counted at, by the period of each amount cap (numeric text), or null.
  recordSpend: `INSERT INTO connector_spend (operation_id, tenant_id, connector, amounts) VALUES ($1, $2, $3, $4::jsonb)
         ON CONFLICT (operation_id) DO NOTHING`,
  // `attempt > 0` is "ever sent" (everSent in libs/status-model): every operation handed to its connector counts. $4
  // (null: the whole window) the mark of a prefill (prefillSpend): only sends since, less a minute against a step back
  // of the database's clock. Walks operations_sent_by_connector: the tenant's sends of the connector in the window.
  backfill: `INSERT INTO connector_spend (operation_id, tenant_id, connector, spent_at)
     SELECT id, tenant_id, connector, sent_at FROM operations
     WHERE tenant_id = $1 AND connector = $2 AND attempt > 0
       AND sent_at >= greatest(now() - make_interval(secs => $3), $4::timestamptz - interval '1 minute')
     ON CONFLICT (operation_id) DO NOTHING`,
  // Taken holding the caps' lock (exclusively: every send in flight has committed), the time a prefill counts from.
  mark: `SELECT clock_timestamp() AS at`,
  // What a prefill reads outside the lock (the backfill's rows, not written): the window's sends of the connector.
  prefillRead: `SELECT id FROM operations
     WHERE tenant_id = $1 AND connector = $2 AND attempt > 0 AND sent_at >= now() - make_interval(secs => $3)`,
  // The rows a prefill read, written in the change's transaction before it takes the caps' lock; an operation pruned
  // since is skipped, and each counts from its sent_at as it stands now, not as read.
  prefillWrite: `INSERT INTO connector_spend (operation_id, tenant_id, connector, spent_at)
     SELECT o.id, o.tenant_id, o.connector, o.sent_at FROM unnest($3::text[]) AS u(id)
       JOIN operations o ON o.id = u.id AND o.tenant_id = $1 AND o.connector = $2 AND o.attempt > 0
     ON CONFLICT (operation_id) DO NOTHING`,
  prune: `DELETE FROM connector_spend WHERE operation_id IN (
       SELECT operation_id FROM connector_spend WHERE spent_at < now() - make_interval(secs => $1)
       ORDER BY spent_at LIMIT $2
     ) RETURNING operation_id`,
} as const;

export interface ConnectorSettingsRecord {
  allowHosts: AllowedHostRow[];
  spendingCaps: SpendingCapRow[];
  /** `declared` when the tenant set nothing (no row): every declared read-back counts, as before the setting existed. */
  readBackBinding: ReadBackBindingRow;
  /** Names and values; present only when asked for (workers building a request). */
  secrets: Record<string, string>;
  /**
   * Why the secrets were not opened (one does not open with this SECRETS_KEY), when the read was asked to say so
   * rather than throw (`connectorSettingsOfRow`'s `unopened: 'recorded'`); `secrets` is then empty. Anything built
   * from such settings would lack the secrets the tenant set: a call made with them must not be made.
   */
  secretsUnopened?: SecretUnreadableError;
  /** The row's version as read (`settingsVersionOf`; null: there was no row); undefined when the read did not ask. */
  version?: string | null;
}

/**
 * A settings row's version: its updated_at (moved by every change of the allowlist or caps) in microseconds, as text.
 * A send made from settings read earlier in a job commits only while the row still has the version read (the send
 * guard's `settings_changed`), so an allowlist or cap changed meanwhile is never sent around.
 */
export function settingsVersionOf(alias: string): string {
  return `(extract(epoch FROM ${alias}.updated_at) * 1000000)::bigint::text`;
}

/**
 * A tenant's settings for one connector in one round trip; no row means no allowlist, no caps, no secrets. Secrets are
 * read only when `withSecrets` is the cipher that opens them.
 */
export async function loadConnectorSettings(
  db: Queryable,
  tenantId: string,
  connector: string,
  options: { withSecrets: SecretsCipher | false },
): Promise<ConnectorSettingsRecord> {
  const [row] = await rows<ConnectorSettingsRow>(db, CONNECTOR_SPEND_SQL.settingsOf, [
    tenantId,
    connector,
    options.withSecrets !== false,
  ]);
  return connectorSettingsOfRow(row, tenantId, connector, options.withSecrets);
}

/**
 * Every secret the tenant holds for `connectors`, opened, in one round trip: what text is looked through for their
 * values. A secret that does not open throws SecretUnreadableError.
 */
export async function loadTenantSecrets(
  db: Queryable,
  tenantId: string,
  connectors: readonly string[],
  cipher: SecretsCipher,
): Promise<{ connector: string; name: string; value: string }[]> {
  if (connectors.length === 0) return [];
  const found = await rows<{ connector: string; name: string; value: string }>(
    db,
    CONNECTOR_SPEND_SQL.secretsOfTenant,
    [tenantId, connectors],
  );
  return found.map(({ connector, name, value }) => ({
    connector,
    name,
    value: cipher.open(value, secretBinding(tenantId, connector, name)),
  }));
}

/** The stored settings of one (tenant, connector) as a statement reads them; every field null when there are none. */
export interface ConnectorSettingsRow {
  allow_hosts: AllowedHostRow[] | null;
  spending_caps: SpendingCapRow[] | null;
  read_back_binding: ReadBackBindingRow | null;
  /** Sealed values by name; null when the statement did not read them. */
  secrets: Record<string, string> | null;
  /** `settingsVersionOf` the row (null: no row), where the statement reads it. */
  version?: string | null;
}

/**
 * The record a worker uses, with the secrets opened when a cipher is given (only for a connector that declares them).
 * A secret that does not open throws SecretUnreadableError — or, with `unopened: 'recorded'`, is said in
 * `secretsUnopened` (and no secret is given): for a read that serves more than the calls that need them.
 */
export function connectorSettingsOfRow(
  row: ConnectorSettingsRow | undefined,
  tenantId: string,
  connector: string,
  cipher: SecretsCipher | false,
  options: { unopened?: 'thrown' | 'recorded' } = {},
): ConnectorSettingsRecord {
  let secrets: Record<string, string> = {};
  let secretsUnopened: SecretUnreadableError | undefined;
  if (cipher) {
    try {
      for (const [name, stored] of Object.entries(row?.secrets ?? {})) {
        secrets[name] = cipher.open(stored, secretBinding(tenantId, connector, name));
      }
    } catch (error) {
      if (!(error instanceof SecretUnreadableError) || options.unopened !== 'recorded') throw error;
      secrets = {};
      secretsUnopened = error;
    }
  }
  return {
    allowHosts: row?.allow_hosts ?? [],
    spendingCaps: row?.spending_caps ?? [],
    readBackBinding: row?.read_back_binding ?? 'declared',
    secrets,
    ...(secretsUnopened && { secretsUnopened }),
    ...(row?.version !== undefined ? { version: row.version } : {}),
  };
}

/**
 * The amount caps a tenant has on these connectors (intake checks each operation's amount against them before it
 * accepts anything): one indexed read, and nothing at all for connectors without caps.
 */
export async function amountCapsOf(
  db: Queryable,
  tenantId: string,
  connectors: string[],
): Promise<Map<string, SpendingCapRow[]>> {
  const found = await rows<{ connector: string; spending_caps: SpendingCapRow[] }>(db, CONNECTOR_SPEND_SQL.amountCaps, [
    tenantId,
    connectors,
  ]);
  const caps = new Map<string, SpendingCapRow[]>();
  for (const row of found) {
    const withAmount = row.spending_caps.filter((cap) => cap.max_amount !== undefined);
    if (withAmount.length > 0) caps.set(row.connector, withAmount);
  }
  return caps;
}

export interface CapUsage {
  period: SpendingCapRow['period'];
  since: string;
  operations: number;
  /**
   * The sum of the cap's amount_field over the window (null when the cap has none), leaving out, for a connector whose
   * FAILED is its own word (`failedSpendsNothing`), the operations whose own request committed nothing (a FAILED not
   * refuted since). At most Number.MAX_VALUE: a sum past a double's range is shown as that (windowAmount).
   */
  amount: number | null;
}

/**
 * A window's sum (numeric text) as a JSON number. Text sent before a cap can make it larger than a double holds
 * (`"1e999"`): `Number()` gives Infinity, which JSON stores as null and a message prints as "Infinity". Such a sum is
 * shown as Number.MAX_VALUE, the largest amount a JSON number holds; it is past every cap either way, and the refusal's
 * message says "more than" it (describeCapExceeded).
 */
function windowAmount(sum: string | null): number {
  const amount = Number(sum ?? 0);
  return Number.isFinite(amount) ? amount : Number.MAX_VALUE;
}

/**
 * What has been spent in a cap's rolling window: every operation handed to the connector, whatever its outcome, counts
 * as an operation; its amount counts unless its own request committed nothing (a FAILED not refuted since) on the
 * connector's own word (`failedSpendsNothing`). Only
 * positive amounts are sent under a cap (capAmount); `greatest(…, 0)` keeps any older negative one from counting back.
 */
export async function spendingUsage(
  db: Queryable,
  tenantId: string,
  connector: string,
  cap: SpendingCapRow,
  amountPath: string[] | null,
  failedSpendsNothing = false,
): Promise<CapUsage> {
  const [row] = await rows<{ operations: string; amount: string | null; since: Date }>(db, CONNECTOR_SPEND_SQL.usage, [
    tenantId,
    connector,
    SPENDING_PERIOD_SECONDS[cap.period],
    amountPath ?? [],
    unspentStatuses(failedSpendsNothing),
    cap.period,
  ]);
  return {
    period: cap.period,
    since: new Date(row.since).toISOString(),
    operations: Number(row.operations),
    amount: amountPath ? windowAmount(row.amount) : null,
  };
}

/**
 * The statuses whose operations spent nothing on the connector's word (its `failedSpendsNothing`): the status model's
 * REJECTED_COMMIT_STATUSES, or none for a connector whose FAILED rests on what the operation declared (`http`).
 */
function unspentStatuses(failedSpendsNothing: boolean): readonly string[] {
  return failedSpendsNothing ? REJECTED_COMMIT_STATUSES : [];
}

/**
 * Whether `amount` on top of the window's usage passes the cap's max_amount, in exact decimal arithmetic (Postgres
 * numeric; a double's shortest form, as String() writes it, is read exactly). Summed in doubles, an amount below the
 * usage's last digit vanished: at a used-up cap, such charges were sent one after another.
 */
async function amountBeyondCap(
  db: Queryable,
  tenantId: string,
  connector: string,
  cap: SpendingCapRow,
  amountPath: string[],
  amount: number,
  failedSpendsNothing: boolean,
): Promise<boolean> {
  const [row] = await rows<{ beyond: boolean }>(db, CONNECTOR_SPEND_SQL.amountBeyond, [
    tenantId,
    connector,
    SPENDING_PERIOD_SECONDS[cap.period],
    amountPath,
    String(amount),
    String(cap.max_amount),
    unspentStatuses(failedSpendsNothing),
    cap.period,
  ]);
  return row.beyond;
}

export interface CapExceeded {
  cap: SpendingCapRow;
  usage: CapUsage;
  rule: 'max_operations' | 'max_amount' | 'amount_unreadable' | 'currency_mismatch';
  /** This operation's amount, for an amount cap. */
  requested?: number | null;
  /** For `currency_mismatch`: where the cap reads the currency and what this operation has there (absent: nothing). */
  currency_found?: { field: string; value: unknown };
}

/**
 * The spending cap, enforced where it cannot be raced: under a per-(tenant, connector) transaction lock, the window
 * is counted, and either the operation is refused or its SENT commit and its ledger row are written together.
 * Without caps, a turn or a row to lock first, this is just the commit: its one statement takes the settings' lock
 * (shared, in settings_changed) as it judges its conditions, and locks its operation's row only once they passed; the
 * rows it may share-lock while judging (a dependency done, a key, the tenant, a retry's chain) are none a capped send
 * writes. `commit` is the SENT transition, run on the transaction it is given.
 */
export async function commitWithinSpendingCaps(
  dataSource: DataSource,
  input: {
    tenantId: string;
    connector: string;
    operationId: string;
    caps: SpendingCapRow[];
    /**
     * The path segments of a cap's amount_field, and this operation's amount there (null: not a number); for a cap
     * with a currency, whether this operation's currency is another one (libs/connectors `capAmount` decides).
     */
    amountOf: (
      cap: SpendingCapRow,
    ) => { path: string[]; amount: number | null; currencyMismatch?: { field: string; found: unknown } } | null;
    /**
     * Take the operation's row first, in a transaction, before the SENT statement takes its snapshot (a reviewer's
     * release). The release guard judges the execution from that snapshot; a cancel or an expiry does rewrite a held
     * never-sent row (cancelHeldOfEndedExecution, after the execution's move, in its transaction), so the statement's
     * compare-and-set would refuse after such a wait too, but an end that did not would let a release that waited for
     * its row lock send after it. With the lock, the end either commits before the snapshot (the release is refused)
     * or waits for the release.
     */
    lockOperationFirst?: boolean;
    /**
     * The operation's `resend_ref` (a provider that does not deduplicate), or null: sends naming one reference take
     * turns, so the send guard's `reference_unsettled` of the second sees the first's SENT (each statement's snapshot
     * is taken when it starts; without the turn, two sends of one reference prepared at once both went out).
     */
    resendRef?: string | null;
    /**
     * The connector's `failedSpendsNothing`: whether its FAILED operations' amounts are left out of the window (its
     * rejections are its own word, not the operation's). Absent: every send's amount counts.
     */
    failedSpendsNothing?: boolean;
  },
  commit: (db: EntityManager) => Promise<TransitionResult>,
): Promise<{ sent: TransitionResult } | { exceeded: CapExceeded }> {
  const resendRef = input.resendRef ?? null;
  if (input.caps.length === 0 && !input.lockOperationFirst && resendRef === null) {
    return { sent: await commit(dataSource.manager) };
  }
  return transaction(dataSource, async (tx) => {
    // The connector settings' lock, before any row or turn, whether capped or not: one order for every send (settings,
    // then rows). Capped, exclusively: two dispatchers sending for the same tenant and connector take turns here, so
    // neither can overshoot the cap. Uncapped, shared, as the SENT statement's settings_changed takes it again (held, it
    // does not wait): taken only there, after a release's row locks or a reference's turn, it waited for a capped send
    // that held it and waited for those rows or that turn — a cap set between the two sends' reads made a deadlock.
    const settingsKey = `${input.tenantId}/${input.connector}`;
    await tx.query(input.caps.length > 0 ? CONNECTOR_SPEND_SQL.capLock : CONNECTOR_SPEND_SQL.readBackLock, [
      settingsKey,
    ]);
    // Then the reference's turn (also before any row, and always after the cap's: one order, no deadlock).
    if (resendRef !== null) {
      await tx.query(CONNECTOR_SPEND_SQL.resendLock, [input.tenantId, input.connector, resendRef]);
    }
    if (input.lockOperationFirst) {
      // The operation's row, then its execution's (the order every transition takes them): an end of the execution
      // (a cancel, an expiry) committed before the SENT statement's snapshot is seen by it, a later one waits.
      await tx.query(CONNECTOR_SPEND_SQL.lockOperation, [input.operationId]);
      await tx.query(CONNECTOR_SPEND_SQL.lockExecutionOfOperation, [input.operationId]);
    }
    const failedSpendsNothing = input.failedSpendsNothing ?? false;
    const usageOf = (cap: SpendingCapRow, path: string[] | null) =>
      spendingUsage(tx, input.tenantId, input.connector, cap, path, failedSpendsNothing);
    // First what no window changes, whatever the caps' order: an amount a cap cannot count, or one above a cap's
    // max_amount on its own. Named after a full window of another cap, the refusal would read as retryable (the
    // window passes) and be refused again for the amount.
    for (const cap of input.caps) {
      if (cap.max_amount === undefined) continue;
      const amount = input.amountOf(cap);
      if (amount === null || amount.amount === null) {
        return {
          exceeded: {
            cap,
            usage: await usageOf(cap, amount?.path ?? null),
            rule: 'amount_unreadable',
            requested: null,
          },
        };
      }
      // An amount in another currency is not in the cap's unit: never counted as if it were, so never sent under it.
      if (amount.currencyMismatch) {
        const { field, found } = amount.currencyMismatch;
        return {
          exceeded: {
            cap,
            usage: await usageOf(cap, amount.path),
            rule: 'currency_mismatch',
            requested: amount.amount,
            currency_found: { field, value: found },
          },
        };
      }
      if (amount.amount > cap.max_amount) {
        return {
          exceeded: { cap, usage: await usageOf(cap, amount.path), rule: 'max_amount', requested: amount.amount },
        };
      }
    }
    for (const cap of input.caps) {
      const amount = cap.max_amount !== undefined ? input.amountOf(cap) : null;
      const usage = await usageOf(cap, amount?.path ?? null);
      if (cap.max_operations !== undefined && usage.operations + 1 > cap.max_operations) {
        return { exceeded: { cap, usage, rule: 'max_operations' } };
      }
      // Readable and in the cap's currency (the pass above): what this window has room for decides.
      if (cap.max_amount !== undefined && amount !== null && amount.amount !== null) {
        if (
          await amountBeyondCap(
            tx,
            input.tenantId,
            input.connector,
            cap,
            amount.path,
            amount.amount,
            failedSpendsNothing,
          )
        ) {
          return { exceeded: { cap, usage, rule: 'max_amount', requested: amount.amount } };
        }
      }
    }
    const sent = await commit(tx);
    if (sent.won) {
      // What each amount cap counted this send at (every one readable: refused above otherwise), kept with its row.
      const amounts: Record<string, string> = {};
      for (const cap of input.caps) {
        const amount = cap.max_amount !== undefined ? input.amountOf(cap)?.amount : null;
        if (typeof amount === 'number') amounts[cap.period] = String(amount);
      }
      await tx.query(CONNECTOR_SPEND_SQL.recordSpend, [
        input.operationId,
        input.tenantId,
        input.connector,
        Object.keys(amounts).length > 0 ? JSON.stringify(amounts) : null,
      ]);
    }
    return { sent };
  });
}

/**
 * A change of a tenant's settings for a connector takes the spending caps' lock of that connector first, and holds it
 * until it commits: every capped send takes it too, and every SENT statement that checks the settings version reads
 * that version only once it holds the lock (shared), so no send commits from the settings before the change while
 * the change's backfill is counting what was sent.
 */
export async function lockSpendingCaps(db: Queryable, tenantId: string, connector: string): Promise<void> {
  await db.query(CONNECTOR_SPEND_SQL.capLock, [`${tenantId}/${connector}`]);
}

/**
 * The spending-caps lock of each connector named, shared, taken at the start of a transaction that locks rows and then
 * writes a statement judged under that lock: a VERIFIED from an unbound read-back (`readBackUnbound`,
 * `verity_read_backs_bound_locked`) or moves written while the settings are at a version (`whileSettingsAt`,
 * `verity_settings_version_locked`). Those statements take it again (already held, they do not wait); taken only there,
 * after the transaction locked its execution's row, they waited for a capped send holding it exclusively, which waited
 * for that row: a deadlock. Sends and settings changes take it first too: one order, the cap's lock, then rows.
 */
export async function lockReadBackBindings(
  db: Queryable,
  tenantId: string,
  connectors: Iterable<string>,
): Promise<void> {
  for (const connector of [...new Set(connectors)].sort()) {
    await db.query(CONNECTOR_SPEND_SQL.readBackLock, [`${tenantId}/${connector}`]);
  }
}

/** What a prefill read before a cap's change (prefillSpend): its mark, and the sends before it, not yet written. */
export interface SpendPrefill {
  since: Date;
  ids: string[];
}

/**
 * When a cap is set, what was already sent in its longest window counts too: the ledger is filled from the operations
 * table, under the change's hold of the caps' lock (lockSpendingCaps), so no send commits from the settings before the
 * change unseen by it, and in the change's transaction, so a change refused writes nothing. `since`: the mark of a
 * prefill made before the lock (prefillSpend), whose rows writeSpendPrefill wrote: only the sends since the mark are
 * read. Null: the whole window is read, every capped send of the connector waiting.
 */
export async function backfillSpend(
  db: Queryable,
  tenantId: string,
  connector: string,
  seconds: number,
  since: Date | null = null,
) {
  await db.query(CONNECTOR_SPEND_SQL.backfill, [tenantId, connector, seconds, since]);
}

/**
 * Writes what a prefill read (prefillSpend) to the ledger. The caps' change calls it first in its transaction, BEFORE it
 * takes the caps' lock, so a month of rows is not written while every send of the connector waits, and a change refused
 * still writes nothing (the transaction rolls back); its backfill under the lock then reads only the sends since the
 * mark.
 *
 * It first takes the connector's caps-change lock (held until the commit; even with nothing to write, as the change's
 * backfill writes rows too): two changes take turns from here. Without it, a change holding the caps' lock backfilled a
 * send made after its own mark that another change, waiting for that lock, had written uncommitted before it: each
 * waited for the other, a deadlock Postgres broke after `deadlock_timeout` by aborting one (retried), every send of the
 * connector waiting meanwhile. A send never writes a prefill's row under the caps' lock: a prefill reads only
 * operations sent (`attempt > 0`), whose row, if their send wrote one, was committed with their SENT, and the status
 * model sends no operation twice (MANUAL_REVIEW → SENT is for one never sent).
 */
export async function writeSpendPrefill(db: Queryable, tenantId: string, connector: string, prefill: SpendPrefill) {
  await db.query(CONNECTOR_SPEND_SQL.capsChangeLock, [`${tenantId}/${connector}`]);
  if (prefill.ids.length === 0) return;
  await db.query(CONNECTOR_SPEND_SQL.prefillWrite, [tenantId, connector, prefill.ids]);
}

/**
 * The long part of a cap's backfill, read before its change and outside the caps' lock, so the tenant's sends of the
 * connector do not wait for it (a month of sends to read). First the mark: the caps' lock is taken exclusively — every
 * send holds it (shared, or exclusively under a cap) from before it stamps `sent_at` until it commits, so every send
 * stamped before the mark has committed — the database's clock is read, and the lock is let go. Then every send in
 * the window is read, not written: the change writes them (`writeSpendPrefill`), so a change
 * refused (412, a key revoked meanwhile) writes nothing. A send stamped after the mark takes the lock after it, so its
 * `sent_at` is later: the change's backfill reads it under the lock.
 */
export async function prefillSpend(
  dataSource: DataSource,
  tenantId: string,
  connector: string,
  seconds: number,
): Promise<SpendPrefill> {
  const since = await transaction(dataSource, async (tx) => {
    await lockSpendingCaps(tx, tenantId, connector);
    const [row] = await rows<{ at: Date }>(tx, CONNECTOR_SPEND_SQL.mark, []);
    return new Date(row.at);
  });
  const sent = await rows<{ id: string }>(dataSource.manager, CONNECTOR_SPEND_SQL.prefillRead, [
    tenantId,
    connector,
    seconds,
  ]);
  return { since, ids: sent.map((r) => r.id) };
}

/**
 * The ledger only has to reach back as far as the longest cap period; older entries count toward nothing. Deletes
 * at most `limit` of them per call (the sweeper calls it every sweep), oldest first.
 */
export async function pruneSpendLedger(db: Queryable, limit: number): Promise<number> {
  const longest = Math.max(...Object.values(SPENDING_PERIOD_SECONDS));
  const pruned = await rows<{ operation_id: string }>(db, CONNECTOR_SPEND_SQL.prune, [longest, limit]);
  return pruned.length;
}

/** A window's amount plus a request in words: past a double's range (windowAmount) it is "more than" the largest one. */
function describeTotal(total: number): string {
  return Number.isFinite(total) && total < Number.MAX_VALUE ? String(total) : `more than ${Number.MAX_VALUE}`;
}

/** The refusal in words, for the operation's evidence and its events. */
export function describeCapExceeded(connector: string, e: CapExceeded): string {
  const window = `per ${e.cap.period} (rolling, since ${e.usage.since})`;
  switch (e.rule) {
    case 'max_operations':
      return `spending cap reached for ${connector}: ${e.usage.operations} of at most ${e.cap.max_operations} operations ${window}; not sent`;
    case 'max_amount':
      return `spending cap reached for ${connector}: ${e.requested} more would bring ${e.cap.amount_field} to ${describeTotal((e.usage.amount ?? 0) + (e.requested ?? 0))}, above ${e.cap.max_amount} ${window}; not sent`;
    case 'amount_unreadable':
      return `spending cap on ${connector} counts params.${e.cap.amount_field}, which this operation does not carry as a positive finite number${e.cap.amount_decimals === undefined ? '' : ` with at most ${e.cap.amount_decimals} decimal places`}; not sent`;
    case 'currency_mismatch':
      return `spending cap on ${connector} counts params.${e.cap.amount_field} in ${e.cap.currency}; this operation's params.${e.currency_found?.field} is ${describeFoundCurrency(e.currency_found?.value)}, not ${e.cap.currency}; not sent`;
  }
}
