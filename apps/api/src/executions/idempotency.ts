import { createHash } from 'node:crypto';

/**
 * Members of a submission whose absence intake stores as exactly this value, for every connector and action: a body
 * that spells one out and a body that leaves it out are one request (`depends_on: []` and no `depends_on`). Not
 * `irreversible` or `verification_method` (what their absence means depends on the action: its reversibility, its
 * read-back), nor `deadline_seconds` (the default is the server's and may change): those compare as sent.
 */
export const ABSENT_MEANS = {
  submission: { criteria: [] as const },
  operation: { depends_on: [] as const, requires_approval: false, expected_state: null },
};

/**
 * The request an Idempotency-Key is held for: the body as canonical JSON (sorted keys, so the same body in another key
 * order is the same request), without the members that spell out what their absence means (ABSENT_MEANS).
 */
export function requestHash(body: unknown): string {
  return sha256(canonical(withoutSpelledDefaults(body)));
}

/**
 * The hash an earlier version recorded for the body: of the canonical JSON as sent, defaults spelled out and all. A
 * key it recorded is still the same request's (for the key's lifetime) — equal to requestHash unless the body spells
 * out a default.
 */
export function sentBodyHash(body: unknown): string {
  return sha256(canonical(body));
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The members of `value` that equal their absence's meaning in `absent`, left out (anything else kept as it is). */
function omitAbsent(value: Record<string, unknown>, absent: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(value).filter(([k, v]) => !(Object.hasOwn(absent, k) && canonical(v) === canonical(absent[k]))),
  );
}

/** Applied to the body as sent, valid or not: only a member in its place (top level, an operation's) is left out. */
function withoutSpelledDefaults(body: unknown): unknown {
  if (!isObject(body)) return body;
  const top = omitAbsent(body, ABSENT_MEANS.submission);
  if (Array.isArray(top.operations)) {
    top.operations = top.operations.map((op: unknown) => (isObject(op) ? omitAbsent(op, ABSENT_MEANS.operation) : op));
  }
  return top;
}

function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}
