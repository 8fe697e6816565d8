import { DataSource } from 'typeorm';
import {
  SecretsCipher,
  TransitionService,
  createWebhookEndpoint,
  listWebhookDeliveries,
  scanWebhookOutbox,
} from '@verity/persistence';
import { ExecutionStatus } from '@verity/status-model';
import { insertTestExecution } from './fixtures';

/**
 * How long a test polls the outbox before it gives up on an event. The outbox reads no event of a transaction younger
 * than the oldest one still running on the whole server (transaction ids are the cluster's, not the database's), and
 * the test files beside this one hold transactions open while they wait, for up to their helpers' 20 s: a deadline of a
 * few seconds failed a correct outbox on a busy machine.
 */
export const OUTBOX_HORIZON_WAIT_MS = 45_000;

/**
 * An endpoint of the tenant (`execution.finished`, a port nothing listens on) and `count` deliveries to it, oldest
 * first: executions that ended, and outbox passes until it has announced them (a transaction elsewhere on the cluster
 * may hold the events back a moment). The tenant needs a standing key `key_admin`.
 */
export async function endpointWithDeliveries(dataSource: DataSource, tenantId: string, count: number) {
  const { endpoint } = (await createWebhookEndpoint(dataSource, new SecretsCipher(undefined), {
    tenantId,
    url: 'http://127.0.0.1:9/hook',
    events: ['execution.finished'],
    createdBy: 'key_admin',
  }))!;
  const transitions = new TransitionService();
  for (let i = 0; i < count; i += 1) {
    const executionId = await insertTestExecution(dataSource.manager, tenantId, { operations: [] });
    await transitions.execution(dataSource.manager, {
      executionId,
      from: ExecutionStatus.CREATED,
      to: ExecutionStatus.FAILED,
    });
  }
  const deadline = Date.now() + OUTBOX_HORIZON_WAIT_MS;
  for (;;) {
    await scanWebhookOutbox(dataSource, 100);
    const deliveries = await listWebhookDeliveries(dataSource.manager, {
      tenantId,
      endpointId: endpoint.id,
      limit: count,
    });
    if (deliveries.length === count) return { endpointId: endpoint.id, deliveries: deliveries.reverse() };
    if (Date.now() > deadline) throw new Error('the outbox did not announce the executions');
    await new Promise((r) => setTimeout(r, 50));
  }
}
