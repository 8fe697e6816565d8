import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ExecutionsApi, OperationsApi, Verity } from './client';
import { ReviewApi } from './review';

/** The README's API table is where a user learns what the client can call: a method missing there is one never used. */
describe('the SDK README', () => {
  const readme = readFileSync(join(__dirname, '..', 'README.md'), 'utf8');
  const table = readme.split('## API')[1]?.split('\n\n')[1] ?? '';
  /** The methods a caller can reach (TypeScript's `private` ones are on the prototype too: named here). */
  const PRIVATE = ['waitUntil', 'catchUp', 'getJson', 'act', 'decide', 'get@review'];
  const methods = (prototype: object, owner: string) =>
    Object.getOwnPropertyNames(prototype).filter(
      (name) =>
        name !== 'constructor' &&
        typeof Object.getOwnPropertyDescriptor(prototype, name)?.value === 'function' &&
        !PRIVATE.includes(name) &&
        !PRIVATE.includes(`${name}@${owner.split('.')[1]}`),
    );

  it.each([
    ['dx.executions', ExecutionsApi.prototype],
    ['dx.operations', OperationsApi.prototype],
    ['dx.review', ReviewApi.prototype],
    ['dx', Verity.prototype],
  ] as const)('names every public method of %s in its API table', (owner, prototype) => {
    // `dx.executions.stream` may be named by its shorthand `dx.stream`; `dx.review.summary()` / `approvals(query)`: the
    // later methods of one row are written without their owner.
    const named = (method: string) =>
      [`${owner}.${method}(`, `dx.${method}(`, `/ \`${method}(`].some((spelling) => table.includes(spelling));
    expect(methods(prototype, owner).filter((method) => !named(method))).toEqual([]);
  });
});
