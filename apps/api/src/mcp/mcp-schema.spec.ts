import { SubmissionInput, SubmitExecutionInput } from '@verity/sdk/mcp';
import { z } from 'zod';
import { LIMITS, SubmissionSchema } from '../executions/submission';

/**
 * The submit_execution tool's input lives in the SDK (the stdio entry point ships without the API), so it is held
 * to the API's own SubmissionSchema here: the same fields, the same required ones, the same limits an agent can see.
 */
type Schema = { properties?: Record<string, Schema>; required?: string[]; items?: Schema; maxItems?: number };
const json = (schema: z.ZodType) => z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Schema;

describe('the MCP submission schema', () => {
  const api = json(SubmissionSchema);
  const mcp = json(SubmissionInput);

  it('has the API submission’s fields and required fields', () => {
    expect(Object.keys(mcp.properties ?? {}).sort()).toEqual(Object.keys(api.properties ?? {}).sort());
    expect([...(mcp.required ?? [])].sort()).toEqual([...(api.required ?? [])].sort());
  });

  it('has the API operation’s fields and required fields', () => {
    const apiOp = api.properties!.operations.items!;
    const mcpOp = mcp.properties!.operations.items!;
    expect(Object.keys(mcpOp.properties ?? {}).sort()).toEqual(Object.keys(apiOp.properties ?? {}).sort());
    expect([...(mcpOp.required ?? [])].sort()).toEqual([...(apiOp.required ?? [])].sort());
  });

  it('states the API’s limits on operations and criteria', () => {
    expect(mcp.properties!.operations.maxItems).toBe(LIMITS.operations);
    expect(mcp.properties!.criteria.maxItems).toBe(LIMITS.criteria);
  });

  it('refuses unknown fields instead of dropping them, and adds only the idempotency key', () => {
    const body = {
      agent_id: 'a',
      intent: 'i',
      operations: [{ key: 'k', connector: 'c', action: 'x', params: {} }],
    };
    expect(SubmitExecutionInput.safeParse({ ...body, idempotency_key: 'key-1' }).success).toBe(true);
    expect(SubmitExecutionInput.safeParse({ ...body, tenant_id: 't' }).success).toBe(false);
    expect(
      SubmitExecutionInput.safeParse({ ...body, operations: [{ ...body.operations[0], status: 'VERIFIED' }] }).success,
    ).toBe(false);
  });
});
