/** RFC 9457 problem details. One class for every refusal the API makes; the filter renders it. */
export interface FieldError {
  field: string;
  rule: string;
  message: string;
}

export class Problem extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly title: string,
    readonly detail?: string,
    readonly extras: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(detail ?? title);
  }

  static validation(errors: FieldError[], detail?: string): Problem {
    return new Problem(400, 'validation-error', 'The request is invalid', detail ?? describe(errors), { errors });
  }

  static notFound(what: string, id: string): Problem {
    return new Problem(404, 'not-found', `${what} not found`, `no ${what.toLowerCase()} ${id} is visible to this key`);
  }

  static conflict(code: string, detail: string, extras: Record<string, unknown> = {}): Problem {
    return new Problem(409, code, 'Conflict with the current state', detail, extras);
  }
}

function describe(errors: FieldError[]): string {
  const first = errors[0];
  if (!first) return 'invalid request';
  const more = errors.length > 1 ? ` (and ${errors.length - 1} more)` : '';
  return `${first.field}: ${first.message}${more}`;
}

export const PROBLEM_BASE = 'https://verity.dev/problems/';
