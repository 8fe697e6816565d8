import { insertStandingKeys } from '../../../test/support/fixtures';
import { waitForLockWaiter } from '../../../test/support/lock-waits';
import { endpointWithDeliveries as endpointWithDeliveriesOf } from '../../../test/support/webhook-deliveries';
import { useTestDatabase } from '../../../test/support/test-database';
import { pruneWebhookDeliveries, redeliverWebhook } from './webhooks';

const DAY = 24 * 60 * 60 * 1000;

/**
 * The delivery log is not kept for ever: every event × endpoint made a row that stayed. The sweeper deletes settled
 * deliveries (delivered, failed, skipped) whose last change is older than WEBHOOK_DELIVERY_RETENTION_MS, a batch at a
 * time; a pending one (owed, or a redelivery's round) never.
 */
describe('pruneWebhookDeliveries (real Postgres)', () => {
  const db = useTestDatabase('whretention', ['acme']);
  beforeAll(async () => insertStandingKeys(db.dataSource.manager, 'acme', ['key_admin']));

  /** An endpoint and `count` deliveries to it, oldest first. */
  async function endpointWithDeliveries(count: number) {
    const { endpointId, deliveries } = await endpointWithDeliveriesOf(db.dataSource, 'acme', count);
    return { endpointId, ids: deliveries.map((d) => d.id) };
  }

  const set = (id: string, status: string, daysAgo: number) =>
    db.dataSource.query(
      `UPDATE webhook_deliveries SET status = $2, updated_at = clock_timestamp() - make_interval(days => $3) WHERE id = $1`,
      [id, status, daysAgo],
    );
  const remaining = async (ids: string[]) =>
    (
      (await db.dataSource.query(`SELECT id, status FROM webhook_deliveries WHERE id = ANY($1) ORDER BY id`, [
        ids,
      ])) as { id: string; status: string }[]
    ).map((r) => r.id);

  it('deletes settled deliveries past the retention, a batch at a time, and keeps pending and recent ones', async () => {
    const { ids } = await endpointWithDeliveries(6);
    const [delivered, failed, skipped, pending, recent, recentFailed] = ids;
    await set(delivered, 'delivered', 40);
    await set(failed, 'failed', 31);
    await set(skipped, 'skipped', 90);
    await set(pending, 'pending', 365); // owed however old: never deleted
    await set(recent, 'delivered', 29);
    await set(recentFailed, 'failed', 0);

    expect(await pruneWebhookDeliveries(db.dataSource.manager, 30 * DAY, 2)).toBe(2);
    expect(await pruneWebhookDeliveries(db.dataSource.manager, 30 * DAY, 2)).toBe(1);
    expect(await pruneWebhookDeliveries(db.dataSource.manager, 30 * DAY, 2)).toBe(0);
    expect(await remaining(ids)).toEqual([pending, recent, recentFailed].sort());
    // The oldest went first.
    expect(await remaining([skipped, delivered, failed])).toEqual([]);
  });

  it('keeps a delivery an admin redelivers while the batch that chose it waits for its row', async () => {
    const { endpointId, ids } = await endpointWithDeliveries(1);
    const [old] = ids;
    await set(old, 'failed', 40);
    const runner = db.dataSource.createQueryRunner();
    await runner.connect();
    try {
      await runner.startTransaction();
      const redelivered = await redeliverWebhook(runner.manager, {
        tenantId: 'acme',
        endpointId,
        deliveryId: old,
        by: 'key_admin',
      });
      expect(redelivered).toHaveProperty('delivery');
      // The prune chose the row from before the redelivery (not committed yet) and waits for its lock.
      let done = false;
      const pruned = pruneWebhookDeliveries(db.dataSource.manager, 30 * DAY, 10).finally(() => (done = true));
      await waitForLockWaiter(db.dataSource, { statementLike: '%DELETE FROM webhook_deliveries%', unless: () => done });
      await runner.commitTransaction();
      expect(await pruned).toBe(0);
    } finally {
      if (runner.isTransactionActive) await runner.rollbackTransaction();
      await runner.release();
    }
    const [row] = (await db.dataSource.query(`SELECT status, round FROM webhook_deliveries WHERE id = $1`, [old])) as {
      status: string;
      round: number;
    }[];
    expect(row).toEqual({ status: 'pending', round: 1 });
  });
});
