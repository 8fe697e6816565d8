import { rawJsonIssue, rawJsonNumberAt } from '@verity/platform';
import { isIP } from 'node:net';
import { z } from 'zod';
import {
  EGRESS_REFUSED,
  OperationStatus,
  SECRET_NOT_BOUND,
  SECRET_NOT_SET,
  TerminalReason,
  foldedMemberName,
} from '@verity/status-model';
import { SendOutcome, classifySend, isRejectableStatus } from './classify';
import { ANY_SECRET } from './connector';
import type {
  AllowedHost,
  Connector,
  ConnectorCapabilities,
  ConnectorEnvironment,
  ConnectorOperation,
  ContextResult,
  ReadBackBindingProblem,
  ReadBackResult,
  ReadEvidence,
  SecretBindingProblem,
} from './connector';
import {
  Resolver,
  allowlistEntryOf,
  checkTarget,
  classifyAddress,
  cleartextSecretRefusal,
  lookupFor,
  PlatformService,
  platformRefusalOf,
  nonCanonicalIpv4,
  rawHostOf,
  systemResolver,
  urlDotSegmentProblem,
  urlFragmentProblem,
  urlSpellingProblem,
  urlWrittenHiddenCharacterProblem,
} from './egress';
import { HttpExchange, HttpExchangeRequest, httpExchange } from './http-exchange';
import { FIELD_PATH, FIELD_PATH_RULE, clipValue, fieldKey, fieldSegments, readField, sameJson } from './json-path';
import { holdsRedactedSecret, secretPlaceholder, secretRedactor } from './secret-redaction';
import { holdsReplacedText } from './storable-text';

/** Response bodies beyond this are not parsed; nothing of a body is kept but one extracted field. */
export const HTTP_MAX_RESPONSE_BYTES = 64 * 1024;
const MAX_BODY_CHARS = 64 * 1024;

/**
 * Headers the client sets itself, or that would let a request template smuggle a second request or reach a proxy —
 * or tell a proxy or framework in front of an allowlisted host to act on another host, path or method than the
 * request names: routed by them, the call reaches what the allowlist never judged, and a read (GET) may become a
 * write that every reconciliation read repeats, while the record shows the URL and method the operation names.
 */
const FORBIDDEN_HEADERS = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'expect',
  'te',
  'trailer',
  'proxy-authorization',
  'proxy-connection',
  'forwarded',
  'x-forwarded-host',
  'x-forwarded-for',
  'x-forwarded-proto',
  'x-forwarded-port',
  'x-forwarded-prefix',
  'x-forwarded-uri',
  'x-forwarded-server',
  'x-original-host',
  'x-original-uri',
  'x-original-url',
  'x-rewrite-url',
  'x-http-method-override',
  'x-http-method',
  'x-method-override',
  'x-original-method',
]);

/**
 * Whether a header name is refused, ignoring case and `_` for `-`: a CGI-style server (PHP, WSGI and the like) reads
 * `X_Forwarded_Host` as HTTP_X_FORWARDED_HOST, the variable `X-Forwarded-Host` becomes.
 */
function forbiddenHeader(name: string): boolean {
  return FORBIDDEN_HEADERS.has(name.toLowerCase().replace(/_/g, '-'));
}

const PLACEHOLDER = /\{\{\s*([^{}]*?)\s*\}\}/g;
const SECRET_PLACEHOLDER = /^secret:([A-Za-z0-9_.-]{1,64})$/;

/** Where each template variable may appear. Secrets only in header values: never in URLs, bodies or evidence. */
type Place = 'url' | 'body' | 'header' | 'read_back_url' | 'read_back_header';
const VARIABLES: Record<Place, { ref: boolean; secret: boolean }> = {
  url: { ref: false, secret: false },
  body: { ref: false, secret: false },
  header: { ref: false, secret: true },
  read_back_url: { ref: true, secret: false },
  read_back_header: { ref: true, secret: true },
};

/** The provider's reference as a template variable: `{{ref}}`, spaces allowed inside the braces. */
const REF_VARIABLE = /\{\{\s*ref\s*\}\}/;

/** Whether a read-back puts the provider's reference in one of its headers (where it is not percent-encoded). */
function refInHeader(spec: { headers?: Record<string, string> }): boolean {
  return Object.values(spec.headers ?? {}).some((text) => REF_VARIABLE.test(text));
}

/** Whether a read-back is built from the provider's reference: `{{ref}}` in its URL or in one of its headers. */
function readBackUsesRef(spec: { url: string; headers?: Record<string, string> }): boolean {
  return REF_VARIABLE.test(spec.url) || refInHeader(spec);
}

/** The variables that name this operation's effect: the provider's reference for it, or values only it has. */
const EFFECT_VARIABLE = /\{\{\s*(?:ref|operation_id|idempotency_key)\s*\}\}/;

/**
 * A URL template parsed with a harmless value for each variable, or null if it does not parse. Variables never stand
 * in the scheme, host or port (`urlProblem`), so what it says of those is what every request built from it will say.
 */
function templateUrl(template: string): URL | null {
  try {
    return new URL(template.replace(PLACEHOLDER, 'x'));
  } catch {
    return null;
  }
}

/** scheme://host:port of a URL template, or null. */
function originOf(template: string): string | null {
  return templateUrl(template)?.origin ?? null;
}

/** The secrets a header value names (`{{secret:NAME}}`). */
function secretNamesIn(template: string): string[] {
  return [...template.matchAll(PLACEHOLDER)].flatMap((m) => SECRET_PLACEHOLDER.exec(m[1])?.[1] ?? []);
}

/**
 * The secrets these headers name that the allowlist entry of `url` does not bind (`AllowedHost.secrets`; absent binds
 * none, `"*"` every one). A URL that is not on the allowlist, or does not parse, is the egress check's to refuse: the
 * request is never made, so no secret can leave with it. `field` is where the headers are, under the operation.
 */
function unboundSecrets(
  url: URL | null,
  headers: Record<string, string> | undefined,
  allowHosts: readonly AllowedHost[] | undefined,
  field: string,
): SecretBindingProblem[] {
  if (!url || !headers) return [];
  const found = allowlistEntryOf(url, allowHosts);
  if ('refusal' in found) return [];
  const bound = found.entry.secrets ?? [];
  // Over plain http a secret reaches whoever is on the way: only within the operator's own network, which an entry
  // reaches only with allow_private (the address is judged at the call, cleartextSecretRefusal). Without it, never.
  const cleartext = url.protocol === 'http:' && found.entry.allow_private !== true;
  if (bound.includes(ANY_SECRET) && !cleartext) return [];
  const target = `${isIP(found.host) === 6 ? `[${found.host}]` : found.host}:${found.port}`;
  return Object.entries(headers).flatMap(([name, value]) =>
    secretNamesIn(value)
      .filter((secret) => cleartext || !bound.includes(secret))
      .map((secret) => ({
        field: `${field}.${name}`,
        secret,
        target,
        message:
          bound.includes(secret) || bound.includes(ANY_SECRET)
            ? `secret "${secret}" may not be sent to ${target} over plain http://: on the way it can be read, and answered, by whoever is between (only an entry with allow_private may take one in cleartext, and only at a private or loopback address); use https://`
            : `secret "${secret}" may not be sent to ${target}: the tenant's allowlist entry for it does not bind it (allow_hosts[].secrets)`,
      })),
  );
}

/**
 * The secrets an `http` operation would send to a host whose allowlist entry does not bind them: in the request's
 * headers, the read-back's and the context read's, each judged by its own URL (templates parsed as `templateUrl`
 * does). Without the binding an agent — or whoever injected its prompt — could send a token meant for the CRM to any
 * other allowlisted host (a webhook receiver, an echo service) and have it come back. Refused at intake (the API) and
 * at the call (`HttpConnector.headers`, for an operation accepted before its admin changed the allowlist).
 */
export function httpSecretBindingProblems(
  params: {
    url: string;
    headers?: Record<string, string>;
    read_back?: { url: string; headers?: Record<string, string> } | null;
    context?: { url: string; headers?: Record<string, string> } | null;
  },
  allowHosts: readonly AllowedHost[] | undefined,
): SecretBindingProblem[] {
  const requests = [
    { field: 'params.headers', spec: params },
    { field: 'params.read_back.headers', spec: params.read_back },
    { field: 'params.context.headers', spec: params.context },
  ];
  return requests.flatMap(({ field, spec }) =>
    spec ? unboundSecrets(templateUrl(spec.url), spec.headers, allowHosts, field) : [],
  );
}

/**
 * Why a declared read-back does not count under the tenant's `read_back_binding: "bound"` (empty: it does, or there is
 * none). The read-back is the agent's to declare, so without this rule it could ask any allowlisted URL whose field
 * happens to equal `equals` (a status page that always says "ok") and a call that did nothing would end VERIFIED. Bound,
 * it must (a) ask the request's own origin (scheme, host, port), and (b) name this effect: `{{ref}}`,
 * `{{operation_id}}` or `{{idempotency_key}}` in its URL — path or query: a fragment never reaches the target — or in
 * one of its header values. `equals` does not count: it is compared here, never sent. The rule is structural: it
 * cannot tell whether the target honours what it is asked (docs/connectors.md).
 */
export function httpReadBackBindingProblems(params: {
  url: string;
  read_back?: { url: string; headers?: Record<string, string> } | null;
  context?: { url: string; headers?: Record<string, string>; equals?: unknown } | null;
}): ReadBackBindingProblem[] {
  return [
    ...bindingProblemsOf('read_back', params.url, params.read_back),
    // A context read with `equals` ends the operation VERIFIED (`no_change_required`) without a send when the field
    // already equals it: as much a verdict as a read-back's, so bound by the same rule. Without `equals` it only
    // reports the state (a mismatch with the agent's expected_state holds the operation; it can verify nothing).
    ...(params.context && params.context.equals !== undefined
      ? bindingProblemsOf('context', params.url, params.context)
      : []),
  ];
}

function bindingProblemsOf(
  name: 'read_back' | 'context',
  requestUrl: string,
  spec: { url: string; headers?: Record<string, string> } | null | undefined,
): ReadBackBindingProblem[] {
  if (!spec) return [];
  const problems: ReadBackBindingProblem[] = [];
  const request = originOf(requestUrl);
  const read = originOf(spec.url);
  if (request === null || read === null || request !== read) {
    problems.push({
      of: name,
      field: `params.${name}.url`,
      condition: 'origin',
      message: `${name} must ask the request's own origin (${request ?? 'unknown'}), not ${read ?? 'another'}: the tenant's read_back_binding is "bound"`,
    });
  }
  if (!namesEffectWhenSent(spec)) {
    const variables =
      name === 'read_back'
        ? '{{ref}}, {{operation_id}} or {{idempotency_key}}'
        : '{{operation_id}} or {{idempotency_key}}';
    problems.push({
      of: name,
      field: `params.${name}`,
      condition: 'names_effect',
      message: `${name} must name this effect: ${variables} in its URL (path or query) or in a header value (equals does not count): the tenant's read_back_binding is "bound"`,
    });
  }
  return problems;
}

/**
 * Whether the read-back, as it will be sent, carries a value only this effect has: judged on the URL the client will
 * request (WHATWG-parsed: dot segments removed, the fragment never sent) and the header values (names are unique
 * ignoring case: the schema refuses a name given twice), not on the template's text, where `/x/{{operation_id}}/../`
 * names a value that never reaches the target.
 */
function namesEffectWhenSent(spec: { url: string; headers?: Record<string, string> }): boolean {
  const MARK = 'verity-effect-value-0b7c5e';
  const marked = (text: string) =>
    text.replace(PLACEHOLDER, (whole: string, name: string) =>
      EFFECT_VARIABLE.test(whole) ? MARK : `x${name.length}`,
    );
  const written = marked(spec.url);
  try {
    const url = new URL(written);
    if (`${url.pathname}${url.search}`.includes(MARK)) return true;
  } catch {
    // Not a URL: refused by the schema anyway.
  }
  return Object.values(spec.headers ?? {}).some((value) => marked(value).includes(MARK));
}

/**
 * A variable whose braces are written wrong: `{{idempotency_key}`, `{{ ref }`, `{{secret:crm_token}` (opened, never
 * closed) or `{operation_id}}` (closed, opened with one brace). No variable is read from it, so it would be sent as
 * written — the same text for every operation: one literal idempotency key or external id that a provider which
 * deduplicates reads as a replay of the first operation (acknowledged, and found by a read-back that asks for it).
 */
const HALF_PLACEHOLDER = /\{\s*(?:operation_id|idempotency_key|ref|secret:[A-Za-z0-9_.-]*)\s*\}\}/;

function malformedPlaceholder(text: string): string | null {
  // What is left once every well-formed variable is taken out (a space in its place: it never makes a brace pair).
  const rest = text.replace(PLACEHOLDER, ' ');
  if (rest.includes('{{') || HALF_PLACEHOLDER.test(rest)) {
    return 'a template variable is written {{name}} ({{operation_id}}, {{idempotency_key}}, {{ref}}, {{secret:NAME}}): this one has a "{{" or "}}" without its other half, so it would be sent as written, the same text for every operation';
  }
  return null;
}

function placeholderProblem(text: string, place: Place): string | null {
  const malformed = malformedPlaceholder(text);
  if (malformed) return malformed;
  for (const match of text.matchAll(PLACEHOLDER)) {
    const name = match[1];
    if (name === 'operation_id' || name === 'idempotency_key') continue;
    if (name === 'ref') {
      if (VARIABLES[place].ref) continue;
      return '{{ref}} (the reference the provider returned) can only be used in read_back';
    }
    if (SECRET_PLACEHOLDER.test(name)) {
      if (VARIABLES[place].secret) continue;
      return 'secrets ({{secret:NAME}}) can only be used in header values';
    }
    return `unknown template variable {{${name}}} (known: operation_id, idempotency_key, ref, secret:NAME)`;
  }
  return null;
}

/** Schema-level URL rules (tenant-independent): the allowlist and DNS are checked when the request is made. */
function urlProblem(raw: string, place: Place): string | null {
  const placeholder = placeholderProblem(raw, place);
  if (placeholder) return placeholder;
  // A dot segment in the request's or the context read's path is resolved away by the parser: an approver and the
  // record read `/x/../y` while `/y` is called. (A read-back's URL is judged as it is sent: `readBackBindingProblems`.)
  // A control, bidi or invisible character written in it makes the URL an approver reads another than the one called.
  const spelling =
    urlSpellingProblem(raw) ??
    urlWrittenHiddenCharacterProblem(raw) ??
    urlFragmentProblem(raw) ??
    (place === 'url' ? urlDotSegmentProblem(raw) : null);
  if (spelling) return spelling;
  const authority = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i.exec(raw)?.[1];
  if (authority === undefined) return 'an absolute http:// or https:// URL';
  if (authority.includes('{')) return 'template variables are not allowed in the scheme, host or port';
  const url = templateUrl(raw);
  if (!url) return 'not a valid URL';
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return 'only http:// and https:// URLs are allowed';
  if (url.username || url.password) return 'credentials in the URL are not allowed; use a header with a secret';
  if (!rawHostOf(raw)) return 'the URL has no host';
  if (nonCanonicalIpv4(raw)) return 'IPv4 addresses must be written in dotted-decimal form (e.g. 192.0.2.10)';
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host)) {
    const category = classifyAddress(host);
    if (['unspecified', 'multicast', 'broadcast', 'reserved'].includes(category)) {
      return `${host} is a ${category} address and can never be a target`;
    }
  }
  return null;
}

const TargetUrl = (place: Place) =>
  z
    .string()
    .min(1)
    .max(2048)
    .superRefine((raw, ctx) => {
      const problem = urlProblem(raw, place);
      // Each refusal names its rule (zod's `custom` names none): a template variable, or the URL's own form.
      const rule = placeholderProblem(raw, place) ? 'invalid_placeholder' : 'invalid_format';
      if (problem) ctx.addIssue({ code: 'custom', message: problem, params: { rule } });
    });

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$/;
const FORBIDDEN_HEADER_RULE = 'this header is set by Verity or not allowed';

const HeaderName = z
  .string()
  .regex(HEADER_NAME, 'an HTTP header name')
  .refine((name) => !forbiddenHeader(name), { message: FORBIDDEN_HEADER_RULE, params: { rule: 'forbidden_header' } })
  // The name becomes a member of the request's headers (a plain object), where "__proto__" is no member: the idempotency
  // key set under it was never sent, while the operation said the provider deduplicates its call.
  .refine((name) => name.toLowerCase() !== '__proto__', {
    message:
      '"__proto__" cannot be a header name here (it is no member of the request\'s headers: the header would not be sent)',
    params: { rule: 'forbidden_header' },
  });

const Headers = (place: Place) =>
  z
    .record(
      z.string().regex(HEADER_NAME, 'an HTTP header name'),
      z
        .string()
        .max(4096)
        // eslint-disable-next-line no-control-regex -- the characters a header value cannot hold are the point
        .regex(/^[^\x00-\x08\x0a-\x1f\x7f]*$/, 'no line breaks or other control characters (a tab is allowed)')
        // One byte per character on the wire: "€" was refused as "no line breaks", a cause it did not have.
        .regex(
          /^[^\u0100-\uffff]*$/,
          'no character a header value cannot carry as one byte (such as "€" or "日"): U+00FF at most',
        )
        // Sent without them (fetch trims a header value): the operation would record another value than the one sent.
        .regex(
          /^(?![\t ]).*(?<![\t ])$/s,
          'no spaces or tabs at either end (an HTTP header value loses them on the way)',
        ),
    )
    .superRefine((headers, ctx) => {
      if (Object.keys(headers).length > 32) {
        ctx.addIssue({ code: 'custom', message: 'at most 32 headers', params: { rule: 'too_big' } });
      }
      const seen = new Set<string>();
      for (const [name, value] of Object.entries(headers)) {
        // Header names are case-insensitive: of `X-Op` and `x-op` only the last would be sent, the other dropped
        // without a word (and a read-back could seem to name its effect in a header that never leaves).
        if (seen.has(name.toLowerCase())) {
          ctx.addIssue({
            code: 'custom',
            path: [name],
            message: 'this header is given twice (names ignore case)',
            params: { rule: 'duplicate_key' },
          });
        }
        seen.add(name.toLowerCase());
        if (forbiddenHeader(name)) {
          ctx.addIssue({
            code: 'custom',
            path: [name],
            message: FORBIDDEN_HEADER_RULE,
            params: { rule: 'forbidden_header' },
          });
        }
        const problem = placeholderProblem(value, place);
        if (problem) {
          ctx.addIssue({ code: 'custom', path: [name], message: problem, params: { rule: 'invalid_placeholder' } });
        }
      }
    });

const FieldPath = z.string().max(200).regex(FIELD_PATH, FIELD_PATH_RULE);

/** Whether a header is Content-Type, named as forbiddenHeader compares names (case, and `_` read as `-`). */
function isContentType(name: string): boolean {
  return name.toLowerCase().replace(/_/g, '-') === 'content-type';
}

const JSON_MEDIA_TYPE = /^application\/(?:[!#$&^_.+0-9a-z-]+\+)?json$/i;

/**
 * Whether a Content-Type an operation gives its request says what the body is: JSON (`application/json`, or a type of
 * the `+json` family such as `application/merge-patch+json`), in UTF-8 if it names a charset. The body is always sent
 * as the JSON text of `body`; labelled a form, a target reads `amount=1000000` out of a string value of it, an amount
 * no spending cap or approval threshold ever read (they read `body.amount` of the JSON).
 */
function jsonContentType(value: string): boolean {
  const [type, ...parameters] = value.split(';');
  if (!JSON_MEDIA_TYPE.test(type.trim())) return false;
  return parameters.every((parameter) => {
    const at = parameter.indexOf('=');
    if (
      parameter
        .slice(0, at === -1 ? undefined : at)
        .trim()
        .toLowerCase() !== 'charset'
    )
      return true;
    // `utf8` is a common spelling of UTF-8, as the API reads its own bodies' charset.
    return /^"?utf-?8"?$/i.test(parameter.slice(at + 1).trim());
  });
}

const JSON_CONTENT_TYPE_RULE =
  'the body is sent as JSON (UTF-8): a Content-Type naming another media type (a form, text) or charset would have the target read it otherwise than a spending cap or an approval threshold reads it; give application/json, an application/…+json type, or none';

/**
 * The members of the body's objects whose name an earlier member of the same object has too when names are compared
 * ignoring case, NFKC forms, invisible characters and spaces at either end (the status model's foldedMemberName), each
 * as its path in the body. JSON.parse keeps `amount` and `AMOUNT` apart, and so does
 * a spending cap or an approval threshold reading `body.amount`; a target that binds names ignoring case takes the
 * last of them, an amount neither ever read. Iterative, as every walk of a caller's JSON.
 */
function caseFoldedDuplicates(body: unknown): (string | number)[][] {
  type Visit = { value: unknown; key: string | number | null; parent: Visit | null };
  const pathOf = (visit: Visit): (string | number)[] => {
    const path: (string | number)[] = [];
    for (let at: Visit | null = visit; at && at.key !== null; at = at.parent) path.unshift(at.key);
    return path;
  };
  const found: (string | number)[][] = [];
  const stack: Visit[] = [{ value: body, key: null, parent: null }];
  while (stack.length > 0) {
    const visit = stack.pop()!;
    const { value } = visit;
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i -= 1) stack.push({ value: value[i], key: i, parent: visit });
      continue;
    }
    if (typeof value !== 'object' || value === null) continue;
    const names = new Set<string>();
    const members = Object.entries(value);
    for (const [name] of members) {
      const folded = foldedMemberName(name);
      if (names.has(folded)) found.push(pathOf({ value: undefined, key: name, parent: visit }));
      names.add(folded);
    }
    for (let i = members.length - 1; i >= 0; i -= 1) {
      stack.push({ value: members[i][1], key: members[i][0], parent: visit });
    }
  }
  return found;
}

const ReadBackSpec = z.strictObject({
  method: z.literal('GET').optional().describe('read-backs only read: GET'),
  url: TargetUrl('read_back_url'),
  headers: Headers('read_back_header').optional(),
  field: FieldPath,
  equals: z.json().describe('the value the field must hold for the effect to count as verified'),
});

const ContextSpec = z.strictObject({
  url: TargetUrl('url'),
  headers: Headers('header').optional(),
  field: FieldPath,
  equals: z.json().optional().describe('the field already holding this value means no change is required'),
});

const RequestParams = z
  .strictObject({
    method: z.enum(['GET', 'POST', 'PUT', 'PATCH', 'DELETE']),
    url: TargetUrl('url'),
    headers: Headers('header').optional(),
    body: z.json().optional(),
    reject_statuses: z
      .array(
        z
          .number()
          .int()
          .refine(isRejectableStatus, {
            message: '4xx codes only, and never 408 or 429 (those leave the outcome unknown)',
            params: { rule: 'rejectable_status' },
          }),
      )
      .max(20)
      .optional()
      .describe('codes the target documents as "refused, nothing happened": FAILED instead of UNKNOWN'),
    read_back: ReadBackSpec.optional(),
    context: ContextSpec.optional(),
    idempotency: z
      .strictObject({
        // Its value, `verity-<operation id>`, would replace the body's media type.
        header: HeaderName.refine((name) => !isContentType(name), {
          message: 'the idempotency key cannot be the Content-Type',
          params: { rule: 'forbidden_header' },
        }),
      })
      .optional()
      .describe('send an idempotency key derived from the operation id in this header'),
    ref_field: FieldPath.optional().describe('a field of the 2xx response to keep as {{ref}} for the read-back'),
    timeout_ms: z.number().int().min(100).max(60_000).optional(),
  })
  .superRefine((params, ctx) => {
    if (params.body !== undefined) {
      const text = JSON.stringify(params.body);
      if (text.length > MAX_BODY_CHARS) {
        ctx.addIssue({
          code: 'custom',
          path: ['body'],
          message: `at most ${MAX_BODY_CHARS} characters of JSON`,
          params: { rule: 'too_big' },
        });
      }
      const problem = placeholderProblem(text, 'body');
      if (problem) {
        ctx.addIssue({ code: 'custom', path: ['body'], message: problem, params: { rule: 'invalid_placeholder' } });
      }
      for (const path of caseFoldedDuplicates(params.body)) {
        const name = String(path[path.length - 1]);
        ctx.addIssue({
          code: 'custom',
          path: ['body', ...path],
          message: `${JSON.stringify(name.slice(0, 64))} names a member its object already has when names are compared ignoring case, Unicode compatibility forms (NFKC), invisible characters and spaces at either end: a target that reads them so (Go's encoding/json, ASP.NET, one that normalises names) would take the last one, not the member a spending cap or an approval threshold reads`,
          params: { rule: 'duplicate_key' },
        });
      }
      if (params.method === 'GET') {
        ctx.addIssue({
          code: 'custom',
          path: ['body'],
          message: 'a GET request has no body',
          params: { rule: 'no_body' },
        });
      }
      for (const [name, value] of Object.entries(params.headers ?? {})) {
        if (!isContentType(name) || jsonContentType(value)) continue;
        ctx.addIssue({
          code: 'custom',
          path: ['headers', name],
          message: JSON_CONTENT_TYPE_RULE,
          params: { rule: 'json_content_type' },
        });
      }
    }
    if (params.read_back && readBackUsesRef(params.read_back) && !params.ref_field) {
      ctx.addIssue({
        code: 'custom',
        path: ['ref_field'],
        message: '{{ref}} in read_back needs ref_field',
        params: { rule: 'required' },
      });
    }
  });

export type HttpRequestParams = z.infer<typeof RequestParams>;

/** Headers ready to send, or why the call must not be made (a secret not set, or not bound to the target). */
type PreparedHeaders =
  | { ok: Record<string, string>; secrets: boolean }
  | { refused: string; cause: typeof SECRET_NOT_SET | typeof SECRET_NOT_BOUND };

/**
 * The tenant's secret of this name — its own entry only: a name like `constructor` or `__proto__` is not a secret the
 * tenant set, and must not reach a header as whatever the object's prototype holds under it.
 */
function secretNamed(secrets: Record<string, string> | undefined, name: string): string | undefined {
  if (!secrets || !Object.hasOwn(secrets, name)) return undefined;
  const value = secrets[name];
  return typeof value === 'string' ? value : undefined;
}

/** How much of a value a target answered is kept (a read field), and of the provider's reference. */
const KEPT_ANSWER_CHARS = 1000;
const KEPT_REF_CHARS = 200;

/**
 * The first `maxChars` characters of `text`, or a few more where the cut would fall inside the `{{secret:NAME}}` of one
 * of the tenant's secrets. Only of those: text of that shape naming no secret is the target's own, and extending the cut
 * to wherever its `}}` comes would keep tens of kilobytes of an answer where a thousand characters are promised.
 */
function cutOutsideSecrets(text: string, maxChars: number, secrets: Record<string, string> | undefined): string {
  let end = maxChars;
  for (const name of Object.keys(secrets ?? {})) {
    const marker = secretPlaceholder(name);
    // Placeholders never overlap (one pass writes them), so at most one straddles the cut.
    const at = text.indexOf(marker, Math.max(0, maxChars - marker.length + 1));
    if (at !== -1 && at < maxChars) end = Math.max(end, at + marker.length);
  }
  return text.slice(0, end);
}

/**
 * Where the answer's JSON reads two ways on the path of `field` (a member of it named twice, a number in it that a
 * double cannot keep), or the value there cannot be kept as the target wrote it (unkeptAt), why the field is not read;
 * null when the field reads one way. Only that path counts: a 64-bit id elsewhere in the answer does not make its
 * status unreadable. No value is quoted: it may be a secret echoed.
 */
function unclearAt(exchange: { json?: string; body?: unknown }, field: string): string | null {
  const issue = exchange.json === undefined ? null : rawJsonIssue(exchange.json, fieldSegments(field));
  if (!issue) return unkeptAt(exchange.body, field);
  return issue.rule === 'duplicate_key'
    ? `the answer names ${issue.field} twice: which one the target meant is a guess, so ${field} is not read from it`
    : `the answer holds a number at ${issue.field} that a double cannot keep exactly: ${field} would be read rounded, so it is not read`;
}

/**
 * The text the number at `field` of the answer's JSON was written as, or null where no number is. Read from the text
 * (rawJsonNumberAt), not from JSON.parse's source text access: Node 20 gives a reviver none, and every number was then
 * taken as not written as it reads back.
 */
function numberTextAt(json: string | undefined, field: string): string | null {
  return json === undefined ? null : rawJsonNumberAt(json, fieldSegments(field));
}

/**
 * As deep as a value read from an answer is followed: no `equals` nests deeper (a request body nests at most 64
 * levels), and the walks a kept value goes through (secret redaction, clipping, the comparison with `equals`) recurse.
 */
const MAX_ANSWER_DEPTH = 64;

/**
 * Why the value at `field` of a parsed answer cannot be read as the target wrote it, or null: a number past a double's
 * range (`1e400` parses to Infinity, which JSON, the record and the comparison with `equals` all write as null — an
 * `equals: null` would verify it), or nesting deeper than MAX_ANSWER_DEPTH (64 KiB of JSON nests 32 000 levels, past
 * what a recursive walk survives: it threw a RangeError, and a context read failed its job again and again).
 * Iterative, so no nesting can exhaust the stack.
 */
function unkeptAt(body: unknown, field: string): string | null {
  const read = readField(body, field);
  if (!read.found) return null;
  const pending: { value: unknown; depth: number }[] = [{ value: read.value, depth: 0 }];
  while (pending.length > 0) {
    const { value, depth } = pending.pop()!;
    if (typeof value === 'number' && !Number.isFinite(value)) {
      return `the answer holds a number at ${field} that a double cannot keep (beyond its range, it would be read as null), so it is not read`;
    }
    if (value === null || typeof value !== 'object') continue;
    if (depth >= MAX_ANSWER_DEPTH) {
      return `the answer nests deeper than ${MAX_ANSWER_DEPTH} levels at ${field}: it cannot be kept or compared as written, so it is not read`;
    }
    for (const item of Object.values(value)) pending.push({ value: item, depth: depth + 1 });
  }
  return null;
}

/**
 * What is kept of a value a target answered: the tenant's secret values replaced first, then cut to length (a string
 * to `maxChars`, never inside a `{{secret:NAME}}`; anything else as clipValue does). Cut first, a secret that straddled
 * the cut kept its first characters, which no redaction afterwards (redactingSecrets) can recognise as the secret.
 */
function keptOfAnswer(value: unknown, env: ConnectorEnvironment): unknown {
  const redacted = secretRedactor(env.tenant?.secrets)(value);
  if (typeof redacted !== 'string' || redacted.length <= KEPT_ANSWER_CHARS)
    return clipValue(redacted, KEPT_ANSWER_CHARS);
  const cut = cutOutsideSecrets(redacted, KEPT_ANSWER_CHARS, env.tenant?.secrets);
  return cut.length >= redacted.length ? redacted : `${cut}…`;
}

/**
 * A generic HTTP call to a host the tenant allowlisted. What it can prove depends on the operation: with a
 * `read_back` spec it can reach VERIFIED; without, it ends ACKNOWLEDGED. Responses are never kept or shown raw:
 * only the status and the one field a read-back or context read names.
 */
export class HttpConnector implements Connector {
  readonly name = 'http';
  readonly description =
    'A generic HTTP request to a host on the tenant allowlist (SSRF-guarded, redirects not followed)';
  readonly capabilities = { read_back: true, context_read: true, provider_idempotency: true, reversible: false };
  readonly settings = { allowHosts: true, secrets: true, readBackBinding: true };
  readonly actions = {
    request: {
      description:
        'One HTTP request from a template (method, url, headers, JSON body); optional read_back, context and idempotency',
      params: RequestParams,
      conditions: {
        read_back:
          'only when the operation gives params.read_back (under the tenant\'s read_back_binding "bound", only one that asks the request\'s own origin and names this effect); without it the operation ends ACKNOWLEDGED',
        context_read: 'only when the operation gives params.context',
        provider_idempotency:
          'only when the operation gives params.idempotency, and only if the target honours that header (Verity cannot check it)',
      },
    },
  };

  constructor(private readonly options: { resolver?: Resolver; maxResponseBytes?: number } = {}) {}

  operationCapabilities(_action: string, params: Record<string, unknown>): Partial<ConnectorCapabilities> {
    return {
      read_back: params.read_back !== undefined && params.read_back !== null,
      context_read: params.context !== undefined && params.context !== null,
      provider_idempotency: params.idempotency !== undefined && params.idempotency !== null,
    };
  }

  readBackBindingProblems(_action: string, params: Record<string, unknown>): ReadBackBindingProblem[] {
    return httpReadBackBindingProblems(params as HttpRequestParams);
  }

  secretBindingProblems(
    _action: string,
    params: Record<string, unknown>,
    allowHosts: readonly AllowedHost[] | undefined,
  ): SecretBindingProblem[] {
    return httpSecretBindingProblems(params as HttpRequestParams, allowHosts);
  }

  async send(op: ConnectorOperation, env: ConnectorEnvironment): Promise<SendOutcome> {
    const params = op.params as HttpRequestParams;
    const url = substituteUrl(params.url, op);
    const headers = this.headers(params.headers, url, op, env);
    if ('refused' in headers) {
      // A secret the call names is not set, or not bound to this host: never sent, and it stays so until an admin
      // sets or binds it.
      return {
        status: OperationStatus.FAILED,
        reason: TerminalReason.SOURCE_UNREACHABLE,
        detail: `not sent: ${headers.refused}`,
        refused: { cause: headers.cause, rule: headers.refused },
      };
    }
    if (params.idempotency) {
      // One key per operation, whatever the template said under the same name in another case.
      const name = params.idempotency.header;
      for (const key of Object.keys(headers.ok)) if (key.toLowerCase() === name.toLowerCase()) delete headers.ok[key];
      headers.ok[name] = idempotencyKey(op);
    }
    const exchange = await this.exchange(
      {
        method: params.method,
        url,
        headers: headers.ok,
        body: params.body === undefined ? undefined : substituteBody(params.body, op),
      },
      params.timeout_ms,
      env,
      headers.secrets,
    );
    if (exchange.kind === 'refused') {
      // The tenant's egress policy refused the target, or a secret in cleartext to it: never sent, and not something
      // that passes on its own.
      return {
        status: OperationStatus.FAILED,
        reason: TerminalReason.SOURCE_UNREACHABLE,
        detail: exchange.cause ? `not sent: ${exchange.message}` : `not sent: egress refused: ${exchange.message}`,
        refused: { cause: exchange.cause ?? EGRESS_REFUSED, rule: exchange.message },
      };
    }
    const status = exchange.kind === 'response' ? exchange.status : undefined;
    return classifySend(exchange, {
      rejectionStatuses: params.reject_statuses ?? [],
      // The operation declared these codes itself; a bare 4xx from its own target is the answer it asked for.
      requireErrorBody: false,
      providerRef: (body) => {
        const ref: Record<string, unknown> = { status };
        // Past the size limit the body is not read: said here, so a read-back that needs the reference names why none.
        if (exchange.kind === 'response' && exchange.truncated) ref.body_not_read = 'larger than the connector reads';
        // From JSON that reads two ways no reference is kept: the one read (the last of two ids, an id rounded beyond
        // 2^53) could name another record, whose read-back would verify this call or hide it.
        if (params.ref_field && !(exchange.kind === 'response' && unclearAt(exchange, params.ref_field))) {
          const found = readField(body, params.ref_field);
          // A number is kept only as the provider wrote it: String() of what JSON.parse made of `1e3`, `7.0` or `-0` is
          // another text (1000, 7, 0), and a read-back built from it asks another record than the one the answer named.
          const asWritten =
            !found.found ||
            typeof found.value !== 'number' ||
            (exchange.kind === 'response' && numberTextAt(exchange.json, params.ref_field) === String(found.value));
          if (found.found && asWritten && (typeof found.value === 'string' || typeof found.value === 'number')) {
            // Redacted before it is cut, as keptOfAnswer does (a reference has no marker: it is used as written).
            const whole = secretRedactor(env.tenant?.secrets)(String(found.value));
            const kept = cutOutsideSecrets(whole, KEPT_REF_CHARS, env.tenant?.secrets);
            ref.ref = kept;
            // Cut, it is another reference: said here, so that no read-back is built from it (unusableRef).
            if (kept.length < whole.length) ref.ref_cut = `longer than the ${KEPT_REF_CHARS} characters kept`;
          }
        }
        return ref;
      },
    });
  }

  async readBack(op: ConnectorOperation, env: ConnectorEnvironment): Promise<ReadBackResult> {
    const spec = (op.params as HttpRequestParams).read_back;
    const readAt = () => new Date().toISOString();
    if (!spec) {
      return { kind: 'unreachable', evidence: { source: 'http', read_at: readAt(), error: 'no read_back declared' } };
    }
    if (env.tenant?.readBackBinding === 'bound') {
      // Accepted before the tenant's admin bound read-backs (intake refuses such an operation now): its read-back
      // cannot show this effect, so it is not made. Inconclusive — never VERIFIED, never a proof of absence — so the
      // operation is read again, then held for a person, with this reason in its evidence.
      const unbound = bindingProblemsOf('read_back', (op.params as HttpRequestParams).url, spec);
      if (unbound.length > 0) return notReadUnbound(spec.url, unbound);
    }
    const ref = typeof op.providerRef?.ref === 'string' ? op.providerRef.ref : undefined;
    const unusable = readBackUsesRef(spec)
      ? unusableRef(ref, {
          inPath: refInPath(spec.url),
          inHeader: refInHeader(spec),
          answered: typeof op.providerRef?.status === 'number',
          bodyNotRead: op.providerRef?.body_not_read !== undefined,
          cut: op.providerRef?.ref_cut !== undefined,
        })
      : null;
    if (unusable) {
      return {
        kind: 'unreachable',
        evidence: { source: spec.url, read_at: readAt(), error: unusable.error },
        ...(unusable.notMade && { notMade: true as const }),
      };
    }
    const read = await this.read(spec.url, spec.headers, spec.field, op, env, ref);
    if (read.kind === 'unreachable') return read;
    const { evidence } = read;
    evidence.expected = clipValue(spec.equals);
    if (read.kind === 'absent') return { kind: 'absent', evidence };
    if (!read.value.found) return { kind: 'field_missing', evidence, field: spec.field };
    if (!sameJson(read.value.value, spec.equals)) return { kind: 'mismatch', evidence, fields: [fieldKey(spec.field)] };
    return { kind: 'found', evidence };
  }

  async readContext(op: ConnectorOperation, env: ConnectorEnvironment): Promise<ContextResult> {
    const spec = (op.params as HttpRequestParams).context;
    if (!spec) {
      return {
        kind: 'unreachable',
        evidence: { source: 'http', read_at: new Date().toISOString(), error: 'no context read declared' },
      };
    }
    if (env.tenant?.readBackBinding === 'bound' && spec.equals !== undefined) {
      // As for a read-back (readBack): accepted before the admin bound read-backs, this context read could verify the
      // operation from a source that does not name it. Not made: the state is unknown (the operation is then sent, or
      // waits for its precondition as any unread one).
      const unbound = bindingProblemsOf('context', (op.params as HttpRequestParams).url, spec);
      if (unbound.length > 0) return notReadUnbound(spec.url, unbound);
    }
    const read = await this.read(spec.url, spec.headers, spec.field, op, env, undefined);
    if (read.kind === 'unreachable') return read;
    const key = fieldKey(spec.field);
    const value = read.kind === 'present' && read.value.found ? read.value.value : null;
    const requestedStatePresent =
      spec.equals !== undefined && read.kind === 'present' && read.value.found && sameJson(value, spec.equals);
    return {
      kind: 'state',
      state: { [key]: keptOfAnswer(value, env) },
      requestedStatePresent,
      conflicts: [],
      evidence: read.evidence,
    };
  }

  /** One GET that yields a field, with evidence holding only the status and that field (never the body). */
  private async read(
    rawUrl: string,
    rawHeaders: Record<string, string> | undefined,
    field: string,
    op: ConnectorOperation,
    env: ConnectorEnvironment,
    ref: string | undefined,
  ): Promise<
    | { kind: 'present'; value: ReturnType<typeof readField>; evidence: ReadEvidence }
    | { kind: 'absent'; evidence: ReadEvidence }
    | { kind: 'unreachable'; evidence: ReadEvidence; notMade?: true }
  > {
    // The URL as the client requests it (dot segments resolved, no fragment): what the evidence names is what was asked.
    const source = asRequested(substituteUrl(rawUrl, op, ref));
    const evidence: ReadEvidence = { source, read_at: new Date().toISOString(), field: fieldKey(field) };
    const unreachable = (error: string) => ({ kind: 'unreachable' as const, evidence: { ...evidence, error } });
    // Refused by the tenant's settings before anything left: not made.
    const notMade = (error: string) => ({ ...unreachable(error), notMade: true as const });
    const headers = this.headers(rawHeaders, source, op, env, ref);
    if ('refused' in headers) return notMade(headers.refused);
    const exchange = await this.exchange(
      { method: 'GET', url: source, headers: headers.ok },
      undefined,
      env,
      headers.secrets,
    );
    if (exchange.kind === 'refused') {
      return notMade(exchange.cause ? exchange.message : `egress refused: ${exchange.message}`);
    }
    if (exchange.kind !== 'response') return unreachable(exchange.code);
    evidence.status = exchange.status;
    // Not found there. Whether that proves the effect absent is the status model's call: not for a URL the operation
    // declared (this connector does not declare readBackProvesAbsence).
    if (exchange.status === 404 || exchange.status === 410) return { kind: 'absent', evidence };
    if (exchange.status < 200 || exchange.status >= 300) return unreachable(`status ${exchange.status}`);
    if (exchange.truncated) return unreachable(`response larger than ${this.maxBytes} bytes`);
    // No JSON at all (an empty body, a page from a proxy or portal in front of the target): nothing was read, so no
    // record whose field is missing — that would count as the effect shown (as sandbox.payments reads it too).
    if (exchange.body === undefined) return unreachable('the answer is not JSON: no field can be read from it');
    // JSON that reads two ways is no reading: the parsed value is not what the target wrote (a verification of a value
    // it never sent, or of the one of two it did not mean).
    const unclear = unclearAt(exchange, field);
    if (unclear) return unreachable(unclear);
    const value = readField(exchange.body, field);
    evidence.record = value.found ? { [fieldKey(field)]: keptOfAnswer(value.value, env) } : null;
    // Found no record at all (an empty list, a null where it would stand): as a 404, not a record without the field.
    if (!value.found && value.noRecord) return { kind: 'absent', evidence };
    return { kind: 'present', value, evidence };
  }

  private get maxBytes(): number {
    return this.options.maxResponseBytes ?? HTTP_MAX_RESPONSE_BYTES;
  }

  /**
   * Header templates resolved for a request to `url`; a secret its allowlist entry does not bind, or one that is not
   * set, stops the request before anything leaves. The binding is judged on the URL as it will be requested, by the
   * same entry the egress check then finds for it (`allowlistEntryOf`).
   */
  private headers(
    templates: Record<string, string> | undefined,
    url: string,
    op: ConnectorOperation,
    env: ConnectorEnvironment,
    ref?: string,
  ): PreparedHeaders {
    // A URL that does not parse is refused by the egress check, before any connection: no header leaves.
    const requested = URL.canParse(url) ? new URL(url) : null;
    const [unbound] = unboundSecrets(requested, templates, env.tenant?.allowHosts, 'headers');
    if (unbound) return { refused: unbound.message, cause: SECRET_NOT_BOUND };
    const out: Record<string, string> = {};
    let secrets = false;
    for (const [name, template] of Object.entries(templates ?? {})) {
      const missing: string[] = [];
      out[name] = template.replace(PLACEHOLDER, (_, variable: string) => {
        const secret = SECRET_PLACEHOLDER.exec(variable);
        if (!secret) return variableValue(variable, op, ref);
        secrets = true;
        const value = secretNamed(env.tenant?.secrets, secret[1]);
        if (value === undefined) missing.push(secret[1]);
        return value ?? '';
      });
      if (missing.length > 0) {
        return { refused: `secret "${missing[0]}" is not set for this tenant`, cause: SECRET_NOT_SET };
      }
    }
    return { ok: out, secrets };
  }

  /** Every request of this connector goes through the egress policy: allowlist, then vetted DNS, no redirects. */
  private async exchange(
    request: { method: string; url: string; headers: Record<string, string>; body?: unknown },
    timeoutMs: number | undefined,
    env: ConnectorEnvironment,
    carriesSecret: boolean,
  ): Promise<HttpExchange | GuardedRefusal> {
    return guardedExchange(
      {
        ...request,
        // Never longer than the deployment's connector timeout: the reconciler's absence proof is built on it.
        timeoutMs: Math.min(timeoutMs ?? env.timeoutMs, env.timeoutMs),
        maxResponseBytes: this.maxBytes,
        signal: env.signal,
      },
      env.tenant?.allowHosts,
      this.options.resolver ?? systemResolver,
      env.platform,
      { carriesSecret },
    );
  }
}

/** A request the egress policy did not let leave; `cause` when it was for the secret it carried. */
export type GuardedRefusal = { kind: 'refused'; message: string; cause?: typeof SECRET_NOT_BOUND };

/**
 * One request under the egress policy. IP literals are vetted here (the HTTP client skips DNS for them); names are
 * vetted by the lookup the client calls, so the address that was checked is the address connected to.
 */
export async function guardedExchange(
  request: Omit<HttpExchangeRequest, 'lookup'>,
  allowHosts: readonly AllowedHost[] | undefined,
  resolver: Resolver = systemResolver,
  platform: readonly PlatformService[] = [],
  options: { carriesSecret?: boolean } = {},
): Promise<HttpExchange | GuardedRefusal> {
  const target = checkTarget(request.url, allowHosts, platform);
  if ('code' in target) return { kind: 'refused', message: target.message };
  // A tenant secret in a plain http request goes only to an address of the operator's own network.
  const secretInCleartext = options.carriesSecret === true && target.url.protocol === 'http:';
  // An IP literal is connected to without a lookup: judged here against the platform's services configured by name.
  if (isIP(target.host)) {
    const cleartext = secretInCleartext ? cleartextSecretRefusal(target.host, target.port, target.host) : null;
    if (cleartext) return { kind: 'refused', message: cleartext, cause: SECRET_NOT_BOUND };
    const reserved = await platformRefusalOf(target, resolver);
    if (reserved) return { kind: 'refused', message: reserved };
  }
  const refusal: { message?: string; cause?: typeof SECRET_NOT_BOUND } = {};
  const lookup = isIP(target.host)
    ? undefined
    : lookupFor(target, (message, cause) => Object.assign(refusal, { message, cause }), resolver, {
        secretInCleartext,
      });
  const exchange = await httpExchange({ ...request, url: target.url.toString(), lookup });
  if (refusal.message !== undefined) {
    return { kind: 'refused', message: refusal.message, ...(refusal.cause && { cause: refusal.cause }) };
  }
  return exchange;
}

/**
 * Why a read-back built from the provider's reference (`{{ref}}`) cannot be made, or null when it can. Each case is
 * inconclusive — never VERIFIED, never a proof of absence — so a person decides:
 * - no answer was received, or none with a reference to read at ref_field, so there is no reference (not made);
 * - "", "." or "..": substituted, it names no record. In a path it leaves the collection's URL or is a dot segment the
 *   URL parser resolves (encodeURIComponent leaves dots as they are), so `/items/{{ref}}` would ask `/items/` or `/` —
 *   a source that does not name this effect, whose answer could verify a call that did nothing. The reference is the
 *   target's answer at the operation's own ref_field (an echo of what the agent sent, at worst). Not made;
 * - it was longer than the characters kept (`ref_cut`): its first ones name another record, one whose reference shares
 *   them (another call's, which would verify a call that did nothing);
 * - in the URL's path (`refInPath`), a dot segment or an empty part between slashes (`../health`, `//`): sent
 *   encoded, but read as a path by a proxy that decodes first (pathLikeRef). Not made. In the query or a header such a
 *   reference is a value like any other (a provider's reference may well be a URL, `https://…/charges/ch_1`): read;
 * - it held a tenant secret value and was stored redacted: the URL built from it would name another record, whose
 *   absence proves nothing about this effect.
 */
function unusableRef(
  ref: string | undefined,
  {
    inPath,
    inHeader,
    answered,
    bodyNotRead,
    cut,
  }: { inPath: boolean; inHeader: boolean; answered: boolean; bodyNotRead: boolean; cut: boolean },
): { error: string; notMade: boolean } | null {
  if (ref === undefined) {
    return {
      error: bodyNotRead
        ? `the read-back URL needs the reference the provider returns, and its answer's body was larger than the connector reads (64 KiB): it was not read`
        : answered
          ? 'the read-back URL needs the reference the provider returns, and its answer gave none that can be read at ref_field (missing, not a string or number, a number not written as it reads back — 1e3, 7.0 or -0 —, or in JSON that reads two ways)'
          : 'the read-back URL needs the reference the provider returns, and no answer was received',
      notMade: true,
    };
  }
  if (ref === '' || ref === '.' || ref === '..') {
    return {
      error: `the reference the provider returned (${JSON.stringify(ref)}) names no record: it cannot be read back`,
      notMade: true,
    };
  }
  if (cut) {
    // Its first characters are all that was kept: the URL built from them names another record (one whose reference
    // shares them — another call's, which would verify this one). The answer was received: a read that cannot be made.
    return {
      error: `the reference the provider returned is longer than the ${KEPT_REF_CHARS} characters kept: built from its first ${KEPT_REF_CHARS}, the read-back would name another record; it cannot be read back`,
      notMade: false,
    };
  }
  if (inPath && pathLikeRef(ref)) {
    return {
      error:
        `the reference the provider returned (${JSON.stringify(ref)}) holds a dot segment or an empty one between ` +
        'slashes: a server or proxy that decodes %2F or %5C before routing would read another path; it cannot be ' +
        'read back',
      notMade: true,
    };
  }
  if (holdsRedactedSecret(ref)) {
    return {
      error: 'the reference the provider returned holds a secret value, stored redacted: it cannot be read back',
      notMade: false,
    };
  }
  if (holdsReplacedText(ref)) {
    // Stored with U+FFFD for text Postgres cannot store (storableText): the URL built from it would name another record.
    return {
      error:
        'the reference the provider returned held text that cannot be stored as written (U+0000, or half of a UTF-16 pair), stored replaced by U+FFFD: it cannot be read back',
      notMade: false,
    };
  }
  if (inHeader && !/^[\x20-\x7e]*$/.test(ref)) {
    // A header carries bytes: Node refuses a line break or a character beyond U+00FF (the read threw, and its evidence
    // said only "read-back error"), and sends U+0080–U+00FF as single Latin-1 bytes, which a target reading UTF-8 takes
    // for another value — another record, whose absence proves nothing. Not made.
    return {
      error:
        'the reference the provider returned holds characters a header cannot carry as written (a control character, or one beyond ASCII): it cannot be read back through a header',
      notMade: true,
    };
  }
  return null;
}

/**
 * Whether a read-back URL template puts `{{ref}}` in its path (before its query or fragment): only there does a proxy
 * that decodes `%2F` and resolves dot segments route the request by it.
 */
function refInPath(template: string): boolean {
  return REF_VARIABLE.test(template.split(/[?#]/)[0]);
}

/**
 * A reference whose parts between slashes or backslashes include `.`, `..` or an empty one. encodeURIComponent sends
 * `../health` as `..%2Fhealth`, which the target's router takes as one segment — but a proxy in front that decodes the
 * path before routing (nginx normalises `%2F`, IIS reads `\` as `/`), resolves dot segments and merges slashes asks
 * `/health` instead: a status page, not this effect.
 */
function pathLikeRef(ref: string): boolean {
  const parts = ref.split(/[/\\]/);
  return parts.length > 1 && parts.some((part) => part === '' || part === '.' || part === '..');
}

/** A read not made under `read_back_binding: "bound"`: inconclusive, with the reason in its evidence. */
function notReadUnbound(
  source: string,
  unbound: ReadBackBindingProblem[],
): { kind: 'unreachable'; evidence: ReadEvidence; notMade: true } {
  return {
    kind: 'unreachable',
    notMade: true,
    evidence: {
      source,
      read_at: new Date().toISOString(),
      error: `not read: ${unbound.map((p) => p.message).join('; ')}`,
      read_back_binding: 'bound',
      unbound: unbound.map((p) => p.condition),
    },
  };
}

/** A URL as the HTTP client will request it: WHATWG-parsed, without a fragment (the text as it is if it does not parse). */
function asRequested(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.hash = '';
    return parsed.href;
  } catch {
    return url;
  }
}

export function idempotencyKey(op: Pick<ConnectorOperation, 'id'>): string {
  return `verity-${op.id}`;
}

function variableValue(name: string, op: ConnectorOperation, ref: string | undefined): string {
  if (name === 'operation_id') return op.id;
  if (name === 'idempotency_key') return idempotencyKey(op);
  if (name === 'ref') return ref ?? '';
  return '';
}

function substituteUrl(template: string, op: ConnectorOperation, ref?: string): string {
  return template.replace(PLACEHOLDER, (_, name: string) => encodeURIComponent(variableValue(name, op, ref)));
}

function substituteBody(body: unknown, op: ConnectorOperation): unknown {
  if (typeof body === 'string')
    return body.replace(PLACEHOLDER, (_, name: string) => variableValue(name, op, undefined));
  if (Array.isArray(body)) return body.map((item) => substituteBody(item, op));
  if (typeof body === 'object' && body !== null) {
    return Object.fromEntries(Object.entries(body).map(([k, v]) => [k, substituteBody(v, op)]));
  }
  return body;
}
