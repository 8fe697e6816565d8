import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { ConnectorRegistry, TenantConnectors, amountFieldErrors } from '@verity/connectors';
import {
  DEFAULT_OBLIGATION_OWNER,
  DEFAULT_ESCALATION_TARGET,
  TenantPolicySettings,
  TenantSettings,
  VersionCondition,
  changeTenantPolicy,
  loadTenantPolicy,
} from '@verity/persistence';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { ApprovalRule, DEFAULT_AMOUNT_FIELD, DEFAULT_CURRENCY_FIELD, tenantApprovalRules } from '@verity/status-model';
import { DataSource } from 'typeorm';
import type { Principal } from '../auth/principal';
import { versionConditionFailed } from '../http/if-match';
import { refuseSecretValuesIn } from '../http/secret-values';
import { FieldError, Problem } from '../problem/problem';
import { PolicyInput, PolicyViewOf } from './policy.schema';

/** The tenant's policy (admin role): who owns obligations, who is told when overdue, by when, what needs approval. */
@Injectable()
export class PolicyService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly connectors: ConnectorRegistry,
    private readonly tenantConnectors: TenantConnectors,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /** The policy in force, and its version (the ETag a PUT's If-Match names). */
  async get(principal: Principal): Promise<{ view: PolicyViewOf; version: string }> {
    const found = await loadTenantPolicy(this.db.manager, principal.tenantId);
    if (!found) throw Problem.notFound('Tenant', principal.tenantId);
    return { view: this.view(found.settings), version: found.version };
  }

  /**
   * `condition`: If-Match's versions the change was made against, If-None-Match's it may not be made on (undefined:
   * any). The statement that writes compares them, so
   * of two admins who read one version and change it at once, the second gets 412 instead of undoing the first.
   */
  async put(
    principal: Principal,
    input: PolicyInput,
    condition: VersionCondition = {},
  ): Promise<{ view: PolicyViewOf; version: string }> {
    const errors: FieldError[] = [];
    (input.approval_rules ?? []).forEach((rule, i) => {
      const connector = this.connectors.get(rule.connector);
      if (!connector) {
        errors.push({
          field: `approval_rules[${i}].connector`,
          rule: 'unknown_connector',
          message: `no connector "${rule.connector}"; known: ${this.connectors
            .list()
            .map((c) => c.name)
            .join(', ')}`,
        });
        return;
      }
      // A threshold on a field no operation of the connector has would never apply: refused, not kept silently off. A
      // currency read from a field no operation has would make every amount of the connector wait for approval.
      if (rule.amount_above === undefined) return;
      errors.push(
        ...amountFieldErrors(connector, `approval_rules[${i}]`, {
          amountField: rule.amount_field ?? DEFAULT_AMOUNT_FIELD,
          currencyField: rule.currency === undefined ? undefined : (rule.currency_field ?? DEFAULT_CURRENCY_FIELD),
        }),
      );
    });
    if (errors.length > 0) throw Problem.validation(errors);
    // The owner and the escalation target are shown on every recovery obligation, to agent keys too: a secret's value
    // there would be stored and returned, so it is refused as in any other text.
    await refuseSecretValuesIn(this.tenantConnectors, principal.tenantId, [
      ['obligation_owner', input.obligation_owner ?? undefined],
      ['escalation_target', input.escalation_target ?? undefined],
    ]);

    const set: TenantPolicySettings = {};
    const remove: (keyof TenantPolicySettings)[] = [];
    const assign = <K extends keyof TenantPolicySettings>(
      key: K,
      value: TenantPolicySettings[K] | null | undefined,
    ) => {
      if (value === undefined) return;
      if (value === null) remove.push(key);
      else set[key] = value;
    };
    // A value that is what applies where the tenant set none (the fixed owner and escalation target, no rules, no due
    // times) is stored as none: the same in force. Stored as given, the GET of a tenant that set nothing, sent back,
    // made the defaults its own and changed the policy's version (ETag) though nothing shown had changed.
    const unlessDefault = <T>(value: T | null | undefined, isDefault: (given: T) => boolean) =>
      value !== undefined && value !== null && isDefault(value) ? null : value;
    assign(
      'obligationOwner',
      unlessDefault(input.obligation_owner, (owner) => owner === DEFAULT_OBLIGATION_OWNER),
    );
    assign(
      'escalationTarget',
      unlessDefault(input.escalation_target, (target) => target === DEFAULT_ESCALATION_TARGET),
    );
    assign(
      'obligationDueSeconds',
      unlessDefault(input.obligation_due_seconds, (due) => Object.keys(due).length === 0) as
        Record<string, number> | null | undefined,
    );
    // No rules replace the older single threshold as well (removed below): the same as none set.
    assign(
      'approvalRules',
      unlessDefault(input.approval_rules, (rules) => rules.length === 0) as ApprovalRule[] | null | undefined,
    );
    // Rules replace the older single threshold (GET showed it as a rule, so a read-modify-write keeps it).
    if (input.approval_rules !== undefined) remove.push('approvalAmountAbove');

    const changed = await changeTenantPolicy(this.db.manager, principal.tenantId, {
      set,
      remove,
      by: principal.keyId,
      ...condition,
    });
    if ('refused' in changed) {
      if (changed.refused === 'stale') throw versionConditionFailed('the policy', condition);
      throw Problem.notFound('Tenant', principal.tenantId);
    }
    const { settings, version } = changed;
    this.logger.info(
      { tenantId: principal.tenantId, by: principal.keyId, set: Object.keys(set), reset: remove },
      'tenant policy updated',
    );
    return { view: this.view(settings), version };
  }

  /**
   * The tenant's values, and what is in force. The due times are the tenant's own (null: none set); the configured
   * default (OBLIGATION_DUE_MS) is shown only under `effective`, so a GET sent back as a PUT does not make today's
   * default the tenant's own for ever.
   */
  private view(settings: TenantSettings): PolicyViewOf {
    return {
      obligation_owner: settings.obligationOwner ?? DEFAULT_OBLIGATION_OWNER,
      escalation_target: settings.escalationTarget ?? DEFAULT_ESCALATION_TARGET,
      obligation_due_seconds: settings.obligationDueSeconds ?? null,
      effective: {
        obligation_due_seconds: {
          // Exact: the configuration refuses an OBLIGATION_DUE_MS that is not whole seconds (until 2026-12-07 it was
          // taken, and shown here rounded up — a due time longer than the one in force).
          default: this.config.OBLIGATION_DUE_MS / 1000,
          ...settings.obligationDueSeconds,
        },
      },
      approval_rules: tenantApprovalRules(settings, this.connectors.approvalAmountDeclarations()),
      updated_at: settings.policyUpdatedAt ?? null,
      updated_by: settings.policyUpdatedBy ?? null,
    };
  }
}
