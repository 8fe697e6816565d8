import { textPrefix } from '@verity/status-model';

/** What the raw text of a JSON body says that the parsed value would no longer show. */
export interface RawJsonIssue {
  /** The member's path, as validation errors name fields: `operations[0].params.amount`. */
  field: string;
  /**
   * `duplicate_key`: one object names the member twice. `exact_number`: a number a double cannot hold (more digits than
   * it keeps, or so small it becomes 0), which JSON.parse would round without a word.
   */
  rule: 'duplicate_key' | 'exact_number';
}

type Frame = ({ kind: 'object'; keys: Set<string>; key: string | null } | { kind: 'array'; index: number }) & Along;

/**
 * Where a value (or an open frame) lies against the path a scan follows: `depth`, how many segments lead to it (each
 * open array's index, each open object's member once named); `onPath`, whether those segments and the path lead one to
 * the other (or are the same). A frame's own is decided when it opens (the frames around it do not change while it is
 * open), so a value's is known from the innermost frame alone, whatever the nesting: no walk of the whole stack.
 */
interface Along {
  depth: number;
  onPath: boolean;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * The first place where a JSON text and the value JSON.parse makes of it differ, or null.
 *
 * - A member named twice in one object: JSON.parse keeps the last of two and says nothing, so
 *   `{"amount": 100, "amount": 99999999}` would charge what a reader of the first line never saw (and a proxy, a log
 *   or a person that reads first-wins sees another request than the one stored). Names are compared as JSON reads
 *   them (`"a"` and `"\u0061"` are one name).
 * - A number a double cannot hold exactly: `9007199254740993` parses to ...992, and an `http` body would send the
 *   provider (and the record would show) another amount than the agent wrote. A number is kept when the double's
 *   shortest decimal form is the same number (`0.1`, `1.50`, `1e22` are; `0.30000000000000000001` is not). Infinity
 *   (`1e400`) is left to the parsed value's own check (`finite_number`).
 *
 * `within`: only an issue on that path counts — at a member the path goes through, at the value it names, or inside
 * that value (segments as `fieldSegments` gives them: member names, array indexes as digits). A reader of one field
 * is not misled by a number elsewhere that it never reads (a 64-bit id beside the status it checks).
 *
 * One pass, no recursion; a text that is not JSON gives null and is left to the parser to refuse.
 */
export function rawJsonIssue(text: string, within?: readonly string[]): RawJsonIssue | null {
  return scan<RawJsonIssue>(text, within ?? [], {
    name: (stack, name, repeated, along) =>
      repeated && along.onPath ? { field: pathOf(stack, name), rule: 'duplicate_key' } : null,
    number: (stack, literal, along) =>
      !keptExactly(literal) && along.onPath ? { field: pathOfValue(stack), rule: 'exact_number' } : null,
  });
}

/**
 * The text of the number at `at` (segments as `fieldSegments` gives them, matched as readField reads them) as the JSON
 * text writes it (`1e3`, `7.0`, `-0`), or null where the path names no number. Read from the text itself, not from
 * JSON.parse's source text access, which a reviver is given only from V8 11.4 (Node 21) on. A member named twice on the
 * path gives the first; rawJsonIssue says where that is so.
 */
export function rawJsonNumberAt(text: string, at: readonly string[]): string | null {
  return scan<string>(text, at, {
    number: (_, literal, along) => (along.depth === at.length && along.onPath ? literal : null),
  });
}

/** What a scan of a JSON text reports; the first non-null answer ends it. */
interface JsonVisitor<T> {
  /**
   * A member's name, as JSON reads it, with the open frames (the innermost its object); `repeated`: named before;
   * `along`: where the member's value lies against the scan's path.
   */
  name?: (stack: readonly Frame[], name: string, repeated: boolean, along: Along) => T | null;
  /** A number literal as written, with the open frames around it and where it lies against the scan's path. */
  number?: (stack: readonly Frame[], literal: string, along: Along) => T | null;
}

/**
 * One pass over a JSON text, no recursion; a text that is not JSON gives null and is left to the parser to refuse.
 * Linear in the text, however deep it nests: each value is placed against `path` from its innermost frame (Along).
 */
function scan<T>(text: string, path: readonly string[], visit: JsonVisitor<T>): T | null {
  const stack: Frame[] = [];
  let expectingName = false;
  for (let i = 0; i < text.length; i += 1) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const start = i;
      let escaped = false;
      for (i += 1; i < text.length && text.charCodeAt(i) !== QUOTE; i += 1) {
        if (text.charCodeAt(i) === BACKSLASH) {
          escaped = true;
          i += 1;
        }
      }
      if (i >= text.length) return null;
      const top = stack[stack.length - 1];
      if (!expectingName || top?.kind !== 'object') continue;
      expectingName = false;
      const name = memberName(text.slice(start, i + 1), escaped);
      if (name === null) return null;
      const repeated = top.keys.has(name);
      if (!repeated) top.keys.add(name);
      const found = visit.name?.(stack, name, repeated, along(top, name, path)) ?? null;
      if (found !== null) return found;
      top.key = name;
      continue;
    }
    if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) {
      const start = i;
      while (i + 1 < text.length && NUMBER_CHAR.test(text[i + 1])) i += 1;
      const top = stack[stack.length - 1];
      const found = visit.number?.(stack, text.slice(start, i + 1), along(top, segmentOf(top), path)) ?? null;
      if (found !== null) return found;
      continue;
    }
    if (c === 0x7b /* { */) {
      const top = stack[stack.length - 1];
      stack.push({ kind: 'object', keys: new Set(), key: null, ...along(top, segmentOf(top), path) });
      expectingName = true;
    } else if (c === 0x5b /* [ */) {
      const top = stack[stack.length - 1];
      stack.push({ kind: 'array', index: 0, ...along(top, segmentOf(top), path) });
      expectingName = false;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
      expectingName = false;
    } else if (c === 0x2c /* , */) {
      const top = stack[stack.length - 1];
      if (top?.kind === 'object') expectingName = true;
      else if (top) top.index += 1;
    }
  }
  return null;
}

const NUMBER_CHAR = /[-+.eE0-9]/;
const JSON_NUMBER = /^(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([-+]?[0-9]+))?$/;

/** Whether the double JSON.parse makes of a number literal is that number (compared as decimals, not as text). */
function keptExactly(literal: string): boolean {
  // The common case, decided without parsing: a whole number of at most 15 digits always fits.
  if (/^-?[0-9]{1,15}$/.test(literal)) return true;
  const value = Number(literal);
  if (!Number.isFinite(value)) return true; // refused after parsing as finite_number; not JSON at all: the parser's
  const written = decimalOf(literal);
  return written === null || written === decimalOf(String(value));
}

/**
 * A number literal as sign, significant digits and exponent (`-12.50` → `-125e-1`); zero is `0` whatever its sign.
 * Linear in the literal's length (a body may hold one number of 256 KiB): no backtracking pattern, and an exponent
 * too long to mean anything but 0 or Infinity for a body-sized mantissa is not parsed as a number.
 */
function decimalOf(literal: string): string | null {
  const parts = JSON_NUMBER.exec(literal);
  if (!parts) return null;
  const [, sign, whole, fraction = '', exponent = '0'] = parts;
  const digits = `${whole}${fraction}`;
  let first = 0;
  while (first < digits.length && digits.charCodeAt(first) === 0x30) first += 1;
  if (first === digits.length) return '0';
  let end = digits.length;
  while (digits.charCodeAt(end - 1) === 0x30) end -= 1;
  // |exponent| ≥ 10^7 moves any mantissa a body can hold past every double: the value is 0 or Infinity.
  const magnitude = exponent.replace(/^[-+]?0*/, '');
  if (magnitude.length > 7) return `${sign}${digits.slice(first, end)}e${exponent.startsWith('-') ? '-' : ''}huge`;
  const shift = Number(exponent) - fraction.length + (digits.length - end);
  return `${sign}${digits.slice(first, end)}e${shift}`;
}

function memberName(literal: string, escaped: boolean): string | null {
  if (!escaped) return literal.slice(1, -1);
  try {
    return JSON.parse(literal) as string;
  } catch {
    return null;
  }
}

/** The segment `frame` gives the value being read in it: an array's index (a number), an object's member (a name). */
function segmentOf(frame: Frame | undefined): string | number | null {
  if (!frame) return null;
  return frame.kind === 'array' ? frame.index : frame.key;
}

/**
 * Where a value read inside `frame` (none: the whole text) whose own segment there is `segment` (null: none, an object
 * before its first name) lies against `path`. An index is matched as readField reads a segment of an array, by its
 * number (`01` is element 1); a member by its name as written. Past the path's end a value is inside what it names.
 */
function along(frame: Frame | undefined, segment: string | number | null, path: readonly string[]): Along {
  if (!frame) return { depth: 0, onPath: true };
  if (segment === null) return { depth: frame.depth, onPath: frame.onPath };
  const wanted = path[frame.depth];
  const same =
    wanted === undefined ||
    (typeof segment === 'number' ? /^[0-9]+$/.test(wanted) && Number(wanted) === segment : segment === wanted);
  return { depth: frame.depth + 1, onPath: frame.onPath && same };
}

/** Paths as validation errors name fields; a path too long to be worth reading (a body nested thousands deep) is cut. */
const MAX_PATH_CHARS = 200;

/** The path of member `name` of the object being read. */
function pathOf(stack: readonly Frame[], name: string): string {
  return pathThrough(stack.slice(0, -1), name);
}

/** The path of the value being read: each open object's member and each open array's index. */
function pathOfValue(stack: readonly Frame[]): string {
  return pathThrough(stack);
}

function pathThrough(frames: readonly Frame[], name?: string): string {
  let path = '';
  for (const frame of frames) {
    if (frame.kind === 'array') path += `[${frame.index}]`;
    else if (frame.key !== null) path = memberPath(path, frame.key);
    if (path.length > MAX_PATH_CHARS) break;
  }
  const full = name === undefined ? path : memberPath(path, name);
  if (full === '') return '(body)';
  // Not inside a character: half an emoji is no Unicode, and strict JSON readers refuse the answer that names it.
  return full.length > MAX_PATH_CHARS ? `${textPrefix(full, MAX_PATH_CHARS)}…` : full;
}

/**
 * The field name of member `key` under `path`, as validation errors write it (`operations[0].params.amount`). A member
 * whose name is empty is written `[""]`: joined like any other name it would vanish, and a member of the top level
 * would read as `(body)`, the whole body.
 */
export function memberPath(path: string, key: string): string {
  if (key === '') return `${path}[""]`;
  return path ? `${path}.${key}` : key;
}
