import {
  type Connector,
  ConnectorRegistry,
  capAmount,
  connectorAction,
  effectReference,
  resendReference,
  operationCapabilities,
} from '@verity/connectors';
import {
  Criterion,
  FIELD_PATH,
  FIELD_PATH_RULE,
  OperationStatus,
  VerificationMethod,
  describeFoundCurrency,
} from '@verity/status-model';
import { z } from 'zod';
import { PROTOTYPE_KEYS, memberPath, refuseHiddenCharacters, text, textIssue, visibleText } from '../http/text';
import type { UnsettledReference } from '@verity/persistence';
import { type FieldError, Problem } from '../problem/problem';

export const LIMITS = {
  operations: 100,
  criteria: 100,
  dependsOn: 100,
  keyLength: 64,
  agentId: 200,
  intent: 4000,
  deadlineSeconds: { min: 1, max: 7 * 24 * 3600 },
  expectedStateKeys: 50,
  /** Caps on free-form JSON (params, expected_state); connector schemas add their own, tighter rules. */
  json: { depth: 16, string: 10_000, array: 1_000, keys: 200, keyLength: 200 },
};

const Key = z
  .string()
  .min(1)
  .max(LIMITS.keyLength)
  .regex(/^[A-Za-z0-9_.-]+$/, 'letters, digits, "_", "." and "-" only');

/** A JSON object whose nesting, strings, arrays and key counts are capped, so no single field can be a payload. */
const JsonObject = z.record(z.string(), z.unknown()).superRefine((value, ctx) => {
  for (const issue of jsonShapeIssues(value)) ctx.addIssue({ code: 'custom', ...issue });
});

export function jsonShapeIssues(
  value: unknown,
  path: (string | number)[] = [],
  depth = 1,
): { path: (string | number)[]; message: string; params: { rule: string } }[] {
  const { json } = LIMITS;
  const issue = (rule: string, message: string) => [{ path, message, params: { rule } }];
  if (typeof value === 'string') {
    if (value.length > json.string) return issue('max_length', `strings are at most ${json.string} characters`);
    const bad = textIssue(value);
    return bad ? issue(bad.rule, bad.message) : [];
  }
  if (typeof value === 'number' && !Number.isFinite(value)) return issue('finite_number', 'numbers must be finite');
  if (value === null || typeof value !== 'object') return [];
  if (depth > json.depth) return issue('max_depth', `JSON nests at most ${json.depth} levels`);
  if (Array.isArray(value)) {
    if (value.length > json.array) return issue('max_items', `arrays hold at most ${json.array} items`);
    return value.flatMap((item, i) => jsonShapeIssues(item, [...path, i], depth + 1));
  }
  const entries = Object.entries(value);
  if (entries.length > json.keys) return issue('max_keys', `objects hold at most ${json.keys} keys`);
  return entries.flatMap(([key, item]) =>
    PROTOTYPE_KEYS.has(key)
      ? [{ path: [...path, key], message: `unknown field "${key}"`, params: { rule: 'unknown_field' } }]
      : key.length > json.keyLength
        ? [
            {
              path: [...path, key],
              message: `keys are at most ${json.keyLength} characters`,
              params: { rule: 'max_key_length' },
            },
          ]
        : jsonShapeIssues(item, [...path, key], depth + 1),
  );
}

export const OperationRequestSchema = z.strictObject({
  key: Key,
  connector: text().min(1).max(100),
  action: text().min(1).max(100),
  params: JsonObject,
  irreversible: z.boolean().optional(),
  requires_approval: z.boolean().optional(),
  verification_method: z.enum([VerificationMethod.READ_AFTER_WRITE, '']).optional(),
  expected_state: JsonObject.refine((o) => Object.keys(o).length <= LIMITS.expectedStateKeys, {
    message: `at most ${LIMITS.expectedStateKeys} keys`,
    params: { rule: 'too_big' },
  })
    .nullable()
    .optional(),
  depends_on: z.array(Key).max(LIMITS.dependsOn).optional(),
});

/** `expect_evidence`: a JSON path into the operation's verified evidence and the JSON value it must hold. */
const ExpectEvidence = z
  .strictObject({
    path: z.string().max(500).regex(FIELD_PATH, FIELD_PATH_RULE),
    // Required, but checked below so the caller reads "equals is required", not a type error about undefined.
    equals: z.unknown().optional(),
  })
  .superRefine((value, ctx) => {
    if (value.equals === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['equals'],
        message: 'equals is required: the JSON value the evidence must hold (null included)',
        params: { rule: 'required' },
      });
      return;
    }
    for (const issue of jsonShapeIssues(value.equals, ['equals'])) ctx.addIssue({ code: 'custom', ...issue });
  });

/**
 * An operation's status: one schema for the criteria here and every response (schemas.ts), so that the OpenAPI
 * document names it once, the OperationStatus component.
 */
export const OperationStatusSchema = z.enum(Object.values(OperationStatus) as [OperationStatus, ...OperationStatus[]]);

/** Exactly one expectation per criterion: a status, or an evidence field. */
export const CriterionSchema = z
  .strictObject({
    key: Key,
    operation: Key,
    expect_status: OperationStatusSchema.optional(),
    expect_evidence: ExpectEvidence.optional(),
  })
  .superRefine((value, ctx) => {
    const given = [value.expect_status, value.expect_evidence].filter((v) => v !== undefined).length;
    if (given !== 1) {
      ctx.addIssue({
        code: 'custom',
        path: [],
        message:
          given === 0
            ? 'a criterion needs expect_status or expect_evidence'
            : 'a criterion has either expect_status or expect_evidence, not both',
        params: { rule: 'one_expectation' },
      });
    }
  });

/** The stored form: the one expectation the criterion has (validated by CriterionSchema). */
export function toCriterion(c: z.infer<typeof CriterionSchema>): Criterion {
  return c.expect_evidence !== undefined
    ? {
        key: c.key,
        operation: c.operation,
        expect_evidence: { path: c.expect_evidence.path, equals: c.expect_evidence.equals },
      }
    : { key: c.key, operation: c.operation, expect_status: c.expect_status! };
}

/** Unknown fields are rejected, never dropped: a client cannot set status, tenant_id, evidence... */
export const SubmissionSchema = z.strictObject({
  // What a reviewer reads before deciding, and webhooks, exports and MCP clients carry on: no character that hides or
  // reorders it. An agent id is a name (one line); an intent is prose, in any language (refuseHiddenCharacters).
  agent_id: visibleText().max(LIMITS.agentId).superRefine(refuseHiddenCharacters()),
  intent: visibleText()
    .max(LIMITS.intent)
    .superRefine(refuseHiddenCharacters({ lines: true })),
  deadline_seconds: z.number().int().min(LIMITS.deadlineSeconds.min).max(LIMITS.deadlineSeconds.max).optional(),
  operations: z.array(OperationRequestSchema).min(1).max(LIMITS.operations),
  criteria: z.array(CriterionSchema).max(LIMITS.criteria).optional(),
});

export type Submission = z.infer<typeof SubmissionSchema>;
export type OperationRequest = z.infer<typeof OperationRequestSchema>;

/** zod issues → field errors. Unknown keys name the key itself, so the caller sees which field to remove. */
export function zodErrors(error: z.ZodError, prefix = ''): FieldError[] {
  return oneAnswerPerFault(error.issues).flatMap((issue): FieldError[] => {
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((key) => ({
        field: fieldPath(prefix, [...issue.path, key]),
        rule: 'unknown_field',
        message: `unknown field "${key}": not part of this request (unknown fields are rejected, not ignored)`,
      }));
    }
    const rule =
      issue.code === 'custom' ? ((issue.params as { rule?: string } | undefined)?.rule ?? 'custom') : issue.code;
    return [{ field: fieldPath(prefix, issue.path), rule, message: issue.message }];
  });
}

/**
 * One field, one answer, where zod gives two for a single fault:
 * - int() refuses a number beyond ±2^53 on its own ("expected int to be <=9007199254740991"), beside the field's own
 *   range: 1e300 came back as two errors, the first naming a bound the field does not have. Dropped when another issue
 *   names the same field; alone (an int with no range of its own) it stays.
 * - a length check runs on any value that has a length, also after the type check refused it: `agent_id: []` was told
 *   "expected string" and "expected array to have >=1 items", as if the field took an array. After a wrong type
 *   (`invalid_type` of another kind than int), nothing else about that field is said.
 * - an empty string is told it is empty, and not also that nothing has the field's format ("letters, digits, ... only",
 *   "an absolute http:// or https:// URL").
 */
function oneAnswerPerFault(issues: readonly z.core.$ZodIssue[]): z.core.$ZodIssue[] {
  const samePath = (a: PropertyKey[], b: PropertyKey[]) => a.length === b.length && a.every((part, i) => part === b[i]);
  const wrongType = issues.filter((issue) => issue.code === 'invalid_type' && issue.expected !== 'int');
  const empty = issues.filter(
    (issue) => issue.code === 'too_small' && issue.origin === 'string' && Number(issue.minimum) === 1,
  );
  return issues.filter((issue) => {
    const typeAnswer = wrongType.find((other) => samePath(other.path, issue.path));
    if (typeAnswer !== undefined) return typeAnswer === issue;
    const emptyAnswer = empty.find((other) => samePath(other.path, issue.path));
    if (emptyAnswer !== undefined) return emptyAnswer === issue;
    const safeIntegerEcho = (issue.code === 'too_big' || issue.code === 'too_small') && issue.origin === 'int';
    return !(safeIntegerEcho && issues.some((other) => other !== issue && samePath(other.path, issue.path)));
  });
}

function fieldPath(prefix: string, path: PropertyKey[]): string {
  let out = prefix;
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out = memberPath(out, String(part));
  }
  return out || '(body)';
}

/** Structure first (zod), then the rules that need the connector catalogue and the whole request. */
export function validateSubmission(
  body: unknown,
  connectors: ConnectorRegistry,
): { ok: Submission } | { errors: FieldError[] } {
  const parsed = SubmissionSchema.safeParse(body);
  if (!parsed.success) return { errors: zodErrors(parsed.error) };
  const submission = parsed.data;
  const errors: FieldError[] = [];
  const keys = new Map<string, number>();
  // connector + the provider effect an operation names → the first operation naming it (see `duplicate_reference`).
  const references = new Map<string, string>();
  submission.operations.forEach((op, i) => {
    const at = `operations[${i}]`;
    if (keys.has(op.key)) errors.push({ field: `${at}.key`, rule: 'unique', message: `duplicate key "${op.key}"` });
    keys.set(op.key, i);
    const connector = connectors.get(op.connector);
    if (!connector) {
      errors.push({
        field: `${at}.connector`,
        rule: 'known_connector',
        message: `unknown connector "${op.connector}" (see GET /v1/connectors)`,
      });
      return;
    }
    const action = connectorAction(connector, op.action);
    if (!action) {
      errors.push({
        field: `${at}.action`,
        rule: 'known_action',
        message: `connector ${op.connector} has no action "${op.action}" (it has: ${Object.keys(connector.actions).join(', ')})`,
      });
      return;
    }
    const params = action.params.safeParse(op.params);
    if (!params.success) errors.push(...zodErrors(params.error, `${at}.params`));
    // Two operations naming one provider effect (a payment reference the provider deduplicates by) would be one
    // effect counted as two committed ones: the later one is refused. Only within a submission — across executions
    // the same reference is the business key the provider's idempotency is there for.
    const reference = params.success ? effectReference(connector, op.action, params.data) : null;
    if (reference) {
      const id = `${op.connector}\u0000${reference.value}`;
      const earlier = references.get(id);
      if (earlier !== undefined) {
        errors.push({
          field: `${at}.params.${reference.field}`,
          rule: 'duplicate_reference',
          message: `operation "${earlier}" already names this ${op.connector} ${reference.field}: the provider would take both as one effect (the second a replay of the first); give each its own ${reference.field}, or submit one operation`,
        });
      } else references.set(id, op.key);
    }
    // An agent cannot declare an operation less safe than its connector (I15): that would switch off the hold of an
    // irreversible send on a knowledge conflict or an unreadable precondition.
    if (op.irreversible === false && !operationCapabilities(connector, op.action, op.params).reversible) {
      errors.push({
        field: `${at}.irreversible`,
        rule: 'irreversible_floor',
        message: `connector ${op.connector} declares ${op.action} irreversible; an operation cannot be declared reversible (omit irreversible or use true)`,
      });
    }
    if (
      op.verification_method === VerificationMethod.READ_AFTER_WRITE &&
      !operationCapabilities(connector, op.action, op.params).read_back
    ) {
      errors.push({
        field: `${at}.verification_method`,
        rule: 'read_back_available',
        message: `connector ${op.connector} cannot read this operation back${connector.capabilities.read_back ? ' (it declares no read_back)' : ''}; omit verification_method or use ""`,
      });
    }
  });
  submission.operations.forEach((op, i) => {
    const named = new Set<string>();
    (op.depends_on ?? []).forEach((dep, j) => {
      const field = `operations[${i}].depends_on[${j}]`;
      if (dep === op.key)
        errors.push({ field, rule: 'no_self_dependency', message: 'an operation cannot depend on itself' });
      else if (!keys.has(dep)) errors.push({ field, rule: 'known_key', message: `no operation has key "${dep}"` });
      // As keys and criterion keys are: a dependency named twice says nothing more, and is kept as written.
      else if (named.has(dep)) errors.push({ field, rule: 'unique', message: `"${dep}" is named twice` });
      named.add(dep);
    });
  });
  const cycle = findCycle(submission.operations);
  if (cycle) {
    errors.push({ field: 'operations', rule: 'acyclic', message: `depends_on has a cycle: ${cycle.join(' -> ')}` });
  }
  const criterionKeys = new Set<string>();
  (submission.criteria ?? []).forEach((c, i) => {
    if (criterionKeys.has(c.key)) {
      errors.push({ field: `criteria[${i}].key`, rule: 'unique', message: `duplicate criterion key "${c.key}"` });
    }
    criterionKeys.add(c.key);
    if (!keys.has(c.operation)) {
      errors.push({
        field: `criteria[${i}].operation`,
        rule: 'known_key',
        message: `no operation has key "${c.operation}"`,
      });
    }
  });
  return errors.length > 0 ? { errors } : { ok: submission };
}

/** A tenant's amount caps by connector, as amountCapsOf reads them. */
type AmountCapsByConnector = ReadonlyMap<
  string,
  {
    period: string;
    max_amount?: number;
    amount_field?: string;
    amount_decimals?: number;
    currency?: string;
    currency_field?: string;
  }[]
>;

/**
 * An operation under an amount cap must carry a positive finite amount in the cap's field (a negative one would buy
 * the cap back), and, under a cap with a currency, exactly that currency at the cap's currency field (an amount in
 * another is not in the cap's unit). Known at intake when the tenant has the cap already; a cap set later is enforced
 * at dispatch.
 */
export function capAmountErrors(submission: Submission, capsByConnector: AmountCapsByConnector): FieldError[] {
  return submission.operations.flatMap((op, i) =>
    operationCapAmountErrors(op, capsByConnector, `operations[${i}].params`),
  );
}

/**
 * The connector's own rules for one operation's params (its action's schema), the params named `paramsField` in the
 * answer. A retry is a new operation submitted now: params accepted before a rule existed (a body member named twice
 * ignoring case, before 2026-12-04) are judged by it, as a submission's are, and not sent again as they were.
 */
export function operationParamsErrors(
  connector: Connector,
  op: { action: string; params: Record<string, unknown> },
  paramsField: string,
): FieldError[] {
  const action = connectorAction(connector, op.action);
  if (!action) {
    return [
      {
        field: 'action',
        rule: 'known_action',
        message: `connector ${connector.name} has no action "${op.action}" any more`,
      },
    ];
  }
  const parsed = action.params.safeParse(op.params);
  return parsed.success ? [] : zodErrors(parsed.error, paramsField);
}

/**
 * capAmountErrors for one operation, its params named `paramsField` in the answer: a submission's
 * `operations[i].params`, or a retry's `params` (a retry is a new operation, judged by the caps in place when it is
 * made, as a submission is).
 */
export function operationCapAmountErrors(
  op: { connector: string; params: Record<string, unknown> },
  capsByConnector: AmountCapsByConnector,
  paramsField: string,
): FieldError[] {
  for (const cap of capsByConnector.get(op.connector) ?? []) {
    const amount = capAmount(op.params, cap);
    if (!amount) continue;
    if (amount.amount === null) {
      return [
        {
          field: `${paramsField}.${cap.amount_field}`,
          rule: 'positive_amount',
          message: `the tenant's spending cap on ${op.connector} (per ${cap.period}) counts params.${cap.amount_field}: it must be a positive finite number${cap.amount_decimals === undefined ? '' : ` with at most ${cap.amount_decimals} decimal places (the target charges in no smaller unit)`}`,
        },
      ];
    }
    if (amount.currencyMismatch) {
      const { field, found } = amount.currencyMismatch;
      return [
        {
          field: `${paramsField}.${field}`,
          rule: 'currency_mismatch',
          message: `the tenant's spending cap on ${op.connector} (per ${cap.period}) counts params.${cap.amount_field} in ${cap.currency}: params.${field} must be ${cap.currency} (it is ${describeFoundCurrency(found)})`,
        },
      ];
    }
  }
  return [];
}

function findCycle(operations: OperationRequest[]): string[] | null {
  const graph = new Map(operations.map((op) => [op.key, op.depends_on ?? []]));
  const state = new Map<string, 'visiting' | 'done'>();
  const stack: string[] = [];
  const visit = (key: string): string[] | null => {
    if (state.get(key) === 'done') return null;
    if (state.get(key) === 'visiting') return [...stack.slice(stack.indexOf(key)), key];
    state.set(key, 'visiting');
    stack.push(key);
    for (const dep of graph.get(key) ?? []) {
      if (!graph.has(dep) || dep === key) continue;
      const found = visit(dep);
      if (found) return found;
    }
    stack.pop();
    state.set(key, 'done');
    return null;
  };
  for (const key of graph.keys()) {
    const found = visit(key);
    if (found) return found;
  }
  return null;
}

/**
 * 409 reference-unsettled: an operation names the reference (at a provider that does not deduplicate: the SMS
 * `client_ref`) of one of the tenant's operations that was sent and is not settled — it may have made its effect, and
 * nobody knows yet. Sending the new one could make it twice: a blind re-send through a new execution or a retry (I5).
 * `field` names the reference in the request; `unsettled` the operation it would re-send. Nothing was written.
 */
export function referenceUnsettled(
  connector: Connector,
  op: { action: string; params: Record<string, unknown>; field: string },
  held: UnsettledReference,
): Problem {
  const reference = resendReference(connector, op.action, op.params);
  return Problem.conflict(
    'reference-unsettled',
    `operation ${held.operationId} ("${held.key}" of ${held.executionId}) names this ${connector.name} ` +
      `${reference?.field ?? 'reference'} and is ${held.status}: it was sent and whether it made its effect is not ` +
      'settled (the provider does not deduplicate, so sending again could make it twice). Wait until it settles, or ' +
      'have a reviewer resolve it, then submit again',
    {
      ...(reference && { field: `${op.field}.${reference.field}` }),
      unsettled: {
        operation_id: held.operationId,
        execution_id: held.executionId,
        key: held.key,
        status: held.status,
      },
    },
  );
}
