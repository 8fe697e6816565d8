import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Event, events, logLines, markedOperations, submit, waitForOp } from './dispatcher-helpers';

/**
 * A held operation is read again on one schedule, whatever number of reviewers ask for a read meanwhile. Each read that
 * leaves it held re-dates its `next_check_at` and schedules the next automatic read; an automatic re-check scheduled
 * before that (for a time the operation no longer names) must read and write nothing. Before: it ran all the same, so
 * each reviewer's read that left the hold held started another chain of automatic reads — N asks, N chains, the
 * third party read N times as often as configured and the history filled with automatic re-checks.
 */
describe('reconciler: one chain of automatic re-checks per hold', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({
      label: 'recheckchain',
      // Short enough for the test, long enough that the reviewers ask before the first automatic re-check is due.
      env: { RECHECK_BACKOFF_MS: '3000', RECHECK_BACKOFF_MAX_MS: '6000', OBLIGATION_DUE_MS: '600000' },
    });
  });
  afterAll(async () => stack?.stop());

  const rechecks = (log: Event[], opId: string) =>
    log.filter((e) => e.type === 'operation.rechecked' && e.operation_id === opId);

  /** The re-check a hold or a re-check named next (the hold's `recheck_at`, a re-check's `next_check_at`). */
  const namedNext = (e: Event): string | null | undefined =>
    e.type === 'operation.rechecked'
      ? (e.data.next_check_at as string | null)
      : (e.data.recheck_at as string | null | undefined);

  it('two reviewers’ re-checks that leave the operation held do not start two more chains', async () => {
    await stack.setFaults({ read_fault: 'unavailable' });
    const created = await submit(stack, [charge(unique('recheck-chain'))]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held.terminal_reason).toBe('SOURCE_UNREACHABLE');

    // Two reviewers ask, one after the other; each read finds the source still down and leaves the hold held.
    for (const asked of [1, 2]) {
      const res = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/recheck`, { key: DEMO.reviewer });
      expect(res.status).toBe(202);
      await waitFor(
        () => events(stack, created.id),
        (log) => rechecks(log, held.id).filter((e) => e.data.trigger === 'reviewer').length >= asked,
      );
    }
    const lastAsk = rechecks(await events(stack, created.id), held.id).filter((e) => e.data.trigger === 'reviewer')[1];
    expect(lastAsk.data).toMatchObject({ result: 'unreachable', next_check_at: expect.any(String) });

    // Two automatic re-checks after the reviewers' reads.
    const log = await waitFor(
      () => events(stack, created.id),
      (l) => rechecks(l, held.id).filter((e) => e.data.trigger === 'scheduled' && e.seq > lastAsk.seq).length >= 2,
      40_000,
    );

    // Each automatic re-check is the one the operation named when it ran: made no earlier than the `next_check_at` the
    // write before it (the hold's, or a re-check's) had set. A re-check of a chain a later read superseded was made
    // before the time that read named. (Both times are the database's; a little allowance for clock reads.)
    const history = log
      .filter((e) => e.operation_id === held.id && namedNext(e) !== undefined)
      .sort((a, b) => a.seq - b.seq);
    const early: { created_at: string; named: string }[] = [];
    history.forEach((e, i) => {
      if (e.type !== 'operation.rechecked' || e.data.trigger !== 'scheduled') return;
      const named = namedNext(history[i - 1]);
      expect(named).toEqual(expect.any(String));
      if (Date.parse(e.created_at) < Date.parse(named as string) - 100) {
        early.push({ created_at: e.created_at, named: named as string });
      }
    });
    expect(early).toEqual([]);

    // The superseded ones said so, and read nothing.
    const [reconciler] = stack.running('reconciler');
    expect(
      logLines(reconciler).some(
        (l) => l.job === 'recheck-operation' && l.operationId === held.id && l.outcome === 'skipped: superseded',
      ),
    ).toBe(true);
    expect((await waitForOp(stack, created.id, 'charge', () => true)).status).toBe('MANUAL_REVIEW');
  }, 90_000);

  /**
   * The other side of the rule: a scheduled re-check superseded while it read, whose read showed the effect (here a
   * record with another amount), still writes what it showed onto the hold — only the schedule is not its to set.
   */
  it('a scheduled re-check superseded during its read keeps what the read showed, and schedules nothing', async () => {
    await stack.setFaults({ read_fault: 'unavailable' });
    const created = await submit(stack, [charge(unique('recheck-superseded'))]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    for (const reconciler of stack.running('reconciler')) await stack.kill(reconciler, 'SIGTERM');
    // Its reads pause until SIGUSR2 (docs/operations.md "Test-only hooks"): the hold's first automatic re-check waits
    // there, past its check that it is the one the operation names.
    const paused = await stack.startApp('reconciler', { TEST_PAUSE_BEFORE_READ_MS: '60000' });
    // This hold's read (the first test's hold is still read on its own schedule, and may pause there too).
    await waitFor(
      async () => markedOperations(paused, 'paused before read-back'),
      (ids) => ids.includes(held.id),
      30_000,
      20,
    );
    await stack.setFaults({ read_fault: 'amount_mismatch' });
    // A reviewer's "still unknown", due sooner than any re-check: the operation names no next re-check any more.
    const kept = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'MANUAL_REVIEW', evidence: 'provider support is looking into it', due_in_seconds: 1 },
    });
    expect(kept.status).toBe(200);
    paused.child.kill('SIGUSR2');

    const outcomes = (
      await waitFor(
        async () =>
          logLines(paused).filter(
            (l) => l.job === 'recheck-operation' && l.operationId === held.id && typeof l.outcome === 'string',
          ),
        // The sweep finds the hold overdue while the read is paused (its due time passed) and re-arms the chain's job
        // for that due time: the paused one, active, is left to run, and no other read is made beside it.
        (lines) => lines.some((l) => l.outcome === 'still held: mismatch'),
      )
    ).map((l) => l.outcome);
    expect(outcomes).not.toContain('skipped: superseded');
    const log = await events(stack, created.id);
    const shown = rechecks(log, held.id).filter((e) => e.data.result === 'mismatch' && e.data.superseded === true);
    expect(shown).toHaveLength(1);
    expect(shown[0].data).toMatchObject({ trigger: 'scheduled', superseded: true, next_check_at: null });
    const [row] = (await stack.db.dataSource.query(
      `SELECT next_check_at, obligation->'effect_shown'->>'result' AS shown FROM operations WHERE id = $1`,
      [held.id],
    )) as { next_check_at: Date | null; shown: string | null }[];
    expect(row).toEqual({ next_check_at: null, shown: 'mismatch' });
  }, 90_000);
});
