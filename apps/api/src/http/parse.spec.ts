import type { Request } from 'express';
import { Problem } from '../problem/problem';
import { refuseBody } from './parse';

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
});
