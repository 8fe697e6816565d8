import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  ConnectorRegistry,
  ConnectorSettingsInput,
  MAX_SECRETS_PER_CONNECTOR,
  TenantSecretsCache,
  amountFieldErrors,
  fieldSegments,
} from '@verity/connectors';
import {
  CapUsage,
  SPENDING_PERIOD_SECONDS,
  SecretsCipher,
  StaleConnectorSettings,
  backfillSpend,
  changeConnectorSettings,
  clearConnectorSettings,
  connectorSecretCount,
  connectorSettingsMeta,
  connectorSettingsVersion,
  deleteConnectorSecret,
  loadConnectorSettings,
  prefillSpend,
  SpendPrefill,
  spendingUsage,
  sqlState,
  transaction,
  upsertConnectorSettings,
  VersionCondition,
  versionConditionHolds,
  writeConnectorSecret,
  writeSpendPrefill,
} from '@verity/persistence';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig, tenantPrivateEgress } from '@verity/platform';
import { DEFAULT_CURRENCY_FIELD } from '@verity/status-model';
import { DataSource, EntityManager } from 'typeorm';
import type { Principal } from '../auth/principal';
import { versionConditionFailed } from '../http/if-match';
import { FieldError, Problem } from '../problem/problem';
import { ConnectorSettingsViewOf } from './connector-settings.schema';

/** Tenant connector settings, managed by the tenant's admin (allowlist, secrets by name, spending caps). */
@Injectable()
export class ConnectorSettingsService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly cipher: SecretsCipher,
    private readonly connectors: ConnectorRegistry,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
    private readonly secretValues: TenantSecretsCache = new TenantSecretsCache(),
  ) {}

  async list(principal: Principal): Promise<{ data: ConnectorSettingsViewOf[] }> {
    const data: ConnectorSettingsViewOf[] = [];
    for (const connector of this.connectors.list())
      data.push(await this.view(this.db.manager, principal, connector.name));
    return { data };
  }

  /**
   * The settings and their version (the ETag an If-Match names). The version is read first: should a change commit
   * between the reads, it is the older one, so a change based on what is shown is refused (412), never taken.
   */
  async get(principal: Principal, connectorName: string): Promise<{ view: ConnectorSettingsViewOf; version: string }> {
    this.connector(connectorName);
    const version = await connectorSettingsVersion(this.db.manager, principal.tenantId, connectorName);
    return { view: await this.view(this.db.manager, principal, connectorName), version };
  }

  /**
   * `condition`: the versions the change may be made on (If-Match) and those it may not (If-None-Match); settings at
   * another one are 412, nothing written.
   */
  async put(
    principal: Principal,
    connectorName: string,
    input: ConnectorSettingsInput,
    condition: VersionCondition = {},
  ): Promise<{ view: ConnectorSettingsViewOf; version: string }> {
    const connector = this.connector(connectorName);
    const errors: FieldError[] = [];
    if (input.allow_hosts !== undefined && !connector.settings?.allowHosts) {
      errors.push({
        field: 'allow_hosts',
        rule: 'not_applicable',
        message: `${connectorName} calls a fixed provider; an outbound allowlist applies to http only`,
      });
    }
    if (!tenantPrivateEgress(this.config)) {
      (input.allow_hosts ?? []).forEach((entry, i) => {
        if (!entry.allow_private) return;
        errors.push({
          field: `allow_hosts[${i}].allow_private`,
          rule: 'private_egress_disabled',
          message:
            'this platform lets no tenant reach private addresses (its operator can, with TENANT_PRIVATE_EGRESS)',
        });
      });
    }
    (input.spending_caps ?? []).forEach((cap, i) => {
      // A cap summing a field no operation of the connector has would refuse every send as unreadable; one reading its
      // currency where no operation has one would refuse every send as in another currency.
      errors.push(
        ...amountFieldErrors(connector, `spending_caps[${i}]`, {
          amountField: cap.amount_field,
          currencyField: cap.currency === undefined ? undefined : (cap.currency_field ?? DEFAULT_CURRENCY_FIELD),
        }),
      );
    });
    if (input.read_back_binding !== undefined && !connector.settings?.readBackBinding) {
      errors.push({
        field: 'read_back_binding',
        rule: 'not_applicable',
        message: `${connectorName} reads its effects back itself; operations declare their own read-back for http only`,
      });
    }
    if (input.secrets !== undefined && !connector.settings?.secrets) {
      errors.push({
        field: 'secrets',
        rule: 'not_applicable',
        message: `${connectorName} does not use tenant secrets`,
      });
    }
    if (errors.length > 0) throw Problem.validation(errors);

    // A new cap counts what its window already holds. The long part of that is read before the change takes the caps'
    // lock (which every send of the tenant's connector waits for), from a mark no send in flight passes; under the lock
    // only the sends since the mark are read, and what the prefill read is written with the change (a change refused
    // writes nothing). Not read for a change its version condition already refuses (412).
    const longest = Math.max(0, ...(input.spending_caps ?? []).map((c) => SPENDING_PERIOD_SECONDS[c.period]));
    let prefill: SpendPrefill | null = null;
    if (longest > 0) {
      const current = await connectorSettingsVersion(this.db.manager, principal.tenantId, connectorName);
      if (!versionConditionHolds(current, condition)) {
        throw versionConditionFailed('the connector settings', condition);
      }
      prefill = await prefillSpend(this.db, principal.tenantId, connectorName, longest);
    }
    const { view, version } = await this.stale(
      condition,
      transaction(this.db, async (tx) => {
        // The change holds the connector's spending-caps lock until the commit (changeConnectorSettings): a send that
        // checks the settings waits for it, so none commits from the settings before it unseen by the backfill below
        // (of the sends since the prefill's mark; the prefill read those before it, written here).
        // What the prefill read is written first, before the lock: a month of rows is not written while every send of
        // the connector waits, and a change refused still rolls it back with itself. Writing it takes the connector's
        // caps-change lock first: another caps change waits there, not under the caps' lock for rows written here.
        if (prefill) await writeSpendPrefill(tx, principal.tenantId, connectorName, prefill);
        await changeConnectorSettings(tx, this.change(principal, connectorName, condition), async () => {
          await upsertConnectorSettings(tx, principal.tenantId, connectorName, {
            allowHosts: input.allow_hosts,
            spendingCaps: input.spending_caps,
            readBackBinding: input.read_back_binding,
            by: principal.keyId,
          });
          await this.writeSecrets(tx, principal, connectorName, input.secrets ?? {});
        });
        if (longest > 0) await backfillSpend(tx, principal.tenantId, connectorName, longest, prefill?.since ?? null);
        return {
          view: await this.view(tx, principal, connectorName),
          version: await connectorSettingsVersion(tx, principal.tenantId, connectorName),
        };
      }),
    );
    if (input.secrets !== undefined) this.secretsChanged(principal);
    this.logger.info(
      {
        tenantId: principal.tenantId,
        connector: connectorName,
        by: principal.keyId,
        allowHosts: view.allow_hosts.length,
        spendingCaps: view.spending_caps.length,
        readBackBinding: view.read_back_binding,
        secretNames: Object.keys(input.secrets ?? {}),
      },
      'connector settings updated',
    );
    return { view, version };
  }

  async deleteSecret(
    principal: Principal,
    connectorName: string,
    name: string,
    condition: VersionCondition = {},
  ): Promise<void> {
    this.connector(connectorName);
    // A secret that is not there is a 404, which rolls the transaction back: nothing recorded.
    await this.stale(
      condition,
      transaction(this.db, (tx) =>
        changeConnectorSettings(tx, this.change(principal, connectorName, condition), async () => {
          const deleted = await deleteConnectorSecret(tx, principal.tenantId, connectorName, name);
          if (!deleted) throw Problem.notFound('Secret', name);
        }),
      ),
    );
    this.secretsChanged(principal);
    this.logger.info({ tenantId: principal.tenantId, connector: connectorName, secretName: name }, 'secret deleted');
  }

  /** Everything for this connector goes: allowlist, caps and secrets (the spending ledger stays: it is history). */
  async clear(principal: Principal, connectorName: string, condition: VersionCondition = {}): Promise<void> {
    this.connector(connectorName);
    await this.stale(
      condition,
      transaction(this.db, (tx) =>
        changeConnectorSettings(tx, this.change(principal, connectorName, condition), () =>
          clearConnectorSettings(tx, principal.tenantId, connectorName),
        ),
      ),
    );
    this.secretsChanged(principal);
    this.logger.info({ tenantId: principal.tenantId, connector: connectorName }, 'connector settings cleared');
  }

  /**
   * A change of the tenant's secrets has committed: the values this process kept for its answers are dropped now, before
   * the change is answered. Every process drops them when the change's NOTIFY reaches it; this one may answer (and be
   * asked again) before its own does, and would then answer with the values from before the change.
   */
  private secretsChanged(principal: Principal): void {
    this.secretValues.changed(principal.tenantId);
  }

  /** Every write is recorded in the history of admin changes (GET /v1/admin/changes), in its own transaction. */
  private change(principal: Principal, connector: string, condition: VersionCondition) {
    return { tenantId: principal.tenantId, connector, by: principal.keyId, ...condition };
  }

  /** A change refused because the settings' version fails its condition (rolled back): 412. */
  private async stale<T>(condition: VersionCondition, change: Promise<T>): Promise<T> {
    try {
      return await change;
    } catch (error) {
      if (error instanceof StaleConnectorSettings) throw versionConditionFailed('the connector settings', condition);
      throw error;
    }
  }

  private connector(name: string) {
    const connector = this.connectors.get(name);
    if (!connector) throw Problem.notFound('Connector', name);
    return connector;
  }

  /**
   * A database error here would carry the statement's parameters (the secret) into logs; it is replaced by one that
   * keeps only what the error filter needs to classify it.
   */
  private async writeSecrets(
    tx: EntityManager,
    principal: Principal,
    connector: string,
    secrets: Record<string, string | null>,
  ): Promise<void> {
    if (Object.keys(secrets).length === 0) return;
    // Counted in the change's turn (changeConnectorSettings), so two changes at once cannot both pass the bound.
    const held = await connectorSecretCount(tx, principal.tenantId, connector);
    for (const [name, value] of Object.entries(secrets)) {
      try {
        await writeConnectorSecret(tx, this.cipher, principal.tenantId, connector, name, value, principal.keyId);
      } catch (error) {
        const code = sqlState(error);
        throw Object.assign(new Error(`writing secret ${name} failed`), { code, driverError: { code } });
      }
    }
    // A tenant already past the bound (from before it existed) may still rotate and delete, never add.
    const holds = await connectorSecretCount(tx, principal.tenantId, connector);
    if (holds > MAX_SECRETS_PER_CONNECTOR && holds > held) {
      throw Problem.conflict(
        'secret-limit',
        `a tenant holds at most ${MAX_SECRETS_PER_CONNECTOR} secrets for ${connector} (this change would make ${holds}); ` +
          'delete some first (null as a value, or DELETE …/secrets/{name})',
      );
    }
  }

  private async view(db: EntityManager, principal: Principal, connector: string): Promise<ConnectorSettingsViewOf> {
    const settings = await loadConnectorSettings(db, principal.tenantId, connector, { withSecrets: false });
    const meta = await connectorSettingsMeta(db, principal.tenantId, connector);
    const usage: CapUsage[] = [];
    for (const cap of settings.spendingCaps) {
      const path = cap.max_amount !== undefined && cap.amount_field ? fieldSegments(cap.amount_field) : null;
      const failedSpendsNothing = this.connectors.get(connector)?.failedSpendsNothing === true;
      usage.push(await spendingUsage(db, principal.tenantId, connector, cap, path, failedSpendsNothing));
    }
    return {
      connector,
      allow_hosts: settings.allowHosts,
      spending_caps: settings.spendingCaps,
      read_back_binding: settings.readBackBinding,
      secrets: meta.secretNames,
      usage,
      updated_at: meta.updatedAt ? meta.updatedAt.toISOString() : null,
      updated_by: meta.updatedBy,
    };
  }
}
