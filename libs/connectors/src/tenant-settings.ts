import { isIP } from 'node:net';
import { z } from 'zod';
import { classifyAddress, hostMatches, nonCanonicalIpv4, normalizeHost } from './egress';
import {
  CURRENCY_CODE,
  CURRENCY_CODE_RULE,
  MAX_AMOUNT_DECIMALS,
  MAX_RULE_AMOUNT,
  currencyMismatch,
  decimalPlaces,
} from '@verity/status-model';
import { FIELD_PATH, FIELD_PATH_RULE, fieldSegments, readField } from './json-path';
import { SPENDING_PERIOD_SECONDS, type SpendingPeriod } from '@verity/persistence';
import { ANY_SECRET, READ_BACK_BINDINGS } from './connector';

/** The characters of a secret's name. */
const SECRET_NAME_CHARACTERS = /^[A-Za-z0-9_.-]{1,64}$/;
/**
 * A secret's name: also a path segment of its own endpoint (DELETE …/secrets/{name}), so never `.` or `..`, which every
 * URL resolves away (also spelled `%2e`): a delete of the secret `..` would reach DELETE …/connector-settings/http/ and
 * clear the connector's allowlist, caps and every secret instead (red team round 7). One stored before this rule can
 * still be removed by name (`"..": null`).
 */
export const SECRET_NAME = /^(?!\.{1,2}$)[A-Za-z0-9_.-]{1,64}$/;
/** What an allowlist entry's `secrets` lists: a secret's name, or `*` for every one. */
const BOUND_SECRET = new RegExp(`^(?:\\${ANY_SECRET}|${SECRET_NAME_CHARACTERS.source.slice(1, -1)})$`);

/**
 * The fewest characters of a secret's value. Every text stored is refused, and every answer has each occurrence of a
 * secret's value replaced by its placeholder: a value of a character or a word ("a", "true", "{", "EUR") would refuse
 * most submissions and rewrite most answers. A token is longer.
 */
export const SECRET_VALUE_MIN_LENGTH = 8;

/**
 * A secret goes in header values, which lose leading and trailing spaces on the way: the target would get (and could
 * echo back) a value other than the one set, which the redaction of that value would not find.
 */
const SecretValue = z
  .string()
  .min(
    SECRET_VALUE_MIN_LENGTH,
    `at least ${SECRET_VALUE_MIN_LENGTH} characters: every text stored is looked through for a secret's value, and every answer has it replaced by its placeholder`,
  )
  .max(4096)
  // ASCII only: a target that reads a header's Latin-1 bytes as UTF-8 (most do) and echoes them would answer another
  // spelling of the value (U+FFFD for each such byte), which the redaction of the value would not find.
  .regex(/^[\x20-\x7e]*$/, 'printable ASCII characters only (secrets are sent in header values)')
  .regex(/^(?! ).*(?<! )$/s, 'no leading or trailing spaces (an HTTP header value loses them on the way)')
  .describe(
    `a secret's value (write-only): ${SECRET_VALUE_MIN_LENGTH} to 4096 printable ASCII characters, no leading or trailing space; null deletes the secret`,
  );

/** `*.example.com`, `api.example.com`, `10.0.0.5`, `::1` or `[::1]`, normalised the way URLs are. */
export function normalizeAllowedHost(input: string): { host: string } | { error: string } {
  const wildcard = input.startsWith('*.');
  const bare = wildcard ? input.slice(2) : input;
  const ipv6 = isIP(bare.replace(/^\[|\]$/g, '')) === 6;
  // A name in Unicode (or with fullwidth letters, a soft hyphen) is a host name, spelled otherwise than it is called: the
  // answer says which spelling to write, as a webhook URL's does (urlSpellingProblem).
  const called = /[\u0080-\uffff]/.test(bare) ? asciiHostOf(bare) : null;
  if (called !== null) {
    return { error: `write the host name in ASCII as it is called ("${wildcard ? `*.${called}` : called}")` };
  }
  if (!ipv6 && !/^[A-Za-z0-9.-]+$/.test(bare)) return { error: 'a host name or IP address, without scheme or port' };
  if (!ipv6 && nonCanonicalIpv4(`http://${bare}/`)) return { error: 'IPv4 addresses in dotted-decimal form only' };
  let host: string;
  try {
    host = normalizeHost(new URL(`http://${ipv6 ? `[${bare.replace(/^\[|\]$/g, '')}]` : bare}/`).hostname);
  } catch {
    return { error: 'not a valid host name' };
  }
  // `.` became the empty name and `..` the name `.`: entries no URL can match, stored as something else than written.
  if (!isIP(host) && host.split('.').some((label) => label === '')) return { error: 'not a valid host name' };
  // A label over 63 characters is refused in every URL taken (urlSpellingProblem: DNS cannot look it up), so an entry
  // with one would be stored and shown while no target could ever match it.
  if (!isIP(host) && host.split('.').some((label) => label.length > 63)) {
    return { error: 'each label of the host name is 1 to 63 characters: DNS cannot look up a longer one' };
  }
  if (wildcard && isIP(host)) return { error: 'a wildcard applies to host names, not IP addresses' };
  if (isIP(host) && ['unspecified', 'multicast', 'broadcast', 'reserved'].includes(classifyAddress(host))) {
    return { error: `${host} can never be a target` };
  }
  return { host: wildcard ? `*.${host}` : host };
}

/** The host the URL parser calls for a name written in Unicode, when it is a plain ASCII name; else null. */
function asciiHostOf(written: string): string | null {
  try {
    const host = new URL(`http://${written}/`).hostname;
    return /^[a-z0-9.-]+$/.test(host) ? host : null;
  } catch {
    return null;
  }
}

export const AllowedHostSchema = z
  .strictObject({
    host: z.string().min(1).max(253),
    ports: z
      .array(z.number().int().min(1).max(65_535))
      .min(1)
      .max(20)
      // Stored and shown twice otherwise, while the same port in another entry of the host is refused (shadowed).
      .refine((ports) => new Set(ports).size === ports.length, {
        message: 'a port is named twice',
        params: { rule: 'unique' },
      })
      .optional(),
    allow_private: z.boolean().optional(),
    secrets: z
      .array(
        z
          .string()
          .regex(
            BOUND_SECRET,
            `a secret's name (letters, digits, "_", "." and "-", at most 64) or "${ANY_SECRET}" for every secret`,
          ),
      )
      .max(50, 'at most 50 secret names per host')
      .refine((names) => new Set(names).size === names.length, {
        message: 'a secret is named twice',
        params: { rule: 'unique' },
      })
      .optional()
      .describe(
        `the tenant's secrets that may be sent to this host ({{secret:NAME}} in a header value), or ["${ANY_SECRET}"] for every one; absent: none. A name not set yet is allowed`,
      ),
  })
  .transform((entry, ctx) => {
    const normalized = normalizeAllowedHost(entry.host);
    if ('error' in normalized) {
      ctx.addIssue({ code: 'custom', path: ['host'], message: normalized.error, params: { rule: 'invalid_format' } });
      return z.NEVER;
    }
    // The key is always written ("none" as []): an entry without it can then only come from code older than the
    // binding, which is what the migration that added it reads it as (every secret).
    return { ...entry, host: normalized.host, secrets: entry.secrets ?? [] };
  });

export const SpendingCapSchema = z
  .strictObject({
    period: z.enum(Object.keys(SPENDING_PERIOD_SECONDS) as [SpendingPeriod, ...SpendingPeriod[]]),
    max_operations: z.number().int().min(0).max(1_000_000_000).optional(),
    // A cap of 0 or less would refuse everything, or (negative) invite amounts that buy the cap back.
    max_amount: z.number().positive().max(MAX_RULE_AMOUNT).optional(),
    amount_field: z.string().max(200).regex(FIELD_PATH, FIELD_PATH_RULE).optional(),
    amount_decimals: z
      .number()
      .int()
      .min(0)
      .max(MAX_AMOUNT_DECIMALS)
      .optional()
      .describe(
        'at most this many digits after the decimal point in an amount at amount_field (the places the target charges in: 2 for a major unit with cents, 0 for minor units); an amount with more is refused, never sent: a target that rounds 0.004 up to 0.01 would charge more than the cap counts. Absent: any. Only with max_amount',
      ),
    currency: z
      .string()
      .regex(CURRENCY_CODE, CURRENCY_CODE_RULE)
      .optional()
      .describe(
        'the ISO 4217 currency of max_amount: an operation in any other one (at currency_field) is refused; absent: amounts of any currency count as one unit',
      ),
    currency_field: z
      .string()
      .max(200)
      .regex(FIELD_PATH, FIELD_PATH_RULE)
      .optional()
      .describe('where the currency is in the params (default `currency`); only with currency'),
  })
  .superRefine((cap, ctx) => {
    /** `field` given without `needed` is refused; the API names the rule `requires_<needed>`. */
    const onlyWith = (field: keyof typeof cap, needed: keyof typeof cap) => {
      if (cap[field] === undefined || cap[needed] !== undefined) return;
      ctx.addIssue({
        code: 'custom',
        path: [field],
        message: `${field} is only used with ${needed}`,
        params: { rule: `requires_${needed}` },
      });
    };
    if (cap.max_operations === undefined && cap.max_amount === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['max_operations'],
        message: 'give max_operations and/or max_amount',
        params: { rule: 'required' },
      });
    }
    if (cap.max_amount !== undefined && cap.amount_field === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['amount_field'],
        message: 'max_amount needs the params field to sum',
        params: { rule: 'required' },
      });
    }
    if (cap.max_amount === undefined && cap.amount_field !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['max_amount'],
        message: 'amount_field is only used with max_amount',
        params: { rule: 'requires_max_amount' },
      });
    }
    onlyWith('amount_decimals', 'max_amount');
    onlyWith('currency', 'max_amount');
    onlyWith('currency_field', 'currency');
  });

/**
 * The earlier entry that takes every URL `entries[i]` would (or some of its ports), or -1. A URL falls under the first
 * entry naming its host, and only entries written for that same host are read for its port (egress
 * `allowlistEntryOf`): a later entry for the same host is never read for a port an earlier one allows, and a host a
 * wildcard before it names is never judged by it at all.
 */
function shadowingEntry(entries: readonly { host: string; ports?: number[] }[], i: number): number {
  const entry = entries[i];
  return entries.slice(0, i).findIndex((earlier) => {
    if (earlier.host === entry.host) {
      if (!earlier.ports?.length) return true;
      return (entry.ports ?? []).some((port) => earlier.ports!.includes(port));
    }
    if (!earlier.host.startsWith('*.')) return false;
    // A wildcard names every host of a later entry it covers (`*.example.com`: `api.example.com`, `*.api.example.com`).
    return hostMatches(earlier.host, entry.host.startsWith('*.') ? entry.host.slice(2) : entry.host);
  });
}

/**
 * An entry that can never apply is refused (`shadowed`), not kept: its secrets, ports or allow_private would read as in
 * force and never be (the admin who wrote a second entry for a host, to bind a secret there, got secret_not_bound).
 */
function refuseShadowedEntries(entries: { host: string; ports?: number[] }[], ctx: z.RefinementCtx): void {
  entries.forEach((entry, i) => {
    const j = shadowingEntry(entries, i);
    if (j < 0) return;
    const ports = entry.ports?.length ? ` (port ${entry.ports.join(', ')})` : '';
    ctx.addIssue({
      code: 'custom',
      path: [i, 'host'],
      message:
        `never applies: a URL to ${entry.host}${ports} falls under allow_hosts[${j}] (${entries[j].host}), the first ` +
        'entry that names it; put the more specific entry first, give it other ports, or merge the two',
      params: { rule: 'shadowed' },
    });
  });
}

/**
 * The secrets a tenant may hold for one connector, all its changes together (a change takes at most 50). Each API
 * process keeps a tenant's values to redact its answers, and every operation a dispatcher reads carries its
 * connector's: without a bound, one tenant's admin filled the memory of processes that serve every tenant.
 */
export const MAX_SECRETS_PER_CONNECTOR = 100;

/**
 * PUT /v1/admin/connector-settings/{connector}. Each field given replaces that setting; a field left out is kept.
 * Secrets merge by name (a value sets it, null deletes it): they are write-only, so nobody could re-send them all.
 */
export const ConnectorSettingsInputSchema = z
  .strictObject({
    allow_hosts: z.array(AllowedHostSchema).max(100).superRefine(refuseShadowedEntries).optional(),
    spending_caps: z
      .array(SpendingCapSchema)
      .max(8)
      .refine((caps) => new Set(caps.map((c) => c.period)).size === caps.length, {
        message: 'at most one cap per period',
        params: { rule: 'unique' },
      })
      // Every operation is checked against every cap of its connector: caps in two currencies would refuse every amount
      // (each is in the other one's wrong currency), and a cap without a currency next to one with would count both.
      .refine(
        (caps) => new Set(caps.filter((c) => c.max_amount !== undefined).map((c) => c.currency ?? '')).size <= 1,
        {
          message:
            'the amount caps of one connector count one currency: give every cap with max_amount the same currency (or none)',
          params: { rule: 'one_currency' },
        },
      )
      .optional(),
    read_back_binding: z
      .enum(READ_BACK_BINDINGS)
      .optional()
      .describe(
        'which read-backs the operations may be verified by (http only): "declared" (default) any they declare; "bound" only one that asks the request\'s own origin and names this effect ({{ref}}, {{operation_id}} or {{idempotency_key}} in its URL or a header value)',
      ),
    secrets: z
      .record(
        z.string().regex(SECRET_NAME_CHARACTERS, 'letters, digits, "_", "." and "-", at most 64'),
        SecretValue.nullable(),
      )
      .superRefine((secrets, ctx) => {
        for (const [name, value] of Object.entries(secrets)) {
          if (value === null || SECRET_NAME.test(name)) continue;
          ctx.addIssue({
            code: 'custom',
            path: [name],
            message: `a secret may not be named "${name}": it is a path segment every URL resolves away, so DELETE …/secrets/${name} could never name it`,
            params: { rule: 'secret_name' },
          });
        }
      })
      .refine((s) => Object.keys(s).length <= 50, {
        message: 'at most 50 secrets per request',
        params: { rule: 'too_big' },
      })
      .optional(),
  })
  // A body that names no setting (`{}`, or only `secrets: {}`) changed nothing, yet was recorded as a change by this
  // admin (and moved updated_at).
  .refine(
    (input) =>
      Object.entries(input).some(
        ([name, value]) => value !== undefined && (name !== 'secrets' || Object.keys(value as object).length > 0),
      ),
    { message: 'name at least one setting to change', params: { rule: 'no_change' } },
  );
export type ConnectorSettingsInput = z.infer<typeof ConnectorSettingsInputSchema>;

/**
 * For a cap with an amount: the params path it sums, and this operation's amount there — null unless it is a positive
 * finite number of the cap's unit, with no more decimal places than the cap's `amount_decimals`. Anything else is refused before dispatch: a negative amount would buy the cap back
 * (and a string, NaN or zero would pass it uncounted). For a cap with a currency, `currencyMismatch` says when the
 * operation's currency is not exactly the cap's (its amount is then not in the cap's unit, and it is refused too).
 */
export function capAmount(
  params: Record<string, unknown>,
  cap: { amount_field?: string; amount_decimals?: number; currency?: string; currency_field?: string },
): { path: string[]; amount: number | null; currencyMismatch?: { field: string; found: unknown } } | null {
  if (!cap.amount_field) return null;
  const found = readField(params, cap.amount_field);
  const mismatch = currencyMismatch(cap, (path) => {
    const at = readField(params, path);
    return at.found ? at.value : undefined;
  });
  return {
    path: fieldSegments(cap.amount_field),
    amount: found.found ? chargeableAmount(found.value, cap.amount_decimals) : null,
    ...(mismatch ? { currencyMismatch: mismatch } : {}),
  };
}

/** A positive finite number (with at most `decimals` decimal places, when given), or null. */
export function chargeableAmount(value: unknown, decimals?: number): number | null {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) return null;
  return decimals === undefined || decimalPlaces(value) <= decimals ? value : null;
}
