// The pure path and equality rules live in libs/status-model, so criteria (expect_evidence) and connectors read a
// path the same way.
export { FIELD_PATH, FIELD_PATH_RULE, fieldKey, fieldSegments, readField, sameJson } from '@verity/status-model';

/** A value small enough to keep as evidence; anything bigger is replaced by a marker (bodies are never kept raw). */
export function clipValue(value: unknown, maxChars = 1000): unknown {
  if (typeof value === 'string') return value.length > maxChars ? `${textPrefix(value, maxChars)}…` : value;
  const text = JSON.stringify(value);
  if (text !== undefined && text.length > maxChars) return { truncated: true, json_length: text.length };
  return value;
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
