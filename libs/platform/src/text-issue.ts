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
 * inside a number it only hides), the tags of a flag after U+1F3F4 (England's, Scotland's or Wales's code, then the
 * cancel tag: any other run of tag characters is text no person sees, which a language model reads).
 * A variation selector after a Han ideograph (U+E0100–U+E01EF). The joiner and non-joiner (U+200C, U+200D) between
 * two letters of one script written with them (JOINING_SCRIPTS, VIRAMA_SCRIPTS: Arabic and Persian, Syriac, N'Ko,
 * Mongolian, the Indic scripts, Sinhala…; elsewhere, Latin, Han or Hangul, they change nothing seen and only hide),
 * and after a virama at the end of a word (Malayalam's older chillu spelling, a half form or an explicit virama shown
 * before a space or punctuation). A zero-width space between two letters of a script written without spaces between
 * words, where it is the word break (UNSPACED_SCRIPTS: Thai, Lao, Khmer, Myanmar…). A Mongolian free variation
 * selector (U+180B–U+180D, U+180F) right after a Mongolian letter, the Mongolian vowel separator (U+180E) between two.
 * A letter's script is its base letter's: combining marks after it change nothing (`pa\u0301\u200D\u0301y` is Latin).
 * And, in text that holds right-to-left letters, the direction marks (U+200E, U+200F, U+061C), which a keyboard of
 * those languages types: they place the punctuation beside them, as a letter would; in text without right-to-left
 * letters they would reorder it invisibly, and stay refused. Bidi embeddings, overrides and isolates are refused
 * everywhere: they reorder what follows them. So is a byte order mark (U+FEFF), at the start of a text too: it is a
 * file's encoding mark, not writing — no keyboard types it and nothing shows it.
 *
 * Each part matches its character first and looks back after it (`\u200B(?<=…\u200B)`), never the other way round:
 * a look-behind that opens the part would run at every position of the text, and one scanning back over a run of marks
 * or tags there would make a long text cost its length squared.
 */
const FLAG_TAG = String.raw`[\u{E0030}-\u{E0039}\u{E0061}-\u{E007A}]`;
/**
 * A flag's tags: the code of one of the subdivisions emoji fonts draw (UTS #51's RGI tag sequences: England, Scotland,
 * Wales), then the cancel tag. Any other code in the shape of a subdivision's shows as a plain black flag: its tags are
 * six characters no person sees and a language model reads (`ignore`), so they are refused like any other tag run.
 */
const FLAG_TAGS = String.raw`\u{E0067}\u{E0062}(?:\u{E0065}\u{E006E}\u{E0067}|\u{E0073}\u{E0063}\u{E0074}|\u{E0077}\u{E006C}\u{E0073})\u{E007F}`;
/**
 * A letter of one of `scripts`, then its combining marks, whichever script they have (often none: Inherited): the marks
 * that are shown, and a Mongolian letter's free variation selector right after it. An invisible mark refused there (a
 * combining grapheme joiner, a variation selector, a Mongolian selector after another letter) is no part of the letter:
 * what stands after it is not beside the letter, and escaping the mark would leave it, still hidden, after the escape.
 */
const letterOf = (scripts: string[]) =>
  String.raw`(?=\p{L})[${scripts.map((script) => String.raw`\p{Script=${script}}`).join('')}]` +
  String.raw`(?:(?<=\p{Script=Mongolian})[\u180B-\u180D\u180F])?(?:(?!\p{Default_Ignorable_Code_Point})\p{M})*`;
/**
 * Scripts written with the joiner and non-joiner between letters to choose a letter's joining form (The Unicode
 * Standard, chapter 23.2 "Layout Controls"; RFC 5892, appendix A.1: "a formally cursive script … as in the Persian
 * language"): the cursive scripts in use (ArabicShaping.txt's joining types), Mongolian among them (chapter 13.5).
 */
const JOINING_SCRIPTS = ['Arabic', 'Syriac', 'Nko', 'Mongolian', 'Adlam', 'Hanifi_Rohingya'];
/**
 * The Indic scripts and Sinhala, where a joiner or non-joiner after a virama chooses a conjunct's, a half form's or a
 * chillu's shape (chapters 12 and 13.2; RFC 5892, appendix A.2), and VIRAMA, their viramas (Malayalam's three, Sinhala's
 * al-lakuna).
 */
const VIRAMA_SCRIPTS = [
  'Devanagari',
  'Bengali',
  'Gurmukhi',
  'Gujarati',
  'Oriya',
  'Tamil',
  'Telugu',
  'Kannada',
  'Malayalam',
  'Sinhala',
];
const VIRAMA = String.raw`[\u094D\u09CD\u0A4D\u0ACD\u0B4D\u0BCD\u0C4D\u0CCD\u0D3B\u0D3C\u0D4D\u0DCA]`;
const JOINER = String.raw`[\u200C\u200D]`;
/**
 * Scripts written without spaces between words, which mark a word break with a zero-width space (UAX #14's complex
 * context scripts, line break class SA; The Unicode Standard, chapter 16, on Thai and Khmer). Not Tibetan: its tsheg
 * (U+0F0B), a visible mark, ends each syllable and is where a line breaks.
 */
const UNSPACED_SCRIPTS = ['Thai', 'Lao', 'Khmer', 'Myanmar', 'Tai_Tham', 'Tai_Le', 'New_Tai_Lue', 'Tai_Viet'];
const UNSPACED_LETTER = letterOf(UNSPACED_SCRIPTS);
const MONGOLIAN_LETTER = String.raw`(?=\p{L})\p{Script=Mongolian}`;
const MONGOLIAN_SELECTOR = String.raw`[\u180B-\u180D\u180F]`;
const KEPT_IN_LINES = [
  String.raw`[\t\n\r]`,
  String.raw`(?<=\p{Extended_Pictographic}(?:[\u{1F3FB}-\u{1F3FF}]|\uFE0F)?)\u200D(?=\p{Extended_Pictographic})`,
  String.raw`(?<=\p{Extended_Pictographic})(?:\uFE0E|\uFE0F)|(?<=[#*0-9])(?:\uFE0E|\uFE0F)(?=\u20E3)`,
  // A flag's tags are five, then the cancel tag: the look-back never runs further than seven.
  String.raw`(?:${FLAG_TAG}|\u{E007F})(?<=\u{1F3F4}(?=${FLAG_TAGS})${FLAG_TAG}{0,7}(?:${FLAG_TAG}|\u{E007F}))`,
  String.raw`(?<=\p{Script=Han})[\u{E0100}-\u{E01EF}]`,
  // Between two letters of ONE such script (or a letter and its script's virama): between an Arabic and a Devanagari
  // letter it joins nothing and only hides.
  ...[...JOINING_SCRIPTS, ...VIRAMA_SCRIPTS].map(
    (script) =>
      String.raw`${JOINER}(?<=${letterOf([script])}${JOINER})(?=${letterOf([script])}|(?=${VIRAMA})\p{Script=${script}})`,
  ),
  // At the end of a word only: before a letter of another script it joins nothing and only hides.
  String.raw`${JOINER}(?<=${letterOf(VIRAMA_SCRIPTS)}${VIRAMA}${JOINER})(?![\p{L}\p{M}])`,
  String.raw`\u200B(?<=${UNSPACED_LETTER}\u200B)(?=${UNSPACED_LETTER})`,
  String.raw`${MONGOLIAN_SELECTOR}(?<=${MONGOLIAN_LETTER}${MONGOLIAN_SELECTOR})`,
  String.raw`\u180E(?<=${letterOf(['Mongolian'])}\u180E)(?=${MONGOLIAN_LETTER})`,
];
const DIRECTION_MARK = String.raw`[\u200E\u200F\u061C]`;
const RIGHT_TO_LEFT_LETTER =
  /[\p{Script=Hebrew}\p{Script=Arabic}\p{Script=Syriac}\p{Script=Thaana}\p{Script=Nko}\p{Script=Adlam}\p{Script=Samaritan}\p{Script=Mandaic}]/u;
/**
 * The blocks Unicode gives right-to-left letters (Bidi_Class R or AL; DerivedBidiClass's defaults): Hebrew to Arabic
 * Extended-A, the Hebrew and Arabic presentation forms (not U+FEFF, which has no direction), and the two ranges of the
 * supplementary planes that hold every other right-to-left script (Hanifi Rohingya, Yezidi, Old Hungarian, Mende
 * Kikakui, Adlam…). By code point, not by script name: a console's browser that does not know a newer script's name
 * would refuse the whole pattern.
 */
const RIGHT_TO_LEFT_BLOCK = /[\u0590-\u08FF\uFB1D-\uFDFF\uFE70-\uFEFE\u{10800}-\u{10FFF}\u{1E800}-\u{1EFFF}]/u;
/**
 * Whether `text` holds a right-to-left letter (Hebrew, Arabic, Hanifi Rohingya…): shown as written, such a letter lays
 * out the digits and spaces after it right to left, so `\u05D0 1111 2222` reads as `2222 1111 \u05D0` with no hidden
 * character in it.
 */
export function rightToLeftIn(text: string): boolean {
  return RIGHT_TO_LEFT_BLOCK.test(text);
}
const inLines = (kept: string[], flags: string) => new RegExp(`(?!${kept.join('|')})${HIDDEN_CHARACTER.source}`, flags);
const HIDDEN_CHARACTER_IN_LINES = inLines(KEPT_IN_LINES, 'u');
const HIDDEN_CHARACTERS_IN_LINES = inLines(KEPT_IN_LINES, 'gu');
const HIDDEN_CHARACTER_IN_RTL_LINES = inLines([...KEPT_IN_LINES, DIRECTION_MARK], 'u');
const HIDDEN_CHARACTERS_IN_RTL_LINES = inLines([...KEPT_IN_LINES, DIRECTION_MARK], 'gu');

/**
 * The pattern that finds what `text` may not hold: one line, or several lines (with or without right-to-left letters:
 * `within`'s, the whole `text` is the start of, where given).
 */
function hiddenPattern(text: string, options: { lines?: boolean; within?: string }, global: boolean): RegExp {
  if (!options.lines) return global ? HIDDEN_CHARACTERS : HIDDEN_CHARACTER;
  const rtl = RIGHT_TO_LEFT_LETTER.test(options.within ?? text);
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
 * character: one escape, not two halves of a pair). `lines`: tab and line breaks kept, as hiddenCharacterIn's.
 * `within`: the whole text `text` is the start of (a title cut from it), whose right-to-left letters, after the cut
 * too, make its direction marks writing. Free of imports, as this whole file: the console's script bundles it to show
 * stored text escaped.
 */
export function escapeHiddenCharacters(text: string, options: { lines?: boolean; within?: string } = {}): string {
  return text.replace(hiddenPattern(text, options, true), (c) => {
    const code = c.codePointAt(0)!;
    return code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}

/**
 * `value` as JSON in which every character HIDDEN_CHARACTER names is a JSON escape (`\u202e`; one past the first plane
 * as its two halves, `\udb40\udc41`): the same value once parsed, and nothing a terminal acts on or hides when the line
 * is printed. JSON.stringify alone escapes only C0 controls and lone surrogates: a C1 control, a bidi override or an
 * invisible character was written as itself.
 */
export function jsonWithHiddenCharactersEscaped(value: unknown): string {
  return (JSON.stringify(value) ?? 'null').replace(HIDDEN_CHARACTERS, (c) =>
    Array.from({ length: c.length }, (_, i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, '0')}`).join(''),
  );
}
