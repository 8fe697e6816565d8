import type { Request } from 'express';
import { Problem } from '../problem/problem';
import { ifMatchOf, ifNoneMatchOf } from './if-match';

const request = (headers: Record<string, string>) => ({ headers }) as unknown as Pick<Request, 'headers'>;

/** The field and rule of the 400 a header is refused with, or null when it is read. */
function refusal(read: () => unknown): { field: string; rule: string } | null {
  try {
    read();
    return null;
  } catch (error) {
    if (!(error instanceof Problem)) throw error;
    const [first] = (error.extras as { errors: { field: string; rule: string }[] }).errors;
    return { field: first.field, rule: first.rule };
  }
}

describe('If-Match and If-None-Match lists (RFC 9110 §5.6.1.2, §13.1.1–2)', () => {
  it('ignores empty list elements, as a recipient must: the tags listed are read', () => {
    for (const value of ['"a",,"b"', '"a", , "b"', ',"a","b"', '"a","b",', ' , "a" ,\t, "b" , ']) {
      expect([value, ifMatchOf(request({ 'if-match': value }))]).toEqual([value, ['a', 'b']]);
      expect([value, ifNoneMatchOf(request({ 'if-none-match': value }))]).toEqual([value, ['a', 'b']]);
    }
    expect(ifMatchOf(request({ 'if-match': 'W/"a",, "b"' }))).toEqual(['b']);
  });

  it('still refuses a header that lists no tag at all, or anything that is no tag, naming it', () => {
    for (const value of ['', ',', ' , ,', '"a",x', '*,"a"', '"a" "b"']) {
      expect([value, refusal(() => ifMatchOf(request({ 'if-match': value })))]).toEqual([
        value,
        { field: 'If-Match', rule: 'invalid_format' },
      ]);
      expect([value, refusal(() => ifNoneMatchOf(request({ 'if-none-match': value })))]).toEqual([
        value,
        { field: 'If-None-Match', rule: 'invalid_format' },
      ]);
    }
  });

  it('keeps a quoted tag whole: a comma inside the quotes is part of the tag, not a separator (RFC 9110 §8.8.3)', () => {
    expect(ifMatchOf(request({ 'if-match': '"a,b"' }))).toEqual(['a,b']);
    expect(ifMatchOf(request({ 'if-match': '"a,b", "c" ,"d,,e"' }))).toEqual(['a,b', 'c', 'd,,e']);
    expect(ifMatchOf(request({ 'if-match': 'W/"a,b", "c"' }))).toEqual(['c']);
    expect(ifNoneMatchOf(request({ 'if-none-match': 'W/"a,b",,"c"' }))).toEqual(['a,b', 'c']);
    for (const value of ['"a,b', '"a,b"c', 'a,"b"', '"a,"b"', 'W/ "a"']) {
      expect([value, refusal(() => ifMatchOf(request({ 'if-match': value })))]).toEqual([
        value,
        { field: 'If-Match', rule: 'invalid_format' },
      ]);
    }
  });

  it('reads * alone as any version, and no header as no condition', () => {
    expect(ifMatchOf(request({ 'if-match': '*' }))).toBeUndefined();
    expect(ifNoneMatchOf(request({ 'if-none-match': ' * ' }))).toBe('*');
    expect(ifMatchOf(request({}))).toBeUndefined();
    expect(ifNoneMatchOf(request({}))).toBeUndefined();
  });
});
