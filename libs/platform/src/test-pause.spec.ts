import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';

/**
 * In a process of its own (jest's sandbox gives a test a `process` whose signal listeners the real process never
 * sees): this module, compiled as it is, holds two ten-minute pauses, each logging its marker (`paused a`, `paused b`)
 * to stdout through a logger that then does `afterMarker` — what the process does, or has done to it, between the
 * marker a test waits for and its next statement.
 */
function pausingProcess(afterMarker = '', { beforePauses = 'pause();', env = process.env } = {}) {
  const module = ts.transpileModule(readFileSync(join(__dirname, 'test-pause.ts'), 'utf8'), {
    compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022 },
  }).outputText;
  const script = `
    const exported = {};
    new Function('exports', 'require', ${JSON.stringify(module)})(exported, require);
    const logger = {
      warn: (fields, marker) => {
        process.stdout.write(marker + '\\n');
        ${afterMarker}
      },
    };
    function pause() {
      Promise.all([
        exported.testPause(logger, 600000, 'paused a', { operationId: 'a' }),
        exported.testPause(logger, 600000, 'paused b'),
      ]).then(() => {
        console.log('ended');
        process.exit(0);
      });
    }
    ${beforePauses}
  `;
  return spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'], env });
}

/** The child's state letter in /proc (`T` once it is stopped). */
function processState(pid: number): string {
  return readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0];
}

async function stopped(pid: number): Promise<void> {
  while (processState(pid) !== 'T') await new Promise((r) => setTimeout(r, 5));
}

/** Runs `child` to its end, calling `onOutput` with all it printed so far at each chunk; its exit and its output. */
async function runToEnd(child: ReturnType<typeof pausingProcess>, onOutput: (output: string) => void | Promise<void>) {
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => {
    output += chunk.toString();
    void onOutput(output);
  });
  const [code, signal] = (await once(child, 'exit')) as [number | null, string | null];
  return { code, signal, output };
}

const ENDED = { code: 0, signal: null, output: 'paused a\npaused b\nended\n' };

describe('testPause (the test-only kill points)', () => {
  it('ends every pause in progress when the process gets SIGUSR2, long before its time', async () => {
    const child = pausingProcess();
    const result = await runToEnd(child, (output) => {
      if (output === 'paused a\npaused b\n') child.kill('SIGUSR2');
    });
    expect(result).toEqual(ENDED);
  }, 20_000);

  it('is armed before its marker is out: a SIGUSR2 sent on the marker, before the next statement, ends the pause', async () => {
    // The soonest a test can signal on a marker: the process signals itself as the marker is written (delivered before
    // kill() returns). With the marker logged before the handler was installed, the process died of SIGUSR2 here.
    const child = pausingProcess(`process.kill(process.pid, 'SIGUSR2');`);
    expect(await runToEnd(child, () => undefined)).toEqual(ENDED);
  }, 20_000);

  it('is armed before its marker is out: stopped right after it, then SIGCONT and SIGUSR2 (a frozen worker woken), it ends the pause', async () => {
    // As test/e2e/late-rejection.test.ts freezes a dispatcher on its marker and wakes it; here the process is stopped
    // before its next statement (it stops itself as the marker is written), the worst a loaded machine can do.
    const child = pausingProcess(`if (marker === 'paused a') process.kill(process.pid, 'SIGSTOP');`);
    const result = await runToEnd(child, async (output) => {
      if (output !== 'paused a\n') return;
      await stopped(child.pid!);
      child.kill('SIGCONT');
      child.kill('SIGUSR2');
    });
    expect(result).toEqual(ENDED);
  }, 20_000);

  it('is armed from the start in a process started with a pause: a SIGUSR2 before its first pause leaves it running', async () => {
    // A test may signal a worker before any of its pauses has run (a wake sent early, or to every worker). The handler
    // was installed by the process's first pause: before it, SIGUSR2's default action ended the process. Here the
    // process signals itself before any pause (delivered before kill() returns) and pauses once that signal has been
    // handled (a listener added after the kill: one the process never lives to call unless the signal was caught; a
    // timer keeps it alive until then, a signal's listener does not).
    const child = pausingProcess('', {
      env: { ...process.env, TEST_PAUSE_BEFORE_SENT_MS: '600000' },
      beforePauses: `
        process.kill(process.pid, 'SIGUSR2');
        const alive = setTimeout(() => undefined, 600000);
        process.once('SIGUSR2', () => { clearTimeout(alive); pause(); });
      `,
    });
    const result = await runToEnd(child, (output) => {
      if (output === 'paused a\npaused b\n') child.kill('SIGUSR2');
    });
    expect(result).toEqual(ENDED);
  }, 20_000);

  it('ends by itself after its time, and logs nothing when its time is 0', async () => {
    const { testPause } = await import('./test-pause');
    const lines: unknown[] = [];
    const logger = { warn: (fields: unknown, marker: string) => void lines.push([fields, marker]) };
    await testPause(logger, 10, 'paused here', { operationId: 'op_1' });
    await testPause(logger, 0, 'not paused');
    expect(lines).toEqual([[{ operationId: 'op_1', pauseMs: 10 }, 'paused here']]);
  });
});
