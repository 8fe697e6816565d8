import { OperationStatus } from '@verity/status-model';
import type { Connector, ConnectorEnvironment, ConnectorOperation } from './connector';
import { errorCause, readBackThrew } from './connector';
import { ConnectorRegistry } from './registry';
import { ANSWER_REDACTION_PASSES, answerRedactor, redactingSecrets, secretRedactor } from './secret-redaction';

describe('answerRedactor', () => {
  const answer = {
    id: 'exe_1',
    status: 'MANUAL_REVIEW',
    params: { amount: 12345678, currency: 'EUR', reference: 'order-12345678', flag: true, none: null },
    list: ['{"a":1}', 'true', 'null'],
    at: new Date('2026-01-01T00:00:00Z'),
  };

  it("rewrites string values only: member names, numbers, booleans and null are the answer's shape", () => {
    const redact = answerRedactor({ digits: '12345678', member: 'currency', word: 'MANUAL_REVIEW' });
    const redacted = redact(answer);
    expect(redacted).toEqual({
      ...answer,
      status: '{{secret:word}}',
      params: { ...answer.params, reference: 'order-{{secret:digits}}' },
    });
    // The same members, each of the same type, the answer's own object untouched.
    expect(Object.keys(redacted.params)).toEqual(Object.keys(answer.params));
    expect(redacted.at).toBe(answer.at);
    expect(answer.params.reference).toBe('order-12345678');
  });

  it('keeps the answer valid JSON of the same shape whatever the secret: JSON words, punctuation, quotes', () => {
    const values = ['true', 'null', '{', ':', '","', '"a":1}', '\\', '}]'];
    const redact = answerRedactor(Object.fromEntries(values.map((value, i) => [`s${i}`, value])));
    const text = JSON.stringify(redact(answer));
    const parsed = JSON.parse(text) as typeof answer & { at: string };
    const shape = (value: unknown): unknown =>
      Array.isArray(value)
        ? value.map(shape)
        : value !== null && typeof value === 'object'
          ? Object.fromEntries(Object.entries(value).map(([k, v]) => [k, shape(v)]))
          : typeof value;
    expect(shape(parsed)).toEqual(shape(JSON.parse(JSON.stringify(answer))));
    expect(parsed.list[1]).toBe('{{secret:s0}}');
    expect(parsed.params.flag).toBe(true);
  });

  it('walks an instance of a class as JSON writes it (its own members), and gives the value itself when nothing is secret', () => {
    class View {
      constructor(readonly url: string) {}
    }
    expect(answerRedactor({ tok: 'value-x-123' })(new View('https://h/value-x-123'))).toEqual({
      url: 'https://h/{{secret:tok}}',
    });
    expect(answerRedactor({})(answer)).toBe(answer);
    expect(answerRedactor(undefined)(answer)).toBe(answer);
  });
});

describe('answerRedactor and a legacy secret shorter than the minimum', () => {
  // Stored before values were refused under SECRET_VALUE_MIN_LENGTH characters: "1", "OK", "EUR".
  const redact = answerRedactor({ one: '1', short: 'EUR', token: 'tok-12345678' });

  it('replaces only a string that is the value as a whole: ids, times, statuses and other text keep their characters', () => {
    const answer = {
      id: 'exe_01J9Z1A1B1C1',
      status: 'VERIFIED',
      at: '2026-11-01T10:11:21.100Z',
      params: { currency: 'EUR', amount: 1, note: 'EUR 1 order-1', count: '1', ref: 'tok-12345678' },
      events: [{ type: 'operation.sent', seq: '11', reason: 'EURO' }],
    };
    expect(redact(answer)).toEqual({
      ...answer,
      params: {
        currency: '{{secret:short}}',
        amount: 1,
        note: 'EUR 1 order-1',
        count: '{{secret:one}}',
        ref: '{{secret:token}}',
      },
    });
  });

  it('finds the short value as a whole in any spelling, and a secret of the minimum length anywhere as before', () => {
    expect(answerRedactor({ pin: 'a b' })(['a b', 'a%20b', 'a+b', 'xa b'])).toEqual([
      '{{secret:pin}}',
      '{{secret:pin}}',
      '{{secret:pin}}',
      'xa b',
    ]);
    expect(answerRedactor({ eight: '12345678' })('order-12345678')).toBe('order-{{secret:eight}}');
  });
});

describe('redaction of a value found at very many places', () => {
  it('answers a string of 200,000 places of a value beside a "+" (searched percent-decoded too), instead of throwing', () => {
    // Every place found was spread as arguments of one call: past the stack's bound, a RangeError instead of an answer.
    const text = `${'a'.repeat(200_000)}+`;
    expect(answerRedactor({ l: 'aaaaaaaa' })(text)).toBe('{{secret:l}}+');
    expect(secretRedactor({ l: 'aaaaaaaa' })(text)).toBe('{{secret:l}}+');
  });

  it('replaces a value repeated over its own period whole, and a longer value that ends past the repetition with it', () => {
    const redact = answerRedactor({ run: 'abababab', longer: 'ababababababc', other: 'bab-tail-1' });
    // The repetition, then a longer value that starts inside it and ends after it: one placeholder, nothing left.
    expect(redact(`x ${'ab'.repeat(50)}abc y`)).toBe('x {{secret:run}} y');
    expect(redact(`x ${'ab'.repeat(50)}-tail-1 y`)).toBe('x {{secret:run}} y');
    // Percent-encoded, the same.
    expect(redact(`x ${'%61b'.repeat(50)} y`)).toBe('x {{secret:run}} y');
    // Repeated up to a placeholder on file, and inside its name: the placeholder is kept whole.
    const named = answerRedactor({ a8: 'aaaaaaaa', aaaaaaaaaaaa: 'tok-12345678' });
    expect(named(`${'a'.repeat(20)}{{secret:aaaaaaaaaaaa}}`)).toBe('{{secret:a8}}{{secret:aaaaaaaaaaaa}}');
    expect(named('{{secret:aaaaaaaaaaaa}} aaaaaaaaa')).toBe('{{secret:aaaaaaaaaaaa}} {{secret:a8}}');
  });
});

describe('answerRedactor and a legacy secret whose sent spelling is shorter than the minimum', () => {
  it('replaces a spelling under 8 characters (a value of 8 with leading spaces, sent without them) only as a whole string', () => {
    // Stored before leading spaces were refused: a header sends "abcde", which is what an echo answers.
    const redact = answerRedactor({ key: '   abcde', token: 'tok-12345678' });
    expect(
      redact({
        id: 'exe_abcdef01',
        note: 'abcde is a word',
        echo: 'abcde',
        stored: '   abcde',
        inside: 'x   abcde',
        url: 'a%62cde',
        ref: 'ref tok-12345678',
      }),
    ).toEqual({
      id: 'exe_abcdef01',
      note: 'abcde is a word',
      echo: '{{secret:key}}',
      stored: '{{secret:key}}',
      inside: 'x{{secret:key}}',
      url: 'a%62cde',
      ref: 'ref {{secret:token}}',
    });
  });
});

describe('answerRedactor with hostile values', () => {
  it('leaves a placeholder on file whole: a value that is part of its text (`{{secret:`) is not found inside it', () => {
    // A provider answer stored redacted by the connector door holds `{{secret:crm}}`; a secret is `{{secret:` itself.
    const redact = answerRedactor({ crm: 'crm-token-123', brace: '{{secret:', name: 'secret:crm' });
    expect(redact('ref {{secret:crm}} / crm-token-123')).toBe('ref {{secret:crm}} / {{secret:crm}}');
    // Where the value stands in plain text (not inside a placeholder naming a secret), it is replaced.
    expect(redact('x {{secret: y')).toBe('x {{secret:brace}} y');
    expect(redact('{{secret:nothing}}')).toBe('{{secret:brace}}nothing}}');
    expect(redact('secret:crm!')).toBe('{{secret:name}}!');
  });

  it('replaces a placeholder a value runs into whole with it, never leaving a tail of either', () => {
    const redact = answerRedactor({ crm: 'crm-token-123', edge: 'xx{{secret:', tail: 'crm}}-and-more' });
    expect(redact('id xx{{secret:crm}} end')).toBe('id {{secret:edge}} end');
    expect(redact('id {{secret:crm}}-and-more end')).toBe('id {{secret:tail}} end');
  });

  it('never answers a value made of a placeholder it writes next to the text around it', () => {
    // `wrap`'s value is what the text becomes once `inner` is replaced: it is replaced in turn, whole.
    const redact = answerRedactor({ inner: 'inner-secret-1', wrap: 'pre:{{secret:inner}}:post' });
    const out = redact('pre:inner-secret-1:post');
    expect(out).toBe('{{secret:wrap}}');
    const twice = answerRedactor({ a: 'a-secret-value', b: 'x{{secret:a}}', c: 'y{{secret:b}}' });
    expect(twice('yxa-secret-value')).toBe('{{secret:c}}');
    for (const text of ['pre:{{secret:inner}}:post', 'pre:inner-secret-1:post and inner-secret-1']) {
      expect(redact(text)).not.toContain('pre:{{secret:inner}}:post');
    }
  });

  it('replaces a value that holds another whole, and is the same whatever order the secrets come in', () => {
    const values = { outer: 'outer-12345678-x', inner: '12345678', brace: '}}{{secret:' };
    const one = answerRedactor(values);
    const other = answerRedactor(Object.fromEntries(Object.entries(values).reverse()));
    const text = 'outer-12345678-x 12345678 {{secret:inner}}{{secret:outer}} a}}{{secret:b';
    expect(one(text)).toBe(other(text));
    expect(one(text)).toBe('{{secret:outer}} {{secret:inner}} {{secret:brace}} a{{secret:brace}}b');
  });
});

describe('answerRedactor and the cost of its passes', () => {
  it('looks a string through at most ANSWER_REDACTION_PASSES times: a value still found then takes the whole string', () => {
    // A chain of values each holding the placeholder of the one before, deeper than the passes: each pass resolves one
    // link. Before, the string was searched again up to once per character, so a value that holds its own placeholder
    // behind one character (`A{{secret:self}}`) made a 256 KiB string 256 Ki passes over it (seconds of CPU).
    const depth = ANSWER_REDACTION_PASSES + 3;
    const secrets: Record<string, string> = { l0: 'a-secret-value' };
    for (let i = 1; i <= depth; i += 1) secrets[`l${i}`] = `x{{secret:l${i - 1}}}`;
    const redact = answerRedactor(secrets);
    const text = `${'x'.repeat(depth)}a-secret-value`;
    // After ANSWER_REDACTION_PASSES passes (l0 … l3 replaced) l4 is still found: the whole string is its placeholder.
    expect(redact(text)).toBe(`{{secret:l${ANSWER_REDACTION_PASSES}}}`);
    expect(redact(`id ${text} end`)).toBe(`{{secret:l${ANSWER_REDACTION_PASSES}}}`);
    // A chain within the passes is resolved link by link, as before.
    expect(redact(`id ${'x'.repeat(ANSWER_REDACTION_PASSES - 1)}a-secret-value end`)).toBe(
      `id {{secret:l${ANSWER_REDACTION_PASSES - 1}}} end`,
    );
    const self = answerRedactor({ self: 'A{{secret:self}}' });
    expect(self(`${'A'.repeat(256 * 1024)}{{secret:self}}`)).toBe('{{secret:self}}');
    expect(self(`id ${'A'.repeat(2)}{{secret:self}} end`)).toBe('id {{secret:self}} end');
  });
});

describe('secretRedactor', () => {
  const redact = secretRedactor({ token: 's3cr3t-Token', long: 's3cr3t-Token-and-more', odd: 'a b/c"d' });

  it('replaces a secret inside strings, deeply, in values and keys', () => {
    expect(
      redact({
        record: { echo: 'Bearer s3cr3t-Token', 'x-s3cr3t-Token': ['s3cr3t-Token', 1, null, true] },
        source: 'http://h/orders/Bearer%20s3cr3t-Token?x=1',
      }),
    ).toEqual({
      record: { echo: 'Bearer {{secret:token}}', 'x-{{secret:token}}': ['{{secret:token}}', 1, null, true] },
      source: 'http://h/orders/Bearer%20{{secret:token}}?x=1',
    });
  });

  it('leaves no part of a secret that overlaps another where both stand: the overlapping text is replaced whole', () => {
    // Two values where one's end is the other's start: the text holds both, the first found hid only part of the second.
    for (const make of [secretRedactor, answerRedactor]) {
      const overlapping = make({ first: 'abcd-1234', second: '1234-wxyz' });
      expect(overlapping('id abcd-1234-wxyz.')).toBe('id {{secret:first}}.');
      expect(overlapping('id 1234-wxyz and abcd-1234-wxyz')).toBe('id {{secret:second}} and {{secret:first}}');
      // Percent-encoded as well (decoded and searched): the same whole replacement.
      expect(overlapping('q=abcd%2D1234%2Dwxyz')).toBe('q={{secret:first}}');
    }
  });

  it('replaces the longest secret first, so one that contains another is replaced whole', () => {
    expect(redact('s3cr3t-Token-and-more / s3cr3t-Token')).toBe('{{secret:long}} / {{secret:token}}');
  });

  it('finds a secret percent-encoded in a URL and escaped in JSON text', () => {
    expect(redact(`http://h/r/${encodeURIComponent('a b/c"d')}`)).toBe('http://h/r/{{secret:odd}}');
    expect(redact(JSON.stringify({ v: 'a b/c"d' }))).toBe('{"v":"{{secret:odd}}"}');
  });

  it('finds a secret percent-encoded as any encoder writes it: lowercase hex, more characters escaped, a space as +', () => {
    // .NET's UrlEncode writes lowercase hex; PHP's rawurlencode escapes what encodeURIComponent keeps; forms write +.
    const lowercase = encodeURIComponent('a b/c"d').replace(/%[0-9A-F]{2}/g, (hex) => hex.toLowerCase());
    expect(lowercase).toBe('a%20b%2fc%22d');
    expect(redact(`http://h/r/${lowercase}?next=1`)).toBe('http://h/r/{{secret:odd}}?next=1');
    expect(redact('q=a+b%2Fc%22d')).toBe('q={{secret:odd}}');
    // Python's quote() leaves "/" as it is.
    expect(redact('/r/a%20b/c%22d')).toBe('/r/{{secret:odd}}');
    expect(redact('every byte %61%20%62%2F%63%22%64.')).toBe('every byte {{secret:odd}}.');
    expect(redact('s%33cr%33t%2dToken-and-more')).toBe('{{secret:long}}');
    // Still text that merely resembles it is left alone.
    expect(redact('a%20b%2fc%22e a b/c d')).toBe('a%20b%2fc%22e a b/c d');
  });

  it('never matches its own placeholder again (a secret that is a word of the placeholder)', () => {
    expect(secretRedactor({ secret: 'secret' })('my secret')).toBe('my {{secret:secret}}');
  });

  it('replaces a number whose digits are a secret', () => {
    expect(secretRedactor({ pin: '4711' })({ ref: 94711, other: 12 })).toEqual({ ref: '9{{secret:pin}}', other: 12 });
  });

  it('finds a secret stored with surrounding spaces as a target saw it: a header value loses them on the way', () => {
    const spaced = secretRedactor({ key: ' tok-Spaced-value ' });
    // What an echoing target answers for `x-api-key: {{secret:key}}`, and for `authorization: Bearer {{secret:key}}`.
    expect(spaced({ headers: { 'x-api-key': 'tok-Spaced-value' } })).toEqual({
      headers: { 'x-api-key': '{{secret:key}}' },
    });
    expect(spaced('Bearer  tok-Spaced-value')).toBe('Bearer  {{secret:key}}');
  });

  it('finds a secret stored with Latin-1 characters as a target that reads headers as UTF-8 echoes it', () => {
    // Stored before secrets were limited to ASCII: the header carries 0xE4 for "ä", which is no UTF-8.
    const latin = secretRedactor({ key: 'tok-pässwort-9' });
    expect(latin({ headers: { 'x-api-key': 'tok-p\ufffdsswort-9' } })).toEqual({
      headers: { 'x-api-key': '{{secret:key}}' },
    });
    // As a JSON body that escapes non-ASCII (Python's json.dumps), read back as text.
    expect(latin('{"x-api-key": "tok-p\\ufffdsswort-9"}')).toBe('{"x-api-key": "{{secret:key}}"}');
    // Bytes that happen to be UTF-8: "Ã©" goes out as C3 A9 and comes back as "é".
    expect(secretRedactor({ key: 'tok-Ã©-9' })('echo tok-é-9')).toBe('echo {{secret:key}}');
  });

  it('returns the value untouched when the tenant has no secrets', () => {
    const value = { a: 'b' };
    expect(secretRedactor(undefined)(value)).toBe(value);
    expect(secretRedactor({})(value)).toBe(value);
  });
});

describe('redactingSecrets', () => {
  const op: ConnectorOperation = {
    id: 'op-1',
    tenantId: 't',
    action: 'echo',
    params: {},
    expectedState: null,
    providerRef: null,
  };
  const env: ConnectorEnvironment = {
    sandboxUrl: 'http://x',
    timeoutMs: 1000,
    tenant: { secrets: { key: 'hunter22' } },
  };
  const echoing: Connector = {
    name: 'echo',
    description: 'echoes',
    capabilities: { read_back: true, context_read: true, provider_idempotency: false, reversible: false },
    actions: {},
    send: (_op, e) =>
      Promise.resolve({
        status: OperationStatus.ACKNOWLEDGED,
        providerRef: { ref: `Bearer ${e.tenant?.secrets?.key}` },
        detail: 'ok',
      }),
    readBack: (_op, e) =>
      Promise.resolve({
        kind: 'found',
        evidence: {
          source: `http://t/${e.tenant?.secrets?.key}`,
          read_at: 'now',
          record: { h: e.tenant?.secrets?.key },
        },
      }),
  };

  it('redacts what send and readBack return, and keeps absent methods absent', async () => {
    const wrapped = redactingSecrets(echoing);
    expect(await wrapped.send(op, env)).toMatchObject({ providerRef: { ref: 'Bearer {{secret:key}}' } });
    expect(await wrapped.readBack!(op, env)).toEqual({
      kind: 'found',
      evidence: { source: 'http://t/{{secret:key}}', read_at: 'now', record: { h: '{{secret:key}}' } },
    });
    expect(wrapped.readContext).toBeUndefined();
    expect(wrapped.observe).toBeUndefined();
  });

  it('makes what it returns storable: text Postgres cannot store in jsonb is replaced by U+FFFD', async () => {
    const answering = redactingSecrets({
      ...echoing,
      send: () =>
        Promise.resolve({
          status: OperationStatus.ACKNOWLEDGED,
          providerRef: { status: 201, ref: `ref\u0000${'r'.repeat(3)}\ud83d` },
          detail: 'provider answered 201',
        }),
    });
    expect(await answering.send(op, env)).toMatchObject({ providerRef: { ref: 'ref\ufffdrrr\ufffd' } });
  });

  it('redacts what a connector throws', async () => {
    const throwing = redactingSecrets({
      ...echoing,
      send: (_op, e) => Promise.reject(new Error(`refused token ${e.tenant?.secrets?.key}`)),
    });
    const error = (await throwing.send(op, env).catch((e: unknown) => e)) as Error;
    expect(error.message).toBe('refused token {{secret:key}}');
    expect(error.stack).not.toContain('hunter22');
  });

  it('a read-back that throws is recorded with its cause (class and code), never its message', async () => {
    // As Node refuses a header value it cannot carry: a TypeError with a code, the value in its message.
    const refusing = redactingSecrets({
      ...echoing,
      readBack: (_op, e) =>
        Promise.reject(
          Object.assign(
            new TypeError(`Invalid character in header content ["x-ref"]: ${e.tenant?.secrets?.key}\u0001`),
            {
              code: 'ERR_INVALID_CHAR',
            },
          ),
        ),
    });
    const thrown = await refusing.readBack!(op, env).catch((e: unknown) => e);
    expect(errorCause(thrown)).toBe('TypeError ERR_INVALID_CHAR');
    const read = readBackThrew('echo', thrown);
    expect(read).toEqual({
      kind: 'unreachable',
      evidence: { source: 'echo', read_at: expect.any(String), error: 'read-back error: TypeError ERR_INVALID_CHAR' },
    });
    expect(JSON.stringify(read)).not.toContain('hunter22');
    expect(JSON.stringify(read)).not.toContain('x-ref');
    // A code or a name that is a secret is redacted by the door, and then no code or name errorCause repeats.
    const leaking = redactingSecrets({
      ...echoing,
      readBack: (_op, e) =>
        Promise.reject(Object.assign(new Error('x'), { code: e.tenant?.secrets?.key, name: e.tenant?.secrets?.key })),
    });
    expect(errorCause(await leaking.readBack!(op, env).catch((e: unknown) => e))).toBe('Error');
    class SecretUnreadableError extends Error {
      override readonly name = 'SecretUnreadableError';
    }
    expect(errorCause(new SecretUnreadableError('a connector secret does not open with this SECRETS_KEY'))).toBe(
      'SecretUnreadableError',
    );
    expect(errorCause(Object.assign(new Error('terminating connection'), { code: '57P01' }))).toBe('Error 57P01');
    expect(errorCause('hunter22')).toBe('a thrown string');
    expect(errorCause(null)).toBe('a thrown null');
  });

  it('is what the registry hands out', async () => {
    const registry = new ConnectorRegistry([echoing]);
    expect(await registry.require('echo').send(op, env)).toMatchObject({
      providerRef: { ref: 'Bearer {{secret:key}}' },
    });
    expect(registry.get('echo')?.capabilities).toBe(echoing.capabilities);
  });
});
