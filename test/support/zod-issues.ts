import type { z } from 'zod';

/**
 * The rule each issue of a parse carries, by path — as the API reports it: `params.rule` of a custom issue, else its
 * code (apps/api `zodErrors`). Empty when the input parses.
 */
export function issueRules(schema: z.ZodType, input: unknown): Record<string, string> {
  const parsed = schema.safeParse(input);
  if (parsed.success) return {};
  return Object.fromEntries(
    parsed.error.issues.map((issue) => [
      issue.path.join('.'),
      issue.code === 'custom' ? ((issue.params as { rule?: string } | undefined)?.rule ?? 'custom') : issue.code,
    ]),
  );
}
