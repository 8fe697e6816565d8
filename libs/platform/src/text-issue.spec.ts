import { escapeHiddenCharacters, hiddenCharacterIn } from './text-issue';

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
});

describe('escapeHiddenCharacters', () => {
  it('escapes each hidden character, one escape past the first plane', () =>
    expect(escapeHiddenCharacters('/pay/\u202eelgoog\u{e0041}')).toBe('/pay/\\u202eelgoog\\u{e0041}'));
});
