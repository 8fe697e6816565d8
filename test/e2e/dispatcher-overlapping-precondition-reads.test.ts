import { ConnectorRegistry, TenantConnectors } from '@verity/connectors';
import { EventEntity, SecretsCipher, TransitionService } from '@verity/persistence';
import { createLogger, loadConfig } from '@verity/platform';
import { insertChargeExecution } from '../support/fixtures';
import { heldSourceDuringDescribe } from '../support/held-source';
import { producerDuringDescribe } from '../support/producer';
import { TEST_REDIS_URL } from '../support/services';
import { useTestDatabase } from '../support/test-database';
import { LifecycleService } from '../../apps/dispatcher/src/lifecycle.service';
import { OutcomeService } from '../../apps/dispatcher/src/outcome.service';

/**
 * The dispatcher's owed precondition reads (I15: an irreversible charge whose expected_state could not be read waits in
 * PREPARED, read again with backoff) against real Postgres and Redis, the source a local sandbox provider whose reads
 * of charges are held until the test answers them (503: unreachable), so the reads of two advance jobs of one
 * execution (a redelivered job and a newer one) can be made to overlap and end in a chosen order.
 */
describe('LifecycleService: failed precondition reads of advance jobs that overlap (real Postgres)', () => {
  const db = useTestDatabase('precondition', ['acme']);
  const source = heldSourceDuringDescribe();
  const { held, readArrived, unreachable } = source;
  const queues = producerDuringDescribe('precondition');
  let lifecycle: LifecycleService;

  beforeAll(async () => {
    // A backoff long enough that no read comes due while the test runs unless the test makes it due (and well before
    // the execution's deadline, 10 minutes, so a failed read is read again rather than held).
    const config = loadConfig({
      SANDBOX_URL: source.url,
      REDIS_URL: TEST_REDIS_URL,
      QUEUE_PREFIX: queues.prefix,
      PRECONDITION_READ_BUDGET: '8',
      PRECONDITION_READ_BACKOFF_MS: '60000',
      PRECONDITION_READ_BACKOFF_MAX_MS: '60000',
    });
    const transitions = new TransitionService();
    lifecycle = new LifecycleService(
      db.dataSource,
      transitions,
      queues.producer,
      new TenantConnectors(new ConnectorRegistry(), db.dataSource, new SecretsCipher(undefined), config),
      new OutcomeService(db.dataSource, transitions),
      config,
      createLogger('precondition-spec', 'silent'),
    );
  });

  const row = async (id: string) =>
    (
      (await db.dataSource.query(`SELECT status, check_count, next_check_at FROM operations WHERE id = $1`, [id])) as {
        status: string;
        check_count: number;
        next_check_at: Date | null;
      }[]
    )[0];

  /** The owed read comes due (as when its delayed advance fires). */
  const due = (id: string) =>
    db.dataSource.query(`UPDATE operations SET next_check_at = now() - interval '1 second' WHERE id = $1`, [id]);

  const failedReads = (operationId: string) =>
    db.dataSource.getRepository(EventEntity).find({
      where: { operationId, type: 'context.unavailable' },
      order: { seq: 'ASC' },
    });

  it('a job whose read ends after newer ones never writes its older check_count back (the retry budget holds)', async () => {
    const { executionId, operationId } = await insertChargeExecution(db.dataSource.manager, 'acme', {
      operation: { expected_state: { charged: false } },
    });
    // Prepared and waiting: its expected_state could not be read once already, and the next read is due.
    await db.dataSource.query(`UPDATE executions SET status = 'waiting_for_tool' WHERE id = $1`, [executionId]);
    await db.dataSource.query(`UPDATE operations SET check_count = 1 WHERE id = $1`, [operationId]);
    await due(operationId);
    const first = held.length;

    // The job whose read hangs (a slow source); the same advance is delivered again and reads too.
    const { running: stale } = await readArrived(() => lifecycle.advance(executionId));
    const { running: second } = await readArrived(() => lifecycle.advance(executionId));
    unreachable(first + 1);
    expect(await second).toBe('done');
    expect(await row(operationId)).toMatchObject({ status: 'PREPARED', check_count: 2 });

    // Its delayed advance reads again: unreachable, counted.
    await due(operationId);
    const { running: third } = await readArrived(() => lifecycle.advance(executionId));
    unreachable(first + 2);
    expect(await third).toBe('done');
    const counted = await row(operationId);
    expect(counted).toMatchObject({ status: 'PREPARED', check_count: 3 });
    expect((await failedReads(operationId)).map((e) => e.data.failed_reads)).toEqual([2, 3]);

    // The slow read ends: what it decided from a count of 1 is not written over the count of 3.
    unreachable(first);
    expect(await stale).toBe('done');
    expect(await row(operationId)).toEqual(counted);
    expect((await failedReads(operationId)).map((e) => e.data.failed_reads)).toEqual([2, 3]);
    // It read no more than once: after its write lost, it looked again and found the next read not due yet.
    expect(held.length).toBe(first + 3);
  });
});
