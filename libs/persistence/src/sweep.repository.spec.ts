import { createTestDatabase, TestDatabase } from '../../../test/support/services';
import { withSweepLock } from './sweep.repository';

describe('withSweepLock (real Postgres)', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase('sweeplock');
  });
  afterAll(async () => db.drop());

  it('runs one sweep at a time: a second caller skips while the first holds the lock, and runs once it is released', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const started = new Promise<void>((resolve) => (entered = resolve));
    const first = withSweepLock(db.dataSource, 'first', async () => {
      entered();
      await gate;
      return { ran: 'first' };
    });
    await started;
    let secondRan = false;
    const second = await withSweepLock(db.dataSource, 'second', () => {
      secondRan = true;
      return Promise.resolve({ ran: 'second' });
    });
    expect(second).toBeNull();
    expect(secondRan).toBe(false);
    release();
    expect(await first).toEqual({ ran: 'first' });
    expect(await withSweepLock(db.dataSource, 'third', () => Promise.resolve({ ran: 'third' }))).toEqual({
      ran: 'third',
    });
    const log = (await db.dataSource.query(
      `SELECT worker, report, finished_at IS NOT NULL AS finished FROM sweep_log ORDER BY id`,
    )) as { worker: string; report: unknown; finished: boolean }[];
    expect(log).toEqual([
      { worker: 'first', report: { ran: 'first' }, finished: true },
      { worker: 'third', report: { ran: 'third' }, finished: true },
    ]);
  });

  it('releases the lock when a sweep fails', async () => {
    await expect(withSweepLock(db.dataSource, 'failing', () => Promise.reject(new Error('boom')))).rejects.toThrow(
      'boom',
    );
    expect(await withSweepLock(db.dataSource, 'after', () => Promise.resolve({ ok: true }))).toEqual({ ok: true });
  });
});
