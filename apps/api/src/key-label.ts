/**
 * The rule for an API key's label, which the keys CLI prints in `list`'s table: operators read it to decide which key
 * to revoke.
 */
export const LABEL_MAX = 200;

/**
 * What a label may not hold. A line break makes a row of its own in the table (a key that is not there, or one shown
 * "revoked" that stands), an escape sequence rewrites what the terminal shows, a bidi control reorders it, and an
 * invisible character (a zero-width space, a word joiner, a byte order mark, a soft hyphen, a combining grapheme
 * joiner, a Hangul filler, a variation selector) makes a label that reads as another key's. Control characters (C0,
 * DEL, C1), format characters (`\p{Cf}`, bidi controls among them), every other character Unicode says to show as
 * nothing (``, unassigned ones included), line and paragraph separators, and lone
 * surrogates.
 */
const NOT_LABEL_TEXT = /[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\u2028\u2029]|\p{Cs}/u;
const NOT_LABEL_TEXT_EVERYWHERE = new RegExp(NOT_LABEL_TEXT.source, 'gu');

/** Whether `label` is one line of plain text of at most LABEL_MAX characters. */
export function isLabelText(label: string): boolean {
  return [...label].length <= LABEL_MAX && !NOT_LABEL_TEXT.test(label);
}

/**
 * A stored label shown on its row: what a label may not hold (one stored before the rule, or not by this CLI) as
 * \uXXXX, or \u{XXXXX} past the first plane (a tag character: one escape, not two halves of a pair).
 */
export function shownLabel(label: string | null): string {
  return (label ?? '').replace(NOT_LABEL_TEXT_EVERYWHERE, (c) => {
    const code = c.codePointAt(0)!;
    return code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}
