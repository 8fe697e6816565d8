import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';

/**
 * In a process of its own (jest's sandbox gives a test a `process` whose signal listeners the real process never
 * sees): this module, compiled as it is, holds two ten-minute pauses; SIGUSR2 must end both.
 */
function pausingProcess() {
  const module = ts.transpileModule(readFileSync(join(__dirname, 'test-pause.ts'), 'utf8'), {
    compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022 },
  }).outputText;
  const script = `
    const exported = {};
    new Function('exports', ${JSON.stringify(module)})(exported);
    Promise.all([exported.testPauseSleep(600000), exported.testPauseSleep(600000)]).then(() => {
      console.log('ended');
      process.exit(0);
    });
    console.log('paused');
  `;
  return spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
}

describe('testPauseSleep (the sleep of the test-only kill points)', () => {
  it('ends every pause in progress when the process gets SIGUSR2, long before its time', async () => {
    const child = pausingProcess();
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output === 'paused\n') child.kill('SIGUSR2');
    });
    const [code, signal] = (await once(child, 'exit')) as [number | null, string | null];
    expect({ code, signal, output }).toEqual({ code: 0, signal: null, output: 'paused\nended\n' });
  }, 20_000);

  it('ends by itself after its time', async () => {
    const { testPauseSleep } = await import('./test-pause');
    await testPauseSleep(10);
  });
});
