import { rawJsonIssue, rawJsonNumberAt } from './raw-json';

/** The texts in which rawJsonIssue finds `rule` (with the field it names), and texts in which it finds nothing. */
function itJudges(rule: string, cases: { found: [text: string, field: string][]; none: string[] }): void {
  it.each(cases.found)('%s → %s', (text, field) => {
    expect(rawJsonIssue(text)).toEqual({ field, rule });
  });
  it.each(cases.none)('%s → none', (text) => {
    expect(rawJsonIssue(text)).toBeNull();
  });
}

describe('rawJsonIssue: a member named twice', () => {
  itJudges('duplicate_key', {
    found: [
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
    ],
    none: [
      '{"a":1,"b":{"a":1},"c":[{"a":1},{"a":1}]}',
      '{"a":"\\"a\\":1,","b":"}{[,"}',
      '{"a\\\\":1,"a":2}',
      '[]',
      '"just a string"',
      '{"unterminated',
      '{"a":1,"a',
      '',
    ],
  });

  it('names an empty name as [""] (not as the whole body), and cuts a path nested thousands deep', () => {
    expect(rawJsonIssue('{"":1,"":2}')).toEqual({ field: '[""]', rule: 'duplicate_key' });
    expect(rawJsonIssue('{"a":{"":1,"":2}}')).toEqual({ field: 'a[""]', rule: 'duplicate_key' });
    const deep = `${'{"x":'.repeat(5_000)}{"a":1,"a":2}${'}'.repeat(5_000)}`;
    const { field } = rawJsonIssue(deep)!;
    expect(field.length).toBeLessThanOrEqual(201);
    expect(field).toMatch(/^x\.x\.x.*…$/);
  });

  it('cuts a long path before an emoji at the cut, never inside it (half of one is no Unicode)', () => {
    // The 200th UTF-16 unit of the path is the first half of 😀: the answer's field carried "\ud83d", which strict JSON
    // readers refuse with the whole refusal.
    const name = `${'a'.repeat(199)}\u{1F600}`;
    const text = JSON.stringify({ [name]: 1 }).replace('}', `,${JSON.stringify(name)}:2}`);
    expect(rawJsonIssue(text)).toEqual({ field: `${'a'.repeat(199)}…`, rule: 'duplicate_key' });
  });
});

describe('rawJsonIssue: a number JSON.parse would round', () => {
  itJudges('exact_number', {
    found: [
      ['{"amount":9007199254740993}', 'amount'],
      ['{"amount":-9007199254740993}', 'amount'],
      ['{"amount":12345678901234567890}', 'amount'],
      ['{"a":{"b":[1,2,{"c":0.30000000000000000001}]}}', 'a.b[2].c'],
      ['{"a":[1,9007199254740993]}', 'a[1]'],
      ['[0,1,2,3.14159265358979323846]', '[3]'],
      ['{"tiny":1e-400}', 'tiny'],
      ['{"x":9007199254740993.0}', 'x'],
      ['{"x":90071992547409930e-1}', 'x'],
      ['9007199254740993', '(body)'],
      // The first issue in the text is the one named.
      ['{"n":9007199254740993,"n":1}', 'n'],
    ],
    none: [
      '{"amount":9007199254740991,"b":-9007199254740991}',
      '{"amount":9007199254740992}', // 2^53 itself is a double
      '{"a":0.1,"b":1.50,"c":-0,"d":0.0,"e":1e22,"f":10000000000000000000000,"g":5e-324,"h":1E+2,"i":2.5e-3}',
      '{"big":1e400}', // Infinity: refused after parsing (finite_number)
      '{"s":"9007199254740993","t":"0.30000000000000000001"}', // strings are kept as written
      '{"a":true,"b":false,"c":null,"d":[]}',
    ],
  });

  it('judges a number as long as a body can be in one pass (no pattern that backtracks on a run of zeros)', () => {
    // A 256 KiB literal (318 bytes gzipped): a trailing-zeros pattern took 47 s on it and held the event loop.
    const zeros = '0'.repeat(262_100);
    expect(rawJsonIssue(`{"x":0.1${zeros}1}`)).toEqual({ field: 'x', rule: 'exact_number' });
    expect(rawJsonIssue(`{"x":1${zeros}}`)).toBeNull(); // Infinity: refused after parsing (finite_number)
    expect(rawJsonIssue(`{"x":1${zeros.slice(0, 30)}1}`)).toEqual({ field: 'x', rule: 'exact_number' });
    expect(rawJsonIssue(`{"x":1${zeros}e-262100}`)).toBeNull();
    expect(rawJsonIssue(`{"x":0.1${zeros}}`)).toBeNull();
    expect(rawJsonIssue(`{"x":1e-${'9'.repeat(262_100)}}`)).toEqual({ field: 'x', rule: 'exact_number' });
    expect(rawJsonIssue(`{"x":0e-${'9'.repeat(262_100)}}`)).toBeNull();
    expect(rawJsonIssue(`{"x":1e${'0'.repeat(262_100)}1}`)).toBeNull();
  });

  it('keeps what JSON.parse keeps, for whole numbers around 2^53', () => {
    for (let n = 2n ** 53n - 5n; n <= 2n ** 53n + 5n; n += 1n) {
      const keeps = BigInt(JSON.parse(n.toString()) as number) === n;
      expect(rawJsonIssue(`{"n":${n}}`)).toEqual(keeps ? null : { field: 'n', rule: 'exact_number' });
    }
  });
});

describe('rawJsonIssue within one path', () => {
  const answer =
    '{"id":12345678901234567891,"data":{"status":"ok","tags":["a",1e400],"note":"x","note":"y"},' +
    '"items":[{"n":1},{"n":9007199254740993}],"data2":1,"data2":2}';

  // Only an issue at a member the path goes through, at its value or inside it: a reader of data.status is not misled
  // by the 64-bit id beside it, which it never reads.
  it.each([
    [['data', 'status'], null],
    [['items', '0', 'n'], null],
    [['data'], { field: 'data.note', rule: 'duplicate_key' }],
    [['data', 'note'], { field: 'data.note', rule: 'duplicate_key' }],
    [['id'], { field: 'id', rule: 'exact_number' }],
    [['items', '1', 'n'], { field: 'items[1].n', rule: 'exact_number' }],
    [['items'], { field: 'items[1].n', rule: 'exact_number' }],
    [['data2'], { field: 'data2', rule: 'duplicate_key' }],
    [[], { field: 'id', rule: 'exact_number' }],
  ])('within %j → %j', (within, issue) => {
    expect(rawJsonIssue(answer, within)).toEqual(issue);
  });

  it('counts a member named twice above the path: which of the two the path goes through is a guess', () => {
    const text = '{"data":{"status":"declined"},"data":{"status":"ok"}}';
    expect(rawJsonIssue(text, ['data', 'status'])).toEqual({ field: 'data', rule: 'duplicate_key' });
    // The path after the second name still reads its members by name (no duplicate inside either object).
    expect(rawJsonIssue('{"a":{"x":1},"a":{"x":2},"b":{"y":9007199254740993}}', ['b', 'y'])).toEqual({
      field: 'b.y',
      rule: 'exact_number',
    });
  });

  it('reads an array index written with leading zeros as the element a path reads there (items.01 is items[1])', () => {
    // readField reads "01" of an array as its element 1: the issue there counts, or the rounded value is read.
    expect(rawJsonIssue(answer, ['items', '01', 'n'])).toEqual({ field: 'items[1].n', rule: 'exact_number' });
    expect(rawJsonIssue(answer, ['items', '001'])).toEqual({ field: 'items[1].n', rule: 'exact_number' });
    expect(rawJsonIssue('[{"s":"declined","s":"ok"}]', ['00', 's'])).toEqual({ field: '[0].s', rule: 'duplicate_key' });
    expect(rawJsonIssue(answer, ['items', '00', 'n'])).toBeNull();
    // A member is read by its name as written: "01" is not the member "1" of an object.
    expect(rawJsonIssue('{"items":{"1":{"n":9007199254740993}}}', ['items', '01', 'n'])).toBeNull();
  });

  it('reads a whole body that is one unkeepable number as an issue for every path', () => {
    expect(rawJsonIssue('9007199254740993', ['anything'])).toEqual({ field: '(body)', rule: 'exact_number' });
  });
});

describe('rawJsonNumberAt: a number as the text writes it', () => {
  it.each([
    ['{"id":1e3}', ['id'], '1e3'],
    ['{"id":-0}', ['id'], '-0'],
    ['{"a":{"id":1},"id":7.0}', ['id'], '7.0'],
    ['{"items":[{"id":1},{"id":2.50}]}', ['items', '1', 'id'], '2.50'],
    ['{"items":[{"id":1},{"id":2}]}', ['items', '01', 'id'], '2'],
    ['{"i\\u0064": 12 }', ['id'], '12'],
    ['{"id":"12"}', ['id'], null],
    ['{"data":{"id":12}}', ['id'], null],
    ['{"id":{"n":12}}', ['id'], null],
    ['{"id":[12]}', ['id'], null],
    ['{"name":"id:5","id":5}', ['id'], '5'],
  ])('%s at %j → %s', (text, at, literal) => {
    expect(rawJsonNumberAt(text, at)).toBe(literal);
  });
});

describe('a scan along one path, on a hostile answer of 64 KiB', () => {
  // Arrays nested 21 000 deep around 11 000 numbers (or an object naming one member 8 000 times), the path's member
  // after them: a scan that rebuilt the path of every value from the whole stack took 20–30 s of CPU on one answer,
  // the event loop held all along. Each value is judged in constant time against the path. These cases pin the answers
  // on such input; how long a scan takes is not asserted here (a timed assertion flakes on a loaded machine).
  const deepNumbers = `{"x":${'['.repeat(21_000)}${Array(11_000).fill('1').join(',')}${']'.repeat(21_000)},"id":5}`;
  const deepNames = `{"x":${'['.repeat(12_000)}{${Array(6_500).fill('"a":1').join(',')}}${']'.repeat(12_000)},"id":5}`;

  it('reads the number at the path past 21 000 levels of arrays', () => {
    expect(deepNumbers.length).toBeLessThanOrEqual(64 * 1024);
    expect(rawJsonNumberAt(deepNumbers, ['id'])).toBe('5');
  });

  it('judges members named again off the path, 6 500 times over', () => {
    expect(deepNames.length).toBeLessThanOrEqual(64 * 1024);
    expect(rawJsonIssue(deepNames, ['id'])).toBeNull();
    expect(rawJsonIssue(deepNames, ['x'])).toEqual({
      field: expect.stringMatching(/^x\[0\]\[0\]/),
      rule: 'duplicate_key',
    });
  });
});
