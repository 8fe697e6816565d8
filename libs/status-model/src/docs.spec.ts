import { readFileSync } from 'fs';
import { join } from 'path';
import { FAILURE_CODES } from './failure';

/** docs/api.md prints the failure code table; it must say exactly what the model does (cells, padding aside). */
describe('the failure code table in docs/api.md', () => {
  const rows = readFileSync(join(__dirname, '../../../docs/api.md'), 'utf8')
    .split('\n')
    .filter((line) => line.startsWith('| `'))
    .map((line) =>
      line
        .split('|')
        .slice(1, -1)
        .map((cell) => cell.trim()),
    );

  it.each(Object.entries(FAILURE_CODES))('lists %s with its status, phase, category and retryability', (code, info) => {
    expect(rows).toContainEqual([
      `\`${code}\``,
      info.applies_to,
      info.status,
      info.phase,
      `\`${info.category}\``,
      info.retryable ? 'yes' : 'no',
      info.message,
    ]);
  });
});
