import { ExecutionStatus } from '@verity/status-model';
import { insertTestExecution } from '../../../test/support/fixtures';
import { createTestDatabase, TestDatabase } from '../../../test/support/services';
import { ensureTenant } from './api-keys';
import { createDataSource } from './data-source';
import { announceEventsWith } from './event-signal';
import { transaction } from './sql';
import { TransitionService } from './transition.service';

/** Streams are woken by an announcement after each commit that wrote events — never before it, never for a rollback. */
describe('event announcements (real Postgres)', () => {
  let db: TestDatabase;
  const transitions = new TransitionService();
  const announced: string[] = [];

  beforeAll(async () => {
    db = await createTestDatabase('eventsignal');
    await ensureTenant(db.dataSource.manager, 'acme');
    announceEventsWith(db.dataSource, (executionId) => announced.push(executionId));
  });
  afterAll(async () => {
    announceEventsWith(db.dataSource, null);
    await db.drop();
  });
  beforeEach(() => announced.splice(0));

  function newExecution(): Promise<string> {
    return insertTestExecution(db.dataSource.manager, 'acme', { operations: [] });
  }

  const move = (
    db2: Parameters<TransitionService['execution']>[0],
    id: string,
    from: ExecutionStatus,
    to: ExecutionStatus,
  ) => transitions.execution(db2, { executionId: id, from, to });

  it('announces a transition made outside a transaction at once', async () => {
    const id = await newExecution();
    await move(db.dataSource.manager, id, ExecutionStatus.CREATED, ExecutionStatus.VALIDATING);
    expect(announced).toEqual([id]);
  });

  it('announces nothing for a lost compare-and-set', async () => {
    const id = await newExecution();
    const result = await move(db.dataSource.manager, id, ExecutionStatus.PLANNING, ExecutionStatus.RUNNING);
    expect(result.won).toBe(false);
    expect(announced).toEqual([]);
  });

  it('announces what a transaction wrote once, after it commits', async () => {
    const id = await newExecution();
    const seenInside: string[][] = [];
    await transaction(db.dataSource, async (tx) => {
      await move(tx, id, ExecutionStatus.CREATED, ExecutionStatus.VALIDATING);
      await move(tx, id, ExecutionStatus.VALIDATING, ExecutionStatus.RESOLVING_CONTEXT);
      await transitions.annotate(tx, { executionId: id, type: 'note' });
      seenInside.push([...announced]);
    });
    expect(seenInside).toEqual([[]]);
    expect(announced).toEqual([id]);
  });

  it('announces through the data source that wrote, and not at all for one nobody registered a signal for', async () => {
    const other = createDataSource(db.url, 2);
    await other.initialize();
    try {
      const id = await newExecution();
      await move(other.manager, id, ExecutionStatus.CREATED, ExecutionStatus.VALIDATING);
      await transaction(other, (tx) => move(tx, id, ExecutionStatus.VALIDATING, ExecutionStatus.RESOLVING_CONTEXT));
      expect(announced).toEqual([]);
      await move(db.dataSource.manager, id, ExecutionStatus.RESOLVING_CONTEXT, ExecutionStatus.PLANNING);
      expect(announced).toEqual([id]);
    } finally {
      await other.destroy();
    }
  });

  it('announces nothing for a transaction that rolls back', async () => {
    const id = await newExecution();
    await expect(
      transaction(db.dataSource, async (tx) => {
        await move(tx, id, ExecutionStatus.CREATED, ExecutionStatus.VALIDATING);
        throw new Error('changed my mind');
      }),
    ).rejects.toThrow('changed my mind');
    expect(announced).toEqual([]);
    const [{ status }] = (await db.dataSource.query(`SELECT status FROM executions WHERE id = $1`, [id])) as {
      status: string;
    }[];
    expect(status).toBe('created');
  });
});
