import { TenantConnectors, secretRedactor } from '@verity/connectors';
import { FieldError, Problem } from '../problem/problem';

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
    .filter(
      ([, value]) => value !== undefined && value !== null && JSON.stringify(redact(value)) !== JSON.stringify(value),
    )
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
