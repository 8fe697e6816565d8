import { sqlMigration } from './sql-migration';

/**
 * What JavaScript's `Number()` skips around a number (StrWhiteSpaceChar: tab, line and paragraph ends, vertical tab,
 * form feed, the byte order mark and every Unicode space separator), as a regular-expression bracket. Frozen here with
 * the function that uses it.
 */
export const PADDING = String.raw`[\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]`;

/** The digits `digits` (text, no prefix; null: none matched) of base `base` as an exact numeric, or null. */
export const powerBaseDigits = (digits: string, base: number) =>
  `CASE WHEN ltrim(${digits}, '0') = '' THEN 0
        ELSE (SELECT sum((strpos('0123456789abcdef', d.c) - 1)::numeric
                         * power(${base}::numeric, (length(ltrim(${digits}, '0')) - d.i)::numeric))
              FROM regexp_split_to_table(lower(ltrim(${digits}, '0')), '') WITH ORDINALITY AS d(c, i)) END`;

/**
 * `FUNCTION verity_amount_of(…) … $$…$$` (to follow CREATE or CREATE OR REPLACE), the prefixed digits read by
 * `baseDigits` (the expression of the digits, text or null, and their base: an exact numeric, or null).
 */
export const amountOfFunction = (baseDigits: (digits: string, base: number) => string) => `
      FUNCTION verity_amount_of(p_value jsonb) RETURNS numeric
      LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
      SELECT CASE jsonb_typeof(p_value)
        WHEN 'number' THEN (p_value #>> '{}')::numeric
        WHEN 'string' THEN CASE
          WHEN octet_length(p_value #>> '{}') <= 4096 THEN coalesce(
            (SELECT CASE WHEN m[2] || coalesce(m[3], '') <> '' AND length(ltrim(coalesce(m[5], ''), '0')) <= 4
                         THEN (m[1] || '0' || ltrim(m[2], '0') || '.' || rtrim(coalesce(m[3], ''), '0') || '0e'
                               || coalesce(m[4], '') || '0' || ltrim(coalesce(m[5], ''), '0'))::numeric END
             FROM regexp_match(p_value #>> '{}',
                    '^${PADDING}*([+-]?)([0-9]*)(?:\\.([0-9]*))?(?:[eE]([+-]?)([0-9]+))?${PADDING}*$') AS r(m)),
            (SELECT ${baseDigits('m[1]', 16)} FROM regexp_match(p_value #>> '{}', '^${PADDING}*0[xX]([0-9a-fA-F]+)${PADDING}*$') AS r(m)),
            (SELECT ${baseDigits('m[1]', 2)} FROM regexp_match(p_value #>> '{}', '^${PADDING}*0[bB]([01]+)${PADDING}*$') AS r(m)),
            (SELECT ${baseDigits('m[1]', 8)} FROM regexp_match(p_value #>> '{}', '^${PADDING}*0[oO]([0-7]+)${PADDING}*$') AS r(m)))
          WHEN p_value #>> '{}' ~ '^${PADDING.slice(0, -1)}0-9.eE+-]*$' THEN 'Infinity'::numeric
          WHEN p_value #>> '{}' ~ '^${PADDING}*0(?:[xX][0-9a-fA-F]+|[bB][01]+|[oO][0-7]+)${PADDING}*$' THEN 'Infinity'::numeric
        END
      END
      $$`;

/**
 * The spending caps' amount reading in one place (it was written twice into the window's statements), and the ledger's
 * record of what each send was counted at.
 *
 * `verity_amount_of(value)`: a JSON value as the amount a target charged for it, as numeric — a JSON number; text as
 * JavaScript's `Number()` reads it: a decimal number (`"900"`, `" 0.5 "`, `"1e3"`, padded with what `Number()` skips),
 * or an unsigned hexadecimal, binary or octal integer (`"0x1F4"`, `"0b101"`, `"0o17"`: 500, 5, 15). Under a cap intake
 * and dispatch send no text, but an operation sent before the cap (its backfill) may carry some, and a target reading
 * it with `Number()` charged it. At most 4096 bytes of text are taken apart (`octet_length`, known without reading it):
 * decimal text is cast from a rebuilt form (leading zeros of the integer part and exponent and trailing zeros of the
 * fraction dropped; an exponent of at most 4 digits), prefixed text digit by digit; every such value and any sum of
 * them stays within numeric. Longer text made only of a number's characters and padding (decimal, or a prefix and its
 * digits) counts as past every cap (`Infinity`). Anything else (an object, `"abc"`, `"-0x10"`, `"1,000"`, `"Infinity"`,
 * an exponent of five digits or more) counts nothing (null).
 *
 * `connector_spend.amounts`: what a send made under amount caps was counted at, by the cap's period (numeric text), so
 * a cap whose amount_field changed since still counts the sends of its window by what they were sent with.
 */
export class CapAmountFunction1764721300000 extends sqlMigration('CapAmountFunction1764721300000', {
  up: [`ALTER TABLE connector_spend ADD COLUMN amounts jsonb`, `CREATE ${amountOfFunction(powerBaseDigits)}`],
  down: [`DROP FUNCTION verity_amount_of(jsonb)`, `ALTER TABLE connector_spend DROP COLUMN amounts`],
}) {}
