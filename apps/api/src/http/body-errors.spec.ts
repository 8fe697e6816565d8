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

  it('leaves other errors alone', () => {
    expect(bodyParserProblem(new Error('boom'))).toBeNull();
    expect(bodyParserProblem({ type: 'x', status: 500 })).toBeNull();
  });
});
