import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '@verity/platform/config';
import { BODY_LIMIT_BYTES } from '../http/body-errors';
import { DEFAULT_DEADLINE_SECONDS } from './executions.service';
import { LIMITS } from './submission';

/** docs/api.md's "Limits" table: the row whose first cell starts so, its value cell with spaces in numbers dropped. */
function limit(row: string): string {
  const section = readFileSync(join(__dirname, '../../../../docs/api.md'), 'utf8').split('\n## Limits\n')[1] ?? '';
  const line = section.split('\n').find((l) => l.startsWith(`| ${row}`));
  if (line === undefined) throw new Error(`docs/api.md, Limits: no row "${row}"`);
  return line
    .split('|')[2]
    .trim()
    .replace(/(\d) (\d{3})\b/g, '$1$2');
}

describe('the limits docs/api.md lists', () => {
  const config = loadConfig({});

  it('are the ones intake enforces', () => {
    expect(limit('request body')).toMatch(new RegExp(`^${BODY_LIMIT_BYTES / 1024} KiB \\(413\\)`));
    expect(limit('operations per execution')).toBe(`1–${LIMITS.operations}`);
    expect(LIMITS.criteria).toBe(LIMITS.dependsOn);
    expect(limit('criteria, `depends_on` entries')).toBe(`${LIMITS.criteria} each`);
    expect(limit('operation `key`')).toMatch(new RegExp(`^1–${LIMITS.keyLength} `));
    expect(limit('`agent_id` / `intent`')).toMatch(new RegExp(`^${LIMITS.agentId} / ${LIMITS.intent} characters`));
    expect(LIMITS.deadlineSeconds).toEqual({ min: 1, max: 7 * 24 * 3600 });
    expect(limit('`deadline_seconds`')).toBe(`1 s – 7 days (${DEFAULT_DEADLINE_SECONDS} by default)`);
    const { json } = LIMITS;
    expect(limit('`params`, `expected_state`')).toBe(
      `nesting ≤ ${json.depth}, strings ≤ ${json.string} characters, arrays ≤ ${json.array} items, objects ≤ ` +
        `${json.keys} keys of ≤ ${json.keyLength} characters each; \`expected_state\` ≤ ${LIMITS.expectedStateKeys} keys`,
    );
  });

  it('give each configurable limit its default', () => {
    const rows: [string, keyof typeof config][] = [
      ['requests per key', 'RATE_LIMIT_PER_MINUTE'],
      ['requests in flight per key', 'MAX_V1_REQUESTS_PER_KEY'],
      ['requests in flight per tenant and per process', 'MAX_V1_REQUESTS_PER_PROCESS'],
      ['open streams per key', 'MAX_STREAMS_PER_KEY'],
      ['open streams per tenant and per process', 'MAX_STREAMS_PER_PROCESS'],
      ['MCP requests in flight per key', 'MAX_MCP_REQUESTS_PER_KEY'],
      ['MCP requests in flight per tenant and per process', 'MAX_MCP_REQUESTS_PER_PROCESS'],
    ];
    for (const [row, name] of rows) {
      expect({ row, cell: limit(row).slice(0, name.length + 20) }).toEqual({
        row,
        cell: expect.stringMatching(new RegExp(`^\`${name}\` \\(${String(config[name])}\\)`)) as unknown,
      });
    }
  });

  it('fail on a row the table does not have', () => {
    expect(() => limit('frobs per key')).toThrow('no row');
  });
});
