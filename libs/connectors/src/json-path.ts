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

/** The one member of what stands where a value was clipped: `{ "verity:clipped": <its JSON length> }`. */
export const CLIPPED_MEMBER = 'verity:clipped';

/**
 * What stands where clipValue dropped a value too big to keep. An instance of its own class, not a plain object, so
 * the registry door (withinKeptDepth) tells it from a target's data of the same shape: the door writes it as
 * `{ "verity:clipped": N }` and keeps a target's own member of that name with one more `verity:` in front. Serialised
 * anywhere else (toJSON), it writes the same marker.
 */
export class ClippedValue {
  constructor(readonly jsonLength: number) {}

  toJSON(): Record<string, number> {
    return { [CLIPPED_MEMBER]: this.jsonLength };
  }
}

/** A value small enough to keep as evidence; anything bigger is replaced by a marker (bodies are never kept raw). */
export function clipValue(value: unknown, maxChars = 1000): unknown {
  if (typeof value === 'string') return value.length > maxChars ? `${textPrefix(value, maxChars)}…` : value;
  const text = JSON.stringify(value);
  if (text !== undefined && text.length > maxChars) return new ClippedValue(text.length);
  return value;
}
