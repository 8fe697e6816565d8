import { FIELD_PATH, fieldKey, fieldSegments, readField, sameJson } from './json-path';

describe('json-path (shared by criteria and connectors)', () => {
  it('accepts the documented forms and nothing else', () => {
    for (const ok of ['data.status', '$.data.status', 'items[0].id', 'items.0.id'])
      expect(FIELD_PATH.test(ok)).toBe(true);
    for (const bad of ['', '$', 'a..b', 'a[*]', 'a b']) expect(FIELD_PATH.test(bad)).toBe(false);
  });

  it('splits segments and strips the $. prefix', () => {
    expect(fieldSegments('$.items[2].id')).toEqual(['items', '2', 'id']);
    expect(fieldKey('$.a.b')).toBe('a.b');
    expect(fieldKey('a.b')).toBe('a.b');
  });

  it('reads a value through objects and arrays, and says when it is not there', () => {
    const doc = { record: { amount: 1250, tags: ['a', 'b'] } };
    expect(readField(doc, 'record.amount')).toEqual({ found: true, value: 1250 });
    expect(readField(doc, 'record.tags[1]')).toEqual({ found: true, value: 'b' });
    expect(readField(doc, 'record.tags[5]')).toEqual({ found: false });
    expect(readField(doc, 'record.missing')).toEqual({ found: false });
    expect(readField(null, 'a')).toEqual({ found: false });
  });

  it('reads an array by index only: `length` and other members of the JavaScript array are not JSON members', () => {
    const doc = { record: { tags: [], items: [{ id: 'x' }] } };
    expect(readField(doc, 'record.tags.length')).toEqual({ found: false });
    expect(readField(doc, 'record.items.length')).toEqual({ found: false });
    expect(readField(doc, 'record.items.0.id')).toEqual({ found: true, value: 'x' });
    // An object's own member named `length` is JSON and is read as any other.
    expect(readField({ a: { length: 3 } }, 'a.length')).toEqual({ found: true, value: 3 });
  });

  it('compares JSON values deeply, ignoring key order', () => {
    expect(sameJson({ a: 1, b: [1, { c: 2 }] }, { b: [1, { c: 2 }], a: 1 })).toBe(true);
    expect(sameJson({ a: 1 }, { a: 2 })).toBe(false);
    expect(sameJson(undefined, null)).toBe(false);
  });
});
