import { insertStandingKeys } from '../../../test/support/fixtures';
import { waitForLockWaiter } from '../../../test/support/lock-waits';
import { waitFor } from '../../../test/support/stack';
import { useTestDatabase } from '../../../test/support/test-database';
import type { EntityManager } from 'typeorm';
import { SecretsCipher } from './secrets-cipher';
import {
  clearWebhookSend,
  createWebhookEndpoint,
  deleteWebhookEndpoint,
  markWebhookSending,
  waitForWebhookSends,
} from './webhooks';

/**
 * A send marked in flight by the attempt's last read before signing (markWebhookSending), and the delete of its
 * endpoint: the delete's answer waits for a send marked before it committed, and a mark after it finds nothing.
 */
describe('webhook sends in flight and the delete of their endpoint (real Postgres)', () => {
  const db = useTestDatabase('whsends', ['sends']);
  const cipher = new SecretsCipher(undefined);

  beforeAll(async () => {
    await insertStandingKeys(db.dataSource.manager, 'sends', ['key_sends']);
  });

  /** An endpoint with one pending delivery (round 0). */
  async function endpointWithDelivery(): Promise<{ endpointId: string; deliveryId: string }> {
    const created = await createWebhookEndpoint(db.dataSource, cipher, {
      tenantId: 'sends',
      url: 'http://127.0.0.1:9/hook',
      events: ['execution.finished'],
      createdBy: 'key_sends',
    });
    const endpointId = created!.endpoint.id;
    const deliveryId = `msg_${endpointId}`;
    await db.dataSource.query(
      `INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, event_id, type, payload)
       VALUES ($1, $2, 'sends', NULL, 'webhook.disabled', '{}'::jsonb)`,
      [deliveryId, endpointId],
    );
    return { endpointId, deliveryId };
  }

  /** Marks the delivery's round-0 send in flight (for `inFlightMs`) under `mark`, as an attempt's last read does. */
  const markSending = (deliveryId: string, mark: string, inFlightMs = 60_000) =>
    markWebhookSending(db.dataSource.manager, cipher, { deliveryId, round: 0, mark, inFlightMs });

  /** The tenant's delete of the endpoint (by its standing key), in `manager`'s transaction. */
  const deleteEndpoint = (endpointId: string, manager: EntityManager = db.dataSource.manager) =>
    deleteWebhookEndpoint(manager, { tenantId: 'sends', id: endpointId, by: 'key_sends' });

  const marked = async (mark: string) =>
    (await db.dataSource.query(`SELECT 1 FROM webhook_sends_in_flight WHERE id = $1`, [mark])).length === 1;

  it('a delete committed after the mark waits for the send to end, and the mark outlives the delivery', async () => {
    const { endpointId, deliveryId } = await endpointWithDelivery();
    const read = await markSending(deliveryId, 'mark-before-delete');
    expect(read).toMatchObject({ id: deliveryId, endpointId, skip: null });
    expect(await deleteEndpoint(endpointId)).toBe(true);
    let waited = false;
    const waiting = waitForWebhookSends(db.dataSource.manager, endpointId, { pollMs: 5 }).then(() => (waited = true));
    // The delivery went with the endpoint; the mark did not, and the wait (reading it every 5 ms) goes on.
    expect(await marked('mark-before-delete')).toBe(true);
    expect(waited).toBe(false);
    await clearWebhookSend(db.dataSource.manager, 'mark-before-delete');
    await waiting;
    expect(waited).toBe(true);
  });

  it('for an id found gone, waits for the sends marked for the caller’s tenant, never for another tenant’s', async () => {
    const { endpointId, deliveryId } = await endpointWithDelivery();
    await markSending(deliveryId, 'mark-of-gone');
    expect(await deleteEndpoint(endpointId)).toBe(true);
    // Another tenant naming the id: nothing of it is waited for, and its mark stays.
    let saidWaiting = 0;
    await waitForWebhookSends(db.dataSource.manager, endpointId, {
      ofTenant: 'other',
      pollMs: 5,
      onWaiting: () => (saidWaiting += 1),
    });
    expect([saidWaiting, await marked('mark-of-gone')]).toEqual([0, true]);
    // The endpoint's own tenant (a second delete of it): waits until the send has ended, and says so once.
    let waited = false;
    const waiting = waitForWebhookSends(db.dataSource.manager, endpointId, {
      ofTenant: 'sends',
      pollMs: 5,
      onWaiting: () => (saidWaiting += 1),
    }).then(() => (waited = true));
    await waitFor(
      async () => saidWaiting,
      (n) => n > 0,
    );
    expect(waited).toBe(false);
    await clearWebhookSend(db.dataSource.manager, 'mark-of-gone');
    await waiting;
    expect([saidWaiting, waited]).toEqual([1, true]);
  });

  it('a mark made while a delete holds the endpoint waits for it, then finds nothing and marks nothing', async () => {
    const { endpointId, deliveryId } = await endpointWithDelivery();
    const deleter = db.dataSource.createQueryRunner();
    await deleter.connect();
    let marking: Promise<unknown> | undefined;
    try {
      await deleter.startTransaction();
      expect(await deleteEndpoint(endpointId, deleter.manager)).toBe(true);
      marking = markSending(deliveryId, 'mark-during-delete');
      await waitForLockWaiter(db.dataSource, { statementLike: 'WITH target AS%' });
      await deleter.commitTransaction();
    } finally {
      if (deleter.isTransactionActive) await deleter.rollbackTransaction();
      await deleter.release();
    }
    expect(await marking).toBeNull();
    expect(await marked('mark-during-delete')).toBe(false);
    // The delete's answer does not wait: nothing is in flight.
    await waitForWebhookSends(db.dataSource.manager, endpointId, { pollMs: 5 });
  });

  it('a send past its time is not waited for, and its mark is deleted with the wait', async () => {
    const { endpointId, deliveryId } = await endpointWithDelivery();
    await markSending(deliveryId, 'mark-expired', 0);
    expect(await marked('mark-expired')).toBe(true);
    expect(await deleteEndpoint(endpointId)).toBe(true);
    await waitForWebhookSends(db.dataSource.manager, endpointId, { pollMs: 5 });
    expect(await marked('mark-expired')).toBe(false);
  });
});
