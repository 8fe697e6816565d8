import {
  FIELD_PATH,
  fieldKey,
  fieldSegments,
  keptMemberName,
  readEvidenceField,
  readField,
  sameJson,
  withKeptMemberNames,
} from './json-path';

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
    expect(readField(doc, 'record.tags[5]')).toEqual({ found: false, noRecord: true });
    expect(readField(doc, 'record.missing')).toEqual({ found: false, noRecord: false });
    expect(readField(null, 'a')).toEqual({ found: false, noRecord: true });
  });

  it('tells a path that ran out where no record stands (a list with no entry there, a null) from one inside a record', () => {
    const noRecord = (value: unknown, path: string) => {
      const read = readField(value, path);
      return read.found ? 'found' : read.noRecord;
    };
    // No record: a search answered with no match, or nothing where the record goes.
    expect(noRecord({ data: [] }, 'data[0].status')).toBe(true);
    expect(noRecord({ data: [] }, 'data.status')).toBe(true);
    expect(noRecord({ data: [{ id: 'x' }] }, 'data[1].status')).toBe(true);
    expect(noRecord({ data: null }, '$.data.status')).toBe(true);
    expect(noRecord({ data: null, meta: { total: 0 } }, 'data.status')).toBe(true);
    expect(noRecord({ data: [null] }, 'data.0.status')).toBe(true);
    expect(noRecord({ result: { data: null } }, 'result.data.status')).toBe(true);
    expect(noRecord({ data: { attributes: null, links: null } }, 'data.attributes.status')).toBe(true);
    // As docs/contract.md §7 says: an empty list runs out at no record inside a record too, and an answer that is the
    // record itself, unwrapped, has the shape of a top-level null beside other members (nothing tells them apart).
    expect(noRecord({ data: { id: 'o_1', items: [] } }, 'data.items[0].status')).toBe(true);
    expect(noRecord({ id: 'o_1', attributes: null }, 'attributes.status')).toBe(true);
    expect(noRecord([], '0.status')).toBe(true);
    expect(noRecord(null, 'data')).toBe(true);
    // A record (an object, an entry) that is there without the field, or an answer that is no container at all.
    expect(noRecord({ data: [{ id: 'x' }] }, 'data[0].status')).toBe(false);
    expect(noRecord({ data: [{ id: 'x' }] }, 'data.length')).toBe(false);
    expect(noRecord({ data: { '0': {} } }, 'data[0].status')).toBe(false);
    expect(noRecord({ other: 1 }, 'data.status')).toBe(false);
    expect(noRecord('text', 'data')).toBe(false);
    // A null inside a record below the top of the answer that holds a value: that record, without the field.
    expect(noRecord({ data: { id: 'o_1', attributes: null } }, 'data.attributes.status')).toBe(false);
    expect(noRecord({ data: [{ id: 'o_1', attributes: null }] }, 'data[0].attributes.status')).toBe(false);
    expect(noRecord({ data: { id: 'o_1', a: { b: null } } }, 'data.a.b.status')).toBe(false);
    // Read whole, the path did not run out: nothing to tell.
    expect(noRecord({ data: { status: null } }, 'data.status')).toBe('found');
  });

  it('reads an array by index only: `length` and other members of the JavaScript array are not JSON members', () => {
    const doc = { record: { tags: [], items: [{ id: 'x' }] } };
    expect(readField(doc, 'record.tags.length')).toEqual({ found: false, noRecord: true });
    expect(readField(doc, 'record.items.length')).toEqual({ found: false, noRecord: false });
    expect(readField(doc, 'record.items.0.id')).toEqual({ found: true, value: 'x' });
    // An object's own member named `length` is JSON and is read as any other.
    expect(readField({ a: { length: 3 } }, 'a.length')).toEqual({ found: true, value: 3 });
  });

  it('compares JSON values deeply, ignoring key order', () => {
    expect(sameJson({ a: 1, b: [1, { c: 2 }] }, { b: [1, { c: 2 }], a: 1 })).toBe(true);
    expect(sameJson({ a: 1 }, { a: 2 })).toBe(false);
    expect(sameJson(undefined, null)).toBe(false);
  });

  // Compared as JSON, as jsonb stores them: what JSON.stringify writes of a value is what is compared.
  describe('sameJson compares values as JSON carries them', () => {
    it('a member whose value is undefined is no member (JSON leaves it out); no value at all is not null', () => {
      expect(sameJson({ a: 1, b: undefined }, { a: 1 })).toBe(true);
      expect(sameJson({ a: { b: undefined } }, { a: {} })).toBe(true);
      expect(sameJson({ a: undefined }, { a: null })).toBe(false);
      expect(sameJson(undefined, undefined)).toBe(true);
      expect(sameJson(undefined, null)).toBe(false);
    });

    it('undefined in an array, and a hole, are null (as JSON writes them)', () => {
      expect(sameJson([1, undefined], [1, null])).toBe(true);
      // eslint-disable-next-line no-sparse-arrays
      expect(sameJson([1, , 3], [1, null, 3])).toBe(true);
      expect(sameJson([1, undefined], [1])).toBe(false);
    });

    it('a Date is its ISO text (toJSON), not an empty object', () => {
      const at = new Date('2026-12-07T01:00:00.000Z');
      expect(sameJson(at, '2026-12-07T01:00:00.000Z')).toBe(true);
      expect(sameJson({ at }, { at: '2026-12-07T01:00:00.000Z' })).toBe(true);
      expect(sameJson(at, new Date('2026-12-08T01:00:00.000Z'))).toBe(false);
      expect(sameJson(at, {})).toBe(false);
    });

    it('NaN and the infinities are null, -0 is 0 (JSON has neither)', () => {
      expect(sameJson(NaN, null)).toBe(true);
      expect(sameJson({ a: Infinity }, { a: null })).toBe(true);
      expect(sameJson(-0, 0)).toBe(true);
      expect(sameJson([-0], [0])).toBe(true);
      expect(sameJson(NaN, 0)).toBe(false);
    });

    it('an array is no object, even one with its indices as members; a boxed value is its value', () => {
      expect(sameJson([1, 2], { 0: 1, 1: 2 })).toBe(false);
      expect(sameJson([], {})).toBe(false);
      expect(sameJson({ a: [] }, { a: {} })).toBe(false);
      expect(sameJson('1', 1)).toBe(false);
      expect(sameJson(Object('a'), 'a')).toBe(true);
    });

    it('ignores member order at every depth, never the order of an array', () => {
      expect(sameJson({ a: { x: 1, y: [{ p: 1, q: 2 }] }, b: 2 }, { b: 2, a: { y: [{ q: 2, p: 1 }], x: 1 } })).toBe(
        true,
      );
      expect(sameJson([1, 2], [2, 1])).toBe(false);
      expect(sameJson({ a: { x: 1 } }, { a: { x: 1, y: 2 } })).toBe(false);
    });
  });

  // An http read-back keeps what it read under the field as written (`record: { "data.status": "ok" }`): a criterion
  // on the natural path `record.data.status` read nothing there, and a VERIFIED operation's outcome was "unmet".
  it('reads evidence through a member whose name is itself a path, a member of the segment’s own name first', () => {
    const evidence = {
      record: { 'data.status': 'ok', 'items[0].id': 'x', 'a.b': { c: 1 }, 'not a path': 1 },
      array: [{ 'p.q': 2 }],
    };
    expect(readEvidenceField(evidence, 'record.data.status')).toEqual({ found: true, value: 'ok' });
    expect(readEvidenceField(evidence, 'record.items.0.id')).toEqual({ found: true, value: 'x' });
    expect(readEvidenceField(evidence, 'record.items[0].id')).toEqual({ found: true, value: 'x' });
    expect(readEvidenceField(evidence, 'record.a.b.c')).toEqual({ found: true, value: 1 });
    expect(readEvidenceField(evidence, 'array[0].p.q')).toEqual({ found: true, value: 2 });
    expect(readEvidenceField(evidence, 'record.data')).toEqual({ found: false });
    expect(readEvidenceField(evidence, 'record.data.status.more')).toEqual({ found: false });
    expect(readEvidenceField(evidence, 'record.a.b.d')).toEqual({ found: false });
    expect(readEvidenceField(evidence, 'array.p.q')).toEqual({ found: false });
    // The member named by the segment itself wins; the dotted one is read only where the plain path finds nothing.
    const both = { data: { status: 'plain' }, 'data.status': 'dotted' };
    expect(readEvidenceField(both, 'data.status')).toEqual({ found: true, value: 'plain' });
    expect(readEvidenceField({ data: { other: 1 }, 'data.status': 'dotted' }, 'data.status')).toEqual({
      found: true,
      value: 'dotted',
    });
    expect(readEvidenceField(null, 'a')).toEqual({ found: false });
  });
});

describe("keptMemberName and withKeptMemberNames: a target's marker-named members as they are kept", () => {
  it("escapes each spelling of a marker's member with one more verity:, and nothing else", () => {
    expect(keptMemberName('verity:cut')).toBe('verity:verity:cut');
    expect(keptMemberName('verity:verity:clipped')).toBe('verity:verity:verity:clipped');
    for (const name of ['verity:cutx', 'cut', 'Verity:cut', 'verity:', 'clipped'])
      expect(keptMemberName(name)).toBe(name);
  });

  it('walks objects and arrays at any depth; other values are as they are', () => {
    expect(withKeptMemberNames({ 'verity:cut': [{ 'verity:clipped': null }], a: 1 })).toEqual({
      'verity:verity:cut': [{ 'verity:verity:clipped': null }],
      a: 1,
    });
    expect(withKeptMemberNames('verity:cut')).toBe('verity:cut');
  });
});
