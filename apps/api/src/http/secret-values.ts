import { TenantConnectors, secretRedactor } from '@verity/connectors';
import { FieldError, Problem } from '../problem/problem';

/** A `{{secret:NAME}}` placeholder as the http connector reads one (spaces inside the braces allowed). */
const SECRET_PLACEHOLDER = /\{\{\s*secret:[A-Za-z0-9_.-]{1,64}\s*\}\}/g;

/**
 * `value` with each secret placeholder in its strings (and member names) replaced by a NUL, which no secret value holds:
 * a placeholder names a secret and holds none, so a value that is a part of its text ("secret", letters of a name) is
 * not found in it, and what stood on either side of it stays apart.
 */
function withoutPlaceholders(value: unknown): unknown {
  if (typeof value === 'string') return value.replace(SECRET_PLACEHOLDER, '\u0000');
  if (Array.isArray(value)) return value.map(withoutPlaceholders);
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(
      Object.entries(value).map(([key, item]) => [
        key.replace(SECRET_PLACEHOLDER, '\u0000'),
        withoutPlaceholders(item),
      ]),
    );
  }
  return value;
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
  const redact = secretRedactor(secrets);
  return fields
    .filter(([, value]) => {
      if (value === undefined || value === null) return false;
      const written = withoutPlaceholders(value);
      return JSON.stringify(redact(written)) !== JSON.stringify(written);
    })
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
 * secrets: free text a caller gave (a reason, the evidence) — pasted from a provider's answer, say —, or what a retry
 * copies from the operation it retries. The secrets are read only when there is something to look through.
 */
export async function refuseSecretValuesIn(
  tenantConnectors: TenantConnectors,
  tenantId: string,
  fields: [string, unknown][],
): Promise<void> {
  if (fields.every(([, value]) => value === undefined || value === null || value === '')) return;
  const errors = secretValueErrors(fields, await tenantConnectors.secretsOfTenant(tenantId));
  if (errors.length > 0) throw Problem.validation(errors);
}
