import { runChaos } from './chaos';

/**
 * The reduced chaos run of `npm test`: ~200 operations through a private Postgres, Redis, sandbox, API, two
 * dispatchers and two reconcilers, with send faults at probability 0.2, 3 worker SIGKILLs, a dispatcher paused past
 * its lock, one crash each of Redis and Postgres, Redis crashed once more and brought back empty, and stray dispatch
 * jobs for operations already SENT. Checked against the provider's effects and its wire log. `npm run chaos` is the
 * full run (2,000 operations, 20 kills).
 */
describe('chaos (reduced run)', () => {
  it('loses nothing, duplicates nothing and never claims VERIFIED or FAILED against the provider', async () => {
    const lines: string[] = [];
    const result = await runChaos({
      operations: 200,
      kills: 3,
      faultProbability: 0.2,
      dispatchers: 2,
      reconcilers: 2,
      rate: 10,
      drainTimeoutMs: 180_000,
      stallMs: 90_000,
      log: (line) => lines.push(line),
    });
    const broken = result.report.rows
      .filter((row) => (row.violations ?? 0) > 0)
      .map((row) => ({ invariant: row.label, count: row.violations, examples: row.examples }));
    console.log(`${result.report.table}${result.ok ? '' : `\n\nrun log:\n${lines.join('\n')}\nkept in ${result.dir}`}`);

    // The run must have been a real storm, or "no violation" proves nothing.
    const counts = result.report.counts;
    expect(counts.operations).toBeGreaterThanOrEqual(190);
    expect(counts.passedUnknown).toBeGreaterThan(0);
    expect(result.actions).toMatchObject({
      workerKills: 3,
      workerRestarts: 3,
      redisRestarts: 1,
      redisEmptied: 1,
      postgresRestarts: 1,
    });
    // Duplicated jobs met operations already SENT (the dispatcher must mark them UNKNOWN, never send again).
    expect(result.actions.strayDispatches).toBeGreaterThan(0);
    expect(result.actions.pauses).toHaveLength(1);
    // Reviewers raced each other and the workers on approvals and on manual reviews.
    expect(result.actions.reviewers.approvalRaces).toBeGreaterThan(0);
    expect(result.actions.reviewers.resolutionRaces).toBeGreaterThan(0);

    expect(broken).toEqual([]);
  }, 420_000);
});
