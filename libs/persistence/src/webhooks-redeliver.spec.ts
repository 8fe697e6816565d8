import { ExecutionStatus } from '@verity/status-model';
import { insertStandingKeys, insertTestExecution } from '../../../test/support/fixtures';
import { writeDuringRevocation } from '../../../test/support/lock-waits';
import { useTestDatabase } from '../../../test/support/test-database';
import {
  OUTBOX_HORIZON_WAIT_MS,
  endpointWithDeliveries as endpointWithDeliveriesOf,
} from '../../../test/support/webhook-deliveries';
import { SecretsCipher } from './secrets-cipher';
import { TransitionService } from './transition.service';
import {
  AttemptOutcome,
  createWebhookEndpoint,
  deleteWebhookEndpoint,
  listWebhookDeliveries,
  loadDeliveryToSend,
  recordWebhookAttempt,
  redeliverWebhook,
  scanWebhookOutbox,
} from './webhooks';

/**
 * Two admins act on one delivery at once, or one deletes the endpoint while the delivery worker is sending to it. A
 * redelivery is a new round, taken only from a settled delivery: of two at once one is refused, a job (or an attempt
 * in flight) of an older round sends nothing more and writes nothing, and a delete while a send is in flight leaves
 * no row behind.
 */
describe('webhook redeliveries and deletes racing the delivery worker (real Postgres)', () => {
  const db = useTestDatabase('whredeliver', ['acme', 'other', 'third', 'fourth']);
  beforeAll(async () => insertStandingKeys(db.dataSource.manager, 'acme', ['key_admin']));
  const cipher = new SecretsCipher(undefined);
  const transitions = new TransitionService();

  /** An endpoint of the tenant and `count` deliveries to it (executions that ended), oldest first. */
  const endpointWithDeliveries = (tenantId: string, count: number) =>
    endpointWithDeliveriesOf(db.dataSource, tenantId, count);

  async function endpointWithDelivery(tenantId: string) {
    const { endpointId, deliveries } = await endpointWithDeliveries(tenantId, 1);
    return { endpointId, delivery: deliveries[0] };
  }

  const ok = { ok: true as const, status: 204 };
  const failedWith500 = { ok: false as const, status: 500, error: 'the endpoint answered 500' };
  /** The endpoint's answer to a delivery's `round`, recorded as its final attempt. */
  const finalAttempt = (deliveryId: string, round: number, outcome: AttemptOutcome, disableAfter: number) =>
    recordWebhookAttempt(db.dataSource, { deliveryId, round, outcome, final: true, disableAfter });
  /** The endpoint's 2xx to a delivery's `round`, recorded as its final attempt. */
  const answered = (deliveryId: string, round: number) => finalAttempt(deliveryId, round, ok, 5);

  it('two redeliveries at once: one new round, the other refused while it is pending; an older round writes nothing', async () => {
    const { endpointId, delivery } = await endpointWithDelivery('acme');
    // Still pending (its first round not attempted yet): a redelivery now would send it beside that round.
    expect(
      await redeliverWebhook(db.dataSource.manager, {
        tenantId: 'acme',
        endpointId,
        deliveryId: delivery.id,
        by: 'key_admin',
      }),
    ).toEqual({ refused: 'pending', round: 0 });
    expect(await answered(delivery.id, 0)).toEqual({ state: 'delivered' });

    const both = await Promise.all(
      [1, 2].map(() =>
        redeliverWebhook(db.dataSource.manager, {
          tenantId: 'acme',
          endpointId,
          deliveryId: delivery.id,
          by: 'key_admin',
        }),
      ),
    );
    expect(both.filter((r) => 'delivery' in r).map((r) => ('delivery' in r ? r.delivery.round : null))).toEqual([1]);
    expect(both.filter((r) => 'refused' in r)).toEqual([{ refused: 'pending', round: 1 }]);

    // A job of the first round, late (its delivery went to a new round meanwhile): it sends nothing.
    expect((await loadDeliveryToSend(db.dataSource.manager, cipher, delivery.id, 0))?.skip).toBe('older_round');
    expect((await loadDeliveryToSend(db.dataSource.manager, cipher, delivery.id, 1))?.skip).toBeNull();
    // A send of the first round whose answer comes back now: it writes nothing.
    expect(await answered(delivery.id, 0)).toEqual({ state: 'stale' });
    const [pending] = await listWebhookDeliveries(db.dataSource.manager, { tenantId: 'acme', endpointId, limit: 1 });
    expect(pending).toMatchObject({ id: delivery.id, status: 'pending', round: 1, attempts: 1 });
    expect(await answered(delivery.id, 1)).toEqual({ state: 'delivered' });

    // Another tenant cannot redeliver it, through its id or through an endpoint of its own.
    expect(
      await redeliverWebhook(db.dataSource.manager, {
        tenantId: 'other',
        endpointId,
        deliveryId: delivery.id,
        by: 'key_admin',
      }),
    ).toEqual({ refused: 'webhook_not_found' });
  });

  it('a refused redelivery names what is not found: the webhook when the path’s is not the tenant’s, else the delivery', async () => {
    await insertStandingKeys(db.dataSource.manager, 'third', ['key_third_admin']);
    const { endpointId, delivery } = await endpointWithDelivery('acme');
    const { endpoint: own } = (await createWebhookEndpoint(db.dataSource, cipher, {
      tenantId: 'third',
      url: 'http://127.0.0.1:9/hook',
      events: ['execution.finished'],
      createdBy: 'key_third_admin',
    }))!;
    const adminOf: Record<string, string> = { acme: 'key_admin', third: 'key_third_admin' };
    const redeliver = (tenantId: string, endpoint: string, deliveryId: string) =>
      redeliverWebhook(db.dataSource.manager, { tenantId, endpointId: endpoint, deliveryId, by: adminOf[tenantId] });
    // Another tenant's endpoint reads as one that does not exist (as on every other path under /webhooks/{id}).
    expect(await redeliver('third', endpointId, delivery.id)).toEqual({ refused: 'webhook_not_found' });
    expect(await redeliver('third', 'wh_nope', delivery.id)).toEqual({ refused: 'webhook_not_found' });
    expect(await redeliver('acme', 'wh_nope', delivery.id)).toEqual({ refused: 'webhook_not_found' });
    // Its own endpoint is found; another tenant's delivery under it reads as one that does not exist.
    expect(await redeliver('third', own.id, delivery.id)).toEqual({ refused: 'delivery_not_found' });
    expect(await redeliver('third', own.id, 'msg_nope')).toEqual({ refused: 'delivery_not_found' });
    expect(await redeliver('acme', endpointId, 'msg_nope')).toEqual({ refused: 'delivery_not_found' });
  });

  it('a redelivery by a key revoked before its statement commits writes nothing, also a revocation still under way', async () => {
    const { endpointId, delivery } = await endpointWithDelivery('acme');
    expect(await answered(delivery.id, 0)).toEqual({ state: 'delivered' });
    const redeliver = (by: string) =>
      redeliverWebhook(db.dataSource.manager, { tenantId: 'acme', endpointId, deliveryId: delivery.id, by });
    const settled = { id: delivery.id, status: 'delivered', round: 0 };
    // Revoked (and committed) after the request was admitted on it (a cached key): nothing written.
    await insertStandingKeys(db.dataSource.manager, 'acme', ['key_gone', 'key_racing']);
    await db.dataSource.query(`UPDATE api_keys SET revoked_at = now() WHERE id = 'key_gone'`);
    expect(await redeliver('key_gone')).toEqual({ refused: 'key_revoked' });
    // Another tenant's key redelivers nothing here either.
    await insertStandingKeys(db.dataSource.manager, 'other', ['key_other_admin']);
    expect(await redeliver('key_other_admin')).toEqual({ refused: 'key_revoked' });
    const [after] = await listWebhookDeliveries(db.dataSource.manager, { tenantId: 'acme', endpointId, limit: 1 });
    expect(after).toMatchObject(settled);

    // A revocation written but not yet committed when the redelivery's statement runs: the statement waits for it (it
    // share-locks the key's row) and then finds the key revoked. Read without the lock, the key still looked active.
    expect(await writeDuringRevocation(db.dataSource, 'key_racing', () => redeliver('key_racing'))).toEqual({
      refused: 'key_revoked',
    });
    const [still] = await listWebhookDeliveries(db.dataSource.manager, { tenantId: 'acme', endpointId, limit: 1 });
    expect(still).toMatchObject(settled);
    // The same redelivery by a key that stands is made.
    expect(await redeliver('key_admin')).toMatchObject({ delivery: { id: delivery.id, status: 'pending', round: 1 } });
  });

  it('an endpoint deleted while a send is in flight: the answer writes nothing, counts no failure, tells nobody', async () => {
    const { endpointId, delivery } = await endpointWithDelivery('other');
    const toSend = await loadDeliveryToSend(db.dataSource.manager, cipher, delivery.id, 0);
    expect(toSend?.skip).toBeNull();
    expect(
      await deleteWebhookEndpoint(db.dataSource.manager, { tenantId: 'other', id: endpointId, by: 'key_admin' }),
    ).toBe(true);
    // The last attempt failed: had the endpoint still been there, it would count towards disabling it.
    const recorded = await finalAttempt(delivery.id, 0, failedWith500, 1);
    expect(recorded).toEqual({ state: 'stale' });
    expect(await loadDeliveryToSend(db.dataSource.manager, cipher, delivery.id, 0)).toBeNull();
    expect(await db.dataSource.query(`SELECT id FROM webhook_deliveries WHERE endpoint_id = $1`, [endpointId])).toEqual(
      [],
    );
  });

  it('a success in flight when another delivery disabled the endpoint leaves it disabled, its failure count kept', async () => {
    const { endpointId, deliveries } = await endpointWithDeliveries('third', 2);
    const [failing, succeeding] = deliveries;
    const failed = await finalAttempt(failing.id, 0, failedWith500, 1);
    expect(failed.state).toBe('failed');
    expect(failed.disabled?.reason).toContain('1 consecutive deliveries failed');
    // The other delivery was sent before the endpoint was disabled; its 2xx comes back after.
    expect(await finalAttempt(succeeding.id, 0, ok, 1)).toEqual({ state: 'delivered' });
    // Disabled "after 1 consecutive failed delivery" with 0 failures would contradict itself: the count stays what
    // disabled it until an admin enables the endpoint (which sets it back to 0).
    const [endpoint] = await db.dataSource.query(
      `SELECT disabled_at IS NOT NULL AS disabled, consecutive_failures FROM webhook_endpoints WHERE id = $1`,
      [endpointId],
    );
    expect(endpoint).toEqual({ disabled: true, consecutive_failures: 1 });
  });

  it('tells the other endpoints which endpoint was disabled without its URL’s path or query (a receiver’s token)', async () => {
    await insertStandingKeys(db.dataSource.manager, 'fourth', ['key_fourth']);
    const create = async (url: string, events: string[]) =>
      (await createWebhookEndpoint(db.dataSource, cipher, {
        tenantId: 'fourth',
        url,
        events,
        createdBy: 'key_fourth',
      }))!.endpoint.id;
    // A chat service's incoming-webhook URL is its credential: whoever has it posts into the channel.
    const failing = await create('https://hooks.chat.example:8443/services/T01/B02/s3cr3tPath?token=s3cr3tQuery', [
      'execution.finished',
    ]);
    const monitor = await create('http://127.0.0.1:9/monitor', ['webhook.disabled']);
    const executionId = await insertTestExecution(db.dataSource.manager, 'fourth', { operations: [] });
    await transitions.execution(db.dataSource.manager, {
      executionId,
      from: ExecutionStatus.CREATED,
      to: ExecutionStatus.FAILED,
    });
    const deadline = Date.now() + OUTBOX_HORIZON_WAIT_MS;
    let delivery: { id: string } | undefined;
    while (!delivery) {
      await scanWebhookOutbox(db.dataSource, 100);
      [delivery] = await listWebhookDeliveries(db.dataSource.manager, {
        tenantId: 'fourth',
        endpointId: failing,
        limit: 1,
      });
      if (Date.now() > deadline) throw new Error('the outbox did not announce the execution');
    }
    const failed = await finalAttempt(delivery.id, 0, failedWith500, 1);
    expect(failed.disabled?.notices).toHaveLength(1);
    const [notice] = await listWebhookDeliveries(db.dataSource.manager, {
      tenantId: 'fourth',
      endpointId: monitor,
      limit: 1,
    });
    expect(notice.payload.data).toMatchObject({ endpoint_id: failing, origin: 'https://hooks.chat.example:8443' });
    expect(JSON.stringify(notice.payload)).not.toMatch(/s3cr3t|services/);
  });
});
