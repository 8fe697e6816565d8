import { OperationStatus, VerificationMethod } from '@verity/status-model';
import { z } from 'zod';
import type { SubmissionRequest } from '../types';

/**
 * zod runs a length check on any value that has a length, also one its type check refused: `agent_id: []` was told
 * "expected string" and "expected array to have >=1 items", as if the argument took an array. Each length check of
 * the tools' arguments is judged on a value of its own type only (zod's `when`, which its typings leave out of these
 * checks' parameters). The JSON Schema of the tools is unchanged.
 */
const onString = { when: (payload: { value: unknown }) => typeof payload.value === 'string' } as never;
const onArray = { when: (payload: { value: unknown }) => Array.isArray(payload.value) } as never;

/** A string of min to max characters. */
export function text(min: number, max: number) {
  const lengths = z.string().check(z.maxLength(max, onString));
  return min > 0 ? lengths.check(z.minLength(min, onString)) : lengths;
}

/** An array of min to max items. */
export function list<T extends z.ZodType>(item: T, min: number, max: number) {
  const lengths = z.array(item).check(z.maxLength(max, onArray));
  return min > 0 ? lengths.check(z.minLength(min, onArray)) : lengths;
}

/**
 * The submission (`POST /v1/executions`) as the MCP tools' input schema. The API's own schema (with every limit and
 * text rule) stays the authority and answers any violation with the field and the rule; this one tells the agent the
 * shape, refuses unknown fields instead of dropping them, and is kept to the same fields as the API's by a test
 * (apps/api/src/mcp/mcp-schema.spec.ts). The compile-time check below keeps it to the SDK's `SubmissionRequest`.
 */
const Key = text(1, 64).regex(/^[A-Za-z0-9_.-]+$/, 'letters, digits, "_", "." and "-" only');
/**
 * A JSON object. A `"__proto__"` key is refused here, as the API refuses it: a record schema would drop it without a
 * word (it cannot be assigned as an own key), and the body sent would then differ from the one the agent wrote.
 */
const JsonObject = z.preprocess(
  (value, ctx) => {
    if (value !== null && typeof value === 'object' && !Array.isArray(value) && Object.hasOwn(value, '__proto__')) {
      ctx.addIssue({
        code: 'custom',
        path: ['__proto__'],
        message: 'unknown field "__proto__": names of Object.prototype are never accepted as keys',
      });
    }
    return value;
  },
  z.record(z.string(), z.unknown()),
);

/**
 * A whole number from min to max. The range is checked first and ends the checks when it fails: zod's int() refuses a
 * number beyond 2^53 with an issue of its own, so 1e300 was told two bounds, the first one (2^53) not the argument's.
 */
export function wholeNumber(min: number, max: number) {
  return z.number().min(min, { abort: true }).max(max, { abort: true }).int();
}

export const OperationInput = z.strictObject({
  key: Key.describe('unique within the submission; other operations name it in depends_on'),
  connector: text(1, 100).describe('a connector name from list_connectors'),
  action: text(1, 100).describe('an action of that connector'),
  params: JsonObject.describe('the action’s params, per its params_schema in list_connectors'),
  irreversible: z.boolean().optional().describe('defaults to the connector’s declaration'),
  requires_approval: z.boolean().optional().describe('hold it for a human reviewer’s approval before sending'),
  verification_method: z
    .enum([VerificationMethod.READ_AFTER_WRITE, ''])
    .optional()
    .describe('read_after_write when the connector can read back (the default), else ""'),
  expected_state: JsonObject.nullable()
    .optional()
    .describe('what you believe the target holds now; a mismatch is a KNOWLEDGE_CONFLICT'),
  depends_on: list(Key, 0, 100).optional().describe('keys of operations that must settle first'),
});

const CriterionInput = z.union([
  z.strictObject({
    key: Key,
    operation: Key.describe('the key of an operation of this submission'),
    expect_status: z.enum(Object.values(OperationStatus) as [OperationStatus, ...OperationStatus[]]),
  }),
  z.strictObject({
    key: Key,
    operation: Key.describe('the key of an operation of this submission'),
    expect_evidence: z.strictObject({
      path: text(0, 500).describe('a JSON path into the verified evidence, e.g. record.amount'),
      equals: z.unknown().describe('the JSON value it must hold'),
    }),
  }),
]);

export const SubmissionInput = z.strictObject({
  agent_id: text(1, 200).describe('who is acting (your agent’s name)'),
  intent: text(1, 4000).describe('what the operations are for, in words'),
  deadline_seconds: wholeNumber(1, 604_800).optional().describe('600 by default'),
  operations: list(OperationInput, 1, 100),
  criteria: list(CriterionInput, 0, 100).optional(),
});

/** The submit_execution tool's input: the submission, plus the Idempotency-Key (generated when omitted). */
export const SubmitExecutionInput = SubmissionInput.extend({
  idempotency_key: text(1, 255)
    .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces')
    .optional()
    .describe(
      'Pass your own to make this call safe to repeat: the same key and body return the same execution instead of a ' +
        'second one. When omitted one is generated and returned; reuse it if you must repeat the call.',
    ),
});

// The MCP input and the SDK's request type must describe the same body: a field added to one and not the other
// fails the build here.
type SameKeys<A, B> = [Exclude<keyof A, keyof B>, Exclude<keyof B, keyof A>] extends [never, never] ? true : false;
const submissionMatches: SameKeys<z.infer<typeof SubmissionInput>, SubmissionRequest> = true;
const operationMatches: SameKeys<z.infer<typeof OperationInput>, SubmissionRequest['operations'][number]> = true;
void submissionMatches;
void operationMatches;

export function toSubmissionRequest(input: z.infer<typeof SubmissionInput>): SubmissionRequest {
  return input as SubmissionRequest;
}
