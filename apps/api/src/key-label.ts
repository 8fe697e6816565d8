import { escapeHiddenCharacters, hiddenCharacterIn } from '@verity/platform';

/**
 * The rule for an API key's label, which the keys CLI prints in `list`'s table: operators read it to decide which key
 * to revoke.
 */
export const LABEL_MAX = 200;

/**
 * Whether `label` is one line of plain text of at most LABEL_MAX characters: nothing that would make it read as another
 * key's row or label (hiddenCharacterIn: line breaks, escape sequences, bidi controls, invisible characters, lone
 * surrogates). A webhook endpoint's URL obeys the same rule.
 */
export function isLabelText(label: string): boolean {
  return [...label].length <= LABEL_MAX && hiddenCharacterIn(label) === null;
}

/** A stored label shown on its row: what a label may not hold (one stored before the rule, or not by this CLI) escaped. */
export function shownLabel(label: string | null): string {
  return escapeHiddenCharacters(label ?? '');
}
