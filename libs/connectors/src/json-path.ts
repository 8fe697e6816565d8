// The pure path and equality rules live in libs/status-model, so criteria (expect_evidence) and connectors read a
// path the same way.
export {
  FIELD_PATH,
  FIELD_PATH_RULE,
  fieldKey,
  fieldSegments,
  readField,
  sameJson,
  textPrefix,
} from '@verity/status-model';
import { textPrefix } from '@verity/status-model';

/** A value small enough to keep as evidence; anything bigger is replaced by a marker (bodies are never kept raw). */
export function clipValue(value: unknown, maxChars = 1000): unknown {
  if (typeof value === 'string') return value.length > maxChars ? `${textPrefix(value, maxChars)}…` : value;
  const text = JSON.stringify(value);
  if (text !== undefined && text.length > maxChars) return { truncated: true, json_length: text.length };
  return value;
}
