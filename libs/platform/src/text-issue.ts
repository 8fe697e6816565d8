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
 * HIDDEN_CHARACTER but tab, line feed and carriage return: text of several lines (a reviewer's evidence). And the two
 * invisible characters that are part of an emoji, where they are: a zero-width joiner between two pictographs (one
 * after a skin tone or a presentation selector), and an emoji presentation selector (U+FE0F) after a pictograph or a
 * keycap's digit. A reviewer writes "✔️ confirmed" (U+2714 U+FE0F); refusing it would refuse ordinary text, and
 * there neither reorders nor hides anything. Anywhere else they stay refused.
 */
const HIDDEN_CHARACTER_IN_LINES =
  /(?![\t\n\r])(?!(?<=\p{Extended_Pictographic}(?:[\u{1F3FB}-\u{1F3FF}]|\uFE0F)?)\u200D(?=\p{Extended_Pictographic}))(?!(?<=\p{Extended_Pictographic}|[#*0-9])\uFE0F)[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\u2028\u2029]|\p{Cs}/u;
const HIDDEN_CHARACTERS_IN_LINES = new RegExp(HIDDEN_CHARACTER_IN_LINES.source, 'gu');

/**
 * The first character of `text` that HIDDEN_CHARACTER names, written `U+XXXX`, or null when every one is shown.
 * `lines`: text of several lines, where tab, line feed and carriage return are its own (a reviewer's evidence, a
 * reason), not one line (a label, a URL, a name).
 */
export function hiddenCharacterIn(text: string, options: { lines?: boolean } = {}): string | null {
  const found = (options.lines ? HIDDEN_CHARACTER_IN_LINES : HIDDEN_CHARACTER).exec(text);
  return found ? `U+${found[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}` : null;
}

/**
 * `text` with every character HIDDEN_CHARACTER names escaped: \uXXXX, or \u{XXXXX} past the first plane (a tag
 * character: one escape, not two halves of a pair). `lines`: tab and line breaks kept, as hiddenCharacterIn's. Free of
 * imports, as this whole file: the console's script bundles it to show stored text escaped.
 */
export function escapeHiddenCharacters(text: string, options: { lines?: boolean } = {}): string {
  return text.replace(options.lines ? HIDDEN_CHARACTERS_IN_LINES : HIDDEN_CHARACTERS, (c) => {
    const code = c.codePointAt(0)!;
    return code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}
