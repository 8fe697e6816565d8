import { clipValue, textPrefix } from './json-path';

describe('clipValue and textPrefix: a cut keeps no half of a character', () => {
  const emoji = '\u{1F4B6}'; // two UTF-16 units

  it('cuts before a character whose two halves the cut would split', () => {
    expect(textPrefix(`${'x'.repeat(3)}${emoji}`, 4)).toBe('xxx');
    expect(clipValue(`${'x'.repeat(3)}${emoji}y`, 4)).toBe('xxx…');
    // JSON of the cut has no lone surrogate escape, which Postgres refuses in jsonb.
    expect(JSON.stringify(clipValue(`${'x'.repeat(39)}${emoji}`, 40))).not.toMatch(/\\ud[89ab]/i);
  });

  it('keeps a character the cut does not split, and text shorter than the cut as it is', () => {
    expect(textPrefix(`xx${emoji}y`, 4)).toBe(`xx${emoji}`);
    expect(textPrefix(`xxx${emoji}`, 5)).toBe(`xxx${emoji}`);
    expect(clipValue(`xx${emoji}`, 40)).toBe(`xx${emoji}`);
    // A lone first half already at the end of the text is not the cut's doing: left to storableText.
    expect(textPrefix('xx\ud83d', 3)).toBe('xx\ud83d');
  });
});
