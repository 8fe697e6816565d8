import { skewedClock } from '../support/skewed-clock';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { events, resetSandbox, submit } from './dispatcher-helpers';

/** How far behind the database's clock the dispatcher's and the reconciler's host clocks run. */
const BEHIND_MS = 10 * 60_000;
/** How long after VERIFIED an effect is read again (the default): longer than the whole test. */
const OBSERVE_INTERVAL_MS = 60_000;

interface CheckRow {
  id: string;
  status: string;
  check_count: number;
  updated_at: Date;
  acknowledged_at: Date | null;
  next_check_at: Date | null;
  obligation: { effect_shown?: { result: string; at: string } } | null;
}

/**
 * When an operation is next owed a read (`next_check_at`) is compared by the sweeper with the database's clock, and
 * the times a worker writes into a hold's history are shown beside the database's. Written from the worker's own
 * clock, a host 10 minutes behind made every acknowledged send, inconclusive read and observation due 10 minutes in the
 * past (read again at once), and dated what a re-check showed before the hold it was read for.
 */
describe('workers on hosts whose clocks are behind the database’s: checks due by the database’s clock', () => {
  let stack: Stack;
  let clock: ReturnType<typeof skewedClock> | undefined;
  beforeAll(async () => {
    clock = skewedClock();
    // No reconciler at first: nothing (its verify job, its sweeper) moves what the dispatcher wrote.
    stack = await Stack.start({ label: 'checksclock', dispatchers: 0, reconcilers: 0 });
    await stack.startApp('dispatcher', clock.env(-BEHIND_MS));
  });
  afterAll(async () => {
    await stack?.stop();
    clock?.remove();
  });
  afterEach(async () => resetSandbox(stack));

  /** The execution's one operation as its row holds it, once `until` holds. */
  async function operationRow(executionId: string, until: (row: CheckRow) => boolean): Promise<CheckRow> {
    const [row] = await waitFor(
      async () =>
        (await stack.db.dataSource.query(
          `SELECT id, status, check_count, updated_at, acknowledged_at, next_check_at, obligation
           FROM operations WHERE execution_id = $1`,
          [executionId],
        )) as CheckRow[],
      (found) => found.length === 1 && until(found[0]),
      45_000,
      50,
    );
    return row;
  }

  it('an acknowledged send is owed its read from the acknowledgement, not 10 minutes before it', async () => {
    // The read at send finds nothing yet: the operation stays ACKNOWLEDGED, owed the verify job's read.
    await stack.setFaults({ read_fault: 'record_lost' });
    const created = await submit(stack, [charge(unique('ack-clock'))]);
    const row = await operationRow(created.id, (r) => r.status === 'ACKNOWLEDGED');
    expect(row.next_check_at!.getTime()).toBeGreaterThanOrEqual(row.acknowledged_at!.getTime());
    expect(row.next_check_at!.getTime()).toBeLessThan(row.acknowledged_at!.getTime() + 1_000);
  });

  it('a VERIFIED effect is observed OBSERVE_INTERVAL_MS after it was verified, by the database’s clock', async () => {
    const created = await submit(stack, [charge(unique('observe-clock'))]);
    const row = await operationRow(created.id, (r) => r.status === 'VERIFIED');
    const after = row.next_check_at!.getTime() - row.updated_at.getTime();
    expect(after).toBeGreaterThanOrEqual(OBSERVE_INTERVAL_MS);
    expect(after).toBeLessThan(OBSERVE_INTERVAL_MS + 1_000);
  });

  describe('with a reconciler behind too', () => {
    beforeAll(async () => {
      await stack.startApp('reconciler', clock!.env(-BEHIND_MS));
    });

    it('an inconclusive read is read again after its backoff, and what a re-check showed is dated after the hold', async () => {
      // Taken by the provider, the answer lost; the source cannot be read.
      await stack.setFaults({
        rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
        read_fault: 'unavailable',
      });
      const created = await submit(stack, [charge(unique('unknown-clock'))]);
      // Back in UNKNOWN after a read (one statement: its time and the next read's are on one clock).
      const unknown = await operationRow(created.id, (r) => r.status === 'UNKNOWN' && r.check_count >= 1);
      expect(unknown.next_check_at!.getTime()).toBeGreaterThanOrEqual(unknown.updated_at.getTime());

      const held = await operationRow(created.id, (r) => r.status === 'MANUAL_REVIEW');
      // The source answers again, showing the charge with another amount: the re-check keeps that on the hold.
      await stack.setFaults({ read_fault: 'amount_mismatch' });
      const asked = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/recheck`, { key: DEMO.reviewer });
      expect(asked.status).toBe(202);
      const shown = await operationRow(created.id, (r) => r.obligation?.effect_shown !== undefined);
      const heldAt = Date.parse(
        (await events(stack, created.id)).find((e) => e.to_status === 'MANUAL_REVIEW')!.created_at,
      );
      expect(shown.obligation!.effect_shown!.result).toBe('mismatch');
      expect(Date.parse(shown.obligation!.effect_shown!.at)).toBeGreaterThanOrEqual(heldAt);
    });
  });
});
