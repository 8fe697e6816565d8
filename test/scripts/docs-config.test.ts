import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { CONFIG_VARIABLES, ConfigError, loadConfig } from '../../libs/platform/src/config';
import { TEST_TIMINGS } from '../support/stack';
import { userDocs } from '../support/user-docs';

const ROOT = join(__dirname, '..', '..');
const OPERATIONS = readFileSync(join(ROOT, 'docs', 'operations.md'), 'utf8');

/** The rows of the first table under `heading`: its cells, the first one's backticked names. */
function tableRows(heading: string): { names: string[]; cells: string[] }[] {
  const section = OPERATIONS.split(`\n${heading}\n`)[1]?.split('\n## ')[0] ?? '';
  const lines = section.split('\n');
  const start = lines.findIndex((line) => line.startsWith('|'));
  const table = lines.slice(
    start,
    lines.findIndex((line, i) => i > start && !line.startsWith('|')),
  );
  return table.slice(2).map((line) => {
    const cells = line
      .split('|')
      .slice(1, -1)
      .map((cell) => cell.trim());
    return { names: [...cells[0].matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1]), cells };
  });
}

const UNITS: Record<string, number> = { ms: 1, s: 1_000, min: 60_000, h: 3_600_000, day: 86_400_000, days: 86_400_000 };

/** `1 s – 30 days` → [1000, 2592000000]; `0 – 2 147 483 647 ms` → [0, 2147483647]; `1 – 500` → [1, 500]. */
function range(cell: string): [number, number] | undefined {
  const m = /^([\d ]+?) ?(ms|s|min|h|days?)? – ([\d ]+?) ?(ms|s|min|h|days?)?(?: \(|$)/.exec(cell);
  if (!m) return undefined;
  const [, low, lowUnit, high, highUnit] = m;
  const value = (digits: string, unit: string | undefined) =>
    Number(digits.replace(/ /g, '')) * (UNITS[unit ?? ''] ?? 1);
  return [value(low, lowUnit ?? highUnit), value(high, highUnit)];
}

/** The range loadConfig states when a value is not a number (`… from 100 to 3600000 …`), if the variable has one. */
function codeRange(name: string): [number, number] | undefined {
  try {
    loadConfig({ [name]: 'not a number' });
  } catch (error) {
    const m = new RegExp(`${name}: must be a whole number (?:of milliseconds )?from (\\d+) to (\\d+)`).exec(
      (error as ConfigError).message,
    );
    return m ? [Number(m[1]), Number(m[2])] : undefined;
  }
  return undefined;
}

/**
 * The variables read outside loadConfig (the sandbox provider, npm start, verity-mcp): each is a name in a
 * `process.env.NAME`, `env.NAME` or `env['NAME']` read, or passed to a reader of the environment by name.
 */
function otherReads(): Map<string, string[]> {
  const reads = new Map<string, string[]>();
  const files = (path: string): string[] =>
    statSync(path).isFile()
      ? [path]
      : readdirSync(path)
          .filter((name) => name !== 'node_modules' && name !== 'dist' && !name.startsWith('.'))
          .flatMap((name) => files(join(path, name)));
  const source = ['apps', 'libs', 'scripts']
    .flatMap((dir) => files(join(ROOT, dir)))
    .filter((file) => /\.ts$/.test(file) && !/\.spec\.ts$/.test(file) && !file.includes('/generated/'));
  const patterns = [
    /\benv\.([A-Z][A-Z0-9_]+)/g,
    /\benv\[['"]([A-Z][A-Z0-9_]+)['"]\]/g,
    /\bparse(?:Port|Bound)\(\s*'([A-Z][A-Z0-9_]+)'/g,
    /\['[a-z ]+', '([A-Z][A-Z0-9_]+)', \d+\]/g, // npm start's [name, variable, default port] rows
    /^\s+([A-Z][A-Z0-9_]+): wholeNumberVariable\(/gm, // a program's own settings, read with readVariables
  ];
  for (const file of source) {
    const text = readFileSync(file, 'utf8');
    for (const pattern of patterns) {
      for (const [, name] of text.matchAll(pattern)) {
        reads.set(name, [...(reads.get(name) ?? []), relative(ROOT, file)]);
      }
    }
  }
  return reads;
}

/** Read by the code, but not configuration: the system's search path, jest's worker number (tests only). */
const NOT_CONFIGURATION = ['PATH', 'JEST_WORKER_ID'];

describe('docs/operations.md, "Environment variables"', () => {
  const configRows = tableRows('## Environment variables');
  const otherRows = (() => {
    const after = OPERATIONS.split('\nRead by the other programs:\n')[1] ?? '';
    return after
      .trim()
      .split('\n\n')[0]
      .split('\n')
      .slice(2)
      .map((line) => [...line.split('|')[1].matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1]))
      .flat();
  })();

  it('lists every variable loadConfig reads, one a row, each once, and nothing else', () => {
    expect(configRows.every((row) => row.names.length === 1)).toBe(true);
    const listed = configRows.map((row) => row.names[0]);
    expect(listed.filter((name, i) => listed.indexOf(name) !== i)).toEqual([]);
    expect([...listed].sort()).toEqual([...CONFIG_VARIABLES].sort());
  });

  it('gives each the default loadConfig applies when it is unset', () => {
    const defaults = loadConfig({}) as Record<string, unknown>;
    const wrong = configRows.flatMap(({ names: [name], cells: [, cell] }) => {
      const value = defaults[name];
      const documented = /^`([^`]*)`/.exec(cell)?.[1];
      const unset = value === undefined || (Array.isArray(value) && value.length === 0);
      const ok = unset ? cell.startsWith('unset') : documented === String(value);
      return ok ? [] : [`${name}: documented ${cell}, the code's default is ${JSON.stringify(value)}`];
    });
    expect(wrong).toEqual([]);
  });

  it('gives each numeric variable the range loadConfig enforces', () => {
    const wrong = configRows.flatMap(({ names: [name], cells: [, , cell] }) => {
      const enforced = codeRange(name);
      const documented = range(cell);
      return JSON.stringify(enforced) === JSON.stringify(documented)
        ? []
        : [`${name}: documented ${cell} (${JSON.stringify(documented)}), enforced ${JSON.stringify(enforced)}`];
    });
    expect(wrong).toEqual([]);
  });

  it('names the variables that refuse an empty value: the flags and those the text lists', () => {
    const sentence = /counts as unset, except for the flags and (.*?), which refuse/s.exec(
      OPERATIONS.replace(/\n/g, ' '),
    );
    const listed = [...(sentence?.[1] ?? '').matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1]);
    const flags = configRows.filter(({ cells: [, , values] }) => values.startsWith('flag')).map((row) => row.names[0]);
    const refused = CONFIG_VARIABLES.filter((name) => {
      try {
        loadConfig({ [name]: '' });
        return false;
      } catch {
        return true;
      }
    });
    expect([...refused].sort()).toEqual([...flags, ...listed].sort());
  });

  it('lists every variable the other programs read, and only those', () => {
    const reads = otherReads();
    const outside = [...reads.keys()].filter(
      (name) => !(CONFIG_VARIABLES as string[]).includes(name) && !NOT_CONFIGURATION.includes(name),
    );
    expect([...new Set(otherRows)].sort()).toEqual([...new Set(outside)].sort());
  });
});

describe('docs/operations.md, "Timing settings"', () => {
  it('gives each setting the default loadConfig applies', () => {
    const defaults = loadConfig({}) as Record<string, unknown>;
    const wrong = tableRows('## Timing settings (`libs/platform/src/config.ts`)').flatMap(({ names, cells }) => {
      const documented = cells[1].split(' / ');
      return names.flatMap((name, i) => {
        const cell = documented[i] ?? '';
        const duration = /^([\d ]+) ?(ms|s|min|h|days?)?$/.exec(cell);
        const value =
          cell === 'true' || cell === 'false'
            ? cell === 'true'
            : duration
              ? Number(duration[1].replace(/ /g, '')) * (UNITS[duration[2] ?? ''] ?? 1)
              : cell;
        return value === defaults[name] ? [] : [`${name}: documented ${cell}, the code's default is ${defaults[name]}`];
      });
    });
    expect(wrong).toEqual([]);
  });
});

describe('docs/operations.md, "Timing settings", the tests column', () => {
  it('gives the value every end-to-end stack runs with (TEST_TIMINGS), or the default where the tests keep it', () => {
    const defaults = loadConfig({}) as Record<string, unknown>;
    const wrong = tableRows('## Timing settings (`libs/platform/src/config.ts`)').flatMap(({ names, cells }) => {
      const documented = cells[2].split(' / ');
      return names.flatMap((name, i) => {
        const cell = documented[i] ?? cells[2];
        const duration = /^([\d ]+) ?(ms|s|min|h|days?)?$/.exec(cell);
        const value = duration ? Number(duration[1].replace(/ /g, '')) * (UNITS[duration[2] ?? ''] ?? 1) : cell;
        const set = TEST_TIMINGS[name];
        const ok =
          set === undefined
            ? cell === '—' || value === defaults[name] || cell === String(defaults[name])
            : value === Number(set);
        return ok ? [] : [`${name}: documented ${cell} for the tests, the stacks run with ${set ?? 'the default'}`];
      });
    });
    expect(wrong).toEqual([]);
  });
});

describe('the defaults the docs give in prose', () => {
  const DOCS = userDocs();

  /**
   * Each `NAME` (or `A + B`) the text follows with a number — `IDEMPOTENCY_TTL_MS` (24 h by default),
   * `WEBHOOK_MAX_ATTEMPTS` 8, `CONNECTOR_TIMEOUT_MS + SEND_GRACE_MS` (10 s by default) — where every name is a
   * variable loadConfig reads: the number, in milliseconds where it has a unit, and the sum of the defaults.
   */
  function statedDefaults(text: string): { stated: string; documented: number; actual: number }[] {
    const defaults = loadConfig({}) as Record<string, unknown>;
    const pattern =
      /`([A-Z][A-Z0-9_]*(?: \+ [A-Z][A-Z0-9_]*)*)` \(?(?:default |by default )?(\d[\d ]*(?:\.\d+)?)(?: ?(ms|s|min|h|days?))?(?=[ ,;.)])/g;
    return [...text.replace(/\s+/g, ' ').matchAll(pattern)].flatMap(([stated, expression, digits, unit]) => {
      const names = expression.split(' + ');
      if (!names.every((name) => (CONFIG_VARIABLES as string[]).includes(name))) return [];
      const values = names.map((name) => defaults[name]);
      if (!values.every((value) => typeof value === 'number')) return [];
      const documented = Number(digits.replace(/ /g, '')) * (UNITS[unit ?? ''] ?? 1);
      return [{ stated, documented, actual: (values as number[]).reduce((a, b) => a + b, 0) }];
    });
  }

  it('are the defaults loadConfig applies', () => {
    const stated = DOCS.flatMap((file) =>
      statedDefaults(readFileSync(join(ROOT, file), 'utf8')).map((found) => ({ file, ...found })),
    );
    expect(stated.length).toBeGreaterThan(20);
    expect(stated.filter(({ documented, actual }) => documented !== actual)).toEqual([]);
  });

  it('catch a wrong one', () => {
    expect(
      statedDefaults('waits `CONNECTOR_TIMEOUT_MS + SEND_GRACE_MS` (6 s by default), `WEBHOOK_MAX_ATTEMPTS` 8.'),
    ).toEqual([
      { stated: '`CONNECTOR_TIMEOUT_MS + SEND_GRACE_MS` (6 s', documented: 6000, actual: 10000 },
      { stated: '`WEBHOOK_MAX_ATTEMPTS` 8', documented: 8, actual: 8 },
    ]);
  });
});
