/**
 * What one VERIFIED operation costs the dispatcher in CPU: a local stack (test/support/stack.ts) with one dispatcher,
 * a closed loop of DISPATCHER_CPU_INFLIGHT (32) open charges, DISPATCHER_CPU_OPS (2000) of them measured after
 * DISPATCHER_CPU_WARMUP (300) unmeasured ones. Prints the dispatcher's utime + stime (from /proc) per operation over
 * the measured ones. With DISPATCHER_CPU_PROFILE=<dir> the dispatcher runs under `node --cpu-prof` and writes its
 * profile there (summarise it with profile-summary.js); DISPATCHER_CPU_NODE_OPTIONS adds Node flags to the dispatcher's (after its own, so they win). Run after `npm run build`:
 * `node dist/test/bench/dispatcher-cpu.js`. To compare two trees, run each tree's own dist/ in turn (docs/benchmarks.md).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Verity } from '@verity/sdk';
import { DEMO, Stack } from '../support/stack';
import { benchOnStack, measured, rssOf } from './measure';
import { submission } from './workload';

const ops = Number(process.env.DISPATCHER_CPU_OPS ?? 2000);
const warmup = Number(process.env.DISPATCHER_CPU_WARMUP ?? 300);
const inflight = Number(process.env.DISPATCHER_CPU_INFLIGHT ?? 32);
const profileDir = process.env.DISPATCHER_CPU_PROFILE;
const label = process.env.DISPATCHER_CPU_LABEL ?? 'dispatcher-cpu';

benchOnStack(
  () => Stack.start({ label: 'dispcpu', dispatchers: 0 }),
  async (stack) => {
    // On node's command line, after the apps' own flags: given in NODE_OPTIONS, a flag the apps set (the semi-space
    // size) lost to theirs, and a comparison of settings measured the same process twice.
    const nodeArgs = [
      ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []),
      ...(process.env.DISPATCHER_CPU_NODE_OPTIONS ?? '').split(/\s+/).filter(Boolean),
    ];
    const dispatcher = await stack.startApp('dispatcher', {}, nodeArgs);
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
    const { cpuMs: cpu, seconds } = await measured(pid, () => run(warmup + ops));
    const after = await verified();
    const rss = rssOf(pid);
    const done = after.v - before.v;
    return {
      label,
      verified: done,
      failures,
      dispatcherCpuMsPerOp: +(cpu / done).toFixed(3),
      dispatcherRssMb: rss === null ? null : Math.round(rss / 1024 ** 2),
      opsPerSecond: +(done / seconds).toFixed(1),
    };
  },
);
