import { z } from 'zod';
import { hiddenCharacterIn, memberPath, textIssue } from '@verity/platform';
import { PROTOTYPE_KEYS } from '@verity/status-model';
import type { FieldError } from '../problem/problem';

/** The rule every accepted string obeys (no control characters, no lone surrogates): one home, in the platform. */
export { textIssue };

/** Names that would reach Object.prototype in a plain object; as JSON keys they are refused, never dropped. */
export { PROTOTYPE_KEYS };

/** A zod string that refuses what `textIssue` finds; every free-text field of a request is built on it. */
export function text(): z.ZodString {
  return z.string().superRefine((value, ctx) => {
    const issue = textIssue(value);
    if (issue) ctx.addIssue({ code: 'custom', message: issue.message, params: { rule: issue.rule } });
  });
}

/**
 * Characters that show nothing: white space, the default-ignorable code points (U+200B ZERO WIDTH SPACE, U+2060
 * WORD JOINER, U+3164 HANGUL FILLER, U+FEFF…), which `trim()` keeps, U+2800 BRAILLE PATTERN BLANK — a braille
 * cell with no dots, drawn as nothing, which Unicode counts as neither (braille text holds it between its words, and
 * such text shows its other cells) — and U+1D159 MUSICAL SYMBOL NULL NOTEHEAD, a notehead drawn as nothing, also
 * neither, listed beside those two among the "invisible characters" of blank names and messages — and U+16FE4
 * KHITAN SMALL SCRIPT FILLER, a mark (Mn) that fills an empty position of a Khitan character and is drawn as nothing,
 * also of neither property.
 */
// (The mark stands outside the class: a combining mark inside one reads as if it combined with the character before.)
const SHOWS_NOTHING = /^(?:[\p{White_Space}\p{Default_Ignorable_Code_Point}\u2800\u{1D159}]|\u{16FE4})*$/u;

/**
 * Refuses, as `too_small` (to a reader it says nothing, as the empty string does), a value that shows nothing. The
 * empty string is left to the field's own rule: a reason left empty is "none given", and shown so.
 */
export function refuseInvisible(message: string) {
  return (value: string, ctx: z.RefinementCtx) => {
    // The empty string is min's `too_small`, answered once.
    if (value !== '' && SHOWS_NOTHING.test(value)) {
      ctx.addIssue({ code: 'custom', message, params: { rule: 'too_small' } });
    }
  };
}

/**
 * A free-text field that must say something (a reviewer's evidence, an obligation's owner): `text()`, trimmed, and
 * refused with `message` when nothing is left that shows — a zero-width space is no evidence, though `trim` keeps it.
 */
export function filledText(message: string): z.ZodString {
  return text().trim().min(1, message).superRefine(refuseInvisible(message));
}

/**
 * A field that names or says something and is stored as written (an execution's agent_id and intent): `text()`,
 * not trimmed — the caller's spelling is the record — but refused when it shows nothing at all (spaces only, a
 * zero-width space), which no reader of the record could tell from an empty one. (Those two also refuse what hides
 * inside visible text: refuseHiddenCharacters, in the submission's schema.)
 */
export function visibleText(): z.ZodString {
  return text()
    .min(1)
    .superRefine(refuseInvisible('must contain a visible character (not only white space or invisible characters)'));
}

/**
 * Refuses, as `invalid_format` naming it, a character that hides or reorders what a person reads (hiddenCharacterIn: a
 * bidi control such as U+202E, a zero-width or other invisible character, a control character) in text shown to one
 * who decides on it: a policy's names in the review queue, a reviewer's evidence and reasons to the next reviewer, an
 * agent's intent and agent id in the review queue. `lines`: text of several lines, in any language (hiddenCharacterIn's
 * `lines`). A value that shows nothing at all is left to `too_small`.
 */
export function refuseHiddenCharacters(options: { lines?: boolean } = {}) {
  return (value: string, ctx: z.RefinementCtx) => {
    if (SHOWS_NOTHING.test(value)) return;
    const found = hiddenCharacterIn(value, options);
    if (found) {
      ctx.addIssue({
        code: 'custom',
        message: `no ${found}: a bidi control, an invisible or a control character makes the text shown read as other text`,
        params: { rule: 'invalid_format' },
      });
    }
  };
}

/** The field name of member `key` under `path` (one home, in the platform: connectors name fields the same way). */
export { memberPath };

const MAX_ISSUES = 50;
/** Deeper than any schema allows (they stop at 16); the walk stops there instead of following a hostile nesting. */
const MAX_DEPTH = 64;

/**
 * Every string, key and number of a parsed JSON body, checked before any schema sees it (a schema could drop a
 * `__proto__` key on the way, and a later field could never name it): keys that reach Object.prototype are
 * `unknown_field`, strings and keys follow `textIssue`, and a number JSON cannot carry (1e400 parses to Infinity,
 * which would be stored as null) is `finite_number`. Iterative, so no nesting can exhaust the stack.
 */
export function jsonInputIssues(value: unknown): FieldError[] {
  const issues: FieldError[] = [];
  const pending: { node: unknown; path: string; depth: number }[] = [{ node: value, path: '', depth: 0 }];
  while (pending.length > 0 && issues.length < MAX_ISSUES) {
    const { node, path, depth } = pending.pop()!;
    const field = path || '(body)';
    if (typeof node === 'string') {
      const issue = textIssue(node);
      if (issue) issues.push({ field, ...issue });
    } else if (typeof node === 'number') {
      if (!Number.isFinite(node)) issues.push({ field, rule: 'finite_number', message: 'numbers must be finite' });
    } else if (node !== null && typeof node === 'object') {
      if (depth >= MAX_DEPTH) {
        issues.push({ field, rule: 'max_depth', message: `JSON nests at most ${MAX_DEPTH} levels` });
      } else if (Array.isArray(node)) {
        for (let i = node.length - 1; i >= 0; i -= 1) {
          pending.push({ node: node[i], path: `${path}[${i}]`, depth: depth + 1 });
        }
      } else {
        const keys = Object.keys(node);
        for (let i = keys.length - 1; i >= 0; i -= 1) {
          const key = keys[i];
          const at = memberPath(path, key);
          const issue = PROTOTYPE_KEYS.has(key)
            ? {
                rule: 'unknown_field',
                message: `unknown field "${key}": names of Object.prototype are never accepted as keys`,
              }
            : textIssue(key);
          if (issue) issues.push({ field: at, ...issue });
          else pending.push({ node: (node as Record<string, unknown>)[key], path: at, depth: depth + 1 });
        }
      }
    }
  }
  return issues.slice(0, MAX_ISSUES);
}
