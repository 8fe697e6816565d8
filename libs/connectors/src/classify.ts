import { OperationStatus, type SendRefusedCause, TerminalReason, textPrefix } from '@verity/status-model';
import type { HttpExchange } from './http-exchange';

export type SendOutcome =
  | { status: OperationStatus.ACKNOWLEDGED; providerRef: Record<string, unknown>; detail: string }
  | {
      status: OperationStatus.FAILED;
      reason: TerminalReason.CONNECTOR_REJECTED | TerminalReason.SOURCE_UNREACHABLE;
      detail: string;
      providerError?: unknown;
      /**
       * Never sent because a rule refused the call (the tenant's egress policy, a secret it names that is not set):
       * which cause, and the rule in words (naming the host or the secret's name, never a secret's value). The status
       * model makes it a policy failure, not a transient one.
       */
      refused?: { cause: SendRefusedCause; rule: string };
    }
  | { status: OperationStatus.UNKNOWN; reason: TerminalReason.CONNECTOR_ERROR; detail: string };

export interface ClassifyRules {
  /** Documented rejection codes: the provider said no and nothing happened. */
  rejectionStatuses: readonly number[];
  /**
   * A rejection counts only with an error body (default): a bare 4xx may come from a proxy in front of the provider.
   * A connector whose caller declared the codes itself may drop that requirement.
   */
  requireErrorBody?: boolean;
  /** Pull the provider's reference out of an accepted response (its id, version...). */
  providerRef?: (body: unknown) => Record<string, unknown>;
}

export const DEFAULT_REJECTION_STATUSES: readonly number[] = [400, 402, 409, 422];

/**
 * the contract's §2 outcome classification, implemented once for every connector:
 * 2xx → ACKNOWLEDGED; a declared rejection with an error body → FAILED/CONNECTOR_REJECTED;
 * never delivered → FAILED/SOURCE_UNREACHABLE; everything else (timeout, reset, 5xx, 408, 429, an undeclared
 * status, a rejection without an error body or with one larger than the connector reads) → UNKNOWN/CONNECTOR_ERROR.
 * Ambiguity never becomes FAILED. A 2xx whose body is larger than the connector reads is ACKNOWLEDGED with no reference;
 * a declared rejection whose rule needs no error body (`requireErrorBody: false`) is FAILED by its status, whatever its
 * body's size.
 */
export function classifySend(exchange: HttpExchange, rules: ClassifyRules): SendOutcome {
  if (exchange.kind === 'not_delivered') {
    return {
      status: OperationStatus.FAILED,
      reason: TerminalReason.SOURCE_UNREACHABLE,
      detail: `never delivered (${exchange.code})`,
    };
  }
  if (exchange.kind === 'ambiguous') {
    return {
      status: OperationStatus.UNKNOWN,
      reason: TerminalReason.CONNECTOR_ERROR,
      detail: `outcome unknown (${exchange.code})`,
    };
  }
  const { status, body } = exchange;
  const declaredRejection = isRejectableStatus(status) && rules.rejectionStatuses.includes(status);
  // A rule that needs no error body judges the status alone: the body's size cannot change what it ignores.
  const judgedByStatusAlone = declaredRejection && rules.requireErrorBody === false;
  if (exchange.truncated && !(status >= 200 && status < 300) && !judgedByStatusAlone) {
    // Not read past the size limit: whether a declared code's answer is the provider's rejection (its error body) or
    // a page from something in front of it is unknown, so never FAILED.
    return {
      status: OperationStatus.UNKNOWN,
      reason: TerminalReason.CONNECTOR_ERROR,
      detail: `provider answered ${status} with a body larger than the connector reads: outcome unknown`,
    };
  }
  if (status >= 200 && status < 300) {
    return {
      status: OperationStatus.ACKNOWLEDGED,
      providerRef: rules.providerRef ? rules.providerRef(body) : {},
      // A 2xx is the provider's acceptance whatever its body says (2xx → ACKNOWLEDGED); a body past the limit is not
      // read (it is undefined here), so only the reference it would have named is lost, as with an empty body.
      detail: exchange.truncated
        ? `provider answered ${status} with a body larger than the connector reads (not read)`
        : `provider answered ${status}`,
    };
  }
  const hasErrorBody = typeof body === 'object' && body !== null;
  if (declaredRejection && (hasErrorBody || judgedByStatusAlone)) {
    return {
      status: OperationStatus.FAILED,
      reason: TerminalReason.CONNECTOR_REJECTED,
      detail: `provider rejected the request (${status})`,
      providerError: hasErrorBody ? summarizeProviderError(body) : undefined,
    };
  }
  return {
    status: OperationStatus.UNKNOWN,
    reason: TerminalReason.CONNECTOR_ERROR,
    detail: `provider answered ${status}: outcome unknown`,
  };
}

/**
 * Only a 4xx can be a rejection, and never 408 (timeout) or 429 (rate limited): those say nothing about whether the
 * request took effect. Enforced here so that no connector's (or operation's) declaration can bend the rule.
 */
export function isRejectableStatus(status: number): boolean {
  return status >= 400 && status < 500 && status !== 408 && status !== 429;
}

/** Only the provider's error code travels on; raw bodies are never echoed to agents. */
function summarizeProviderError(body: unknown): unknown {
  const error = (body as { error?: { code?: unknown } }).error;
  return typeof error?.code === 'string' ? { code: textPrefix(error.code, 100) } : undefined;
}
