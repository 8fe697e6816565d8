import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  ConnectorSecretsAccess,
  ConnectorSettingsRecord,
  SecretsCipher,
  loadConnectorSettings,
  loadTenantSecrets,
} from '@verity/persistence';
import { VERITY_CONFIG, VerityConfig, tenantPrivateEgress, tenantSecretsReads } from '@verity/platform';
import { DataSource } from 'typeorm';
import type { AllowedHost, Connector, ConnectorEnvironment, TenantConnectorSettings } from './connector';
import { PlatformService, effectiveAllowHosts, platformServices } from './egress';
import { ConnectorRegistry } from './registry';
import { type Redact, answerRedactor } from './secret-redaction';
import { type SecretsMoment, type SecretsRead, TenantSecretsCache } from './tenant-secrets-cache';

/** What every connector call needs from the app's configuration. */
export type ConnectorCallConfig = Pick<
  VerityConfig,
  | 'SANDBOX_URL'
  | 'CONNECTOR_TIMEOUT_MS'
  | 'TENANT_PRIVATE_EGRESS'
  | 'NODE_ENV'
  | 'HOST'
  | 'PORT'
  | 'DATABASE_URL'
  | 'REDIS_URL'
  | 'DISPATCHER_METRICS_PORT'
  | 'RECONCILER_METRICS_PORT'
  | 'REDIS_CLUSTER_NODES'
>;

/**
 * A tenant's secret values as a process keeps them (TenantSecretsCache): each of the connectors that take secrets, opened,
 * and what its answers go through (answerRedactor), built once for as long as they are kept.
 */
export interface TenantSecrets {
  values: readonly { connector: string; name: string; value: string }[];
  redact: Redact;
}

/** Which connector of which tenant a call is for (an operation row, or anything naming both). */
export interface TenantConnectorRef {
  tenantId: string;
  connector: string;
}

/**
 * The connectors as one tenant's operations use them: the registry's connector, and the environment a call to it runs
 * in, built from the configuration and the tenant's settings for that connector read now (egress allowlist, spending
 * caps, and its secrets opened only when the connector declares it uses them). One place, so sends, context reads,
 * read-backs and observations agree on what a call sees.
 */
@Injectable()
export class TenantConnectors {
  /** The platform's own listeners: never a target of a tenant's http call or webhook (egress.ts). */
  readonly platform: readonly PlatformService[];

  constructor(
    private readonly registry: ConnectorRegistry,
    @InjectDataSource() private readonly db: DataSource,
    private readonly cipher: SecretsCipher,
    @Inject(VERITY_CONFIG) private readonly config: ConnectorCallConfig,
    private readonly secretValues: TenantSecretsCache<TenantSecrets> = new TenantSecretsCache(),
  ) {
    this.platform = platformServices(config);
  }

  get(name: string): Connector | undefined {
    return this.registry.get(name);
  }

  require(name: string): Connector {
    return this.registry.require(name);
  }

  approvalAmountDeclarations(): { connector: string; amountField: string }[] {
    return this.registry.approvalAmountDeclarations();
  }

  /**
   * For a statement that reads an operation's settings with it (findOperationToSend): the connectors whose secrets it
   * opens — those that declare they use them — and the key.
   */
  secretsAccess(): ConnectorSecretsAccess {
    const connectors = this.registry
      .list()
      .filter((c) => c.settings?.secrets === true)
      .map((c) => c.name);
    return { connectors, cipher: this.cipher };
  }

  /**
   * Every secret the tenant holds for `connectors` (by default every connector that takes secrets), as of now: what a
   * person's or an agent's free text is looked through for before it is stored. Named `<connector>:<name>`. The values
   * its answers are redacted with (tenantSecretsOf): one statement, or none while they are kept.
   */
  async secretsOfTenant(
    tenantId: string,
    connectors: readonly string[] = this.secretsAccess().connectors,
  ): Promise<Record<string, string>> {
    const all: Record<string, string> = {};
    for (const { connector, name, value } of (await this.tenantSecretsOf(tenantId)).values) {
      if (connectors.includes(connector)) all[`${connector}:${name}`] = value;
    }
    return all;
  }

  /**
   * What an answer of this tenant goes through before it leaves (answerRedactor): every secret value it holds now
   * replaced by `{{secret:NAME}}` in the answer's strings. A value stored in plain before it was made a secret (an
   * intake that had no secret to look for, a URL written then) is never returned after. A tenant with none answers
   * through the identity (nothing walked). `since`: when the request being answered arrived (secretsMoment then;
   * by default now).
   */
  async answerRedactorOf(tenantId: string, since?: SecretsMoment): Promise<Redact> {
    return (await this.tenantSecretsOf(tenantId, since)).redact;
  }

  /**
   * Now, in the order TenantSecretsCache keeps: taken when a request arrives and passed with each read of the tenant's
   * secrets for it, every change committed before the request is honoured, and confirmed at most once for the request.
   */
  secretsMoment(): SecretsMoment {
    return this.secretValues.now();
  }

  /**
   * A statement that tells whether the tenant holds any secret (for every connector that takes them) is about to be
   * sent: `noSecretsFound` after it, when it found none.
   */
  secretsReadBegins(): SecretsRead {
    return this.secretValues.reading();
  }

  /**
   * A statement begun at `read` found that the tenant holds no secret for any connector that takes them (intake asks
   * that on its way): kept as a read of its secrets would be, so this request's answer (and any other that arrived
   * before the statement began) is given as it is, with no round trip and no read of its own.
   */
  noSecretsFound(tenantId: string, read: SecretsRead): void {
    this.secretValues.found(tenantId, read, { values: [], redact: answerRedactor({}) }, 0);
  }

  /**
   * The tenant's secret values of now (every change committed before `since` honoured): read once and kept while every
   * change of them is announced to this process (TenantSecretsCache: the API's LISTEN connection); elsewhere, or while
   * it is down, read each time. One statement (loadTenantSecrets) for every connector that takes secrets.
   */
  private tenantSecretsOf(tenantId: string, since?: SecretsMoment): Promise<TenantSecrets> {
    return this.secretValues.get(
      tenantId,
      async () => {
        const named: Record<string, string> = {};
        let size = 0;
        const { connectors, cipher } = this.secretsAccess();
        tenantSecretsReads.inc();
        const values = await loadTenantSecrets(this.db.manager, tenantId, connectors, cipher);
        for (const { connector, name, value } of values) {
          // Named as a placeholder names it; two connectors' secrets of one name both kept (the second as `connector:NAME`).
          named[name in named ? `${connector}:${name}` : name] = value;
          size += connector.length + name.length + value.length;
        }
        return { value: { values, redact: answerRedactor(named) }, size };
      },
      since,
    );
  }

  /** The tenant's settings for the operation's connector, read now. */
  settingsOf(op: TenantConnectorRef): Promise<ConnectorSettingsRecord> {
    const connector = this.registry.get(op.connector);
    return loadConnectorSettings(this.db.manager, op.tenantId, op.connector, {
      withSecrets: connector?.settings?.secrets === true && this.cipher,
    });
  }

  /** The environment of a call with the tenant's settings already read (a send reads them once for several calls). */
  callEnvironment(tenant: TenantConnectorSettings): ConnectorEnvironment {
    const allowHosts = effectiveAllowHosts(tenant.allowHosts, tenantPrivateEgress(this.config));
    return {
      sandboxUrl: this.config.SANDBOX_URL,
      timeoutMs: this.config.CONNECTOR_TIMEOUT_MS,
      platform: this.platform,
      tenant: { ...tenant, allowHosts },
    };
  }

  /**
   * The tenant's http allowlist as the platform lets it act (see callEnvironment), read now: what its webhook targets
   * obey, as its http operations do.
   */
  async httpAllowlist(tenantId: string): Promise<AllowedHost[] | undefined> {
    const settings = await loadConnectorSettings(this.db.manager, tenantId, 'http', { withSecrets: false });
    return effectiveAllowHosts(settings.allowHosts, tenantPrivateEgress(this.config));
  }

  /** The environment of one call for this operation, with the tenant's settings read now. */
  async environmentOf(op: TenantConnectorRef): Promise<ConnectorEnvironment> {
    const settings = await this.settingsOf(op);
    return this.callEnvironment({
      allowHosts: settings.allowHosts,
      secrets: settings.secrets,
      readBackBinding: settings.readBackBinding,
    });
  }
}
