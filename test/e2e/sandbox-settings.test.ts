import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { DIST, freePort } from '../support/stack';

/**
 * Red team (hostile pass 4): the sandbox provider read its numbers (SANDBOX_PORT, SANDBOX_MAX_EFFECTS,
 * SANDBOX_MAX_REQUESTS) with Number(), so `0x10` was 16, `1e3` 1000, ` 5` 5 — values their writer may not have meant —
 * where every other Verity process refuses them at start. It now reads them with the platform config's whole-number
 * rule and refuses start with the same one-line message, naming the variable.
 */
interface Outcome {
  started: boolean;
  code: number | null;
  output: string;
}

/** Starts the built sandbox provider; resolves once it listens (then stops it) or once it exits by itself. */
function start(env: Record<string, string>): Promise<Outcome> {
  return new Promise((resolve) => {
    const child: ChildProcess = spawn(process.execPath, [join(DIST, 'apps/sandbox-provider/src/main.js')], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    let started = false;
    const read = (d: Buffer) => {
      output += d.toString();
      if (!started && output.includes('sandbox provider listening')) {
        started = true;
        child.kill('SIGTERM');
      }
    };
    child.stdout?.on('data', read);
    child.stderr?.on('data', read);
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ started, code, output });
    });
  });
}

const FORM = 'in decimal digits only (no sign, exponent, fraction, hex or spaces)';

describe('the sandbox provider’s own settings', () => {
  it.each([
    ['SANDBOX_MAX_EFFECTS', '0x10'],
    ['SANDBOX_MAX_EFFECTS', '1e3'],
    ['SANDBOX_MAX_EFFECTS', ' 5'],
    ['SANDBOX_MAX_EFFECTS', '-1'],
    ['SANDBOX_MAX_REQUESTS', '0x10'],
    ['SANDBOX_MAX_REQUESTS', '+7'],
    ['SANDBOX_MAX_REQUESTS', '5.0'],
    ['SANDBOX_MAX_REQUESTS', '99999999999'],
    ['SANDBOX_PORT', '0x10'],
    ['SANDBOX_PORT', '1e3'],
  ])('refuses %s=%j at start with one line naming it', async (name, value) => {
    const env = { SANDBOX_PORT: String(await freePort()), [name]: value };
    const result = await start(env);
    expect({ started: result.started, code: result.code }).toEqual({ started: false, code: 1 });
    const lines = result.output.trim().split('\n');
    expect(lines).toHaveLength(1);
    const line = JSON.parse(lines[0]) as { level: string; error: string };
    expect(line.level).toBe('error');
    expect(line.error).toMatch(new RegExp(`^invalid configuration: ${name}: must be a whole number from \\d+ to \\d+`));
    if (!/^\d+$/.test(value)) expect(line.error).toContain(FORM);
  });

  it('starts with plain digits, and with a variable left empty (its default)', async () => {
    const port = await freePort();
    const result = await start({
      SANDBOX_PORT: String(port),
      SANDBOX_MAX_EFFECTS: '10',
      SANDBOX_MAX_REQUESTS: '',
    });
    expect(result.started).toBe(true);
    expect(result.output).toContain(`http://127.0.0.1:${port}`);
  });
});
