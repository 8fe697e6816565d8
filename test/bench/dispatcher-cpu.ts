/**
 * What one VERIFIED operation costs the dispatcher in CPU: a local stack (test/support/stack.ts) with one dispatcher,
 * a closed loop of DISPATCHER_CPU_INFLIGHT (32) open charges, DISPATCHER_CPU_OPS (2000) of them measured after
 * DISPATCHER_CPU_WARMUP (300) unmeasured ones. Prints the dispatcher's utime + stime (from /proc) per operation over
 * the measured ones. With DISPATCHER_CPU_PROFILE=<dir> the dispatcher runs under `node --cpu-prof` and writes its
 * profile there (summarise it with profile-summary.js); DISPATCHER_CPU_NODE_OPTIONS adds Node flags to the dispatcher's. Run after `npm run build`:
 * `node dist/test/bench/dispatcher-cpu.js`. To compare two trees, run each tree's own dist/ in turn (docs/benchmarks.md).
 */
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { Verity } from '@verity/sdk';
import { DEMO, Stack } from '../support/stack';
import { cpuMs } from './measure';
import { submission } from './workload';

async function main(): Promise<void> {
  const ops = Number(process.env.DISPATCHER_CPU_OPS ?? 2000);
  const warmup = Number(process.env.DISPATCHER_CPU_WARMUP ?? 300);
  const inflight = Number(process.env.DISPATCHER_CPU_INFLIGHT ?? 32);
  const profileDir = process.env.DISPATCHER_CPU_PROFILE;
  const label = process.env.DISPATCHER_CPU_LABEL ?? 'dispatcher-cpu';
  const stack = await Stack.start({ label: 'dispcpu', dispatchers: 0 });
  try {
    const dispatcher = await stack.startApp('dispatcher', {
      NODE_OPTIONS: [
        profileDir ? `--cpu-prof --cpu-prof-dir=${profileDir}` : '',
        process.env.DISPATCHER_CPU_NODE_OPTIONS ?? '',
      ].join(' '),
    });
    const pid = dispatcher.child.pid!;
    const dx = new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.agent });
    const verified = async () =>
      (
        (await stack.db.dataSource.query(
          `SELECT count(*) FILTER (WHERE status = 'VERIFIED')::int AS v,
                  count(*) FILTER (WHERE status IN ('PREPARED','SENT','ACKNOWLEDGED','UNKNOWN','RECONCILING'))::int AS open
             FROM operations`,
        )) as { v: number; open: number }[]
      )[0];
    let submitted = 0;
    let pending = 0;
    let failures = 0;
    // Runs the closed loop until `total` operations were submitted and all of them settled.
    const run = async (total: number) => {
      for (;;) {
        const { open } = await verified();
        if (submitted >= total && pending === 0 && open === 0) return;
        for (let deficit = inflight - open - pending; deficit > 0 && submitted < total; deficit -= 1) {
          submitted += 1;
          pending += 1;
          dx.executions
            .create(submission(`dcpu-${label}-${submitted}`))
            .catch(() => (failures += 1))
            .finally(() => (pending -= 1));
        }
        await sleep(20);
      }
    };
    await run(warmup);
    const before = await verified();
    const cpu0 = cpuMs(pid);
    const started = performance.now();
    await run(warmup + ops);
    const cpu = cpuMs(pid) - cpu0;
    const seconds = (performance.now() - started) / 1000;
    const after = await verified();
    const rss = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    const done = after.v - before.v;
    console.log(
      JSON.stringify({
        label,
        verified: done,
        failures,
        dispatcherCpuMsPerOp: +(cpu / done).toFixed(3),
        dispatcherRssMb: rss ? Math.round(Number(rss) / 1024) : null,
        opsPerSecond: +(done / seconds).toFixed(1),
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
