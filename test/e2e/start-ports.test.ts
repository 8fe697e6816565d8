import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { DIST } from '../support/stack';

/**
 * `npm start` checks the ports it will give its apps before it starts anything, by the rule the apps read their own
 * settings with: decimal digits only. `Number()` took `0x10` (16), `1e3` (1000), ` 80` and `+80`, so the supervisor
 * checked and reported a port other than the one written.
 */
describe('npm start: port settings', () => {
  it.each([
    ['PORT', '0x10'],
    ['PORT', '1e3'],
    ['PORT', ' 80'],
    ['SANDBOX_PORT', '+4010'],
    ['DISPATCHER_METRICS_PORT', '0b1'],
    ['RECONCILER_METRICS_PORT', '9102.0'],
    ['PORT', '70000'],
  ])('%s=%j is refused with one line naming it, nothing started', (variable, value) => {
    const result = spawnSync(process.execPath, [join(DIST, 'scripts', 'start.js')], {
      env: { ...process.env, NO_COLOR: '1', [variable]: value },
      encoding: 'utf8',
      timeout: 60_000,
    });
    const output = `${result.stdout}${result.stderr}`;
    expect(result.status).toBe(1);
    expect(output).toContain(`${variable} is not a port: ${value}`);
    expect(output).not.toMatch(/started \S+ \(pid/);
  });
});
