import { runInNewContext } from 'node:vm';
import {
  escapeHiddenCharacters,
  hiddenCharacterIn,
  jsonWithHiddenCharactersEscaped,
  rightToLeftIn,
} from './text-issue';

/** `ascii` written in Unicode tag characters (U+E0020–U+E007E), which show as nothing. */
const tags = (ascii: string) => [...ascii].map((c) => String.fromCodePoint(0xe0000 + c.codePointAt(0)!)).join('');

describe('hiddenCharacterIn', () => {
  it.each([
    ['a\u202eb', 'U+202E'],
    ['a\u2066b', 'U+2066'],
    ['a\u200bb', 'U+200B'],
    ['a\nb', 'U+000A'],
    ['a\u{e0041}', 'U+E0041'],
  ])('finds the first hidden character of %j: %s', (text, named) => expect(hiddenCharacterIn(text)).toBe(named));

  it('takes tab and line breaks in text of several lines, and nothing else hidden', () => {
    expect(hiddenCharacterIn('seen:\n\tno charge\r\n', { lines: true })).toBeNull();
    expect(hiddenCharacterIn('seen:\n\u202eno charge', { lines: true })).toBe('U+202E');
    expect(hiddenCharacterIn('a\u0085b', { lines: true })).toBe('U+0085');
    expect(hiddenCharacterIn('a\u2028b', { lines: true })).toBe('U+2028');
  });

  it('takes an emoji whole in text of several lines: its joiners and presentation selectors, there and nowhere else', () => {
    // ✔️, ❤️, 1️⃣, 👩‍💻, 👍🏽‍… and 🏳️‍🌈: joiners between pictographs, selectors after a pictograph or a keycap's digit.
    for (const emoji of [
      '\u2714\uFE0F',
      '\u2764\uFE0F',
      '1\uFE0F\u20E3',
      '\u{1F469}\u200D\u{1F4BB}',
      '\u{1F3F3}\uFE0F\u200D\u{1F308}',
    ]) {
      expect(hiddenCharacterIn(`${emoji} confirmed by phone`, { lines: true })).toBeNull();
    }
    expect(hiddenCharacterIn('\u{1F469}\u{1F3FD}\u200D\u{1F4BB}', { lines: true })).toBeNull();
    // Between letters, at an end, or one line of text (a label, a URL): refused as before.
    expect(hiddenCharacterIn('pay\u200Dments', { lines: true })).toBe('U+200D');
    expect(hiddenCharacterIn('\u{1F469}\u200D', { lines: true })).toBe('U+200D');
    expect(hiddenCharacterIn('a\uFE0Fb', { lines: true })).toBe('U+FE0F');
    expect(hiddenCharacterIn('\u2714\uFE0F')).toBe('U+FE0F');
    expect(escapeHiddenCharacters('\u2714\uFE0F a\u200Db', { lines: true })).toBe('\u2714\uFE0F a\\u200db');
  });

  it.each([
    ['Persian with a non-joiner', '\u0645\u06CC\u200C\u062E\u0648\u0627\u0647\u0645'],
    ['Sinhala with a joiner', '\u0DC1\u0DCA\u200D\u0DBB\u0DD3 \u0DBD\u0D82\u0D9A\u0DCF'],
    ['Devanagari with a non-joiner', '\u0915\u094D\u200C\u0937'],
    ['Hebrew with a right-to-left mark', '\u05E9\u05DC\u05D5\u05DD 100\u200F!'],
    ['Arabic with an Arabic letter mark', '\u0645\u0631\u062D\u0628\u0627\u061C 42'],
    ['Hebrew beside a left-to-right mark', '\u05E9\u05DC\u05D5\u05DD\u200E ok'],
    ['the flag of England', '\u{1F3F4}\u{E0067}\u{E0062}\u{E0065}\u{E006E}\u{E0067}\u{E007F} seen'],
    [
      'the flags of Scotland and Wales side by side',
      `\u{1F3F4}${tags('gbsct')}\u{E007F}\u{1F3F4}${tags('gbwls')}\u{E007F}`,
    ],
    ['a text-style selector after a pictograph', '\u2714\uFE0E done'],
    ['keycaps in emoji and in text style', '#\uFE0F\u20E3 *\uFE0F\u20E3 0\uFE0E\u20E3'],
    ['a variation selector after a Han ideograph', '\u845B\u{E0100}'],
    // Scripts written without spaces between words mark a word break with a zero-width space, between two of its letters.
    [
      'Thai with zero-width spaces between words',
      '\u0E20\u0E32\u0E29\u0E32\u200B\u0E44\u0E17\u0E22 \u0E17\u0E35\u0E48\u200B\u0E19\u0E35\u0E48',
    ],
    ['Lao with a zero-width space', '\u0E9E\u0EB2\u0EAA\u0EB2\u200B\u0EA5\u0EB2\u0EA7'],
    ['Khmer with a zero-width space', '\u178F\u17BE\u200B\u179B\u17C4\u1780'],
    ['Myanmar with a zero-width space', '\u1019\u103C\u1014\u103A\u1019\u102C\u200B\u1005\u102C'],
    [
      'Mongolian with free variation selectors',
      '\u1822\u180B\u1828 \u1828\u180C\u1822 \u182D\u180D\u1820 \u1828\u180F\u1822',
    ],
    ['Mongolian with the vowel separator (qara, black)', '\u182C\u1820\u1837\u180E\u1820'],
    ['a Mongolian joiner between letters', '\u1828\u200D\u1822'],
    // A chillu in the older spelling: a virama then a joiner at the end of a word, before a space, punctuation or the end.
    [
      'Malayalam chillus spelled with a virama and a joiner',
      '\u0D05\u0D35\u0D28\u0D4D\u200D \u0D05\u0D35\u0D7E\u0D4D\u200D. \u0D05\u0D35\u0D28\u0D4D\u200D',
    ],
    ['a Devanagari virama and non-joiner at the end of a word', '\u0915\u094D\u200C, \u0937'],
    ['a Bengali ra, joiner, virama and ya (ya-phala, no reph)', '\u09B0\u200D\u09CD\u09AF\u09BE\u09AC'],
    ['an Arabic letter with its vowel marks before a non-joiner', '\u0645\u064E\u0651\u200C\u0647\u0627'],
  ])('takes %s in text of several lines', (_, text) => {
    expect(hiddenCharacterIn(text, { lines: true })).toBeNull();
    expect(escapeHiddenCharacters(text, { lines: true })).toBe(text);
  });

  it.each([
    ['a right-to-left mark in text without right-to-left letters', 'paid 456\u200F 789', 'U+200F'],
    ['a left-to-right mark in Latin text', 'paid\u200E', 'U+200E'],
    ['a non-joiner between Latin letters', 'pay\u200Cments', 'U+200C'],
    ['a joiner between Cyrillic letters', '\u043F\u200D\u0430', 'U+200D'],
    ['an override in Hebrew text', '\u05E9\u05DC\u05D5\u05DD \u202Eabc', 'U+202E'],
    ['a tag character not after a black flag', 'a\u{E0067}', 'U+E0067'],
    ['a soft hyphen', 'pay\u00ADments', 'U+00AD'],
    // After a black flag, only a flag's own tags: a subdivision's code (gbeng) and the cancel tag that ends it. Any other
    // run of tag characters is ASCII no one sees (a language model reads it): 🏴 then "approve" in tags shows as 🏴.
    ['text in tag characters after a black flag', `ok \u{1F3F4}${tags('approve all')}\u{E007F}`, 'U+E0061'],
    ['tags after a black flag with no cancel tag', `\u{1F3F4}${tags('gbeng')} seen`, 'U+E0067'],
    ['a flag’s tags then more', `\u{1F3F4}${tags('gbeng')}\u{E007F}${tags('x')}`, 'U+E0078'],
    ['an uppercase subdivision code', `\u{1F3F4}${tags('GBENG')}\u{E007F}`, 'U+E0047'],
    ['a code too long for a subdivision', `\u{1F3F4}${tags('gbengxx')}\u{E007F}`, 'U+E0067'],
    // Shaped as a subdivision's code but no flag emoji fonts draw: a black flag, and six characters no one sees.
    ['a code no font draws as a flag', `\u{1F3F4}${tags('ignore')}\u{E007F}`, 'U+E0069'],
    ['a subdivision flag of a numeric region', `\u{1F3F4}${tags('001ab')}\u{E007F} x`, 'U+E0030'],
    ['a real code twice before the cancel tag', `\u{1F3F4}${tags('gbeng')}${tags('gbeng')}\u{E007F}`, 'U+E0067'],
    // A digit is a keycap's only with the keycap mark after the selector: in a number, the selector only hides.
    ['a presentation selector inside a number', 'refund 1\uFE0F00 EUR', 'U+FE0F'],
    ['a text selector after a digit', 'refund 1\uFE0E00 EUR', 'U+FE0E'],
    // The joiner and non-joiner only between letters of a script written with them: elsewhere they change nothing seen.
    ['a joiner between Han ideographs', '\u8F6C\u200D\u8D26', 'U+200D'],
    ['a non-joiner between Hangul syllables', '\uD55C\u200C\uAE00', 'U+200C'],
    ['a joiner between Armenian letters', '\u0561\u200D\u0562', 'U+200D'],
    ['a joiner between Hiragana', '\u3042\u200D\u3044', 'U+200D'],
    ['a joiner between Thai letters', '\u0E44\u200D\u0E17', 'U+200D'],
    // The base letter's script counts, not its marks' (combining marks belong to no script of their own).
    ['a joiner among the combining marks of a Latin letter', 'pa\u0301\u200D\u0301y', 'U+200D'],
    ['a non-joiner after a marked Latin letter before a Persian one', 'e\u0301\u200C\u062E', 'U+200C'],
    ['a joiner after a virama on a Latin letter', 'p\u094D\u200D pay', 'U+200D'],
    ['a joiner after a virama on nothing', '\u094D\u200D pay', 'U+200D'],
    ['a second joiner after a virama', '\u0915\u094D\u200D\u200D', 'U+200D'],
    ['a joiner after a virama, then a Latin letter', '\u0915\u094D\u200Dpayment', 'U+200D'],
    // Between letters of two scripts the joiner joins nothing (each script shapes its own letters).
    ['a non-joiner between an Arabic and a Devanagari letter', '\u0628\u200C\u0915', 'U+200C'],
    ['a joiner between a Devanagari letter and a Bengali virama', '\u0915\u200D\u09CD', 'U+200D'],
    ['a joiner between Syriac and Arabic letters', '\u0710\u200D\u0628', 'U+200D'],
    ['a non-joiner after a virama, then a Han letter', '\u0915\u094D\u200C\u8F6C', 'U+200C'],
    // A Persian non-joiner before punctuation or a space separates nothing: a letter there already ends its word.
    ['a Persian non-joiner before punctuation', '\u0645\u06CC\u200C. ok', 'U+200C'],
    ['a Persian non-joiner at the end', '\u0645\u06CC\u200C', 'U+200C'],
    // A zero-width space only between two letters of a script written without spaces between words.
    ['a zero-width space between Han ideographs', '\u8F6C\u200B\u8D26', 'U+200B'],
    ['a zero-width space after Thai, before Latin', '\u0E44\u0E17\u0E22\u200Bpay', 'U+200B'],
    ['a zero-width space at the end of Thai', '\u0E44\u0E17\u0E22\u200B', 'U+200B'],
    ['a zero-width space after a Thai mark on a Latin letter', 'p\u0E48\u200B\u0E44', 'U+200B'],
    ['two zero-width spaces between Thai words', '\u0E44\u0E17\u0E22\u200B\u200B\u0E44\u0E17\u0E22', 'U+200B'],
    [
      'a zero-width space in Tibetan (the tsheg is its word mark)',
      '\u0F56\u0F7C\u0F51\u200B\u0F61\u0F72\u0F42',
      'U+200B',
    ],
    // Mongolian selectors after a Mongolian letter, the vowel separator between two: nowhere else.
    ['a Mongolian selector after a Latin letter', 'pay\u180Bment', 'U+180B'],
    ['two Mongolian selectors', '\u1822\u180B\u180C', 'U+180C'],
    ['a Mongolian selector after a Mongolian digit', '\u1811\u180B', 'U+180B'],
    ['the Mongolian vowel separator between Latin letters', 'pay\u180Ement', 'U+180E'],
    ['the Mongolian vowel separator at the end', '\u182C\u1820\u1837\u180E', 'U+180E'],
    // A byte order mark is no text: pasted at the start, it shows as nothing and no keyboard types it.
    ['a byte order mark at the start', '\uFEFFRefund order 1234', 'U+FEFF'],
  ])('refuses %s in text of several lines', (_, text, named) => {
    expect(hiddenCharacterIn(text, { lines: true })).toBe(named);
  });

  it.each([
    ['marks after a Devanagari letter, then a joiner', `\u0915${'\u094D'.repeat(100_000)}\u200D`],
    ['combining grapheme joiners', '\u034F'.repeat(100_000)],
    ['marks after a Latin letter, then a joiner', `a${'\u0301'.repeat(100_000)}\u200D`],
    ['Thai marks, then a zero-width space', `\u0E01${'\u0E48'.repeat(100_000)}\u200B`],
    ['half forms', '\u0915\u094D\u200D'.repeat(33_333)],
    ['joiners between marks', '\u0301\u200D'.repeat(50_000)],
    ['tags after a black flag', `\u{1F3F4}${tags('a'.repeat(100_000))}`],
    ['Mongolian selectors', '\u1822\u180B'.repeat(50_000)],
    ['joiners between Arabic letters', '\u0628\u200D'.repeat(50_000)],
    ['joiners between Syriac and Arabic letters', '\u0710\u200D\u0628\u200C'.repeat(25_000)],
    [
      'marks after an Arabic letter, a joiner, marks again',
      `\u0628${'\u064B'.repeat(50_000)}\u200D${'\u064B'.repeat(50_000)}`,
    ],
  ])('judges 100k characters of %s in one pass, not one per character', (_, text) => {
    // No timing assertion: jest's default timeout (5 s) bounds the judgement. A test that runs synchronously is never
    // stopped by jest, so the judgement runs in a context that is (node:vm's timeout): a pattern that scanned back over
    // the run at each character would take minutes, and throws here instead of passing late.
    const [found, escaped] = runInNewContext(
      '[hidden(text, { lines: true }), escape(text, { lines: true })]',
      { hidden: hiddenCharacterIn, escape: escapeHiddenCharacters, text },
      { timeout: 5_000 },
    ) as [string | null, string];
    expect(found === null || /^U\+[0-9A-F]{4,5}$/.test(found)).toBe(true);
    expect(escaped.length).toBeGreaterThanOrEqual(text.length);
  });

  // A refused invisible mark between a letter and what follows it is no mark of that letter: what it separates from the
  // letter is judged as if the letter were not there (refused), and escaping the mark leaves nothing hidden behind it.
  it.each([
    ['a combining grapheme joiner between a Persian letter and a non-joiner', '\u0628\u034F\u200C\u0628', 'U+034F'],
    ['a variation selector between a Devanagari letter and a joiner', '\u0915\uFE00\u200D\u0915', 'U+FE00'],
    ['a combining grapheme joiner between a Thai letter and a zero-width space', '\u0E01\u034F\u200B\u0E01', 'U+034F'],
    ['a Mongolian selector after a Persian letter, then a joiner', '\u0628\u180B\u200D\u0628', 'U+180B'],
  ])('escapes %s, and what it stood between, in text of several lines', (_, text, named) => {
    expect(hiddenCharacterIn(text, { lines: true })).toBe(named);
    const escaped = escapeHiddenCharacters(text, { lines: true });
    expect(hiddenCharacterIn(escaped, { lines: true })).toBeNull();
  });

  it('agrees with escapeHiddenCharacters on every short text of the characters the rules look at', () => {
    // Every text of up to four of these: letters of the scripts the rules name, their marks, a virama, the characters
    // taken in some places only, and invisible marks taken nowhere. Letters of three joining scripts (Arabic, Syriac,
    // Mongolian) and two scripts with a virama (Devanagari, Bengali): a joiner is taken only within one script.
    const alphabet = [
      'a',
      '\u0301',
      '\u0E01',
      '\u0E31',
      '\u0628',
      '\u064B',
      '\u0710',
      '\u0915',
      '\u094D',
      '\u0995',
      '\u09CD',
      '\u1820',
      '\u180B',
      '\u180E',
      '\u200B',
      '\u200C',
      '\u200D',
      '\u034F',
      '\uFE00',
    ];
    let texts = [''];
    const disagreements: string[] = [];
    for (let length = 1; length <= 4; length++) {
      texts = texts.flatMap((text) => alphabet.map((c) => text + c));
      for (const text of texts) {
        for (const options of [{ lines: true }, {}]) {
          const found = hiddenCharacterIn(text, options);
          const escaped = escapeHiddenCharacters(text, options);
          // Taken whole: shown as written. Refused: escaped, and the escaped text holds nothing hidden.
          if ((found === null) !== (escaped === text) || hiddenCharacterIn(escaped, options) !== null) {
            disagreements.push(escapeHiddenCharacters(text));
          }
        }
      }
    }
    expect(disagreements).toEqual([]);
  });

  it('refuses the direction marks in one-line text, with right-to-left letters too', () =>
    expect(hiddenCharacterIn('\u05E9\u05DC\u05D5\u05DD\u200F')).toBe('U+200F'));
});

describe('escapeHiddenCharacters', () => {
  it('escapes each hidden character, one escape past the first plane', () =>
    expect(escapeHiddenCharacters('/pay/\u202eelgoog\u{e0041}')).toBe('/pay/\\u202eelgoog\\u{e0041}'));
});

describe('rightToLeftIn', () => {
  // Each lays out the digits after it right to left ('x 1111 2222' reads '2222 1111 x'): the console shows such a value
  // also in the order it is sent. Hanifi Rohingya, Yezidi, Old Hungarian and Mende Kikakui letters are right to left as
  // much as Hebrew's.
  it.each([
    ['Hebrew', '\u05D0 1111 2222'],
    ['Arabic', '\u0627 1111 2222'],
    ['Arabic (a presentation form)', '\uFE8D 1111 2222'],
    ['Hanifi Rohingya', '\u{10D00} 1111 2222'],
    ['Yezidi', '\u{10E80} 1111 2222'],
    ['Old Hungarian', '\u{10C80} 1111 2222'],
    ['Mende Kikakui', '\u{1E800} 1111 2222'],
  ])('finds a letter of %s', (_script, text) => expect(rightToLeftIn(text)).toBe(true));

  it.each([
    ['Latin and digits', 'abc 1111 2222'],
    ['a byte order mark (no direction of its own)', '\uFEFF1111 2222'],
    ['Greek', '\u03B1 1111'],
  ])('finds none in %s', (_what, text) => expect(rightToLeftIn(text)).toBe(false));
});

describe('jsonWithHiddenCharactersEscaped', () => {
  it('writes each hidden character as a JSON escape, and parses back to the same value', () => {
    const value = { label: 'a\u009b2J\u202eb\u200b\u{e0041}\u001b\\\u202e', n: 1, none: null, text: 'plain é 😀' };
    const json = jsonWithHiddenCharactersEscaped(value);
    expect(json).toBe(
      '{"label":"a\\u009b2J\\u202eb\\u200b\\udb40\\udc41\\u001b\\\\\\u202e","n":1,"none":null,"text":"plain é 😀"}',
    );
    expect(JSON.parse(json)).toEqual(value);
    expect(hiddenCharacterIn(json)).toBeNull();
    expect(jsonWithHiddenCharactersEscaped(undefined)).toBe('null');
  });
});
