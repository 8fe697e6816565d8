import { OperationStatus } from '@verity/status-model';
import type { components } from './generated/wire';
import type {
  Execution,
  ExecutionEvent,
  KnownProblemCode,
  Narrow,
  Operation,
  ProblemDetails,
  SubmissionRequest,
  WireSchemas,
} from './types';

/** True only when A and B are the same type. */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function holds<T extends true>(_proof?: T): void {}

describe('the SDK’s wire types', () => {
  it('are the generated ones, narrowed only to the status model’s own types', () => {
    holds<Equal<Operation['status'], OperationStatus>>();
    holds<Equal<Execution['operations'], Operation[]>>();
    holds<Equal<Operation['created_at'], WireSchemas['Operation']['created_at']>>();
    holds<Equal<keyof Operation, keyof components['schemas']['Operation']>>();
    holds<Equal<keyof Execution, keyof components['schemas']['Execution']>>();
    holds<Equal<keyof ExecutionEvent, keyof components['schemas']['Event']>>();
    // Every response the API sends is one of these types.
    holds<WireSchemas['Problem'] extends ProblemDetails ? true : false>();
    holds<WireSchemas['Operation'] extends { status: `${OperationStatus}` } ? true : false>();
  });

  it('refuse a narrowing that does not fit the generated field', () => {
    // @ts-expect-error: 'z' is no value of the generated field
    type Wrong = Narrow<{ a: 'x' | 'y' }, { a: 'z' }>;
    holds<Equal<Narrow<{ a: 'x' | 'y'; b: number }, { a: 'x' }>['a'], 'x'>>();
    expect(true as unknown as Wrong).toBe(true);
  });

  it('know the problem codes the API sends, and only those', () => {
    holds<'bad-request' extends KnownProblemCode ? true : false>();
    holds<'validation-error' extends KnownProblemCode ? true : false>();
    holds<'execution-busy' extends KnownProblemCode ? false : true>();
  });

  it('accept a submission written with literals or with the status model’s enums', () => {
    const submission: SubmissionRequest = {
      agent_id: 'a',
      intent: 'i',
      operations: [{ key: 'k', connector: 'sandbox', action: 'charge', params: {} }],
      criteria: [
        { key: 'c1', operation: 'k', expect_status: 'VERIFIED' },
        { key: 'c2', operation: 'k', expect_status: OperationStatus.VERIFIED },
      ],
    };
    expect(submission.criteria).toHaveLength(2);
  });
});
