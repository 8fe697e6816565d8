/**
 * The small JSON path connectors accept for read-back and context fields: `data.status`, `$.data.status`,
 * `items[0].id` (or `items.0.id`). No wildcards, no filters: one path names one value.
 */
export const FIELD_PATH = /^(\$\.)?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+|\[[0-9]{1,6}\])*$/;
export const FIELD_PATH_RULE = 'a JSON path such as "data.status", "$.data.status" or "items[0].id"';

export function fieldSegments(path: string): string[] {
  const body = path.startsWith('$.') ? path.slice(2) : path;
  return [...body.matchAll(/([A-Za-z0-9_-]+)|\[([0-9]+)\]/g)].map((m) => m[1] ?? m[2]);
}

/** The path without its `$.` prefix: the key a connector reports the value under. */
export function fieldKey(path: string): string {
  return path.startsWith('$.') ? path.slice(2) : path;
}

export function readField(value: unknown, path: string): { found: true; value: unknown } | { found: false } {
  let current: unknown = value;
  for (const segment of fieldSegments(path)) {
    if (Array.isArray(current)) {
      // A JSON array has elements only: its JavaScript `length` (an own property) is no member a path can name.
      const index = /^[0-9]+$/.test(segment) ? Number(segment) : current.length;
      if (index >= current.length) return { found: false };
      current = current[index];
    } else if (typeof current === 'object' && current !== null && Object.hasOwn(current, segment)) {
      current = (current as Record<string, unknown>)[segment];
    } else {
      return { found: false };
    }
  }
  return { found: true, value: current };
}

/** Deep equality of two JSON values (key order does not matter). */
export function sameJson(a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b);
}

function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`);
    return `{${entries.join(',')}}`;
  }
  return JSON.stringify(value) ?? 'undefined';
}
