import { formatReport, runFuzz } from './fuzz';

/**
 * The bounded run of `npm test`: 3,000 requests generated from /docs-json, fixed seed (FUZZ_SEED to change it,
 * FUZZ_RUNS for more). `npm run fuzz -- --runs 50000` is the long run (docs/reliability.md).
 */
const SEED = Number(process.env.FUZZ_SEED ?? 20_260_512);
const RUNS = Number(process.env.FUZZ_RUNS ?? 3_000);

describe('OpenAPI fuzz', () => {
  it(`${RUNS} generated requests (seed ${SEED}): no 5xx, no hang, no 4xx that writes, ready after`, async () => {
    const lines: string[] = [];
    const report = await runFuzz({ runs: RUNS, seed: SEED, log: (line) => lines.push(line) });
    console.log(`${formatReport(report, SEED)}\n${lines.join('\n')}`);
    expect(report.failure).toBeNull();
    expect(report.requests).toBeGreaterThanOrEqual(RUNS * 0.95);
    expect(report.operations).toBeGreaterThanOrEqual(20);
    expect(report.readyAfter).toBe(true);
  }, 300_000);
});
