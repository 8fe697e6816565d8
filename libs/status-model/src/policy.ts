import { textPrefix } from './json-path';
import { OPERATION_TRANSITIONS, OperationStatus, TerminalReason } from './operation';

/**
 * Tenant policy rules that are decisions, not I/O: which operations need a person's approval, and which reasons a
 * recovery obligation can be due for. The tenant's settings supply the data; these functions apply it.
 */

/** One approval rule: every operation of `connector` needs approval, or only those whose amount is above a line. */
export interface ApprovalRule {
  connector: string;
  /**
   * Only operations whose amount is strictly above this need approval, and those whose value at the amount field is
   * there but not a finite number >= 0 (it cannot be compared); nothing there: not caught. Absent: every operation.
   */
  amount_above?: number;
  /** Where the amount is in the operation's params, a dot path (`amount`, `payment.total`); default `amount`. */
  amount_field?: string;
  /**
   * The currency the threshold is in (ISO 4217, e.g. `EUR`). Set, an operation with an amount in any other currency
   * (or none) at `currency_field` cannot be compared with the threshold and needs approval. Absent: amounts of every
   * currency are compared as if they were one unit.
   */
  currency?: string;
  /** Where the currency is in the operation's params, a dot path; default `currency`. Only with `currency`. */
  currency_field?: string;
}

export const DEFAULT_AMOUNT_FIELD = 'amount';
export const DEFAULT_CURRENCY_FIELD = 'currency';
/** The shape of an ISO 4217 currency code, as a cap or an approval rule names one. */
export const CURRENCY_CODE = /^[A-Z]{3}$/;
export const CURRENCY_CODE_RULE = 'an ISO 4217 currency code: three capital letters, e.g. EUR';
/**
 * The largest amount a tenant's rule may name (a spending cap's `max_amount`, an approval rule's `amount_above`): far
 * beyond any real amount, and still an exact integer in a double (a line of 1e300 reads as "never", not as a limit).
 */
export const MAX_RULE_AMOUNT = 1e15;

/** The most decimal places a spending cap's `amount_decimals` may allow (far below what a double's 17 digits hold). */
export const MAX_AMOUNT_DECIMALS = 8;

/**
 * How many digits a finite number has after the decimal point in its shortest form (as JSON writes it and the target
 * reads it): 100.005 has 3, 1e-7 has 7, 1.5e-7 has 8, 1e21 has 0. A spending cap with `amount_decimals` compares it
 * with the places the target charges in: a target that rounds 0.004 up to 0.01 charges more than the cap counts.
 */
export function decimalPlaces(value: number): number {
  const [mantissa, exponent = '0'] = String(Math.abs(value)).split('e');
  const fraction = mantissa.split('.')[1] ?? '';
  return Math.max(0, fraction.length - Number(exponent));
}

/**
 * An amount rule's currency check (an approval threshold's or a spending cap's): null when the rule names no currency
 * or the operation's value at the rule's currency field is exactly that code; otherwise the field and what is there
 * (undefined when nothing is). Nothing else counts as the rule's currency: not another code, not `eur`, not a number.
 */
export function currencyMismatch(
  rule: { currency?: string; currency_field?: string },
  valueAt: (path: string) => unknown,
): { field: string; found: unknown } | null {
  if (rule.currency === undefined) return null;
  const field = rule.currency_field ?? DEFAULT_CURRENCY_FIELD;
  const found = valueAt(field);
  return found === rule.currency ? null : { field, found };
}

/** A currency as found in params, for a message: a string quoted, anything else named. */
export function describeFoundCurrency(found: unknown): string {
  if (found === undefined) return 'missing';
  return typeof found === 'string'
    ? JSON.stringify(textPrefix(found, 20))
    : `not a string (${JSON.stringify(found)?.slice(0, 20)})`;
}

/**
 * What a denied approval does to its operation, wherever the denial is applied (the API's decision or the lifecycle
 * finding it): CANCELLED, never sent. DENIED is its own reason: a local denial is never proof that nothing changed
 * elsewhere.
 */
export const DENIAL = { to: OperationStatus.CANCELLED, reason: TerminalReason.DENIED } as const;

/** Reasons an operation can be held in MANUAL_REVIEW for: the keys a per-reason obligation due time may use. */
export const HOLD_REASONS: readonly TerminalReason[] = [
  ...new Set(OPERATION_TRANSITIONS.filter((r) => r.to === OperationStatus.MANUAL_REVIEW).flatMap((r) => r.reasons)),
];

/** A connector's declaration of where its operations carry an amount (libs/connectors: `approvalAmountField`). */
export interface ApprovalAmountDeclaration {
  connector: string;
  amountField: string;
}

/** The approval keys of a tenant's settings. */
export interface TenantApprovalSettings {
  /** When set, it replaces `approvalAmountAbove`. */
  approvalRules?: readonly ApprovalRule[];
  /** From before approval rules: operations above this amount need approval, on every connector declaring one. */
  approvalAmountAbove?: number;
}

/**
 * The keys of a tenant's settings that decide which operations need approval (and nothing else does): the approval
 * policy a send was judged by is these keys as stored, and the statement that commits SENT compares them.
 */
export const TENANT_APPROVAL_KEYS = [
  'approvalRules',
  'approvalAmountAbove',
] as const satisfies readonly (keyof TenantApprovalSettings)[];

/**
 * The tenant's approval rules. A tenant that never set rules keeps its older threshold, which applies to the
 * operations of every connector that declares where its amount is (none is named here: the connectors say).
 */
export function tenantApprovalRules(
  settings: TenantApprovalSettings | null | undefined,
  amountDeclarations: readonly ApprovalAmountDeclaration[],
): ApprovalRule[] {
  if (settings?.approvalRules) return [...settings.approvalRules];
  const above = settings?.approvalAmountAbove;
  return typeof above === 'number'
    ? amountDeclarations.map((d) => ({ connector: d.connector, amount_above: above, amount_field: d.amountField }))
    : [];
}

/** An operation needs approval when the agent asked for it, or one of the tenant's approval rules says so. */
export function needsApproval(
  op: { requiresApproval: boolean; connector: string; params: Record<string, unknown> },
  rules: readonly ApprovalRule[],
): boolean {
  return op.requiresApproval || approvalRuleFor(op, rules) !== null;
}

/**
 * Whether a reviewer's release of a held, never-sent operation (MANUAL_REVIEW → SENT) also grants its approval, written
 * with the release: where approval is required (by the agent or the tenant's policy), and where an approval is on
 * record (requested, or granted and perhaps expired since) — the release is sent only with a granted, unexpired one, and
 * the reviewer who releases has the role that approves. Without it, an operation held before it was ever asked for
 * approval (a knowledge conflict) was released and sent with no approval on record.
 */
export function releaseGrantsApproval(approvalRequired: boolean, approval: { state?: string } | null): boolean {
  return approvalRequired || approval !== null;
}

/**
 * Whether a reviewer's approval decision may be recorded for a PREPARED operation: its approval was asked for, or it
 * needs one (the agent's flag or the tenant's policy as it stands now) and planning has not asked yet — a decision kept
 * for when it waits. Not for an operation that needs none: a deny would cancel an operation nobody put up for approval,
 * and a grant nobody asked for would, once expired, send it back for an approval it never needed.
 */
export function approvalDecidable(approvalRequired: boolean, approval: { state?: string } | null): boolean {
  return approvalRequired || approval?.state === 'requested';
}

/**
 * An operation's approval as it is shown (the API, the console): the stored state, except a request that can no longer
 * be decided, shown `withdrawn`. Only a PREPARED operation is approved or denied (`POST .../approval` answers any other
 * `409`), so a request still on record once the operation ended undecided (its execution cancelled or expired, a
 * dependency failed) or was held for a reviewer's resolution (where a release grants it, a cancel ends it) no longer
 * waits for anyone. Derived, never stored: the stored `requested` is what a release of the hold grants.
 */
export function shownApprovalState<State extends string>(
  status: OperationStatus,
  stored: State,
  /**
   * Its execution's deadline has passed (before the sweeper expired it): nothing more is sent for it, and an approve is
   * refused, so a request still PREPARED no longer waits for anyone either.
   */
  pastDeadline = false,
): State | 'withdrawn' {
  return stored === 'requested' && (!approvalRequestWaits(status, stored) || pastDeadline) ? 'withdrawn' : stored;
}

/**
 * A request on record that still waits for a decision, unless its execution's deadline has passed (shownApprovalState):
 * the one case where how it is shown depends on the clock, so the one that needs the database's.
 */
export function approvalRequestWaits(status: OperationStatus, stored: string | undefined): boolean {
  return stored === 'requested' && status === OperationStatus.PREPARED;
}

/** Why a tenant rule asks for approval of an operation: the rule, which test it met, and the reason in words. */
export interface ApprovalRuleMatch {
  rule: ApprovalRule;
  /**
   * `every_operation`: the rule has no threshold; `amount_above`; `amount_unreadable`: something other than a finite
   * number >= 0 at its amount field; `currency_mismatch`: an amount in a currency not comparable with it.
   */
  reason: 'every_operation' | 'amount_above' | 'amount_unreadable' | 'currency_mismatch';
  detail: string;
}

/** The value at a dot path of the params, or undefined. */
export function paramAt(params: Record<string, unknown>, path: string): unknown {
  const found = lookUpParam(params, path);
  return found.kind === 'value' ? found.value : undefined;
}

/**
 * A member name as a target that matches names loosely compares it: Go's encoding/json (Unicode simple folding, so
 * U+017F "ſ" is "s" and U+212A, the Kelvin sign, "k") and ASP.NET's System.Text.Json (case-insensitive by default);
 * and one that normalises names first — NFKC (the full-width "ａｍｏｕｎｔ" is "amount"), invisible characters dropped
 * (a zero-width space, a soft hyphen, a BOM: Unicode's default-ignorable code points), spaces at either end trimmed
 * ("amount " is "amount"). Upper then lower case folds the cases; it also folds a few names such a target keeps apart
 * ("ß" and "ss"): a match too many, never one too few.
 */
export function foldedMemberName(name: string): string {
  const visible = name.replace(DEFAULT_IGNORABLE, '').normalize('NFKC');
  return visible.toUpperCase().toLowerCase().normalize('NFKC').replace(DEFAULT_IGNORABLE, '').trim();
}

const DEFAULT_IGNORABLE = /\p{Default_Ignorable_Code_Point}/gu;

/**
 * What a dot path of the params leads to: a value; nothing (a key missing from an object, or null on the way: no such
 * field); a value on the way that is not an object (an array, a string, a number, a boolean), which hides whatever
 * the path would have named — e.g. a `body` sent as `[{ "amount": 9999999 }]` or as a JSON string; or, where the path's
 * name is missing, a member with that name in another case (`AMOUNT` for `amount`), which a target that binds names
 * ignoring case reads as the very field the path names.
 */
export type ParamLookup =
  | { kind: 'value'; value: unknown }
  | { kind: 'missing' }
  | { kind: 'blocked'; at: string; value: unknown }
  | { kind: 'other_case'; at: string; name: string };

export function lookUpParam(params: Record<string, unknown>, path: string): ParamLookup {
  let at: unknown = params;
  const walked: string[] = [];
  for (const segment of path.split('.')) {
    if (at === undefined || at === null) return { kind: 'missing' };
    if (typeof at !== 'object' || Array.isArray(at)) return { kind: 'blocked', at: walked.join('.'), value: at };
    const object = at as Record<string, unknown>;
    // Own members only: `constructor`, `toString`, `__proto__` name what every object inherits, not a field sent.
    at = Object.hasOwn(object, segment) ? object[segment] : undefined;
    if (at === undefined) {
      const folded = foldedMemberName(segment);
      const name = Object.keys(object).find((key) => foldedMemberName(key) === folded);
      if (name !== undefined) return { kind: 'other_case', at: [...walked, name].join('.'), name };
    }
    walked.push(segment);
  }
  return at === undefined ? { kind: 'missing' } : { kind: 'value', value: at };
}

/** An amount a threshold can be compared with: a finite number, not below zero. */
export function isComparableAmount(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}

/** A value found at an amount field, for a message: its JSON, cut short, and what kind it is when not a number. */
export function describeFoundAmount(found: unknown): string {
  const json = JSON.stringify(found) ?? String(found);
  const shown = json.length > 40 ? `${textPrefix(json, 40)}…` : json;
  if (typeof found === 'number' || found === null) return shown;
  const kind = Array.isArray(found) ? 'an array' : typeof found === 'object' ? 'an object' : `a ${typeof found}`;
  return `${shown} (${kind})`;
}

/**
 * The first rule that asks for approval of this operation, or null. A rule with a threshold does not apply to an
 * operation that has nothing at its amount field: the threshold speaks about amounts only, and there is none to
 * compare (to require approval of every operation of a connector, give no threshold). Something there that is not a
 * finite number >= 0 (a string, even a numeric one a provider may parse; an array, an object, a boolean, null, a
 * negative number) cannot be compared with the threshold, so the operation needs approval (fail safe). A threshold with
 * a currency applies to an amount in that currency only: an amount in any other currency (or without one) cannot be
 * compared with it either, so it needs approval.
 */
export function approvalRuleFor(
  op: { connector: string; params: Record<string, unknown> },
  rules: readonly ApprovalRule[],
): ApprovalRule | null {
  return approvalRuleMatch(op, rules)?.rule ?? null;
}

/** `approvalRuleFor`, with the reason: what the `approval.requested` event records. */
export function approvalRuleMatch(
  op: { connector: string; params: Record<string, unknown> },
  rules: readonly ApprovalRule[],
): ApprovalRuleMatch | null {
  const read = (path: string) => paramAt(op.params, path);
  // Thresholds in several currencies for one amount ("above 10000 EUR", "above 12000 USD"): an amount is compared with
  // those in its own currency, and only an amount in none of them cannot be compared at all. "Its own" means a rule
  // that reads the same amount at the same currency field: a second amount elsewhere in the params, in a rule's
  // currency, says nothing of this one (else a decoy `{"amount": 1, "currency": "EUR"}` would let any `total` through).
  const comparedElsewhere = (mismatched: ApprovalRule) =>
    rules.some(
      (rule) =>
        rule.connector === op.connector &&
        rule.amount_above !== undefined &&
        rule.currency !== undefined &&
        (rule.amount_field ?? DEFAULT_AMOUNT_FIELD) === (mismatched.amount_field ?? DEFAULT_AMOUNT_FIELD) &&
        (rule.currency_field ?? DEFAULT_CURRENCY_FIELD) === (mismatched.currency_field ?? DEFAULT_CURRENCY_FIELD) &&
        currencyMismatch(rule, read) === null,
    );
  for (const rule of rules) {
    if (rule.connector !== op.connector) continue;
    if (rule.amount_above === undefined) {
      return { rule, reason: 'every_operation', detail: `every operation of ${rule.connector} needs approval` };
    }
    const field = rule.amount_field ?? DEFAULT_AMOUNT_FIELD;
    const found = lookUpParam(op.params, field);
    // Nothing there: no amount, nothing to compare (a rule on `http` does not hold every GET).
    if (found.kind === 'missing') continue;
    if (found.kind === 'blocked') {
      // The path runs into an array, a string or a number: whatever amount it carries cannot be read (fail safe).
      return {
        rule,
        reason: 'amount_unreadable',
        detail: `params.${found.at} is ${describeFoundAmount(found.value)}, so params.${field} cannot be read and compared with the approval threshold on ${rule.connector} (${rule.amount_above}${rule.currency ? ` ${rule.currency}` : ''})`,
      };
    }
    if (found.kind === 'other_case') {
      // Not "no amount": a target that binds names ignoring case reads it as this very field (fail safe).
      return {
        rule,
        reason: 'amount_unreadable',
        detail: `params.${found.at} names params.${field} in another case: a target that reads member names ignoring case would take it as the amount, which cannot be compared with the approval threshold on ${rule.connector} (${rule.amount_above}${rule.currency ? ` ${rule.currency}` : ''}) under another spelling`,
      };
    }
    const amount = found.value;
    if (!isComparableAmount(amount)) {
      return {
        rule,
        reason: 'amount_unreadable',
        detail: `params.${field} is ${describeFoundAmount(amount)}, not a finite number >= 0, so it cannot be compared with the approval threshold on ${rule.connector} (${rule.amount_above}${rule.currency ? ` ${rule.currency}` : ''})`,
      };
    }
    const mismatch = currencyMismatch(rule, read);
    if (mismatch) {
      if (comparedElsewhere(rule)) continue;
      return {
        rule,
        reason: 'currency_mismatch',
        detail: `the approval threshold on ${rule.connector} is ${rule.amount_above} ${rule.currency}; params.${mismatch.field} is ${describeFoundCurrency(mismatch.found)}, not ${rule.currency}, so params.${field} (${amount}) cannot be compared with it`,
      };
    }
    if (amount > rule.amount_above) {
      const unit = rule.currency ? ` ${rule.currency}` : '';
      return {
        rule,
        reason: 'amount_above',
        detail: `params.${field} (${amount}${unit}) is above the approval threshold on ${rule.connector} (${rule.amount_above}${unit})`,
      };
    }
  }
  return null;
}
