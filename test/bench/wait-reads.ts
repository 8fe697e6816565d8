/**
 * What an agent's wait costs the API: `executions` charges (WAIT_READS_EXECUTIONS, 300), one after another, each
 * created and then waited for with the SDK's `waitForSettled`, against a local stack (test/support/stack.ts). Prints
 * the GETs of an execution the API answered per execution (its own request metrics), the reads its streams made of
 * the execution to decide whether they end (`verity_stream_verdict_reads_total`; null from an API without that metric),
 * the round trips and reads its redaction made (`verity_secrets_freshness_round_trips_total`,
 * `verity_tenant_secrets_reads_total`) and the API process' CPU per execution (utime + stime from /proc, Linux only). Run after `npm run build`:
 * `node dist/test/bench/wait-reads.js`. It measures the SDK and the API of dist/: to compare two versions of the wait,
 * swap dist/libs/sdk/src/client.js (or the API's bundle, dist/apps/api/src/main.js) between runs and alternate them
 * (docs/benchmarks.md).
 */
import { Verity } from '@verity/sdk';
import { DEMO, METRICS_TOKEN, Stack } from '../support/stack';
import { benchOnStack, measured } from './measure';
import { submission } from './workload';

/**
 * The GETs of an execution the API answered, its streams' verdict reads, and the round trips and statements its
 * redaction made (freshness round trips on the LISTEN connection, reads of the tenant's secrets); null: the API has no
 * such metric.
 */
interface Reads {
  gets: number;
  verdicts: number | null;
  freshness: number | null;
  secretReads: number | null;
}

async function reads(apiUrl: string): Promise<Reads> {
  const text = await (
    await fetch(`${apiUrl}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
  ).text();
  let gets = 0;
  let verdicts: number | null = null;
  let freshness: number | null = null;
  let secretReads: number | null = null;
  for (const line of text.split('\n')) {
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (line.startsWith('verity_stream_verdict_reads_total ')) verdicts = value;
    if (line.startsWith('verity_secrets_freshness_round_trips_total ')) freshness = value;
    if (line.startsWith('verity_tenant_secrets_reads_total ')) secretReads = value;
    if (!line.startsWith('verity_http_request_duration_seconds_count{')) continue;
    if (line.includes('method="GET"') && line.includes('route="/v1/executions/:id"')) gets += value;
  }
  return { gets, verdicts, freshness, secretReads };
}

/** What `field` grew by per execution (null: not counted by the API). */
function perExecution(after: Reads, before: Reads, field: keyof Reads, executions: number): number | null {
  const [b, a] = [before[field], after[field]];
  return a === null ? null : +((a - (b ?? 0)) / executions).toFixed(2);
}

const executions = Number(process.env.WAIT_READS_EXECUTIONS ?? 300);
const label = process.env.WAIT_READS_LABEL ?? 'wait-reads';

benchOnStack(
  () => Stack.start({ label: 'waitreads' }),
  async (stack) => {
    const api = stack.running('api')[0].child.pid!;
    const dx = new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.agent });
    // A few first, so that the API's first requests (compiling, pools filling) are not counted.
    for (let i = 0; i < 10; i += 1) {
      const created = await dx.executions.create(submission(`warm-${Date.now()}-${i}`));
      await dx.waitForSettled(created.id, { timeoutMs: 30_000 });
    }
    const reads0 = await reads(stack.apiUrl);
    const { cpuMs: cpu, seconds } = await measured(api, async () => {
      for (let i = 0; i < executions; i += 1) {
        const created = await dx.executions.create(submission(`reads-${Date.now()}-${i}`));
        await dx.waitForSettled(created.id, { timeoutMs: 30_000 });
      }
    });
    const reads1 = await reads(stack.apiUrl);
    return {
      label,
      executions,
      getsPerExecution: +((reads1.gets - reads0.gets) / executions).toFixed(2),
      verdictReadsPerExecution: perExecution(reads1, reads0, 'verdicts', executions),
      secretsFreshnessRoundTripsPerExecution: perExecution(reads1, reads0, 'freshness', executions),
      tenantSecretsReadsPerExecution: perExecution(reads1, reads0, 'secretReads', executions),
      apiCpuMsPerExecution: +(cpu / executions).toFixed(2),
      seconds: +seconds.toFixed(1),
    };
  },
);
