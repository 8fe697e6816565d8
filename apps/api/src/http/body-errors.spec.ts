import { brotliDecompressSync, gunzipSync, inflateSync } from 'node:zlib';
import { bodyParserProblem } from './body-errors';

describe('bodyParserProblem', () => {
  it('maps body-parser refusals to problems with a field and a rule', () => {
    expect(bodyParserProblem({ type: 'entity.parse.failed', status: 400 })).toMatchObject({
      status: 400,
      code: 'validation-error',
      extras: { errors: [{ field: '(body)', rule: 'json' }] },
    });
    expect(bodyParserProblem({ type: 'entity.too.large', status: 413 })).toMatchObject({
      status: 413,
      code: 'payload-too-large',
    });
    expect(bodyParserProblem({ type: 'charset.unsupported', status: 415 })).toMatchObject({ status: 415 });
  });

  it.each([
    ['null', 'the body must be a JSON object, not null'],
    ['"hello"', 'the body must be a JSON object, not a JSON string'],
    [' 5 ', 'the body must be a JSON object, not a JSON number'],
    ['{bad', 'the body is not valid JSON'],
  ])('says why %s is refused: %s', (body, message) => {
    expect(bodyParserProblem({ type: 'entity.parse.failed', status: 400, body })).toMatchObject({
      extras: { errors: [{ field: '(body)', rule: 'json', message }] },
    });
  });

  it('names the rule for bytes that are not UTF-8 and for a body that does not match its Content-Encoding', () => {
    expect(bodyParserProblem({ type: 'entity.utf8.invalid', status: 400 })).toMatchObject({
      status: 400,
      extras: { errors: [{ field: '(body)', rule: 'utf8' }] },
    });
    expect(bodyParserProblem({ status: 400, code: 'Z_DATA_ERROR' })).toMatchObject({
      status: 400,
      extras: { errors: [{ field: '(body)', rule: 'content_encoding' }] },
    });
  });

  it('recognises what zlib throws for a plain body, Brotli included (its codes are not Z_*)', () => {
    for (const decompress of [gunzipSync, inflateSync, brotliDecompressSync]) {
      for (const plain of ['{}', '{"agent_id":"a"}', 'x']) {
        let thrown: unknown;
        try {
          decompress(Buffer.from(plain));
        } catch (error) {
          thrown = error;
        }
        // body-parser passes zlib's error on with status 400 (http-errors keeps code and errno).
        expect(bodyParserProblem(Object.assign(thrown as Error, { status: 400 }))).toMatchObject({
          status: 400,
          extras: { errors: [{ field: '(body)', rule: 'content_encoding' }] },
        });
      }
    }
  });

  it('leaves other errors alone', () => {
    expect(bodyParserProblem(new Error('boom'))).toBeNull();
    expect(bodyParserProblem({ type: 'x', status: 500 })).toBeNull();
  });
});
