import { amountOfFunction, powerBaseDigits } from './1764721300000-cap-amount-function';
import { sqlMigration } from './sql-migration';

/** The bits of one digit of each base `verity_amount_of` reads after a prefix (0x, 0o, 0b). */
const BITS: Record<number, number> = { 16: 4, 8: 3, 2: 1 };

/**
 * The significant digits of each base past which a number is past every double (`Number()` reads Infinity, or a
 * value past `Number.MAX_VALUE` at the last of them): 256 hexadecimal (2^1024), 342 octal, 1024 binary digits.
 */
export const MAX_SIGNIFICANT_DIGITS: Record<number, number> = { 16: 256, 8: 342, 2: 1024 };

/**
 * The digits `digits` (text, no prefix; null: none matched) of base `base` as an exact numeric, or null; past
 * MAX_SIGNIFICANT_DIGITS, `Infinity` (past every cap, as `Number()` reads past any cap). The digits are written as bits
 * (hexadecimal by the bit type's own `x` input, octal three bits a digit) and read 60 bits at a time: at most 18
 * chunks, each one cast and one power of two, where each digit cost a power of the base (0.5 s a row at 4094
 * hexadecimal digits, under the caps' lock).
 */
const chunkedBaseDigits = (digits: string, base: number) => {
  const bits =
    base === 16
      ? `(('x' || z.t)::varbit)::text`
      : base === 2
        ? `z.t`
        : `array_to_string(ARRAY(SELECT substr('000001010011100101110111', (ascii(d.c) - 48) * 3 + 1, 3)
                                   FROM regexp_split_to_table(z.t, '') WITH ORDINALITY AS d(c, i) ORDER BY d.i), '')`;
  if (BITS[base] === undefined) throw new Error(`no base ${base}`);
  return `(SELECT CASE WHEN z.t = '' THEN 0::numeric
                WHEN length(z.t) > ${MAX_SIGNIFICANT_DIGITS[base]} THEN 'Infinity'::numeric
                ELSE (SELECT sum(substr(w.p, 60 * k + 1, 60)::bit(60)::bigint::numeric
                                 * power(2::numeric, (length(w.p) - 60 * (k + 1))::numeric))
                        FROM (SELECT lpad(${bits}, (length(z.t) * ${BITS[base]} + 59) / 60 * 60, '0') AS p) AS w,
                             generate_series(0, length(w.p) / 60 - 1) AS k) END
           FROM (SELECT ltrim(${digits}, '0') AS t) AS z)`;
};

/**
 * `verity_amount_of` reads hexadecimal, octal and binary text with a bounded cost: past the digits a double holds it is
 * `Infinity` (past every cap) without reading them, and below that the digits are read in 60-bit chunks. The value is
 * unchanged below the bound (exact); past it the old reading was an exact number past every double, which counted as
 * past every cap too. `down` puts the digit-by-digit reading back.
 */
export class CapAmountBoundedDigits1764721500000 extends sqlMigration('CapAmountBoundedDigits1764721500000', {
  up: [`CREATE OR REPLACE ${amountOfFunction(chunkedBaseDigits)}`],
  down: [`CREATE OR REPLACE ${amountOfFunction(powerBaseDigits)}`],
}) {}
