import { filledText, visibleText } from './text';

/** The rule of the issues a value raises under `schema`, or [] when it is taken. */
function rulesOf(schema: ReturnType<typeof visibleText>, value: string): unknown[] {
  const parsed = schema.safeParse(value);
  if (parsed.success) return [];
  return parsed.error.issues.map((issue) => (issue as { params?: { rule?: unknown } }).params?.rule ?? issue.code);
}

/**
 * Code points shown as nothing, alone or in a run: white space and the default-ignorable ones (which the rule names),
 * the blank braille cell, and U+1D159 MUSICAL SYMBOL NULL NOTEHEAD — a notehead drawn as nothing, listed beside U+2800
 * and U+3164 among the "invisible characters" of blank names and messages, yet a symbol (So) of neither property.
 */
const SHOWS_NOTHING: [string, string][] = [
  ['U+3164 HANGUL FILLER', '\u3164'],
  ['U+115F, U+1160 HANGUL CHOSEONG / JUNGSEONG FILLER', '\u115f\u1160'],
  ['U+FFA0 HALFWIDTH HANGUL FILLER', '\uffa0'],
  ['U+2028, U+2029 line and paragraph separators', '\u2028\u2029'],
  ['U+180E MONGOLIAN VOWEL SEPARATOR', '\u180e'],
  ['U+200B–U+200D zero-width space, non-joiner, joiner', '\u200b\u200c\u200d'],
  ['U+2060–U+2064 word joiner, invisible operators', '\u2060\u2061\u2062\u2063\u2064'],
  ['U+FEFF byte order mark', '\ufeff'],
  ['U+FE00, U+FE0F variation selectors', '\ufe00\ufe0f'],
  ['U+E0100, U+E01EF variation selectors supplement', '\u{e0100}\u{e01ef}'],
  ['U+E0001, U+E0020–U+E007F tags', '\u{e0001}\u{e0020}\u{e0041}\u{e007f}'],
  ['U+1D173–U+1D17A musical format controls', '\u{1d173}\u{1d17a}'],
  ['U+2800 BRAILLE PATTERN BLANK', '\u2800'],
  ['U+1D159 MUSICAL SYMBOL NULL NOTEHEAD', '\u{1d159}'],
  ['U+1D159 between spaces', ' \u{1d159}\u{1d159} '],
  ['U+1D159 with a zero-width space and a blank braille cell', '\u{1d159}\u200b\u2800'],
  ['U+16FE4 KHITAN SMALL SCRIPT FILLER', '\u{16fe4}'],
  ['U+16FE4 between spaces, beside U+3164', ' \u{16fe4}\u3164 '],
];

describe('text that must show something', () => {
  it.each(SHOWS_NOTHING)('refuses %s alone as too_small (visibleText)', (_name, value) => {
    expect(rulesOf(visibleText(), value)).toEqual(['too_small']);
  });

  it.each(SHOWS_NOTHING)('refuses %s alone as too_small (filledText)', (_name, value) => {
    expect(rulesOf(filledText('must say something'), value)).toEqual(['too_small']);
  });

  it.each([
    ['a combining acute accent alone (drawn, on a dotted circle or the space before it)', '\u0301'],
    ['a musical null notehead inside visible text', 'rest \u{1d159} here'],
    [
      'braille words with a blank cell between them',
      '\u2813\u2811\u2807\u2807\u2815\u2800\u283a\u2815\u2817\u2807\u2819',
    ],
  ])('takes %s', (_name, value) => {
    expect(rulesOf(visibleText(), value)).toEqual([]);
  });
});
