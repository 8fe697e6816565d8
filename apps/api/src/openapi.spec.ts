import { ConnectorSettingsInputSchema } from '@verity/connectors';
import { PolicyInputSchema } from './admin/policy.schema';
import {
  APPROVAL_EXAMPLE,
  CANCEL_EXAMPLE,
  CONNECTOR_SETTINGS_EXAMPLE,
  CREATED_EXECUTION_EXAMPLE,
  EVENT_LIST_EXAMPLE,
  OPERATION_DETAIL_EXAMPLE,
  POLICY_EXAMPLE,
  PROBLEMS,
  ProblemCode,
  RESOLVE_EXAMPLE,
  SUBMISSION_EXAMPLE,
  VERIFIED_EXECUTION_EXAMPLE,
  problemBody,
} from './openapi-examples';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PROBLEM_CODES } from './problem/problem';
import { API_SCHEMAS } from './schemas';

describe('the OpenAPI examples', () => {
  it('are requests the API accepts', () => {
    expect(API_SCHEMAS.Submission.safeParse(SUBMISSION_EXAMPLE).error).toBeUndefined();
    expect(API_SCHEMAS.CancelRequest.safeParse(CANCEL_EXAMPLE).error).toBeUndefined();
    expect(API_SCHEMAS.ApprovalRequest.safeParse(APPROVAL_EXAMPLE).error).toBeUndefined();
    expect(API_SCHEMAS.ResolveRequest.safeParse(RESOLVE_EXAMPLE).error).toBeUndefined();
    expect(PolicyInputSchema.safeParse(POLICY_EXAMPLE).error).toBeUndefined();
    expect(ConnectorSettingsInputSchema.safeParse(CONNECTOR_SETTINGS_EXAMPLE).error).toBeUndefined();
  });

  it('are answers the response schemas accept (strict: no field the API does not send)', () => {
    expect(API_SCHEMAS.Execution.safeParse(VERIFIED_EXECUTION_EXAMPLE).error).toBeUndefined();
    expect(API_SCHEMAS.Execution.safeParse(CREATED_EXECUTION_EXAMPLE).error).toBeUndefined();
    expect(API_SCHEMAS.OperationDetail.safeParse(OPERATION_DETAIL_EXAMPLE).error).toBeUndefined();
    expect(API_SCHEMAS.EventList.safeParse(EVENT_LIST_EXAMPLE).error).toBeUndefined();
    expect(VERIFIED_EXECUTION_EXAMPLE.operations[0].status).toBe('VERIFIED');
  });

  it('give every problem a body the Problem schema accepts, with its status and type', () => {
    for (const code of Object.keys(PROBLEMS) as ProblemCode[]) {
      const body = problemBody(code);
      expect(API_SCHEMAS.Problem.safeParse(body).error).toBeUndefined();
      expect(body.type).toBe(`https://verity.dev/problems/${code}`);
      expect(body.status).toBe(PROBLEMS[code].status);
    }
  });
});

describe('the problem codes', () => {
  it('are the codes docs/api.md lists, each with the status the API sends it with', () => {
    const doc = readFileSync(join(__dirname, '../../../docs/api.md'), 'utf8');
    const table = doc.split('<!-- problem-codes -->')[1]?.split('\n\n')[1] ?? '';
    const rows = [...table.matchAll(/^\| `([a-z-]+)` +\| (\d{3}) /gm)].map(([, code, status]) => [
      code,
      Number(status),
    ]);
    expect(rows).toEqual(PROBLEM_CODES.map((code) => [code, PROBLEMS[code].status]));
  });

  it('are the enum of the Problem schema’s type, one URL per code', () => {
    const types = PROBLEM_CODES.map((code) => problemBody(code).type);
    for (const type of types) expect(API_SCHEMAS.Problem.shape.type.safeParse(type).success).toBe(true);
    expect(API_SCHEMAS.Problem.shape.type.options).toEqual(types);
    expect(API_SCHEMAS.Problem.shape.type.safeParse('https://verity.dev/problems/execution-busy').success).toBe(false);
  });
});
