import { createServer, type ServerResponse } from 'node:http';
import { ConnectorRegistry, TenantConnectors } from '@verity/connectors';
import { EventEntity, SecretsCipher, TransitionService, recordRecheckRequest } from '@verity/persistence';
import { createLogger, createRedis, loadConfig } from '@verity/platform';
import { JobProducer } from '@verity/queues';
import { insertChargeExecution } from '../support/fixtures';
import { listenLocally, waitUntil } from '../support/local-server';
import { TEST_REDIS_URL, clearRedisPrefix, testQueuePrefix } from '../support/services';
import { useTestDatabase } from '../support/test-database';
import { VerificationService } from '../../apps/reconciler/src/verification.service';

/**
 * The reconciler's reads against real Postgres and Redis, the source a local sandbox provider whose reads of charges
 * are held until the test answers them (503: the source is unreachable, an inconclusive read), so two jobs' reads of
 * one operation can be made to overlap and end in a chosen order.
 */
describe('VerificationService: counts written by jobs whose reads overlap (real Postgres)', () => {
  const db = useTestDatabase('verification', ['acme']);
  const held: ServerResponse[] = [];
  const prefix = testQueuePrefix('verification');
  let service: VerificationService;
  let close: () => Promise<void>;
  let redis: ReturnType<typeof createRedis>;
  let producer: JobProducer;

  beforeAll(async () => {
    const sandbox = await listenLocally(
      createServer((req, res) => {
        req.resume();
        held.push(res);
      }),
    );
    close = sandbox.close;
    const config = loadConfig({ SANDBOX_URL: sandbox.url, REDIS_URL: TEST_REDIS_URL, QUEUE_PREFIX: prefix });
    redis = createRedis(TEST_REDIS_URL, 'producer', 'verification-spec');
    producer = new JobProducer(redis, prefix);
    service = new VerificationService(
      db.dataSource,
      new TransitionService(),
      producer,
      new TenantConnectors(new ConnectorRegistry(), db.dataSource, new SecretsCipher(undefined), config),
      config,
      createLogger('verification-spec', 'silent'),
    );
  });

  afterAll(async () => {
    for (const res of held) res.destroy();
    await close?.();
    await producer?.close();
    redis?.disconnect();
    await clearRedisPrefix(prefix);
  });

  /** Starts `read` and resolves once its read of the source has arrived and is held (its outcome still to come). */
  async function readArrived<T>(read: () => Promise<T>): Promise<{ running: Promise<T> }> {
    const before = held.length;
    const running = read();
    await waitUntil(() => held.length > before);
    return { running };
  }

  /** Answers the `i`-th read held: the source is unreachable. */
  const unreachable = (i: number) => held[i].writeHead(503, { 'content-type': 'application/json' }).end('{}');

  const row = async (id: string) =>
    (
      (await db.dataSource.query(`SELECT status, check_count, obligation FROM operations WHERE id = $1`, [id])) as {
        status: string;
        check_count: number;
        obligation: { rechecks?: number } | null;
      }[]
    )[0];

  it('a job whose read ends after newer ones never writes its older check_count back (the retry budget holds)', async () => {
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    // Sent, its answer lost, reconciled twice already: RECONCILING with two inconclusive reads counted.
    await db.dataSource.query(
      `UPDATE operations SET status = 'RECONCILING', attempt = 1, sent_at = now(), check_count = 2 WHERE id = $1`,
      [operationId],
    );
    const first = held.length;
    // The job whose read hangs (a slow source); the sweeper hands the operation, still RECONCILING, to another job.
    const { running: stale } = await readArrived(() => service.reconcile(operationId));
    const { running: second } = await readArrived(() => service.reconcile(operationId));
    unreachable(first + 1);
    expect(await second).toBe('rescheduled');
    expect(await row(operationId)).toMatchObject({ status: 'UNKNOWN', check_count: 3 });
    // The next job reads again: inconclusive, counted; and the one after it is mid-read when the slow one ends.
    const { running: third } = await readArrived(() => service.reconcile(operationId));
    unreachable(first + 2);
    expect(await third).toBe('rescheduled');
    const { running: fourth } = await readArrived(() => service.reconcile(operationId));
    expect(await row(operationId)).toMatchObject({ status: 'RECONCILING', check_count: 4 });

    unreachable(first);
    expect(await stale).toBe('skipped: lost race');
    expect(await row(operationId)).toMatchObject({ status: 'RECONCILING', check_count: 4 });
    unreachable(first + 3);
    expect(await fourth).toBe('rescheduled');
    expect(await row(operationId)).toMatchObject({ status: 'UNKNOWN', check_count: 5 });
  });

  it('two re-checks of one hold whose reads overlap (a reviewer’s and a scheduled one) are both counted', async () => {
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    const dueAt = new Date(Date.now() + 3_600_000).toISOString();
    await db.dataSource.query(
      `UPDATE operations SET status = 'MANUAL_REVIEW', terminal_reason = 'SOURCE_UNREACHABLE', attempt = 1,
              sent_at = now(), obligation = $2 WHERE id = $1`,
      [operationId, JSON.stringify({ reason: 'SOURCE_UNREACHABLE', due_at: dueAt, rechecks: 3 })],
    );
    const first = held.length;
    const { running: scheduled } = await readArrived(() => service.recheck(operationId));
    const requestId = await recordRecheckRequest(db.dataSource.manager, {
      tenantId: 'acme',
      operationId,
      requestedBy: 'key_reviewer',
    });
    const { running: reviewers } = await readArrived(() => service.recheck(operationId, requestId));
    unreachable(first);
    unreachable(first + 1);
    expect(await Promise.all([scheduled, reviewers])).toEqual(['still held: unreachable', 'still held: unreachable']);
    const op = await row(operationId);
    expect(op.status).toBe('MANUAL_REVIEW');
    expect(op.obligation).toMatchObject({ rechecks: 5, due_at: dueAt });
    const rechecked = await db.dataSource
      .getRepository(EventEntity)
      .countBy({ operationId, type: 'operation.rechecked' });
    expect(rechecked).toBe(2);
  });
});
