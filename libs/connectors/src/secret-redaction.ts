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
import { storableText, withinKeptDepth } from './storable-text';
import { SECRET_VALUE_MIN_LENGTH } from './tenant-settings';

/** What a secret value is replaced by wherever it would be stored, shown or logged. */
export function secretPlaceholder(name: string): string {
  return `{{secret:${name}}}`;
}

/** Whether a stored value holds a redacted secret: what was read or returned there is no longer known to Verity. */
export function holdsRedactedSecret(value: string): boolean {
  return /\{\{secret:[^}]*\}\}/.test(value);
}

/**
 * The ways a secret value can show up in what a target answers or in what a connector builds from it: as sent, inside
 * a JSON string (escaped quotes and backslashes), and percent-encoded in a URL (a `{{ref}}` is encoded into the
 * read-back URL).
 */
function spellings(value: string): string[] {
  const json = JSON.stringify(value).slice(1, -1);
  let component = value;
  let uri = value;
  try {
    component = encodeURIComponent(value);
    uri = encodeURI(value);
  } catch {
    // A lone surrogate cannot be percent-encoded, so it cannot be in a URL either.
  }
  // As a header carried it: without leading and trailing spaces (a value stored before they were refused).
  const sent = value.replace(/^[ \t]+|[ \t]+$/g, '');
  return [
    value,
    json,
    component,
    component.replace(/%20/g, '+'),
    uri,
    ...(sent && sent !== value ? [sent] : []),
    ...misreadSpellings(sent || value),
  ];
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

/**
 * How many times `answerRedactor` replaces what it found in one string before it answers a string where a value is
 * still found as that value's placeholder, whole (see `answerTextRedactor`).
 */
export const ANSWER_REDACTION_PASSES = 4;

const identity: Redact = (value) => value;

/**
 * Replaces every secret value of the tenant by `{{secret:NAME}}`, deeply in any JSON value (in strings, object keys,
 * and numbers whose digits hold a secret). One pass with the longest spelling first, so a secret that contains
 * another is replaced whole, and a placeholder just written is never matched again.
 */
export function secretRedactor(secrets: Readonly<Record<string, string>> | undefined): Redact {
  const redactText = textRedactor(secrets);
  if (redactText === null) return identity;
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

/**
 * Like `secretRedactor`, for an answer read from what is stored (a value written in plain before the tenant made it a
 * secret): only string values are rewritten, never member names or numbers, which are the answer's shape. Whatever the
 * secret's value (`true`, `":"`, a member name), the answer stays the same JSON with the same members, each of the same
 * type; a string that held a value holds its placeholder instead. `value` itself is left as it is.
 *
 * A value shorter than SECRET_VALUE_MIN_LENGTH (stored before that minimum) is replaced only where a string is that
 * value as a whole (in any of its spellings): found inside text, a value of a character or a word would rewrite ids,
 * times and words of every answer. And the answer's text is never garbled by a value that is part of a placeholder's
 * own text (`{{secret:`): see `answerTextRedactor`.
 */
export function answerRedactor(secrets: Readonly<Record<string, string>> | undefined): Redact {
  const redactText = answerTextRedactor(secrets);
  if (redactText === null) return identity;
  const redactValue = (value: unknown): unknown => {
    if (typeof value === 'string') return redactText(value);
    if (Array.isArray(value)) return value.map(redactValue);
    if (writtenAsMembers(value)) {
      return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, redactValue(item)]));
    }
    return value;
  };
  return <T>(value: T) => redactValue(value) as T;
}

/**
 * An answer's string with each secret value replaced, unambiguously:
 * - a value of fewer than SECRET_VALUE_MIN_LENGTH characters only where it is the whole string, and so a spelling of
 *   fewer of a longer value (a value stored with leading spaces: a header sent it without them);
 * - every other value wherever it stands, in one pass over the text (the longest first where two start together, the
 *   text of values that overlap replaced whole), but never inside a placeholder naming one of the tenant's secrets
 *   (`{{secret:NAME}}`, stored by the connector door or just written): a value found wholly in one is that
 *   placeholder's own text (`{{secret:`, `secret:NAME`), and the placeholder is kept. A value that runs into a
 *   placeholder is replaced together with the whole placeholder, so no tail of it (`crm}}`) is left;
 * - the text is looked through again after each pass: where a placeholder just written makes up a value with the text
 *   around it (a value `x{{secret:a}}` where `x` stood before `a`'s value), that value is replaced too. Each pass leaves
 *   fewer characters outside placeholders, or fewer placeholders, so this would end — but after as many passes as
 *   characters: a value that holds its own placeholder behind one character (`A{{secret:self}}`) takes one `A` a pass,
 *   and `AAA…{{secret:self}}` of 256 KiB took seconds. So after ANSWER_REDACTION_PASSES passes (a chain of values
 *   holding each other's placeholder that deep) a string where a value is still found is answered as that value's
 *   placeholder, whole: nothing of it is answered, and a string costs at most ANSWER_REDACTION_PASSES + 1 searches.
 */
function answerTextRedactor(secrets: Readonly<Record<string, string>> | undefined): ((text: string) => string) | null {
  const long: Record<string, string> = {};
  const whole = new Map<string, string>();
  const names: string[] = [];
  for (const [name, value] of Object.entries(secrets ?? {})) {
    if (typeof value !== 'string' || value.length === 0) continue;
    names.push(name);
    if (value.length >= SECRET_VALUE_MIN_LENGTH) long[name] = value;
    // A value under the minimum, and a spelling under it of a longer one (a value stored with leading spaces, sent
    // without them): only as a whole string.
    for (const spelling of spellings(value)) {
      if (!spelling || spelling.length >= SECRET_VALUE_MIN_LENGTH) continue;
      const known = whole.get(spelling);
      if (known === undefined || name < known) whole.set(spelling, name);
    }
  }
  const find = spanFinder(long, SECRET_VALUE_MIN_LENGTH);
  if (find === null && whole.size === 0) return null;
  const placeholder = new RegExp(
    `\\{\\{secret:(?:${names
      .sort((a, b) => b.length - a.length || (a < b ? -1 : 1))
      .map(escapeRegExp)
      .join('|')})\\}\\}`,
    'g',
  );
  return (text: string): string => {
    const wholeName = whole.get(text);
    if (wholeName !== undefined) return secretPlaceholder(wholeName);
    if (find === null) return text;
    let out = text;
    for (let pass = 0; ; pass += 1) {
      const found = find(out);
      // Most strings hold no secret: one search, no more.
      if (found.length === 0) return out;
      // In the order of the text, none overlapping another (a name holds no brace).
      const kept = [...out.matchAll(placeholder)].map((m) => ({ start: m.index, end: m.index + m[0].length }));
      const spans: Span[] = [];
      for (const span of found) {
        // The placeholders it touches: from the first that ends after it starts, while they start before it ends.
        let first = 0;
        for (let last = kept.length; first < last;) {
          const middle = (first + last) >>> 1;
          if (kept[middle].end <= span.start) first = middle + 1;
          else last = middle;
        }
        const p = kept[first];
        if (p !== undefined && p.start <= span.start && span.end <= p.end) continue;
        for (let i = first; i < kept.length && kept[i].start < span.end; i += 1) {
          span.start = Math.min(span.start, kept[i].start);
          span.end = Math.max(span.end, kept[i].end);
        }
        spans.push(span);
      }
      if (spans.length === 0) return out;
      // Still found after as many passes as a chain of values holding each other's placeholder is given: the string is
      // answered as the placeholder of the value found first, whole (nothing of it is answered).
      if (pass === ANSWER_REDACTION_PASSES) return secretPlaceholder(firstSpan(spans).name);
      out = replaceSpans(out, spans);
    }
  };
}

/** The span `replaceSpans` names a placeholder after first: the one that starts first, then the longest, then by name. */
function firstSpan(spans: Span[]): Span {
  return [...spans].sort(bySpanOrder)[0];
}

function bySpanOrder(a: Span, b: Span): number {
  return a.start - b.start || b.end - a.end || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
}

/**
 * An object JSON writes as its own members: a plain one, or an instance of a class (an entity an answer holds) — not a
 * Date (written as its time), binary data or a stream (sent as bytes), nor anything else with its own `toJSON`.
 */
function writtenAsMembers(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  if (isPlainObject(value)) return true;
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return false;
  const object = value as { toJSON?: unknown; pipe?: unknown; getStream?: unknown };
  return typeof object.toJSON !== 'function' && typeof object.pipe !== 'function' && object.getStream === undefined;
}

/** The text with every secret value of `secrets` in any spelling replaced by its placeholder; null: nothing to find. */
function textRedactor(secrets: Readonly<Record<string, string>> | undefined): ((text: string) => string) | null {
  const find = spanFinder(secrets);
  if (find === null) return null;
  return (text: string): string => {
    const found = find(text);
    return found.length === 0 ? text : replaceSpans(text, found);
  };
}

/**
 * Where `text` holds a secret value of `secrets` in any spelling (spans that may overlap); null: nothing to find. A
 * spelling shorter than `minLength` is not looked for (answerTextRedactor finds it only as a whole string).
 */
function spanFinder(
  secrets: Readonly<Record<string, string>> | undefined,
  minLength = 1,
): ((text: string) => Span[]) | null {
  const byText = new Map<string, string>();
  for (const [name, value] of Object.entries(secrets ?? {})) {
    if (typeof value !== 'string' || value.length === 0) continue;
    for (const spelling of spellings(value)) {
      if (spelling.length < minLength) continue;
      const known = byText.get(spelling);
      // Two secrets with the same value: the longer name never matters, but the choice must not depend on order.
      if (known === undefined || name < known) byText.set(spelling, name);
    }
  }
  if (byText.size === 0) return null;
  const texts = [...byText.keys()].sort((a, b) => b.length - a.length || (a < b ? -1 : 1));
  const pattern = new RegExp(texts.map(escapeRegExp).join('|'), 'g');
  // The values as a percent-decoded text holds them (and without leading and trailing spaces, as a header sent them).
  const decodedValues = new Map<string, string>();
  for (const [name, value] of Object.entries(secrets ?? {})) {
    if (typeof value !== 'string' || value.length === 0) continue;
    for (const text of new Set([value, value.replace(/^[ \t]+|[ \t]+$/g, '')])) {
      const known = decodedValues.get(text);
      if (text.length >= minLength && (known === undefined || name < known)) decodedValues.set(text, name);
    }
  }
  const longest = texts[0].length;
  const periodOf = periodFinder();
  return (text: string): Span[] => {
    const found: Span[] = [];
    // The furthest end of what was found: the text from the first place found to it is one stretch of places that
    // overlap each other, replaced whole (replaceSpans).
    let reach = 0;
    pattern.lastIndex = 0;
    for (let match = pattern.exec(text); match; match = pattern.exec(text)) {
      // Searched again from the next character, not past the match: a value that starts inside this one (their texts
      // overlap) is found too, and replaced with it (replaceSpans) rather than left partly shown.
      pattern.lastIndex = match.index + 1;
      // One that ends within what was found already is replaced with it: nothing more to note.
      if (match.index + match[0].length <= reach) continue;
      const name = byText.get(match[0])!;
      const run = repeatedAt(text, match[0], match.index, periodOf(match[0]));
      for (const start of run) found.push({ start, end: start + match[0].length, name });
      reach = run[run.length - 1] + match[0].length;
      // Past a run of the same value repeated (`aaaa…` for a value `aaa…`), searched again only where a value could
      // still end after it.
      pattern.lastIndex = Math.max(pattern.lastIndex, reach - longest + 1);
    }
    // Appended one by one: spread as the arguments of one call, a few hundred thousand overflowed the stack.
    if (/%[0-7][0-9a-f]|\+/i.test(text))
      for (const span of percentEncodedSpans(text, decodedValues, periodOf)) found.push(span);
    return found;
  };
}

/**
 * Where `value`, found in `text` at `at`, stands again shifted by its period (`abab…` for a value `ababab`): each such
 * place is checked with the period's characters only, where searching again compared the whole value at each (a value
 * of 4096 `a` in 256 KiB of `a`: 4096 comparisons per character, seconds). No other place in between holds the value
 * (it would have a shorter period). `at` first; `period` is the value's (periodFinder).
 */
function repeatedAt(text: string, value: string, at: number, period: number): number[] {
  const starts = [at];
  if (period === value.length) return starts;
  const tail = value.slice(value.length - period);
  for (let start = at; text.startsWith(tail, start + value.length); start += period) starts.push(start + period);
  return starts;
}

/**
 * The smallest shift under which a value matches itself where they overlap (its length when there is none), kept per
 * value for as long as the finder that asks lives (never beyond: the values are secrets).
 */
function periodFinder(): (value: string) => number {
  const periods = new Map<string, number>();
  return (value) => {
    let period = periods.get(value);
    if (period === undefined) {
      // The prefix function: border[i] is the longest proper prefix of value[0..i] that is also its suffix.
      const border = new Int32Array(value.length);
      for (let i = 1; i < value.length; i += 1) {
        let k = border[i - 1];
        while (k > 0 && value[i] !== value[k]) k = border[k - 1];
        border[i] = value[i] === value[k] ? k + 1 : k;
      }
      period = value.length - border[value.length - 1];
      periods.set(value, period);
    }
    return period;
  };
}

interface Span {
  start: number;
  end: number;
  name: string;
}

/**
 * Where `text` holds one of `values` (text → secret name) percent-encoded however an encoder wrote it: hex digits in
 * either case (.NET writes `%2f`), any set of characters escaped (each encoder keeps another: `~`, `*`, `'`, `/`), a
 * space as `+` or `%20`. Such spellings are too many to list, so the text is decoded instead (each `%XX` of an ASCII
 * character; `+` as a space, and separately as itself), searched for the values as written, and what is found is
 * mapped back to where it stands in the text.
 */
function percentEncodedSpans(
  text: string,
  values: ReadonlyMap<string, string>,
  periodOf: (value: string) => number,
): Span[] {
  const spans: Span[] = [];
  for (const plusIsSpace of [false, true]) {
    let decoded = '';
    // at[i]: where the i-th character of `decoded` starts in `text`; at[decoded.length] is the text's end.
    const at: number[] = [];
    for (let i = 0; i < text.length;) {
      at.push(i);
      const hex = text[i] === '%' ? /^[0-7][0-9a-f]$/i.exec(text.slice(i + 1, i + 3)) : null;
      if (hex) {
        decoded += String.fromCharCode(parseInt(hex[0], 16));
        i += 3;
      } else {
        decoded += plusIsSpace && text[i] === '+' ? ' ' : text[i];
        i += 1;
      }
    }
    at.push(text.length);
    for (const [value, name] of values) {
      for (let i = decoded.indexOf(value); i >= 0; i = decoded.indexOf(value, i + 1)) {
        for (const start of repeatedAt(decoded, value, i, periodOf(value))) {
          spans.push({ start: at[start], end: at[start + value.length], name });
          i = start;
        }
      }
    }
  }
  return spans;
}

/**
 * `text` with each span replaced by its secret's placeholder, in one pass: of overlapping spans the one that starts
 * first names the placeholder, then the longest (a secret that contains another is replaced whole), then the first
 * name; the text of a span that overlaps it and ends later is replaced with it, so no part of either value is left.
 */
function replaceSpans(text: string, spans: Span[]): string {
  spans.sort(bySpanOrder);
  let out = '';
  let done = 0;
  for (const span of spans) {
    if (span.start < done) {
      done = Math.max(done, span.end);
      continue;
    }
    out += text.slice(done, span.start) + secretPlaceholder(span.name);
    done = span.end;
  }
  return out + text.slice(done);
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
 * tenant's secret values of that call replaced by `{{secret:NAME}}`, text Postgres cannot store replaced by U+FFFD
 * (storableText), and nesting no walk survives cut (withinKeptDepth). This is the one door through which a target's answers enter Verity, so nothing stored, evented,
 * shown or logged downstream can hold a secret value, or fail to be stored.
 */
export function redactingSecrets(connector: Connector): Connector {
  const guarded = async <T>(env: ConnectorEnvironment, call: () => Promise<T>): Promise<T> => {
    const redact = secretRedactor(env.tenant?.secrets);
    try {
      // Storable too: a target's answer may hold text Postgres cannot store (storableText), or nest deeper than any
      // walk of it survives (withinKeptDepth, first: redaction walks it too).
      return storableText(redact(withinKeptDepth(await call())));
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
