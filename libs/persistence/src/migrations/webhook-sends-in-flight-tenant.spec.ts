import { insertStandingKeys } from '../../../../test/support/fixtures';
import { undoMigrationsFrom } from '../../../../test/support/migration-steps';
import { useTestDatabase } from '../../../../test/support/test-database';
import { SecretsCipher } from '../secrets-cipher';
import { createWebhookEndpoint, deleteWebhookEndpoint, waitForWebhookSends } from '../webhooks';
import { WebhookSendsInFlightTenant1764721700000 } from './1764721700000-webhook-sends-in-flight-tenant';

/**
 * Marks of sends in flight written before the upgrade (no tenant): the upgrade runs on a table that holds them, gives
 * each its endpoint's tenant where the endpoint still exists, and leaves a deleted endpoint's mark without one — which a
 * delete that finds that id gone, naming its tenant, does not wait for.
 */
describe('migration 1764721700000: marks of sends in flight written before it (real Postgres)', () => {
  const db = useTestDatabase('whsends-tenant-backfill', ['acme']);
  const cipher = new SecretsCipher(undefined);

  it('gives a live endpoint’s marks its tenant, and leaves a gone endpoint’s without one', async () => {
    const manager = db.dataSource.manager;
    await insertStandingKeys(manager, 'acme', ['key_acme']);
    const endpointOf = async () =>
      (await createWebhookEndpoint(db.dataSource, cipher, {
        tenantId: 'acme',
        url: 'http://127.0.0.1:9/hook',
        events: ['execution.finished'],
        createdBy: 'key_acme',
      }))!.endpoint.id;
    const live = await endpointOf();
    const gone = await endpointOf();
    expect(await deleteWebhookEndpoint(manager, { tenantId: 'acme', id: gone, by: 'key_acme' })).toBe(true);
    const upgrade = await undoMigrationsFrom(db, WebhookSendsInFlightTenant1764721700000);
    // What the reconciler of then wrote: the mark, its endpoint and its time, no tenant.
    await manager.query(
      `INSERT INTO webhook_sends_in_flight (id, endpoint_id, until)
       VALUES ('mark-live', $1, now() + interval '1 hour'), ('mark-gone', $2, now() + interval '1 hour')`,
      [live, gone],
    );
    await upgrade();
    expect(await manager.query(`SELECT id, endpoint_id, tenant_id FROM webhook_sends_in_flight ORDER BY id`)).toEqual([
      { id: 'mark-gone', endpoint_id: gone, tenant_id: null },
      { id: 'mark-live', endpoint_id: live, tenant_id: 'acme' },
    ]);
    // A 404's wait names the tenant: the gone endpoint's mark of then, tenant unknown, is not waited for.
    await waitForWebhookSends(manager, gone, { ofTenant: 'acme', pollMs: 5 });
  });
});
