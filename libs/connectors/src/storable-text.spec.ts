import { KEPT_DEPTH_CUT, MAX_KEPT_DEPTH, holdsReplacedText, storableText, withinKeptDepth } from './storable-text';

describe('storableText: what Postgres cannot store in jsonb becomes U+FFFD', () => {
  it('replaces U+0000 and surrogates without their pair, in strings and keys, deeply', () => {
    expect(
      storableText({ ref: 'a\u0000b', list: ['\ud800', 'x\udc00'], 'k\u0000': { deep: ['\ud83d'] }, n: 1, b: true }),
    ).toEqual({ ref: 'a\ufffdb', list: ['\ufffd', 'x\ufffd'], 'k\ufffd': { deep: ['\ufffd'] }, n: 1, b: true });
  });

  it('leaves storable text as it is: whole pairs, other control characters, U+FFFD of its own', () => {
    const kept = { emoji: '\u{1F600}', tab: 'a\tb\u0001', fffd: '\ufffd', nil: null };
    expect(storableText(kept)).toEqual(kept);
    expect(holdsReplacedText(storableText('a\u0000'))).toBe(true);
    expect(holdsReplacedText('plain')).toBe(false);
  });

  it('what it returns is what JSON.stringify writes and jsonb reads: no \\u0000, no lone \\ud8xx escape', () => {
    const text = JSON.stringify(storableText({ a: `${'x'.repeat(3)}\ud83d`, b: '\u0000' }));
    expect(text).not.toMatch(/\\u0000|\\ud[89ab][0-9a-f]{2}|\\ud[c-f][0-9a-f]{2}/i);
  });
});

describe('withinKeptDepth: a result no deeper than any walk of it survives', () => {
  it('cuts what nests deeper than MAX_KEPT_DEPTH with a marker, without walking it (20 000 levels)', () => {
    const deep = JSON.parse('['.repeat(20_000) + ']'.repeat(20_000)) as unknown;
    const kept = withinKeptDepth({ providerRef: { id: deep } });
    const text = JSON.stringify(kept);
    expect(text).toContain(`{"verity:cut":"deeper than ${MAX_KEPT_DEPTH} levels"}`);
    expect(text).toContain(JSON.stringify(KEPT_DEPTH_CUT));
    expect(text.split('[').length - 1).toBe(MAX_KEPT_DEPTH - 2);
  });

  it('leaves a result within the bound as it is', () => {
    const result = { status: 'ACKNOWLEDGED', providerRef: { id: 'm_1', list: [1, [2, { a: null }]] } };
    expect(withinKeptDepth(result)).toEqual(result);
  });

  it("keeps the cut's member name, and each of its escaped spellings, one `verity:` further: none is the cut, none two", () => {
    const answer = { a: { 'verity:cut': 'deeper than 100 levels' }, b: { 'verity:verity:cut': 1, 'verity:cut': 2 } };
    expect(withinKeptDepth(answer)).toEqual({
      a: { 'verity:verity:cut': 'deeper than 100 levels' },
      b: { 'verity:verity:verity:cut': 1, 'verity:verity:cut': 2 },
    });
    // Other names, those merely like it included, are kept as they are.
    const kept = { 'verity:cutx': 1, cut: 2, 'Verity:cut': 3, 'verity:': 4 };
    expect(withinKeptDepth(kept)).toEqual(kept);
  });
});
