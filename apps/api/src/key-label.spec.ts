import { LABEL_MAX, isLabelText, shownLabel } from './key-label';

describe('an API key label', () => {
  const forged = 'night shift\nkey_01m0forged00000000000000000  demo    admin     vk_admin_zz…  revoked';
  // Invisible format characters (zero-width space, word joiner, byte order mark, soft hyphen, a tag), and invisible
  // characters that are not format characters (a combining grapheme joiner, Hangul fillers, a variation selector, a
  // Mongolian free variation selector, a Khmer inherent vowel, a variation selector supplement, an unassigned
  // default-ignorable): each makes a label that reads as "ops".
  const invisible = [
    'o\u200bps',
    'o\u2060ps',
    '\ufeffops',
    'o\u00adps',
    'ops\u{e0041}',
    'o\u034fps',
    'o\u3164ps',
    '\u115fops',
    'o\ufe0fps',
    'o\u180bps',
    'o\u17b4ps',
    'o\u{e0100}ps',
    'o\u2065ps',
  ];

  it.each([
    forged,
    'ops\u001b[2K',
    'tab\there',
    'ops\u202erevoked',
    'ops\u2028x',
    'lone \ud800 surrogate',
    'x'.repeat(LABEL_MAX + 1),
    ...invisible,
  ])('is refused: %j', (label) => {
    expect(isLabelText(label)).toBe(false);
  });

  it.each(['ci bot', 'x'.repeat(LABEL_MAX), 'nuit blanche – équipe 2', '夜勤', '🤖'.repeat(LABEL_MAX)])(
    'is one line of plain text: %j',
    (label) => {
      expect(isLabelText(label)).toBe(true);
    },
  );

  it('is shown with what a label may not hold escaped, one escape per character', () => {
    expect(shownLabel('o\u200bp\u2060s\ufeff-\u00ad\u{e0041}\u034f\n')).toBe(
      'o\\u200bp\\u2060s\\ufeff-\\u00ad\\u{e0041}\\u034f\\u000a',
    );
    expect(shownLabel(null)).toBe('');
  });
});
