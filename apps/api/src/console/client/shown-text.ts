import { escapeHiddenCharacters, rightToLeftIn } from '../../../../../libs/platform/src/text-issue';

export { rightToLeftIn };

/**
 * Text as the console shows it: every character that would hide or reorder what a reviewer reads (a bidi control such
 * as U+202E, a zero-width or other invisible character, a control character) written as its escape, `\u202e` — text
 * stored before the API refused them (params, intents, evidence, reasons, the policy's names) reads as it is, never as
 * other text. Tab and line breaks are kept: evidence and JSON have lines.
 */
export function shown(text: string): string {
  return escapeHiddenCharacters(text, { lines: true });
}
