import { TenantConnectors, secretRedactor } from '@verity/connectors';
import { FieldError, Problem } from '../problem/problem';

/** A `{{secret:NAME}}` placeholder as the http connector reads one (spaces inside the braces allowed). */
const SECRET_PLACEHOLDER = /\{\{\s*secret:([A-Za-z0-9_.-]{1,64})\s*\}\}/g;

/** Every string of a JSON value, member names included. */
function stringsOf(value: unknown): string[] {
  if (typeof value === 'string') return [value];
  if (Array.isArray(value)) return value.flatMap(stringsOf);
  if (typeof value === 'object' && value !== null) {
    return Object.entries(value).flatMap(([key, item]) => [key, ...stringsOf(item)]);
  }
  return [];
}

/**
 * `value` with each placeholder that names one of `names` in its strings (and member names) replaced by a NUL, which no
 * secret value holds: such a placeholder names a secret and holds none, so a value that is a part of its text
 * ("secret", letters of a name) is not found in it, and what stood on either side of it stays apart. A placeholder
 * naming no secret of the tenant stays: nothing is put in its place, it is stored as written, and its "name" can be a
 * token's value.
 */
function withoutPlaceholders(value: unknown, names: ReadonlySet<string>): unknown {
  const replace = (text: string) =>
    text.replace(SECRET_PLACEHOLDER, (placeholder, name: string) => (names.has(name) ? '\u0000' : placeholder));
  if (typeof value === 'string') return replace(value);
  if (Array.isArray(value)) return value.map((item) => withoutPlaceholders(item, names));
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(
      Object.entries(value).map(([key, item]) => [replace(key), withoutPlaceholders(item, names)]),
    );
  }
  return value;
}

/**
 * Whether `value` holds one of `secrets`. Placeholders naming a secret are taken out first (`withoutPlaceholders`), but
 * only for the secrets a placeholder of this value would be found to hold: any other is looked for in the value as
 * written, so one that holds a placeholder or runs into one (`x{{secr`, a value with braces) is still found.
 */
function holdsSecretValue(value: unknown, secrets: Readonly<Record<string, string>>): boolean {
  // Read for one connector as NAME, for every connector as `connector:NAME` (secretsOfTenant); a placeholder says NAME.
  const names = new Set(Object.keys(secrets).map((key) => key.slice(key.indexOf(':') + 1)));
  const placeholders = stringsOf(value).flatMap((text) =>
    [...text.matchAll(SECRET_PLACEHOLDER)].filter((m) => names.has(m[1])).map((m) => m[0]),
  );
  const inPlaceholder = (name: string) => {
    const redact = secretRedactor({ [name]: secrets[name] });
    return placeholders.some((placeholder) => redact(placeholder) !== placeholder);
  };
  const asWritten = Object.fromEntries(Object.entries(secrets).filter(([name]) => !inPlaceholder(name)));
  const found = (redact: ReturnType<typeof secretRedactor>, text: unknown) =>
    JSON.stringify(redact(text)) !== JSON.stringify(text);
  if (found(secretRedactor(asWritten), value)) return true;
  if (placeholders.length === 0) return false;
  return found(secretRedactor(secrets), withoutPlaceholders(value, names));
}

/**
 * The fields (path → value) that hold the value of one of `secrets`, in any spelling redaction knows, as 400
 * `secret_value` errors: secret values are never stored or returned (§10), so a request that would store one is
 * refused, naming the field but neither the secret nor where in the field it was found. `hint` adds what to write
 * instead where there is something (an http operation names the secret `{{secret:NAME}}`).
 */
export function secretValueErrors(
  fields: readonly [string, unknown][],
  secrets: Readonly<Record<string, string>> | undefined,
  hint: (field: string) => string | undefined = () => undefined,
): FieldError[] {
  if (!secrets || Object.keys(secrets).length === 0) return [];
  return fields
    .filter(([, value]) => value !== undefined && value !== null && holdsSecretValue(value, secrets))
    .map(([field]) => {
      const instead = hint(field);
      return {
        field,
        rule: 'secret_value',
        message: instead
          ? `holds the value of one of the tenant’s secrets; ${instead} (secret values are never stored)`
          : 'holds the value of one of the tenant’s secrets (secret values are never stored or returned)',
      };
    });
}

/**
 * 400 before anything is written when what a request would store (name → value) holds the value of one of the tenant's
 * secrets: free text a caller gave (a reason, the evidence) — pasted from a provider's answer, say. The secrets are
 * read only when there is something to look through.
 */
export async function refuseSecretValuesIn(
  tenantConnectors: TenantConnectors,
  tenantId: string,
  fields: [string, unknown][],
): Promise<void> {
  const errors = await secretValueErrorsIn(tenantConnectors, tenantId, fields);
  if (errors.length > 0) throw Problem.validation(errors);
}

/**
 * `secretValueErrors` against the tenant's secrets of now, read only when there is something to look through: for a
 * request that judges other refusals first (a retry copies what it stores from the operation it retries, and its 409s
 * say more than a 400 would).
 */
export async function secretValueErrorsIn(
  tenantConnectors: TenantConnectors,
  tenantId: string,
  fields: [string, unknown][],
): Promise<FieldError[]> {
  if (fields.every(([, value]) => value === undefined || value === null || value === '')) return [];
  return secretValueErrors(fields, await tenantConnectors.secretsOfTenant(tenantId));
}
