import { CURRENCY_CODE, CURRENCY_CODE_RULE, HOLD_REASONS, MAX_RULE_AMOUNT } from '@verity/status-model';
import { z } from 'zod';
import { amountReadingView } from './amount-reading.schema';
import { filledText, refuseHiddenCharacters } from '../http/text';

/** An obligation may be due in a second (tests, drills) and at most in 30 days: beyond that it is not an obligation. */
export const MAX_DUE_SECONDS = 30 * 24 * 3600;
const DueSeconds = z
  .number()
  // The range first: 1e20 is "at most …", not "whole seconds" (zod's int check refuses unsafe integers too).
  .min(1, 'at least 1 second')
  .max(MAX_DUE_SECONDS, `at most ${MAX_DUE_SECONDS} seconds (30 days)`)
  .int('whole seconds');

const ObligationDueSchema = z.strictObject(
  Object.fromEntries(['default', ...HOLD_REASONS].map((key) => [key, DueSeconds.optional()])) as Record<
    string,
    z.ZodOptional<typeof DueSeconds>
  >,
);

const DotPath = z
  .string()
  .regex(/^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,7}$/, 'a dot path of params, e.g. amount or payment.total');

// Shown to reviewers in the review queue (who owns an obligation, who it is escalated to): one line, nothing hidden.
const Name = filledText('must not be empty').max(200, 'at most 200 characters').superRefine(refuseHiddenCharacters());

export const ApprovalRuleSchema = z
  .strictObject({
    connector: z.string().min(1).max(100),
    amount_above: z.number().min(0, 'must not be negative').max(MAX_RULE_AMOUNT).finite().optional(),
    amount_field: DotPath.optional(),
    currency: z
      .string()
      .regex(CURRENCY_CODE, CURRENCY_CODE_RULE)
      .optional()
      .describe(
        'the ISO 4217 currency of amount_above: an operation in any other one (at currency_field) is held for approval; absent: amounts of any currency count as one unit',
      ),
    currency_field: DotPath.optional().describe(
      'where the currency is in the params (default `currency`); only with currency',
    ),
  })
  .refine((rule) => rule.amount_field === undefined || rule.amount_above !== undefined, {
    message: 'amount_field is only meaningful with amount_above',
    path: ['amount_field'],
    params: { rule: 'requires_amount_above' },
  })
  .refine((rule) => rule.currency === undefined || rule.amount_above !== undefined, {
    message: 'currency is only meaningful with amount_above',
    path: ['currency'],
    params: { rule: 'requires_amount_above' },
  })
  .refine((rule) => rule.currency_field === undefined || rule.currency !== undefined, {
    message: 'currency_field is only meaningful with currency',
    path: ['currency_field'],
    params: { rule: 'requires_currency' },
  });

/**
 * PUT /v1/admin/policy. Each field given replaces that setting, a field left out is kept, and null resets it to the
 * default. Unknown fields (also inside `obligation_due_seconds` and each rule) are rejected.
 */
export const PolicyInputSchema = z
  .strictObject({
    obligation_owner: Name.nullable().optional(),
    escalation_target: Name.nullable().optional(),
    obligation_due_seconds: ObligationDueSchema.nullable().optional(),
    approval_rules: z.array(ApprovalRuleSchema).max(50, 'at most 50 rules').nullable().optional(),
  })
  // An empty body changed nothing, yet was recorded as a policy change by this admin (and moved updated_at).
  .refine((input) => Object.values(input).some((value) => value !== undefined), {
    message: 'name at least one setting to change',
    params: { rule: 'no_change' },
  });
export type PolicyInput = z.infer<typeof PolicyInputSchema>;

export const PolicyView = z
  .object({
    obligation_owner: z.string(),
    escalation_target: z.string(),
    obligation_due_seconds: z
      .record(z.string(), z.number())
      .nullable()
      .describe(
        'the due times the tenant set, per hold reason and `default` for the others; null: none set. The platform’s ' +
          'default is not shown here (see `effective`): sent back in a PUT, it would become the tenant’s own',
      ),
    effective: z
      .object({
        obligation_due_seconds: z
          .record(z.string(), z.number())
          .describe(
            'the due times in force: the tenant’s, and `default` from the platform’s configuration (OBLIGATION_DUE_MS) where it set none',
          ),
      })
      .describe('read-only: what applies where the tenant set nothing; not taken by PUT'),
    approval_rules: z.array(
      z.object({
        connector: z.string(),
        amount_above: z.number().optional(),
        ...amountReadingView('the currency of amount_above; absent: amounts of any currency are compared as one unit'),
      }),
    ),
    updated_at: z.string().nullable(),
    updated_by: z.string().nullable(),
  })
  .meta({ id: 'Policy' });
export type PolicyViewOf = z.infer<typeof PolicyView>;
