import { duplicateKeyIn } from './duplicate-keys';

describe('duplicateKeyIn', () => {
  it.each([
    ['{"amount":100,"amount":99999999}', 'amount'],
    ['{"agent_id":"a","agent_id":"b"}', 'agent_id'],
    ['{"operations":[{"params":{"amount":1,"currency":"EUR","amount":2}}]}', 'operations[0].params.amount'],
    ['{"operations":[{"key":"a"},{"key":"b","key":"c"}]}', 'operations[1].key'],
    ['[{"a":1},{"a":1,"a":2}]', '[1].a'],
    // Names as JSON reads them: an escape spells the same name.
    ['{"a":1,"\\u0061":2}', 'a'],
    ['{"x":{"y":[1,{"z":1}],"w":2,"w":3}}', 'x.w'],
    // A string value that looks like a name does not count; names after a nested value do.
    ['{"a":"b","b":{"c":"a"},"c":1,"a":2}', 'a'],
  ])('%s → %s', (text, field) => {
    expect(duplicateKeyIn(text)).toEqual({ field });
  });

  it('names an empty name as the body, and cuts a path nested thousands deep', () => {
    expect(duplicateKeyIn('{"":1,"":2}')).toEqual({ field: '(body)' });
    const deep = `${'{"x":'.repeat(5_000)}{"a":1,"a":2}${'}'.repeat(5_000)}`;
    const { field } = duplicateKeyIn(deep)!;
    expect(field.length).toBeLessThanOrEqual(201);
    expect(field).toMatch(/^x\.x\.x.*…$/);
  });

  it.each([
    '{"a":1,"b":{"a":1},"c":[{"a":1},{"a":1}]}',
    '{"a":"\\"a\\":1,","b":"}{[,"}',
    '{"a\\\\":1,"a":2}',
    '[]',
    '"just a string"',
    '{"unterminated',
    '{"a":1,"a',
    '',
  ])('%s → none', (text) => {
    expect(duplicateKeyIn(text)).toBeNull();
  });
});
