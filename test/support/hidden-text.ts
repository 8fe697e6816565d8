import type { FieldError } from '@verity/sdk';

/**
 * Words holding one character that hides or reorders what a person reads, each with the character the API names in
 * its refusal: the isolates, a zero-width space, a byte order mark, a soft hyphen, NEL and the line separator. A test
 * adds its own override case (where it stands in the text matters to what it shows).
 */
export const HIDDEN_IN_A_WORD: [string, string][] = [
  ['pay\u2066-team\u2069', 'U+2066'],
  ['pay\u2067x', 'U+2067'],
  ['pay\u2068x', 'U+2068'],
  ['pay\u2069x', 'U+2069'],
  ['pay\u200Bteam', 'U+200B'],
  ['pay\uFEFFteam', 'U+FEFF'],
  ['pay\u00ADteam', 'U+00AD'],
  ['pay\u0085team', 'U+0085'],
  ['pay\u2028team', 'U+2028'],
];

/** The API's refusal of a hidden character in `field`: 400 invalid_format, one error, naming the character. */
export function expectHiddenRefused(
  answer: { status: number; body: { errors: FieldError[] } },
  field: string,
  named: string,
): void {
  expect(answer.status).toBe(400);
  expect(answer.body.errors).toEqual([
    { field, rule: 'invalid_format', message: expect.stringContaining(`no ${named}:`) },
  ]);
}
