import { keptMemberName } from '@verity/status-model';
import { ClippedValue } from './json-path';

/**
 * Text Postgres cannot store in a `jsonb` (or `text`) column: U+0000, and a UTF-16 surrogate without its pair (JSON
 * writes it as `\ud800`, which `jsonb` refuses). A target's answer may hold either (JSON escapes them: `"\u0000"`), and
 * a cut to length may split a pair (an emoji at the 200th character of a reference).
 */
// eslint-disable-next-line no-control-regex -- U+0000 is the point
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** What stands for each unstorable character: U+FFFD REPLACEMENT CHARACTER, as a UTF-8 decoder writes one. */
export const REPLACED_TEXT = '\ufffd';

/** Whether a stored string had text replaced (or holds U+FFFD of its own: a refusal too many, never one too few). */
export function holdsReplacedText(value: string): boolean {
  return value.includes(REPLACED_TEXT);
}

/**
 * A copy of a connector's result with every string and object key made storable (UNSTORABLE replaced by U+FFFD),
 * deeply; anything else as it is. Without it, the write of a result that holds one fails — a send the target answered
 * 201 was left SENT and swept to UNKNOWN ("a worker stopped"), a read-back's verdict was never recorded.
 */
export function storableText<T>(value: T): T {
  return storable(value) as T;
}

function storable(value: unknown): unknown {
  if (typeof value === 'string') return replaced(value);
  if (Array.isArray(value)) return value.map(storable);
  if (typeof value === 'object' && value !== null && isPlain(value)) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [replaced(key), storable(item)]));
  }
  return value;
}

/**
 * As deep as a connector's result is kept. A target's answer of 64 KiB nests up to 32 000 levels — deeper than the
 * recursive walks a result goes through (secret redaction, storableText, JSON.stringify when it is written) and
 * Postgres's `jsonb` parser survive: an SMS provider's 201 naming its message with such an id threw, and the accepted
 * send was recorded as an unknown outcome. Far above a result's own shape plus the 64 levels the http connector reads.
 */
export const MAX_KEPT_DEPTH = 100;

/**
 * The one member of what stands where a connector's result was cut at MAX_KEPT_DEPTH. A target's answer can hold any
 * object, so a member of this name in it is kept under another name (keptMemberName): an object holding this member
 * is only
 * ever Verity's cut, never the target's data made to look like one.
 */
const CUT_MEMBER = 'verity:cut';

/** What stands where a connector's result was cut at MAX_KEPT_DEPTH. */
export const KEPT_DEPTH_CUT: Readonly<Record<string, string>> = Object.freeze({
  [CUT_MEMBER]: `deeper than ${MAX_KEPT_DEPTH} levels`,
});

/**
 * A copy of a connector's result with whatever nests deeper than MAX_KEPT_DEPTH replaced by KEPT_DEPTH_CUT, every
 * clipValue marker written as `{ "verity:clipped": N }`, and every member named as a marker's member (or as an
 * escaped one) renamed by keptMemberName (libs/status-model, where a comparison with what an agent wrote escapes it
 * the same way).
 */
export function withinKeptDepth<T>(value: T): T {
  return clippedAt(value, 0) as T;
}

/** Recursion no deeper than MAX_KEPT_DEPTH: whatever lies below is not walked. */
function clippedAt(value: unknown, depth: number): unknown {
  if (typeof value !== 'object' || value === null) return value;
  // clipValue's marker, made by a connector: written here, after the escape of every target-written name.
  if (value instanceof ClippedValue) return value.toJSON();
  const array = Array.isArray(value);
  if (!array && !isPlain(value)) return value;
  if (depth >= MAX_KEPT_DEPTH) return { ...KEPT_DEPTH_CUT };
  if (array) return value.map((item: unknown) => clippedAt(item, depth + 1));
  return Object.fromEntries(
    Object.entries(value).map(([key, item]) => [keptMemberName(key), clippedAt(item, depth + 1)]),
  );
}

function replaced(text: string): string {
  UNSTORABLE.lastIndex = 0;
  return UNSTORABLE.test(text) ? text.replace(UNSTORABLE, REPLACED_TEXT) : text;
}

function isPlain(value: object): boolean {
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}
