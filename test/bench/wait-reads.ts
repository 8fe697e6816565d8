/**
 * What an agent's wait costs the API: `executions` charges (WAIT_READS_EXECUTIONS, 300), one after another, each
 * created and then waited for with the SDK's `waitForSettled`, against a local stack (test/support/stack.ts). Prints
 * the GETs of an execution the API answered per execution (its own request metrics) and the API process' CPU per
 * execution (utime + stime from /proc, Linux only). Run after `npm run build`: `node dist/test/bench/wait-reads.js`.
 * It measures the SDK of dist/: to compare two versions of the wait, swap dist/libs/sdk/src/client.js between runs
 * and alternate them (docs/benchmarks.md).
 */
import { Verity } from '@verity/sdk';
import { DEMO, METRICS_TOKEN, Stack } from '../support/stack';
import { cpuMs } from './measure';
import { submission } from './workload';

async function executionReads(apiUrl: string): Promise<number> {
  const text = await (
    await fetch(`${apiUrl}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
  ).text();
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith('verity_http_request_duration_seconds_count{')) continue;
    if (line.includes('method="GET"') && line.includes('route="/v1/executions/:id"')) {
      total += Number(line.slice(line.lastIndexOf(' ') + 1));
    }
  }
  return total;
}

async function main(): Promise<void> {
  const executions = Number(process.env.WAIT_READS_EXECUTIONS ?? 300);
  const label = process.env.WAIT_READS_LABEL ?? 'wait-reads';
  const stack = await Stack.start({ label: 'waitreads' });
  try {
    const api = stack.running('api')[0].child.pid!;
    const dx = new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.agent });
    // A few first, so that the API's first requests (compiling, pools filling) are not counted.
    for (let i = 0; i < 10; i += 1) {
      const created = await dx.executions.create(submission(`warm-${Date.now()}-${i}`));
      await dx.waitForSettled(created.id, { timeoutMs: 30_000 });
    }
    const reads0 = await executionReads(stack.apiUrl);
    const cpu0 = cpuMs(api);
    const started = performance.now();
    for (let i = 0; i < executions; i += 1) {
      const created = await dx.executions.create(submission(`reads-${Date.now()}-${i}`));
      await dx.waitForSettled(created.id, { timeoutMs: 30_000 });
    }
    const seconds = (performance.now() - started) / 1000;
    const cpu = cpuMs(api) - cpu0;
    const reads = (await executionReads(stack.apiUrl)) - reads0;
    console.log(
      JSON.stringify({
        label,
        executions,
        getsPerExecution: +(reads / executions).toFixed(2),
        apiCpuMsPerExecution: +(cpu / executions).toFixed(2),
        seconds: +seconds.toFixed(1),
        load: (await import('node:os')).loadavg()[0].toFixed(1),
      }),
    );
  } finally {
    await stack.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
