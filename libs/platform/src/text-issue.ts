/**
 * What no string a Verity endpoint accepts may hold, wherever it appears (a field, a key, a params value, a path id, a
 * query parameter): C0 control characters other than tab, line feed and carriage return, and DEL — U+0000 in
 * particular, which Postgres cannot store (22021 / 22P05) — and UTF-16 surrogates without their pair, which are no
 * Unicode text. The API's schemas and the workers' operations server read the same rule.
 */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export function textIssue(value: string): { rule: string; message: string } | null {
  if (CONTROL.test(value)) {
    return {
      rule: 'no_control_characters',
      message: 'control characters (NUL, U+0001–U+001F other than tab and newlines, DEL) are not allowed',
    };
  }
  if (LONE_SURROGATE.test(value)) {
    return { rule: 'valid_unicode', message: 'not valid Unicode: a UTF-16 surrogate without its pair' };
  }
  return null;
}

/**
 * What text shown to a person (an API key's label in the keys CLI's table, a webhook endpoint's URL in the endpoint
 * list) may not hold: what would make it read as other text. A line break makes a row of its own, an escape sequence
 * rewrites what the terminal shows, a bidi control (U+202A–U+202E, U+2066–U+2069) reorders it, and an invisible
 * character (a zero-width space, a word joiner, a byte order mark, a soft hyphen, a combining grapheme joiner, a Hangul
 * filler, a variation selector) makes it read as something else. Control characters (C0, DEL, C1), format characters
 * (`\p{Cf}`, bidi controls among them), every other character Unicode says to show as nothing
 * (`Default_Ignorable_Code_Point`, unassigned ones included), line and paragraph separators, and lone surrogates.
 */
const HIDDEN_CHARACTER = /[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\u2028\u2029]|\p{Cs}/u;
const HIDDEN_CHARACTERS = new RegExp(HIDDEN_CHARACTER.source, 'gu');

/**
 * Text of several lines (a reviewer's evidence, a reason) is a person's writing, in any language: what HIDDEN_CHARACTER
 * names but what that writing is made of, where it stands, is its own. Tab, line feed and carriage return. The
 * invisible parts of an emoji: a zero-width joiner between two pictographs (one after a skin tone or a selector), a
 * presentation selector (U+FE0E, U+FE0F) after a pictograph or a keycap's digit (the keycap mark U+20E3 after it:
 * inside a number it only hides), the tags of a flag after U+1F3F4 (a subdivision's code in lowercase letters and
 * digits, then the cancel tag: any other run of tag characters is text no person sees, which a language model reads).
 * A variation selector after a Han ideograph (U+E0100–U+E01EF). The joiner and non-joiner (U+200C, U+200D) between
 * two letters of a script that writes with them (Persian, the Indic scripts, Sinhala…: not Latin, Greek or Cyrillic,
 * where they only hide). And, in text that holds right-to-left letters, the direction marks (U+200E, U+200F, U+061C),
 * which a keyboard of those languages types: they place the punctuation beside them, as a letter would; in text
 * without right-to-left letters they would reorder it invisibly, and stay refused. Bidi embeddings, overrides and
 * isolates are refused everywhere: they reorder what follows them.
 */
const FLAG_TAG = String.raw`[\u{E0030}-\u{E0039}\u{E0061}-\u{E007A}]`;
/** A flag's tags (UTS #51): a subdivision's code (a region, then one to four letters or digits), then the cancel tag. */
const FLAG_TAGS = String.raw`(?:[\u{E0061}-\u{E007A}]{2}|[\u{E0030}-\u{E0039}]{3})${FLAG_TAG}{1,4}\u{E007F}`;
const KEPT_IN_LINES = [
  String.raw`[\t\n\r]`,
  String.raw`(?<=\p{Extended_Pictographic}(?:[\u{1F3FB}-\u{1F3FF}]|\uFE0F)?)\u200D(?=\p{Extended_Pictographic})`,
  String.raw`(?<=\p{Extended_Pictographic})(?:\uFE0E|\uFE0F)|(?<=[#*0-9])(?:\uFE0E|\uFE0F)(?=\u20E3)`,
  String.raw`(?<=\u{1F3F4}(?=${FLAG_TAGS})${FLAG_TAG}*)(?:${FLAG_TAG}|\u{E007F})`,
  String.raw`(?<=\p{Script=Han})[\u{E0100}-\u{E01EF}]`,
  String.raw`(?<=[\p{L}\p{M}])(?<![\p{Script=Latin}\p{Script=Greek}\p{Script=Cyrillic}])(?:\u200C|\u200D)(?=[\p{L}\p{M}])(?![\p{Script=Latin}\p{Script=Greek}\p{Script=Cyrillic}])`,
];
const DIRECTION_MARK = String.raw`[\u200E\u200F\u061C]`;
const RIGHT_TO_LEFT_LETTER =
  /[\p{Script=Hebrew}\p{Script=Arabic}\p{Script=Syriac}\p{Script=Thaana}\p{Script=Nko}\p{Script=Adlam}\p{Script=Samaritan}\p{Script=Mandaic}]/u;
const inLines = (kept: string[], flags: string) => new RegExp(`(?!${kept.join('|')})${HIDDEN_CHARACTER.source}`, flags);
const HIDDEN_CHARACTER_IN_LINES = inLines(KEPT_IN_LINES, 'u');
const HIDDEN_CHARACTERS_IN_LINES = inLines(KEPT_IN_LINES, 'gu');
const HIDDEN_CHARACTER_IN_RTL_LINES = inLines([...KEPT_IN_LINES, DIRECTION_MARK], 'u');
const HIDDEN_CHARACTERS_IN_RTL_LINES = inLines([...KEPT_IN_LINES, DIRECTION_MARK], 'gu');

/** The pattern that finds what `text` may not hold: one line, or several lines (with or without right-to-left letters). */
function hiddenPattern(text: string, options: { lines?: boolean }, global: boolean): RegExp {
  if (!options.lines) return global ? HIDDEN_CHARACTERS : HIDDEN_CHARACTER;
  const rtl = RIGHT_TO_LEFT_LETTER.test(text);
  if (global) return rtl ? HIDDEN_CHARACTERS_IN_RTL_LINES : HIDDEN_CHARACTERS_IN_LINES;
  return rtl ? HIDDEN_CHARACTER_IN_RTL_LINES : HIDDEN_CHARACTER_IN_LINES;
}

/**
 * The first character of `text` that HIDDEN_CHARACTER names, written `U+XXXX`, or null when every one is shown.
 * `lines`: text of several lines, where tab, line feed and carriage return are its own (a reviewer's evidence, a
 * reason), not one line (a label, a URL, a name).
 */
export function hiddenCharacterIn(text: string, options: { lines?: boolean } = {}): string | null {
  const found = hiddenPattern(text, options, false).exec(text);
  return found ? `U+${found[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}` : null;
}

/**
 * `text` with every character HIDDEN_CHARACTER names escaped: \uXXXX, or \u{XXXXX} past the first plane (a tag
 * character: one escape, not two halves of a pair). `lines`: tab and line breaks kept, as hiddenCharacterIn's. Free of
 * imports, as this whole file: the console's script bundles it to show stored text escaped.
 */
export function escapeHiddenCharacters(text: string, options: { lines?: boolean } = {}): string {
  return text.replace(hiddenPattern(text, options, true), (c) => {
    const code = c.codePointAt(0)!;
    return code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}
