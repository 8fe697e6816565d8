/**
 * The small JSON path connectors accept for read-back and context fields: `data.status`, `$.data.status`,
 * `items[0].id` (or `items.0.id`). No wildcards, no filters: one path names one value.
 */
export const FIELD_PATH = /^(\$\.)?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+|\[[0-9]{1,6}\])*$/;
export const FIELD_PATH_RULE = 'a JSON path such as "data.status", "$.data.status" or "items[0].id"';

/**
 * Names that would reach Object.prototype in a plain object. As keys of a request's JSON they are refused (the API),
 * so no operation's params hold one: a tenant rule's field naming one names nothing (libs/connectors amount-field).
 */
export const PROTOTYPE_KEYS: ReadonlySet<string> = new Set(['__proto__', 'constructor', 'prototype']);

export function fieldSegments(path: string): string[] {
  const body = path.startsWith('$.') ? path.slice(2) : path;
  return [...body.matchAll(/([A-Za-z0-9_-]+)|\[([0-9]+)\]/g)].map((m) => m[1] ?? m[2]);
}

/** The path without its `$.` prefix: the key a connector reports the value under. */
export function fieldKey(path: string): string {
  return path.startsWith('$.') ? path.slice(2) : path;
}

/**
 * What a path read of a value: the value, or nothing — and then whether the path ran out where no record stands
 * (`noRecord`): at a list with no entry at that place (a search that answered "no match" — or, lagging, "none yet" —
 * with `{"data": []}`; an empty list whatever the path asks of it), or at a null where the record goes (`{"data":
 * null}`, a null in a list, a null in a wrapper that holds nothing else). That is no record without the field, which
 * counts as the effect shown (a person's FAILED refused for good): nothing of the effect was read. A path that runs out
 * inside an object (or an entry) that is there is a record without the field — and so is one that runs out at a null
 * after going through an object below the top of the answer that holds a value (`{"data": {"id": "o_1", "attributes":
 * null}}` at `data.attributes.status`): that record was read, its field was not.
 */
export type FieldRead = { found: true; value: unknown } | { found: false; noRecord: boolean };

/** The value at `path`, walked once for the value and for whether it ran out at no record (FieldRead). */
export function readField(value: unknown, path: string): FieldRead {
  let current: unknown = value;
  // Whether the path went through a record: an object below the top of the answer that holds a value.
  let inRecord = false;
  for (const segment of fieldSegments(path)) {
    if (Array.isArray(current)) {
      // A JSON array has elements only: its JavaScript `length` (an own property) is no member a path can name.
      const index = /^[0-9]+$/.test(segment) ? Number(segment) : current.length;
      // An empty list holds no record, whatever the path asks of it; a list with entries asked for a member has them.
      if (index >= current.length) return { found: false, noRecord: current.length === 0 || /^[0-9]+$/.test(segment) };
      current = current[index];
    } else if (typeof current === 'object' && current !== null && Object.hasOwn(current, segment)) {
      inRecord ||= current !== value && holdsAValue(current);
      current = (current as Record<string, unknown>)[segment];
    } else {
      return { found: false, noRecord: current === null && !inRecord };
    }
  }
  return { found: true, value: current };
}

/** Whether `value` is an object (no list) with a member that is not null: a record that is there. */
function holdsAValue(value: unknown): boolean {
  return (
    typeof value === 'object' &&
    value !== null &&
    !Array.isArray(value) &&
    Object.values(value).some((member) => member !== null)
  );
}

/**
 * A criterion's path into an operation's evidence. As readField, and where a member is not found by its own name, also
 * through a member whose name is itself a path: an http read-back keeps the value it read under the field as written
 * (`record: { "data.status": "ok" }`), so `record.data.status` (or `record["data.status"]`'s segments in any spelling,
 * `items.0.id` for `items[0].id`) reaches it. A member named by the segment itself is always taken first.
 */
export function readEvidenceField(evidence: unknown, path: string): { found: true; value: unknown } | { found: false } {
  return readSegments(evidence, fieldSegments(path));
}

function readSegments(value: unknown, segments: readonly string[]): { found: true; value: unknown } | { found: false } {
  if (segments.length === 0) return { found: true, value };
  const direct = readField(value, segments[0]);
  if (direct.found) {
    const rest = readSegments(direct.value, segments.slice(1));
    if (rest.found) return rest;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return { found: false };
  for (const [name, member] of Object.entries(value)) {
    const named = FIELD_PATH.test(name) ? fieldSegments(name) : [];
    if (named.length < 2 || named.length > segments.length) continue;
    if (named.every((segment, i) => segment === segments[i])) {
      const rest = readSegments(member, segments.slice(named.length));
      if (rest.found) return rest;
    }
  }
  return { found: false };
}

/**
 * Deep equality of two values as JSON (key order does not matter): each is compared as JSON.stringify writes it, as it
 * is stored in jsonb — a member whose value is undefined is no member, undefined in an array (or a hole) is null, a
 * Date its ISO text, NaN and the infinities null, -0 is 0, a boxed value its value. No value at all (undefined) is
 * itself, not null. Compared as the values were, a Date equalled any other Date and `{}`, and a member set to undefined
 * was not the absent member the stored copy has.
 */
export function sameJson(a: unknown, b: unknown): boolean {
  return canonical(asJson(a)) === canonical(asJson(b));
}

/** The value as JSON carries it (what JSON.parse reads back of JSON.stringify's text); undefined for none. */
function asJson(value: unknown): unknown {
  const text = JSON.stringify(value);
  return text === undefined ? undefined : JSON.parse(text);
}

function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`);
    return `{${entries.join(',')}}`;
  }
  return JSON.stringify(value) ?? 'undefined';
}

/**
 * The first `maxChars` UTF-16 units of `text`, less the first half of a character the cut would split (an emoji at the
 * cut): that half alone is text Postgres refuses in a `jsonb` value (JSON writes it `\ud83d`), so a record holding it
 * could not be written at all.
 */
export function textPrefix(text: string, maxChars: number): string {
  const cut = text.slice(0, maxChars);
  const last = cut.charCodeAt(cut.length - 1);
  return cut.length < text.length && last >= 0xd800 && last <= 0xdbff ? cut.slice(0, -1) : cut;
}

/**
 * The member names of Verity's own markers in a connector's result (`verity:cut`, `verity:clipped`) and of their
 * escapes (`verity:verity:cut`, …): a target's member so named is kept with one more `verity:` in front, so no object
 * a target writes reads as Verity's marker, and no two names are kept as one.
 */
const MARKER_MEMBER_SPELLING = /^(?:verity:)+(?:cut|clipped)$/;

/** A member name of a target's answer as kept: a marker's spelling with one more `verity:`, any other as it is. */
export function keptMemberName(name: string): string {
  return MARKER_MEMBER_SPELLING.test(name) ? `verity:${name}` : name;
}

/**
 * `value` with every member name as keptMemberName keeps it, at any depth: what an agent wrote (an expected_state, an
 * expect_evidence's `equals`) made comparable with a target's answer as it was kept, like for like.
 */
export function withKeptMemberNames(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withKeptMemberNames);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).map(([name, member]) => [keptMemberName(name), withKeptMemberNames(member)]),
  );
}
