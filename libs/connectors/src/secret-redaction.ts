import {
  type Connector,
  type ConnectorEnvironment,
  type ConnectorOperation,
  type ContextResult,
  type ObservationResult,
  type ReadBackResult,
  connectorDeclarations,
} from './connector';
import type { SendOutcome } from './classify';
import { storableText } from './storable-text';

/** What a secret value is replaced by wherever it would be stored, shown or logged. */
export function secretPlaceholder(name: string): string {
  return `{{secret:${name}}}`;
}

/** Whether a stored value holds a redacted secret: what was read or returned there is no longer known to Verity. */
export function holdsRedactedSecret(value: string): boolean {
  return /\{\{secret:[^}]*\}\}/.test(value);
}

/**
 * The exact ways a secret value can show up in what a target answers or in what a connector builds from it: as sent,
 * and inside a JSON string (escaped quotes and backslashes). Percent-encoded ones are matched by
 * percentEncodedPattern, as there are many.
 */
function spellings(value: string): string[] {
  const json = JSON.stringify(value).slice(1, -1);
  // As a header carried it: without leading and trailing spaces (a value stored before they were refused).
  const sent = value.replace(/^[ \t]+|[ \t]+$/g, '');
  return [value, json, ...(sent && sent !== value ? [sent] : []), ...misreadSpellings(sent || value)];
}

/** `%XX` of one byte, its hex digits in either case. */
function percentByte(byte: number): string {
  return `%${[...byte.toString(16).padStart(2, '0')].map((d) => (/[a-f]/.test(d) ? `[${d}${d.toUpperCase()}]` : d)).join('')}`;
}

/**
 * A secret percent-encoded in a URL or a form (a `{{ref}}` is encoded into the read-back URL; a target may echo it in a
 * link), however the encoder wrote it: each character as is or as the `%XX` of its UTF-8 bytes, hex digits in either
 * case (.NET writes `%2f`), a space also as `+`. Encoders differ in which characters they escape and in the case of
 * the digits, so a list of spellings (encodeURIComponent's, encodeURI's) let the others through. Also the value as sent
 * without its leading and trailing spaces, as `spellings` has it.
 */
function percentEncodedPattern(value: string): string {
  const sent = value.replace(/^[ \t]+|[ \t]+$/g, '') || value;
  return [...sent]
    .map((char) => {
      const literal = escapeRegExp(char);
      // A lone surrogate cannot be percent-encoded, so it is only ever written as is.
      if (char.length === 1 && /[\ud800-\udfff]/.test(char)) return literal;
      const encoded = [...Buffer.from(char, 'utf8')].map(percentByte).join('');
      return `(?:${literal}|${encoded}${char === ' ' ? '|\\+' : ''})`;
    })
    .join('');
}

/**
 * A value stored before secrets were limited to ASCII (3479cb2) with characters U+0080–U+00FF: a header carries them as
 * single Latin-1 bytes, and a target that reads its headers as UTF-8 (most do) and echoes them answers another spelling
 * (U+FFFD for each byte that is no UTF-8, or other characters where the bytes happen to be). That spelling, as text and
 * inside a JSON string, ASCII-escaped too (`\ufffd`), as such a target writes it.
 */
function misreadSpellings(value: string): string[] {
  if (!/[\u0080-\u00ff]/.test(value) || [...value].some((c) => c.charCodeAt(0) > 0xff)) return [];
  const misread = Buffer.from(value, 'latin1').toString('utf8');
  const json = JSON.stringify(misread).slice(1, -1);
  const ascii = json.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  return [...new Set([misread, json, ascii])];
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

export type Redact = <T>(value: T) => T;

const identity: Redact = (value) => value;

/**
 * Replaces every secret value of the tenant by `{{secret:NAME}}`, deeply in any JSON value (in strings, object keys,
 * and numbers whose digits hold a secret). One pass with the longest spelling first, so a secret that contains
 * another is replaced whole, and a placeholder just written is never matched again.
 */
export function secretRedactor(secrets: Readonly<Record<string, string>> | undefined): Redact {
  // Each alternative of one pattern, with the secret it finds and the shortest text it matches.
  const alternatives: { source: string; name: string; length: number }[] = [];
  for (const [name, value] of Object.entries(secrets ?? {})) {
    if (typeof value !== 'string' || value.length === 0) continue;
    for (const spelling of new Set(spellings(value))) {
      alternatives.push({ source: escapeRegExp(spelling), name, length: spelling.length });
    }
    const sent = value.replace(/^[ \t]+|[ \t]+$/g, '') || value;
    alternatives.push({ source: percentEncodedPattern(value), name, length: sent.length });
  }
  if (alternatives.length === 0) return identity;
  // The longest first, so a secret that contains another is replaced whole. Two secrets with the same value: the
  // longer name never matters, but the choice must not depend on order.
  alternatives.sort((a, b) => b.length - a.length || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const pattern = new RegExp(alternatives.map((a) => `(${a.source})`).join('|'), 'g');
  const redactText = (text: string): string => {
    pattern.lastIndex = 0;
    if (!pattern.test(text)) return text;
    return text.replace(pattern, (...groups: unknown[]) => {
      const index = groups.slice(1, alternatives.length + 1).findIndex((group) => group !== undefined);
      return secretPlaceholder(alternatives[index].name);
    });
  };
  const redactValue = (value: unknown): unknown => {
    if (typeof value === 'string') return redactText(value);
    if (typeof value === 'number' || typeof value === 'bigint') {
      const text = String(value);
      const redacted = redactText(text);
      return redacted === text ? value : redacted;
    }
    if (Array.isArray(value)) return value.map(redactValue);
    if (value instanceof Error) return redactError(value, redactText);
    if (isPlainObject(value)) {
      return Object.fromEntries(Object.entries(value).map(([key, item]) => [redactText(key), redactValue(item)]));
    }
    return value;
  };
  return <T>(value: T) => redactValue(value) as T;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

/** A copy of the error whose message and stack hold no secret (it is logged by whoever catches it). */
function redactError(error: Error, redactText: (text: string) => string): Error {
  const copy = new Error(redactText(error.message)) as Error & { code?: string };
  copy.name = redactText(error.name);
  copy.stack = error.stack === undefined ? undefined : redactText(error.stack);
  // Its code too (`ERR_INVALID_CHAR`), which says why a call failed (errorCause): a string, redacted like the rest.
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') copy.code = redactText(code);
  return copy;
}

/**
 * The connector as the rest of Verity sees it: everything it returns (send outcomes and provider references,
 * read-backs, context reads, observations — evidence, records, URLs, details) and everything it throws has the
 * tenant's secret values of that call replaced by `{{secret:NAME}}`, and text Postgres cannot store replaced by U+FFFD
 * (storableText). This is the one door through which a target's answers enter Verity, so nothing stored, evented,
 * shown or logged downstream can hold a secret value, or fail to be stored.
 */
export function redactingSecrets(connector: Connector): Connector {
  const guarded = async <T>(env: ConnectorEnvironment, call: () => Promise<T>): Promise<T> => {
    const redact = secretRedactor(env.tenant?.secrets);
    try {
      // Storable too: a target's answer may hold text Postgres cannot store (storableText).
      return storableText(redact(await call()));
    } catch (error) {
      throw error instanceof Error ? redact(error) : new Error(redact(String(error)));
    }
  };
  const wrapped: Connector = {
    ...connectorDeclarations(connector),
    send: (op: ConnectorOperation, env: ConnectorEnvironment) =>
      guarded<SendOutcome>(env, () => connector.send(op, env)),
  };
  const { readBack, readContext, observe } = connector;
  if (readBack) {
    wrapped.readBack = (op, env) => guarded<ReadBackResult>(env, () => readBack.call(connector, op, env));
  }
  if (readContext) {
    wrapped.readContext = (op, env) => guarded<ContextResult>(env, () => readContext.call(connector, op, env));
  }
  if (observe) {
    wrapped.observe = (op, verified, env) =>
      guarded<ObservationResult>(env, () => observe.call(connector, op, verified, env));
  }
  return wrapped;
}
