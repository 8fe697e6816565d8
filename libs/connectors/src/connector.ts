import type { PlatformService } from './egress';
import type { z } from 'zod';
import type { SendOutcome } from './classify';
import type { AllowedHostRow } from '@verity/persistence';

export interface ConnectorCapabilities {
  /** Can read the effect back from the source: VERIFIED is reachable. */
  read_back: boolean;
  /** Can report the target's current state before sending (knowledge conflicts, no change required). */
  context_read: boolean;
  /** Passes an Idempotency-Key the provider honours. */
  provider_idempotency: boolean;
  reversible: boolean;
}

export type CapabilityName = keyof ConnectorCapabilities;

export interface ActionSpec {
  description: string;
  params: z.ZodType<Record<string, unknown>>;
  /** Where an action differs from its connector's declaration (the limitations table shows both). */
  capabilities?: Partial<ConnectorCapabilities>;
  /**
   * A capability that holds only for some operations says when, in words (the limitations table prints it).
   * Such a capability is also decided per operation by `Connector.operationCapabilities`.
   */
  conditions?: Partial<Record<CapabilityName, string>>;
}

/** What a connector sees of an operation: its identity and request, never the whole row. */
export interface ConnectorOperation {
  id: string;
  tenantId: string;
  action: string;
  params: Record<string, unknown>;
  expectedState: Record<string, unknown> | null;
  providerRef: Record<string, unknown> | null;
}

/** One entry of a tenant's outbound allowlist: the stored row is the shape the connector reads. */
export type AllowedHost = AllowedHostRow;

/** Binds every secret of the tenant to an allowlist entry (`AllowedHost.secrets`). */
export const ANY_SECRET = '*';

/** A `{{secret:NAME}}` in a header of a request whose host's allowlist entry does not bind NAME. */
export interface SecretBindingProblem {
  /** Path under the operation, e.g. `params.headers.authorization`, `params.read_back.headers.x-t`. */
  field: string;
  secret: string;
  /** `host:port` the request goes to. */
  target: string;
  message: string;
}

/**
 * Which read-backs a tenant's operations may be verified by (its admin's `read_back_binding`, for connectors whose
 * operations declare their own read-back: http). `declared`: any the operation declares. `bound`: only one that asks
 * the operation's own origin about this very effect (`Connector.readBackBindingProblems` finds none); any other is
 * refused at intake and, for an operation accepted before, is not made: the read is inconclusive, never VERIFIED.
 */
export type ReadBackBinding = 'declared' | 'bound';
export const READ_BACK_BINDINGS = ['declared', 'bound'] as const satisfies readonly ReadBackBinding[];

/** Why an operation's declared read-back does not name its own effect (a field under the operation's params). */
export interface ReadBackBindingProblem {
  /** The read it is about: the read-back (verifies after the send) or the context read with `equals` (before it). */
  of: 'read_back' | 'context';
  /** Path under the operation, e.g. `params.read_back.url`. */
  field: string;
  /** `origin` (another scheme, host or port than the request) or `names_effect` (no variable naming this effect). */
  condition: 'origin' | 'names_effect';
  message: string;
}

/** The tenant's settings for one connector, loaded by the worker for each call. Secrets never leave the worker. */
export interface TenantConnectorSettings {
  allowHosts?: AllowedHost[];
  secrets?: Record<string, string>;
  /** Absent: `declared`. */
  readBackBinding?: ReadBackBinding;
}

export interface ConnectorEnvironment {
  sandboxUrl: string;
  timeoutMs: number;
  /** The platform's own listeners, which no call to a tenant-chosen target may reach (egress.ts). */
  platform?: readonly PlatformService[];
  tenant?: TenantConnectorSettings;
  signal?: AbortSignal;
}

export interface ReadEvidence {
  source: string;
  read_at: string;
  as_of_version?: number | null;
  record?: Record<string, unknown> | null;
  [key: string]: unknown;
}

export type ReadBackResult =
  | { kind: 'found'; evidence: ReadEvidence }
  | { kind: 'mismatch'; evidence: ReadEvidence; fields: string[] }
  | { kind: 'absent'; evidence: ReadEvidence }
  | { kind: 'stale'; evidence: ReadEvidence }
  | { kind: 'field_missing'; evidence: ReadEvidence; field: string }
  /**
   * No answer. `notMade`: the read was not even attempted — the tenant's settings refuse it (egress, a secret, the
   * read-back binding) or it cannot be built (a reference the lost answer would have given) — so waiting for the
   * source to come back changes nothing.
   */
  | { kind: 'unreachable'; evidence: ReadEvidence; notMade?: true };

/**
 * A read that reached no answer (no read declared, or the connector threw): the source's state is unknown, never
 * "absent". Shared by every caller that reads outside a connector's own classification.
 */
export function unreachableRead(source: string, error: string): { kind: 'unreachable'; evidence: ReadEvidence } {
  return { kind: 'unreachable', evidence: { source, read_at: new Date().toISOString(), error } };
}

/** An error class's name as code writes one (`TypeError`, `SecretUnreadableError`): nothing a value could be. */
const ERROR_NAME = /^[A-Za-z][A-Za-z0-9_]{0,63}$/;
/** An error code as Node, a driver or Postgres writes one (`ERR_INVALID_CHAR`, `ECONNRESET`, `57P01`). */
const ERROR_CODE = /^[A-Z0-9][A-Z0-9_]{0,63}$/;

/**
 * What may be said of a thrown error where people read it: its class and its code, never its message, which may hold
 * values (a URL, part of an answer, a secret in a spelling redaction does not know).
 */
export function errorCause(error: unknown): string {
  if (!(error instanceof Error)) return `a thrown ${error === null ? 'null' : typeof error}`;
  const name = ERROR_NAME.test(error.name) ? error.name : 'Error';
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && ERROR_CODE.test(code) ? `${name} ${code}` : name;
}

/**
 * A read-back that threw (the connector, or what its call needs: the tenant's settings, a secret that does not open):
 * unreachable — never proof — with its cause (errorCause), so a person holding the operation learns why the source
 * could not be read: "read-back error: SecretUnreadableError" calls for a key, not for the provider.
 */
export function readBackThrew(source: string, error: unknown): { kind: 'unreachable'; evidence: ReadEvidence } {
  return unreachableRead(source, `read-back error: ${errorCause(error)}`);
}

/**
 * A context read that threw, as readBackThrew for a read-back: the source unread (never a state), with its cause. A
 * throw left to fail the job that prepares an execution failed every retry of it the same way, and the execution stayed
 * `created` until its deadline while the source was read again and again.
 */
export function contextReadThrew(source: string, error: unknown): { kind: 'unreachable'; evidence: ReadEvidence } {
  return unreachableRead(source, `context read error: ${errorCause(error)}`);
}

export type ContextResult =
  | {
      kind: 'state';
      state: Record<string, unknown>;
      /** The source already holds what the operation asks for: no change required. */
      requestedStatePresent: boolean;
      /** The source holds something that contradicts the request (beyond the agent's expected_state). */
      conflicts: string[];
      evidence: ReadEvidence;
    }
  | { kind: 'unreachable'; evidence: ReadEvidence };

/** Which tenant settings a connector uses (the admin API refuses the others for it). */
export interface ConnectorSettingsUse {
  /** Calls go to tenant-chosen hosts, restricted by the tenant's allowlist. */
  allowHosts: boolean;
  /** Requests may reference tenant secrets by name. */
  secrets: boolean;
  /** Operations declare their own read-back, so the tenant may require it to be bound to the effect. */
  readBackBinding?: boolean;
}

/**
 * What a later read shows of an effect that was VERIFIED (observation is its own dimension; docs/semantics.md). It never
 * changes how the operation ended. converged: the verified record is there as verified; superseded: a newer version
 * was written since (by someone else); degraded: the read is inconclusive (lagging, incomplete, different);
 * unavailable: the source cannot be read.
 */
export type ObservationKind = 'converged' | 'superseded' | 'degraded' | 'unavailable';

export interface ObservationResult {
  observation: ObservationKind;
  detail: string;
  evidence: ReadEvidence;
}

export interface Connector {
  readonly name: string;
  readonly description: string;
  readonly capabilities: ConnectorCapabilities;
  readonly actions: Readonly<Record<string, ActionSpec>>;
  /**
   * Where this connector's operations carry an amount (a params path), if they do: a tenant's plain approval
   * threshold (`approvalAmountAbove`, from before approval rules) applies to them there. Absent: it does not apply.
   */
  readonly approvalAmountField?: string;
  /** Tenant settings this connector reads besides the spending cap (which applies to every connector). */
  readonly settings?: ConnectorSettingsUse;
  /**
   * For a capability declared with a condition: does it hold for this operation? Called with params that already
   * passed the action's schema. Absent: the action's declaration holds for every operation.
   */
  operationCapabilities?(action: string, params: Record<string, unknown>): Partial<ConnectorCapabilities>;
  /**
   * The provider effect this operation names, when the provider deduplicates by a value taken from its params (the
   * params `field` and its `value`): two operations with the same value would be one provider effect, the second send
   * a replay of the first, yet each would end VERIFIED and count as a committed effect. The API refuses the later of
   * two such operations in one submission (`duplicate_reference`); across executions the same value is intended (the
   * business key "charge this order once"). Called with params that already passed the action's schema. Absent or
   * null: every operation is its own effect.
   */
  effectReference?(action: string, params: Record<string, unknown>): { field: string; value: string } | null;
  /**
   * The caller's own name for this operation's effect at a provider that does not deduplicate (the params `field` and
   * its `value`; the SMS `client_ref`): a second send naming it is a second effect. While an operation naming it was sent
   * and is not settled (`RESEND_BLOCKING_STATUSES`: it may have made its effect, nobody knows), a new operation naming
   * it — another execution, a retry — would be a blind re-send: intake refuses it (`409 reference-unsettled`). Called
   * with params that already passed the action's schema. Absent or null: no reference (nothing is held back).
   */
  resendReference?(action: string, params: Record<string, unknown>): { field: string; value: string } | null;
  /**
   * For a connector whose operations declare their own read-back (`settings.readBackBinding`): why this operation's
   * read-back would not count under the tenant's `read_back_binding: "bound"` — empty when it does, or when the
   * operation has none. Pure: called with params that already passed the action's schema, at intake and before a read.
   */
  readBackBindingProblems?(action: string, params: Record<string, unknown>): ReadBackBindingProblem[];
  /**
   * For a connector whose operations name tenant secrets (`settings.secrets`): the secrets this operation would send
   * to a host whose allowlist entry does not bind them — empty when none. Pure: called with params that already passed
   * the action's schema and the tenant's (effective) allowlist, at intake; the connector applies the same rule at the
   * call.
   */
  secretBindingProblems?(
    action: string,
    params: Record<string, unknown>,
    allowHosts: readonly AllowedHost[] | undefined,
  ): SecretBindingProblem[];
  send(operation: ConnectorOperation, env: ConnectorEnvironment): Promise<SendOutcome>;
  readBack?(operation: ConnectorOperation, env: ConnectorEnvironment): Promise<ReadBackResult>;
  /**
   * Whether `readBack` is the provider's own lookup of the effect (a lookup this connector knows, by the values it
   * sent), so that "absent" there is the provider saying the effect does not exist: only then may reconciliation
   * conclude FAILED, PROVEN_ABSENT (decideReadBack's `sourceProvesAbsence`). Absent: no — an absence is then as
   * inconclusive as a stale read (the `http` connector reads where the operation says, which proves nothing empty).
   */
  readonly readBackProvesAbsence?: boolean;
  /**
   * Whether an operation of this connector that ended FAILED spent nothing on the connector's own word — what counts
   * as a rejection, and any read that proves an effect absent, are the connector's, never declared by the operation —
   * so that a spending cap's `max_amount` does not count it (status model `REJECTED_COMMIT_STATUSES`). Absent: every
   * send's amount counts, FAILED or not. `http` lets the operation declare its own rejection statuses, so its FAILED
   * rests on the agent's word: a target that pays part of a batch and answers 400 would be paid uncounted.
   */
  readonly failedSpendsNothing?: boolean;
  readContext?(operation: ConnectorOperation, env: ConnectorEnvironment): Promise<ContextResult>;
  /**
   * Reads a VERIFIED effect again. `verified` is the record stored as evidence when it was verified. Optional: a
   * connector with read-back but no `observe` is observed through `readBack` (found → converged, unreachable →
   * unavailable, anything else → degraded).
   */
  observe?(
    operation: ConnectorOperation,
    verified: Record<string, unknown> | null,
    env: ConnectorEnvironment,
  ): Promise<ObservationResult>;
}

/**
 * A connector's action by name, or undefined. Own properties only: `actions` is a plain object, so `toString`,
 * `constructor` or `__proto__` would otherwise find Object.prototype's members and be taken for actions.
 */
export function connectorAction(connector: Connector, action: string): Connector['actions'][string] | undefined {
  return Object.hasOwn(connector.actions, action) ? connector.actions[action] : undefined;
}

/** An action's declaration: the connector's, overridden where the action says otherwise. */
export function actionCapabilities(connector: Connector, action: string): ConnectorCapabilities {
  return { ...connector.capabilities, ...connectorAction(connector, action)?.capabilities };
}

/**
 * What holds for one operation: the action's declaration, narrowed by the connector where a capability depends on
 * the operation (an `http` request without a read_back spec cannot be verified). Never widens the declaration.
 */
export function operationCapabilities(
  connector: Connector,
  action: string,
  params: Record<string, unknown>,
): ConnectorCapabilities {
  const declared = actionCapabilities(connector, action);
  if (!connector.operationCapabilities || !connectorAction(connector, action)) return declared;
  let specific: Partial<ConnectorCapabilities> = {};
  try {
    specific = connector.operationCapabilities(action, params);
  } catch {
    // Params that do not match the schema are refused elsewhere; here they simply get no conditional capability.
    specific = { read_back: false, context_read: false, provider_idempotency: false };
  }
  return {
    read_back: declared.read_back && specific.read_back !== false,
    context_read: declared.context_read && specific.context_read !== false,
    provider_idempotency: declared.provider_idempotency && specific.provider_idempotency !== false,
    reversible: declared.reversible && specific.reversible !== false,
  };
}

/**
 * What a connector declares (everything but its calls), for wrappers that replace the calls (secret redaction, call
 * metrics) and must keep the rest as the connector has it.
 */
export function connectorDeclarations(
  connector: Connector,
): Omit<Connector, 'send' | 'readBack' | 'readContext' | 'observe'> {
  return {
    name: connector.name,
    description: connector.description,
    capabilities: connector.capabilities,
    actions: connector.actions,
    settings: connector.settings,
    approvalAmountField: connector.approvalAmountField,
    readBackProvesAbsence: connector.readBackProvesAbsence,
    failedSpendsNothing: connector.failedSpendsNothing,
    operationCapabilities: connector.operationCapabilities?.bind(connector),
    effectReference: connector.effectReference?.bind(connector),
    resendReference: connector.resendReference?.bind(connector),
    readBackBindingProblems: connector.readBackBindingProblems?.bind(connector),
    secretBindingProblems: connector.secretBindingProblems?.bind(connector),
  };
}

/**
 * Why the operation's read-back would not count under `read_back_binding: "bound"` (`Connector.readBackBindingProblems`);
 * empty for a connector that does not let operations declare one. Params it cannot judge count as unbound: the rule
 * exists so that nothing unproven ends VERIFIED, so it fails closed.
 */
export function readBackBindingProblems(
  connector: Connector,
  action: string,
  params: Record<string, unknown>,
): ReadBackBindingProblem[] {
  if (!connector.readBackBindingProblems || !connectorAction(connector, action)) return [];
  try {
    return connector.readBackBindingProblems(action, params);
  } catch {
    return (['read_back', 'context'] as const).map((of) => ({
      of,
      field: `params.${of}`,
      condition: 'names_effect' as const,
      message: `the ${of === 'read_back' ? 'read-back' : 'context read'} could not be judged`,
    }));
  }
}

/**
 * The secrets an operation would send to a host whose allowlist entry does not bind them
 * (`Connector.secretBindingProblems`); empty for a connector that takes no tenant secrets. Params it cannot judge
 * count as unbound (fails closed: a secret must never leave for a host nobody bound it to).
 */
export function secretBindingProblems(
  connector: Connector,
  action: string,
  params: Record<string, unknown>,
  allowHosts: readonly AllowedHost[] | undefined,
): SecretBindingProblem[] {
  if (!connector.secretBindingProblems || !connectorAction(connector, action)) return [];
  try {
    return connector.secretBindingProblems(action, params, allowHosts);
  } catch {
    return [
      { field: 'params', secret: '', target: '', message: 'the secrets this operation names could not be judged' },
    ];
  }
}

/**
 * Whether the operation's read-back would not count under `read_back_binding: "bound"`: a VERIFIED it reads is then
 * written only while the tenant has not bound read-backs (the statement checks it; TransitionService
 * `readBackUnbound`).
 */
export function readBackUnbound(connector: Connector, action: string, params: Record<string, unknown>): boolean {
  return readBackBindingProblems(connector, action, params).some((p) => p.of === 'read_back');
}

/**
 * Whether the operation's context read would not count under `read_back_binding: "bound"`: a VERIFIED with
 * `no_change_required` it reads is then written only while the tenant has not bound read-backs (`readBackUnbound`
 * on that statement too).
 */
export function contextUnbound(connector: Connector, action: string, params: Record<string, unknown>): boolean {
  return readBackBindingProblems(connector, action, params).some((p) => p.of === 'context');
}

/** A reference a connector may declare for an operation: its effect's, or the caller's one for a resend. */
type DeclaredReference = 'effectReference' | 'resendReference';

/**
 * The reader of the reference `kind`: null when the connector declares none, the action is unknown, or the params hold
 * none it can read (a throw there is an answer about the params, not a fault to surface).
 */
function declaredReference(kind: DeclaredReference) {
  return (
    connector: Connector,
    action: string,
    params: Record<string, unknown>,
  ): { field: string; value: string } | null => {
    const read = connector[kind];
    if (!read || !connectorAction(connector, action)) return null;
    try {
      return read.call(connector, action, params);
    } catch {
      return null;
    }
  };
}

/**
 * The caller's reference an operation names its effect by at a provider that does not deduplicate
 * (`Connector.resendReference`), or null: none declared, an unknown action, or params it cannot read one from.
 */
export const resendReference = declaredReference('resendReference');

/**
 * The provider effect an operation names (`Connector.effectReference`), or null: none declared, an unknown action, or
 * params the connector cannot read one from (those are refused by the action's schema anyway).
 */
export const effectReference = declaredReference('effectReference');
