import type { Principal } from '../auth/principal';
import { maskSecrets } from '../console/mask';

/**
 * What an agent wrote or a provider answered, in an execution's, an operation's or an event's view: the fields masked
 * for a reviewer, as the review console shows them (console/mask.ts): values under secret-looking keys, bearer
 * tokens, `{{secret:…}}` references and secret-looking query parameters. A reviewer judges whether an effect happened
 * and never needs a credential to do it; masked in the browser only, the credential would still reach it.
 */
const WRITTEN_FIELDS: ReadonlySet<string> = new Set(['intent', 'params', 'expected_state', 'evidence', 'provider_ref']);

/** `view` as `principal` may see it: masked for a reviewer (see WRITTEN_FIELDS), as it is for anyone else. */
export function viewFor<T>(principal: Principal, view: T): T {
  return principal.role === 'reviewer' ? (maskWritten(view) as T) : view;
}

function maskWritten(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(maskWritten);
  if (value === null || typeof value !== 'object' || Object.getPrototypeOf(value) !== Object.prototype) return value;
  const isEvent = 'seq' in value && 'type' in value;
  return Object.fromEntries(
    Object.entries(value).map(([key, inner]) => [
      key,
      WRITTEN_FIELDS.has(key) || (isEvent && key === 'data') ? maskSecrets(inner) : maskWritten(inner),
    ]),
  );
}
