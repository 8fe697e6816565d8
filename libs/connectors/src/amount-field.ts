import { z } from 'zod';
import type { Connector } from './connector';
import { PROTOTYPE_KEYS } from '@verity/status-model';
import { fieldSegments } from './json-path';

/** What an action's params schema says is at a dot path. */
type PathKind = 'number' | 'string' | 'other' | 'absent' | 'open';

/** Optional, nullable, defaulted, read-only members: the value's own schema. */
function unwrapped(schema: z.ZodType): z.ZodType {
  let at = schema;
  while (
    at instanceof z.ZodOptional ||
    at instanceof z.ZodNullable ||
    at instanceof z.ZodDefault ||
    at instanceof z.ZodReadonly
  ) {
    at = at.unwrap() as z.ZodType;
  }
  return at;
}

/**
 * What is at `path` in values of `schema`: a number, a string (or one of an enum's), something else, nothing (an object that takes no
 * other members has none there), or "open" — a schema that takes any member or value there (a record of unknown values,
 * unknown, a loose object, anything this walk does not know), which says nothing either way. A record's members are of
 * its value type: one of strings (the http connector's headers) holds no number.
 */
function pathKind(schema: z.ZodType, path: string): PathKind {
  let at = unwrapped(schema);
  // Read as the cap's amount is read (readField): `$.` dropped, `items[0]` an element of the array.
  const segments = fieldSegments(path);
  // Refused as a key of every request (the API), so held by no operation's params, open ones included.
  if (segments.some((segment) => PROTOTYPE_KEYS.has(segment))) return 'absent';
  for (const segment of segments) {
    if (at instanceof z.ZodArray && /^[0-9]+$/.test(segment)) {
      at = unwrapped(at.element as z.ZodType);
      continue;
    }
    // A record takes any member its keys allow, and each one is of its value type (the http connector's headers: any
    // name, a string): open in its names, not in what they hold. A name its keys refuse is not there.
    if (at instanceof z.ZodRecord) {
      if (!(at.keyType as z.ZodType).safeParse(segment).success) return 'absent';
      at = unwrapped(at.valueType as z.ZodType);
      continue;
    }
    if (!(at instanceof z.ZodObject)) {
      const scalar = at instanceof z.ZodNumber || at instanceof z.ZodString || at instanceof z.ZodBoolean;
      return scalar || at instanceof z.ZodArray || at instanceof z.ZodEnum || at instanceof z.ZodLiteral
        ? 'absent'
        : 'open';
    }
    // Own members only, as readField reads the params: the shape inherits `constructor`, `toString`, `__proto__`...
    const shape = at.shape as Record<string, z.ZodType>;
    const member = Object.hasOwn(shape, segment) ? shape[segment] : undefined;
    if (!member) {
      // A strict object refuses other members and a plain one drops them: neither can carry one there.
      const catchall = at._zod.def.catchall;
      return catchall === undefined || catchall instanceof z.ZodNever ? 'absent' : 'open';
    }
    at = unwrapped(member);
  }
  if (at instanceof z.ZodNumber) return 'number';
  if (at instanceof z.ZodString || at instanceof z.ZodEnum) return 'string';
  if (
    at instanceof z.ZodBoolean ||
    at instanceof z.ZodArray ||
    at instanceof z.ZodObject ||
    at instanceof z.ZodRecord
  ) {
    return 'other';
  }
  return 'open';
}

/**
 * Why no operation of `connector` can carry a number at `path` (an approval threshold's or a spending cap's amount
 * field), or null when one can — or when its params are open there and only the operation will tell. A rule that names
 * a field no action has would be accepted and never apply (an approval threshold) or refuse every send (a cap).
 */
export function amountFieldProblem(connector: Connector, path: string): string | null {
  return fieldProblem(connector, path, 'number');
}

/**
 * Why no operation of `connector` can carry a string at `path` (the currency field of a threshold or a cap with a
 * currency), or null when one can, or only the operation will tell. A currency read from a field no action has would
 * refuse every send under a cap and ask approval for every amount under a threshold.
 */
export function currencyFieldProblem(connector: Connector, path: string): string | null {
  return fieldProblem(connector, path, 'string');
}

function fieldProblem(connector: Connector, path: string, wanted: 'number' | 'string'): string | null {
  const kinds = Object.values(connector.actions).map((action) => pathKind(action.params, path));
  if (kinds.some((kind) => kind === wanted || kind === 'open')) return null;
  const actions = Object.keys(connector.actions).join(', ');
  return kinds.some((kind) => kind !== 'absent')
    ? `"${path}" is not a ${wanted} in the params of ${connector.name} (${actions})`
    : `no action of ${connector.name} (${actions}) has a "${path}" in its params`;
}

/** A field of a tenant rule or cap that no action of its connector can satisfy, as the API reports it. */
export interface AmountFieldError {
  field: string;
  rule: 'unknown_amount_field' | 'unknown_currency_field';
  message: string;
}

/**
 * The amount and currency fields a tenant's approval threshold or spending cap reads, judged against its connector's
 * declared actions (`amountFieldProblem`, `currencyFieldProblem`): one error per field that none can satisfy, named
 * under `at` (e.g. `spending_caps[0]`). `amountField` undefined: no amount is read; `currencyField` undefined: no
 * currency is (the rule or cap has none).
 */
export function amountFieldErrors(
  connector: Connector,
  at: string,
  fields: { amountField?: string; currencyField?: string },
): AmountFieldError[] {
  const errors: AmountFieldError[] = [];
  const amount = fields.amountField === undefined ? null : amountFieldProblem(connector, fields.amountField);
  if (amount) errors.push({ field: `${at}.amount_field`, rule: 'unknown_amount_field', message: amount });
  const currency = fields.currencyField === undefined ? null : currencyFieldProblem(connector, fields.currencyField);
  if (currency) errors.push({ field: `${at}.currency_field`, rule: 'unknown_currency_field', message: currency });
  return errors;
}
