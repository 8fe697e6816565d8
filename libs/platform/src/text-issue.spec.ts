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
});

describe('escapeHiddenCharacters', () => {
  it('escapes each hidden character, one escape past the first plane', () =>
    expect(escapeHiddenCharacters('/pay/\u202eelgoog\u{e0041}')).toBe('/pay/\\u202eelgoog\\u{e0041}'));
});
