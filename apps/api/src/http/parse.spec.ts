import type { Request } from 'express';
import { Problem } from '../problem/problem';
import { z } from 'zod';
import { pageLimit, parseQuery, refuseBody } from './parse';

const request = (headers: Record<string, string>) => ({ headers }) as unknown as Request;

describe('refuseBody', () => {
  it('lets a request with no body, or an empty JSON object, through', () => {
    expect(() => refuseBody(request({}), undefined, 'retry')).not.toThrow();
    expect(() => refuseBody(request({ 'content-length': '2' }), {}, 'retry')).not.toThrow();
  });

  it('refuses any other body as a validation error that names the endpoint', () => {
    let thrown: unknown;
    try {
      refuseBody(request({ 'content-length': '13' }), { reason: 'x' }, 'recheck');
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(Problem);
    expect(thrown).toMatchObject({
      status: 400,
      code: 'validation-error',
      extras: { errors: [{ field: '(body)', rule: 'no_body', message: 'recheck takes no body' }] },
    });
  });

  it('refuses a body the JSON parser left unread (text/plain, a form, no Content-Type) as any other body', () => {
    const unread: Record<string, string>[] = [
      { 'content-length': '12', 'content-type': 'text/plain' },
      { 'content-length': '12', 'content-type': 'application/x-www-form-urlencoded' },
      { 'content-length': '12' },
      { 'transfer-encoding': 'chunked' },
    ];
    for (const headers of unread) {
      expect(() => refuseBody(request(headers), undefined, 'retry')).toThrow(Problem);
    }
  });
});

describe('parseQuery: a parameter given more than once', () => {
  const schema = z.strictObject({ status: z.enum(['completed', 'failed']).optional(), limit: pageLimit(200, 50) });

  it('is refused as given twice, naming it — not as a value outside its options', () => {
    const refusal = (query: unknown) => {
      try {
        parseQuery(schema, query);
      } catch (error) {
        const problem = error as Problem;
        return { status: problem.status, ...problem.extras };
      }
      throw new Error('accepted');
    };
    expect(refusal({ status: ['completed', 'failed'] })).toMatchObject({
      status: 400,
      errors: [{ field: 'status', rule: 'single_value', message: 'given more than once: give it once' }],
    });
    expect(refusal({ limit: ['1', '2'], status: 'completed' })).toMatchObject({
      errors: [{ field: 'limit', rule: 'single_value' }],
    });
    // A name the endpoint does not take stays an unknown field, given once or twice.
    expect(refusal({ foo: ['a', 'b'] })).toMatchObject({ errors: [{ field: 'foo', rule: 'unknown_field' }] });
    expect(parseQuery(schema, { status: 'failed' })).toEqual({ status: 'failed', limit: 50 });
  });
});
