/** Where one object of a JSON text names the same member twice. */
export interface DuplicateKey {
  /** The member's path, as validation errors name fields: `operations[0].params.amount`. */
  field: string;
}

type Frame = { kind: 'object'; keys: Set<string>; key: string | null } | { kind: 'array'; index: number };

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * The first member named twice in one object of a JSON text, or null. JSON.parse keeps the last of two and says
 * nothing, so `{"amount": 100, "amount": 99999999}` would charge what a reader of the first line never saw (and a
 * proxy, a log or a person that reads first-wins sees another request than the one stored). Names are compared as
 * JSON reads them (`"a"` and `"\u0061"` are one name). One pass, no recursion; a text that is not JSON gives null
 * and is left to the parser to refuse.
 */
export function duplicateKeyIn(text: string): DuplicateKey | null {
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
      if (top.keys.has(name)) return { field: pathOf(stack, name) };
      top.keys.add(name);
      top.key = name;
      continue;
    }
    if (c === 0x7b /* { */) {
      stack.push({ kind: 'object', keys: new Set(), key: null });
      expectingName = true;
    } else if (c === 0x5b /* [ */) {
      stack.push({ kind: 'array', index: 0 });
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

function memberName(literal: string, escaped: boolean): string | null {
  if (!escaped) return literal.slice(1, -1);
  try {
    return JSON.parse(literal) as string;
  } catch {
    return null;
  }
}

/** Paths as validation errors name fields; a path too long to be worth reading (a body nested thousands deep) is cut. */
const MAX_PATH_CHARS = 200;

function pathOf(stack: readonly Frame[], name: string): string {
  let path = '';
  for (const frame of stack.slice(0, -1)) {
    if (frame.kind === 'array') path += `[${frame.index}]`;
    else if (frame.key !== null) path += path === '' ? frame.key : `.${frame.key}`;
    if (path.length > MAX_PATH_CHARS) break;
  }
  const full = path === '' ? name : `${path}.${name}`;
  if (full === '') return '(body)';
  return full.length > MAX_PATH_CHARS ? `${full.slice(0, MAX_PATH_CHARS)}…` : full;
}
